//! Error classification: connection faults, server error codes and
//! unexpected replies mapped to [`BackendErrorKind`]s, with one-line
//! messages that name the server by its redacted URL and never contain a
//! password or the lock token.
//!
//! Failures that retrying cannot fix keep their own kinds, so that the
//! manager can stop retrying on them: `Auth` (`NOAUTH`, `WRONGPASS`, a
//! refused `AUTH`), `Denied` (`NOPERM`), `WrongType`, `Protocol` (a peer that does
//! not speak RESP2, or a reply beyond the size limits), `Config` (TLS
//! mismatch or certificate, a refused `SELECT`).

use std::io;

use redis::Value;

use crate::backend::{BackendError, BackendErrorKind, Op, OpKind, ServerVersion};

use super::Inner;
use super::fault::{Fault, Phase};
use super::forms::Form;
use super::forms::wire::Bad;
use super::frame::describe_value;
use super::redact::{show_key, show_keys};
use super::redirect::Redirect;

impl Inner {
    /// `{node}: {detail}` on one line, with secrets scrubbed.
    pub(super) fn node_error(
        &self,
        kind: BackendErrorKind,
        detail: &str,
        token: Option<&[u8]>,
    ) -> BackendError {
        let detail = one_line(&self.scrub(detail, token));
        BackendError::new(kind, format!("{}: {detail}", self.redacted))
    }

    /// A server error reply to `op`, with `WRONGTYPE` named for what it
    /// means here: the lock key (or, for fenced ops, the fence counters)
    /// holds a value that is not ours to use.
    pub(super) fn op_server_error(&self, op: &Op<'_>, e: &redis::ServerError) -> BackendError {
        if e.code() != "WRONGTYPE" {
            return self.server_error(e, Some(op.token));
        }
        let what = match op.kind {
            OpKind::AcquireFenced { counter, .. } | OpKind::RaiseFence { counter, .. } => format!(
                "key {} or the fence counters {} hold a value quorum-lock did not write \
                 (WRONGTYPE): something else uses these names",
                show_keys(op.keys),
                show_key(counter)
            ),
            _ => format!(
                "key {} holds a value that is not a string (WRONGTYPE), not a lock",
                show_keys(op.keys)
            ),
        };
        self.node_error(BackendErrorKind::WrongType, &what, None)
    }

    /// The error of a command form's refusal or unexpected reply.
    pub(super) fn bad_reply(&self, op: &Op<'_>, form: Form, bad: Bad) -> BackendError {
        match bad {
            Bad::Refused(e) => self.op_server_error(op, &e),
            Bad::Unexpected(value) => self.protocol_error(form.command(), &value),
        }
    }

    /// An op that needs a script on a node where scripts are forbidden
    /// ([`Scripts::Never`]): refused before anything is sent. `Denied`:
    /// tied to this op, as an ACL's refusal of a command is (the node
    /// still serves what it can do without a script, and votes for it;
    /// where it cannot extend or release without one, `health()` shows
    /// it refusing what locks need); and permanent, so a waiting lock
    /// fails at once.
    pub(super) fn needs_script(&self, version: Option<ServerVersion>, needs: &str) -> BackendError {
        let server = version.map_or_else(
            || "the server (its version unknown: INFO refused)".to_owned(),
            |v| v.to_string(),
        );
        self.node_error(
            BackendErrorKind::Denied,
            &format!(
                "{server} cannot do this without a Lua script, and scripts are off \
                 (Scripts::Never, --scripts never): {needs}; allow scripts or upgrade the server"
            ),
            None,
        )
    }

    pub(super) fn timeout_error(&self) -> BackendError {
        self.node_error(
            BackendErrorKind::Timeout,
            &format!("timed out (no answer within {:?})", self.timeout),
            None,
        )
    }

    pub(super) fn server_error(
        &self,
        e: &redis::ServerError,
        token: Option<&[u8]>,
    ) -> BackendError {
        let error = self.node_error(kind_for_server_code(e.code()), &server_text(e), token);
        match Redirect::of(e) {
            // A cluster node reads it, to send the op where the key lives.
            Some(redirect) => error.with_source(redirect),
            None => error,
        }
    }

    pub(super) fn protocol_error(&self, command: &str, value: &Value) -> BackendError {
        self.node_error(
            BackendErrorKind::Protocol,
            &format!("unexpected reply to {command}: {}", describe_value(value)),
            None,
        )
    }

