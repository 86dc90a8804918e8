//! A cluster's redirect (`MOVED` or `ASK`): the answer of a server that
//! does not own the key's slot, which therefore did not run the op. Kept
//! as the [`source`](std::error::Error::source) of the op's
//! [`BackendError`](crate::backend::BackendError), so that a cluster node
//! can send the op where the key lives.

use std::fmt;

/// Where a key's slot lives, as a server that does not serve it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// `ASK`: the slot is being migrated, and this one key is (or will be)
    /// at `host:port` (which serves it only after `ASKING`); `MOVED`: the
    /// slot itself lives there now.
    pub(crate) ask: bool,
    pub(crate) slot: u16,
    /// The host as announced (empty: the host that was asked).
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Redirect {
    /// The redirect in a server error, if it is one: `MOVED 3999
    /// 127.0.0.1:6381` or `ASK 3999 127.0.0.1:6381` (an IPv6 host keeps its
    /// colons: the port is after the last one).
    pub(crate) fn of(e: &redis::ServerError) -> Option<Self> {
        let ask = match e.code() {
            "MOVED" => false,
            "ASK" => true,
            _ => return None,
        };
        let mut words = e.details()?.split_whitespace();
        let slot = words.next()?.parse().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        Some(Self {
            ask,
            slot,
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }
}

impl fmt::Display for Redirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.ask { "ASK" } else { "MOVED" };
        write!(f, "{what} {} {}:{}", self.slot, self.host, self.port)
    }
}

impl std::error::Error for Redirect {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn error(text: &str) -> redis::ServerError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn moved_and_ask_are_read() {
        let moved = Redirect::of(&error("MOVED 3999 127.0.0.1:6381")).unwrap();
        assert_eq!((moved.ask, moved.slot, moved.port), (false, 3999, 6381));
        assert_eq!(moved.host, "127.0.0.1");
        let ask = Redirect::of(&error("ASK 1 ::1:7000")).unwrap();
        assert_eq!((ask.ask, ask.host.as_str(), ask.port), (true, "::1", 7000));
        let unannounced = Redirect::of(&error("MOVED 7 :7001")).unwrap();
        assert_eq!(unannounced.host, "");
        assert!(Redirect::of(&error("ERR wrong")).is_none());
        assert!(Redirect::of(&error("MOVED nonsense")).is_none());
    }
}
