//! Error classification: client-side errors, server error codes and
//! unexpected replies mapped to [`BackendErrorKind`]s, with messages that
//! name the server by its redacted URL.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;

use redis::Value;

use crate::backend::{BackendError, BackendErrorKind};

use super::Inner;

impl Inner {
    pub(super) fn timeout_error(&self) -> BackendError {
        BackendError::new(
            BackendErrorKind::Timeout,
            format!(
                "{}: no answer within the timeout ({:?})",
                self.redacted, self.timeout
            ),
        )
    }

    pub(super) fn server_error(
        &self,
        e: &redis::ServerError,
        token: Option<&[u8]>,
    ) -> BackendError {
        let code = e.code();
        let text = match e.details() {
            Some(details) => format!("{code} {details}"),
            None => code.to_owned(),
        };
        BackendError::new(
            kind_for_server_code(code),
            format!("{}: {}", self.redacted, self.scrub(&text, token)),
        )
    }

    pub(super) fn protocol_error(&self, command: &str, value: &Value) -> BackendError {
        let shown = match value {
            Value::Nil => "nil".to_owned(),
            Value::Int(n) => format!("integer {n}"),
            Value::Okay => "OK".to_owned(),
            Value::SimpleString(_) => "a status reply".to_owned(),
            Value::BulkString(b) => format!("a {}-byte string", b.len()),
            Value::Array(a) => format!("an array of {}", a.len()),
            _ => "an unexpected reply type".to_owned(),
        };
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("{}: unexpected reply to {command}: {shown}", self.redacted),
        )
    }

    /// Maps a client-side error. `connecting`: it happened while opening the
    /// connection, where any I/O failure but a timeout means "unreachable".
    pub(super) fn redis_error(&self, e: &redis::RedisError, connecting: bool) -> BackendError {
        let (kind, what) = classify(e, connecting);
        if kind == BackendErrorKind::Timeout {
            // The OS text for a socket timeout is "Resource temporarily
            // unavailable": say what happened instead.
            let phase = if connecting {
                "connecting"
            } else {
                "waiting for the reply"
            };
            return BackendError::new(
                kind,
                format!(
                    "{}: timed out {phase} (timeout {:?})",
                    self.redacted, self.timeout
                ),
            );
        }
        let detail = self.scrub(&e.to_string(), None);
        BackendError::new(kind, format!("{}: {what}: {detail}", self.redacted))
    }
}

/// The kind of a client-side error and a short description of it.
fn classify(e: &redis::RedisError, connecting: bool) -> (BackendErrorKind, &'static str) {
    use redis::ErrorKind as K;
    if let Some(io) = io_error(e) {
        if matches!(
            io.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) {
            return (BackendErrorKind::Timeout, "timed out");
        }
        if is_tls_error(io) {
            return (
                BackendErrorKind::Config,
                "TLS failed (does the server speak TLS on this port?)",
            );
        }
        if io.kind() == io::ErrorKind::ConnectionRefused {
            return (BackendErrorKind::Unreachable, "connection refused");
        }
        if connecting {
            return (BackendErrorKind::Unreachable, "cannot connect");
        }
        if is_dropped(io.kind()) {
            return (BackendErrorKind::Unreachable, "connection lost");
        }
        return (BackendErrorKind::Other, "I/O error");
    }
    match e.kind() {
        K::AuthenticationFailed => (BackendErrorKind::Auth, "authentication failed"),
        K::InvalidClientConfig => (BackendErrorKind::Config, "invalid configuration"),
        K::Parse | K::UnexpectedReturnType => (BackendErrorKind::Protocol, "unexpected reply"),
        // rustls errors raised outside I/O (e.g. building the TLS config).
        K::Client if connecting => (BackendErrorKind::Config, "client setup failed"),
        K::Server(_) | K::Extension => match e.code() {
            Some(code) => {
                let kind = kind_for_server_code(code);
                if kind == BackendErrorKind::Other && connecting {
                    // e.g. SELECT refused: the URL names a database the
                    // server does not have.
                    (
                        BackendErrorKind::Config,
                        "server refused the connection setup",
                    )
                } else {
                    (kind, "server error")
                }
            }
            None => (BackendErrorKind::Other, "server error"),
        },
        _ => (BackendErrorKind::Other, "error"),
    }
}

/// Maps a Redis error code (the first word of an error reply).
fn kind_for_server_code(code: &str) -> BackendErrorKind {
    match code {
        "WRONGTYPE" => BackendErrorKind::WrongType,
        "READONLY" => BackendErrorKind::ReadOnly,
        "NOAUTH" | "WRONGPASS" | "NOPERM" => BackendErrorKind::Auth,
        _ => BackendErrorKind::Other,
    }
}

/// The `io::Error` inside `e`, if it wraps one.
///
/// `RedisError::source` hands out its inner `Arc<dyn Error + Send + Sync>`
/// itself, so look through that `Arc` as well.
pub(super) fn io_error(e: &redis::RedisError) -> Option<&io::Error> {
    let source = e.source()?;
    if let Some(io) = source.downcast_ref::<io::Error>() {
        return Some(io);
    }
    source
        .downcast_ref::<Arc<dyn StdError + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<io::Error>())
}

fn is_tls_error(io: &io::Error) -> bool {
    #[cfg(feature = "tls")]
    {
        io.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = io;
        false
    }
}

/// The peer closed or reset the connection.
pub(super) fn is_dropped(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
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
        assert_eq!(kind_for_server_code("NOPERM"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("ERR"), BackendErrorKind::Other);
        assert_eq!(kind_for_server_code("LOADING"), BackendErrorKind::Other);
    }

    #[test]
    fn io_errors_map_to_kinds() {
        let err = |kind| redis::RedisError::from(io::Error::from(kind));
        let cases = [
            (io::ErrorKind::TimedOut, false, BackendErrorKind::Timeout),
            (io::ErrorKind::WouldBlock, false, BackendErrorKind::Timeout),
            (io::ErrorKind::TimedOut, true, BackendErrorKind::Timeout),
            (
                io::ErrorKind::ConnectionRefused,
                true,
                BackendErrorKind::Unreachable,
            ),
            (io::ErrorKind::Other, true, BackendErrorKind::Unreachable),
            (
                io::ErrorKind::UnexpectedEof,
                false,
                BackendErrorKind::Unreachable,
            ),
            (
                io::ErrorKind::ConnectionReset,
                false,
                BackendErrorKind::Unreachable,
            ),
            (io::ErrorKind::Other, false, BackendErrorKind::Other),
        ];
        for (io_kind, connecting, want) in cases {
            assert_eq!(classify(&err(io_kind), connecting).0, want, "{io_kind:?}");
        }
        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "no"));
        assert_eq!(classify(&auth, true).0, BackendErrorKind::Auth);
        let parse = redis::RedisError::from((redis::ErrorKind::Parse, "bad"));
        assert_eq!(classify(&parse, false).0, BackendErrorKind::Protocol);
    }
}
