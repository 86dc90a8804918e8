//! [`Inspect::inspect`](crate::backend::Inspect::inspect) on Redis: the key's value
//! (its first bytes only) and its time left, read in one script so both
//! describe the same moment.

use std::time::Duration;

use redis::Value;

use super::Inner;
use crate::backend::{BackendError, BackendErrorKind, Holding, MAX_INSPECTED_VALUE};

/// `nil` for a missing key; else the first `ARGV[1]` bytes of the value,
/// its whole length and its `PTTL`. `GET` fails with `WRONGTYPE` on a key
/// of another type, which the caller reports as such.
const INSPECT: &str = "local v = redis.call('get', KEYS[1]) \
     if not v then return false end \
     return {string.sub(v, 1, tonumber(ARGV[1])), string.len(v), redis.call('pttl', KEYS[1])}";

impl Inner {
    /// One `EVAL` of [`INSPECT`] on a pooled connection, by the node's
    /// deadline. Sent as a whole script each time: inspections are rare,
    /// and this spares them the script cache.
    pub(super) fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        let deadline = self.deadline();
        let mut buf = Vec::new();
        redis::cmd("EVAL")
            .arg(INSPECT)
            .arg(1)
            .arg(key)
            .arg(MAX_INSPECTED_VALUE)
            .write_packed_command(&mut buf);
        let reply = self.with_conn(deadline, |c| {
            c.conn
                .exchange(&buf, 1, deadline)
                .map_err(|(fault, read)| self.failure(&fault, read))
        })?;
        match reply.into_iter().next() {
            Some(value) => self.holding(value),
            None => Err(self.node_error(BackendErrorKind::Protocol, "no reply to EVAL", None)),
        }
    }

    fn holding(&self, value: Value) -> Result<Option<Holding>, BackendError> {
        let parts = match value {
            Value::Nil => return Ok(None),
            Value::ServerError(e) => return Err(self.server_error(&e, None)),
            Value::Array(parts) => parts,
            other => return Err(self.protocol_error("EVAL (inspect)", &other)),
        };
        match parts.as_slice() {
            // Expired between the two reads: absent.
            [_, _, Value::Int(-2)] => Ok(None),
            [Value::BulkString(v), Value::Int(len), Value::Int(pttl)] if *len >= 0 => {
                let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
                let len = usize::try_from(*len).unwrap_or(usize::MAX);
                Ok(Some(Holding::new(v, len, ttl)))
            }
            _ => Err(self.protocol_error("EVAL (inspect)", &Value::Array(parts))),
        }
    }
}