    /// Maps a connection fault.
    pub(super) fn fault_error(&self, fault: &Fault) -> BackendError {
        let (kind, detail) = self.classify(fault);
        self.node_error(kind, &detail, None)
    }

    fn classify(&self, fault: &Fault) -> (BackendErrorKind, String) {
        use BackendErrorKind as K;
        let timeout = self.timeout;
        match fault {
            Fault::Timeout {
                phase: Phase::Connect,
                ..
            } => (
                K::Timeout,
                format!("timed out connecting (timeout {timeout:?})"),
            ),
            #[cfg(feature = "tls")]
            Fault::Timeout {
                phase: Phase::Tls,
                received: 0,
            } => (
                K::Timeout,
                format!(
                    "timed out in the TLS handshake with no answer from the server \
                     (timeout {timeout:?}; a plain-text Redis port waits silently: \
                     does this port speak TLS?)"
                ),
            ),
            #[cfg(feature = "tls")]
            Fault::Timeout {
                phase: Phase::Tls, ..
            } => (
                K::Timeout,
                format!("timed out in the TLS handshake (timeout {timeout:?})"),
            ),
            Fault::Timeout { received: 0, .. } => (
                K::Timeout,
                format!("timed out waiting for the reply (timeout {timeout:?})"),
            ),
            Fault::Timeout { received, .. } => (
                K::Timeout,
                format!(
                    "timed out waiting for the rest of the reply (timeout {timeout:?}, \
                     {received} bytes of it received)"
                ),
            ),
            Fault::Closed {
                phase: Phase::Connect,
            } => (
                K::Unreachable,
                "connection closed while connecting".to_owned(),
            ),
            #[cfg(feature = "tls")]
            Fault::Closed { phase: Phase::Tls } => (
                K::Config,
                "connection closed in the TLS handshake (does this port speak TLS?)".to_owned(),
            ),
            Fault::Closed { .. } => (K::Unreachable, "connection closed by the server".to_owned()),
            Fault::Resolve(e) => (K::Unreachable, format!("cannot resolve the host: {e}")),
            Fault::Io {
                phase: Phase::Connect,
                error,
            } if error.kind() == io::ErrorKind::ConnectionRefused => {
                (K::Unreachable, "connection refused".to_owned())
            }
            Fault::Io {
                phase: Phase::Connect,
                error,
            } => (K::Unreachable, format!("cannot connect: {error}")),
            Fault::Io { error, .. } => (K::Other, format!("I/O error: {error}")),
            Fault::Protocol(why) => (K::Protocol, why.clone()),
            #[cfg(feature = "tls")]
            Fault::Tls(why) => (K::Config, why.clone()),
            Fault::ErrorReply {
                command: "AUTH",
                error,
            } => (K::Auth, format!("AUTH refused: {}", server_text(error))),
            Fault::ErrorReply { command, error } => {
                let kind = match kind_for_server_code(error.code()) {
                    // e.g. SELECT of a database the server does not have.
                    K::Other => K::Config,
                    kind => kind,
                };
                (kind, format!("{command} refused: {}", server_text(error)))
            }
        }
    }
}

/// A server error as `CODE details`.
fn server_text(e: &redis::ServerError) -> String {
    match e.details() {
        Some(details) => format!("{} {details}", e.code()),
        None => e.code().to_owned(),
    }
}

/// `text` on one line: line breaks and other control characters become
/// spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Maps a Redis error code (the first word of an error reply).
fn kind_for_server_code(code: &str) -> BackendErrorKind {
    match code {
        "WRONGTYPE" => BackendErrorKind::WrongType,
        "READONLY" => BackendErrorKind::ReadOnly,
        "NOAUTH" | "WRONGPASS" => BackendErrorKind::Auth,
        "NOPERM" => BackendErrorKind::Denied,
        _ => BackendErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn server_codes_map_to_kinds() {
        assert_eq!(
            kind_for_server_code("WRONGTYPE"),
            BackendErrorKind::WrongType
        );
        assert_eq!(kind_for_server_code("READONLY"), BackendErrorKind::ReadOnly);
        assert_eq!(kind_for_server_code("NOAUTH"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("WRONGPASS"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("NOPERM"), BackendErrorKind::Denied);
        assert_eq!(kind_for_server_code("ERR"), BackendErrorKind::Other);
        assert_eq!(kind_for_server_code("LOADING"), BackendErrorKind::Other);
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\r\nb\tc"), "a  b c");
    }
}
