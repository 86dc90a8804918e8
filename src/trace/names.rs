//! What the spans call things (with the `tracing` feature): a node by its
//! name and, for a Redis URL, its host and port (never its credentials:
//! the name is the one `health()` shows); an error, a node's vote and a
//! backend failure by a short label (`error.type`, `quorum_lock.vote`).

use crate::backend::BackendErrorKind;
use crate::error::Error;
use crate::report::NodeOutcome;

/// One node as the events name it.
#[derive(Debug)]
pub(super) struct Node {
    /// Its name as `health()` gives it (never a credential).
    pub(super) name: Box<str>,
    /// Its host (or socket path) and port, for a Redis URL.
    pub(super) address: Option<Box<str>>,
    pub(super) port: Option<u16>,
    /// `db.system`: `redis` for a Redis (or Valkey) server.
    pub(super) system: Option<&'static str>,
}

impl Node {
    pub(super) fn of(name: &str) -> Self {
        let (address, port, system) = match name.split_once("://") {
            Some((scheme, rest)) if scheme.contains("redis") || scheme.contains("valkey") => {
                let (address, port) = host_port(rest);
                (Some(address), port, Some("redis"))
            }
            Some(("unix", path)) => (Some(path.into()), None, Some("redis")),
            _ => (None, None, None),
        };
        Self {
            name: name.into(),
            address,
            port,
            system,
        }
    }
}

/// The host and port of a URL's part after `scheme://`.
fn host_port(rest: &str) -> (Box<str>, Option<u16>) {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host_port.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (host.into(), port.parse().ok())
        }
        _ => (host_port.into(), None),
    }
}

/// `error.type` of a call's error.
pub(super) fn error_type(error: &Error) -> &'static str {
    match error {
        Error::Contended { .. } => "contended",
        Error::NoQuorum { .. } => "no_quorum",
        Error::ValidityExpired { .. } => "validity_expired",
        Error::Lost { .. } => "lost",
        Error::InvalidArgument { .. } => "invalid_argument",
        Error::Config { .. } => "config",
        Error::Cancelled { .. } => "cancelled",
        Error::Deadlock { .. } => "deadlock",
        Error::Degraded { .. } => "degraded",
        Error::Runtime { .. } => "runtime",
    }
}

/// `quorum_lock.vote` of a node's outcome.
pub(super) fn vote(outcome: &NodeOutcome) -> &'static str {
    match outcome {
        NodeOutcome::Granted => "granted",
        NodeOutcome::Refused => "refused",
        NodeOutcome::Failed(_) => "failed",
        NodeOutcome::TimedOut => "timed_out",
        NodeOutcome::NotAwaited => "not_awaited",
        NodeOutcome::Down => "down",
        NodeOutcome::Quarantined { .. } => "quarantined",
        NodeOutcome::HandedOver => "handed_over",
    }
}

/// `error.type` of a node's failure.
pub(super) fn kind(kind: BackendErrorKind) -> &'static str {
    match kind {
        BackendErrorKind::Unreachable => "unreachable",
        BackendErrorKind::Timeout => "timeout",
        BackendErrorKind::WrongType => "wrong_type",
        BackendErrorKind::ReadOnly => "read_only",
        BackendErrorKind::Auth => "auth",
        BackendErrorKind::Denied => "denied",
        BackendErrorKind::Config => "config",
        BackendErrorKind::Protocol => "protocol",
        BackendErrorKind::Panicked => "panicked",
        BackendErrorKind::Other => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_url_gives_its_host_and_port_never_its_credentials() {
        let node = Node::of("redis://user:***@10.0.0.1:6379/0");
        assert_eq!(node.address.as_deref(), Some("10.0.0.1"));
        assert_eq!(node.port, Some(6379));
        assert_eq!(node.system, Some("redis"));
        let node = Node::of("rediss://[::1]:6380");
        assert_eq!(node.address.as_deref(), Some("::1"));
        assert_eq!(node.port, Some(6380));
        let node = Node::of("mem-0");
        assert_eq!((node.address, node.port, node.system), (None, None, None));
    }
}
