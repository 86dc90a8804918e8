//! [`Inspect::inspect`](crate::backend::Inspect::inspect) on Redis: the key's value
//! (its first bytes only), its length and its time left, read in one
//! `MULTI` block so all three describe the same moment. No script: an ACL
//! user denied `@scripting` inspects too.

use std::time::Duration;

use redis::Value;

use super::Inner;
use crate::backend::{BackendError, BackendErrorKind, Holding, MAX_INSPECTED_VALUE};

impl Inner {
    /// `MULTI`, `GETRANGE key 0 <MAX_INSPECTED_VALUE - 1>`, `STRLEN`,
    /// `PTTL`, `EXEC` on a pooled connection, by the node's deadline.
    /// `GETRANGE` and `STRLEN` fail with `WRONGTYPE` on a key of another
    /// type, which the caller reports as such.
    pub(super) fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        let deadline = self.deadline();
        let mut buf = Vec::new();
        redis::cmd("MULTI").write_packed_command(&mut buf);
        redis::cmd("GETRANGE")
            .arg(key)
            .arg(0)
            .arg(MAX_INSPECTED_VALUE.saturating_sub(1))
            .write_packed_command(&mut buf);
        redis::cmd("STRLEN").arg(key).write_packed_command(&mut buf);
        redis::cmd("PTTL").arg(key).write_packed_command(&mut buf);
        redis::cmd("EXEC").write_packed_command(&mut buf);
        let replies = self.with_conn(deadline, |c| {
            c.conn
                .exchange(&buf, 5, deadline)
                .map_err(|(fault, read)| self.failure(&fault, read))
        })?;
        // MULTI's and the queued commands' own replies: an error there
        // (NOPERM, an unknown command) is the one to report.
        if let Some(Value::ServerError(e)) = replies
            .iter()
            .take(4)
            .find(|r| matches!(r, Value::ServerError(_)))
        {
            return Err(self.server_error(e, None));
        }
        match replies.into_iter().nth(4) {
            Some(value) => self.holding(value),
            None => Err(self.node_error(BackendErrorKind::Protocol, "no reply to EXEC", None)),
        }
    }

    fn holding(&self, value: Value) -> Result<Option<Holding>, BackendError> {
        let parts = match value {
            Value::ServerError(e) => return Err(self.server_error(&e, None)),
            Value::Array(parts) => parts,
            other => return Err(self.protocol_error("EXEC (inspect)", &other)),
        };
        if let Some(Value::ServerError(e)) =
            parts.iter().find(|p| matches!(p, Value::ServerError(_)))
        {
            return Err(self.server_error(e, None));
        }
        match parts.as_slice() {
            // Absent (PTTL -2), whatever GETRANGE and STRLEN said of it.
            [_, _, Value::Int(-2)] => Ok(None),
            [Value::BulkString(v), Value::Int(len), Value::Int(pttl)] if *len >= 0 => {
                let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
                let len = usize::try_from(*len).unwrap_or(usize::MAX);
                Ok(Some(Holding::new(v, len, ttl)))
            }
            _ => Err(self.protocol_error("EXEC (inspect)", &Value::Array(parts))),
        }
    }
}
