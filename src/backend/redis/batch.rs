//! The pipeline protocol: packing ops into one round trip, reading the
//! replies, and the follow-up round trip (`NOSCRIPT` re-runs by `EVAL`,
//! `GET` checks after refused acquires).

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{BackendError, BackendErrorKind, Op, Reply, ServerInfo};

use super::Inner;
use super::pool::{Checkout, Failure};
use super::redact::show_key;
use super::scripts::Script;

/// Largest TTL sent to the server (about 285 000 years). Redis refuses
/// expiries whose absolute time would overflow a signed 64-bit millisecond
/// count, so anything near `i64::MAX` is refused here before any network
/// call.
const MAX_TTL_MS: u64 = 1 << 53;

/// What an op needs in the second round trip.
enum Followup {
    /// A refused acquire: `GET` the key. Our token: already ours (granted);
    /// another value or nil: held elsewhere (refused); `WRONGTYPE`: the key
    /// is not a lock (`SET NX` on a hash answers nil, `GET` fails).
    Get,
    /// The script was not cached: run it by `EVAL`.
    Eval,
}

impl Inner {
    /// Runs the ops whose `results` slot is empty on `c`, filling their
    /// slots. `server` is set to the identity of `c` as soon as its first
    /// round trip has answered, so that the answers already given keep the
    /// identity of the server that gave them even if a later round trip
    /// fails.
    pub(super) fn run_batch(
        &self,
        c: &mut Checkout,
        ops: &[Op<'_>],
        ttls: &[u64],
        results: &mut [Option<Result<Reply, BackendError>>],
        server: &mut Option<ServerInfo>,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let want_info = c.conn.needs_info();
        let mut buf = Vec::new();
        if want_info {
            redis::cmd("INFO")
                .arg("server")
                .write_packed_command(&mut buf);
        }
        let sent: Vec<usize> = (0..ops.len()).filter(|&i| results[i].is_none()).collect();
        for &i in &sent {
            self.pack_first(&ops[i], ttls[i], &mut buf);
        }
        let replies = c
            .conn
            .exchange(&buf, sent.len() + usize::from(want_info), deadline)
            .map_err(|(fault, read)| self.failure(&fault, read))?;
        let mut replies = replies.into_iter();
        if want_info {
            let info = replies.next();
            c.conn.learn_identity(info.as_ref());
        }
        *server = c.conn.server();
        let mut followups = Vec::new();
        for (&i, reply) in sent.iter().zip(replies) {
            let op = &ops[i];
            let token = op_token(op);
            let outcome = match (op, reply) {
                (Op::Acquire { .. }, Value::Okay) => Some(Ok(Reply::Yes)),
                (Op::Acquire { .. }, Value::Nil) => {
                    followups.push((i, Followup::Get));
                    None
                }
                (_, Value::ServerError(e)) if e.code() == "NOSCRIPT" => {
                    followups.push((i, Followup::Eval));
                    None
                }
                (_, Value::ServerError(e)) => Some(Err(self.server_error(&e, Some(token)))),
                (op, value) => Some(self.script_reply(op, value)),
            };
            results[i] = outcome;
        }
        if followups.is_empty() {
            return Ok(());
        }

        buf.clear();
        for (i, followup) in &followups {
            let op = &ops[*i];
            match followup {
                Followup::Get => redis::cmd("GET")
                    .arg(op_key(op))
                    .write_packed_command(&mut buf),
                Followup::Eval => self.pack_eval(op, ttls[*i], &mut buf),
            }
        }
        let replies = c
            .conn
            .exchange(&buf, followups.len(), deadline)
            .map_err(|(fault, _)| Failure {
                error: self.fault_error(&fault),
                stale: false,
            })?;
        for ((i, followup), reply) in followups.iter().zip(replies) {
            let op = &ops[*i];
            let token = op_token(op);
            results[*i] = Some(match (followup, reply) {
                (Followup::Get, Value::ServerError(e)) if e.code() == "WRONGTYPE" => {
                    Err(BackendError::new(
                        BackendErrorKind::WrongType,
                        format!(
                            "{}: key {} holds a value that is not a string (WRONGTYPE), \
                             not a lock",
                            self.redacted,
                            show_key(op_key(op))
                        ),
                    ))
                }
                (_, Value::ServerError(e)) => Err(self.server_error(&e, Some(token))),
                // Already ours: this acquisition set it, e.g. through
                // another name of the same server.
                (Followup::Get, Value::BulkString(held)) => Ok(Reply::from(held == token)),
                // Nil: the holder's key expired in between. Either way it
                // was not set by this SET: refused.
                (Followup::Get, Value::Nil) => Ok(Reply::No),
                (Followup::Get, other) => Err(self.protocol_error("GET", &other)),
                (Followup::Eval, value) => self.script_reply(op, value),
            });
        }
        Ok(())
    }

    /// A script's reply to `op`: 0 / 1 for release, extend and raise; the
    /// counter (or -1, held elsewhere) for a fenced acquire.
    fn script_reply(&self, op: &Op<'_>, value: Value) -> Result<Reply, BackendError> {
        match (op, value) {
            (Op::AcquireFenced { .. }, Value::Int(-1)) => Ok(Reply::No),
            (Op::AcquireFenced { .. }, Value::Int(n)) if n >= 0 => {
                Ok(Reply::Fenced(n.unsigned_abs()))
            }
            (
                Op::Release { .. } | Op::Extend { .. } | Op::RaiseFence { .. },
                Value::Int(n @ (0 | 1)),
            ) => Ok(Reply::from(n == 1)),
            (op, other) => Err(self.protocol_error(op_name(op), &other)),
        }
    }

    fn pack_first(&self, op: &Op<'_>, ttl_ms: u64, buf: &mut Vec<u8>) {
        match *op {
            Op::Acquire { key, token, .. } => redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .write_packed_command(buf),
            _ => self.pack_script(op, ttl_ms, false, buf),
        }
    }

    fn pack_eval(&self, op: &Op<'_>, ttl_ms: u64, buf: &mut Vec<u8>) {
        self.pack_script(op, ttl_ms, true, buf);
    }

    /// `EVALSHA` (or `EVAL` with the script's text when `by_text`) of the
    /// script behind `op`. A plain acquire is never run by script: its
    /// follow-up `GET` keeps the pipeline aligned.
    fn pack_script(&self, op: &Op<'_>, ttl_ms: u64, by_text: bool, buf: &mut Vec<u8>) {
        let scripts = &self.scripts;
        let (script, keys, args): (&Script, [&[u8]; 2], Vec<Vec<u8>>) = match *op {
            Op::Acquire { key, .. } => {
                redis::cmd("GET").arg(key).write_packed_command(buf);
                return;
            }
            Op::Release { key, token } => (&scripts.release, [key, &[]], vec![token.to_vec()]),
            Op::Extend { key, token, .. } => (
                &scripts.extend,
                [key, &[]],
                vec![token.to_vec(), ttl_ms.to_string().into_bytes()],
            ),
            Op::AcquireFenced {
                key,
                token,
                counter,
                ..
            } => (
                &scripts.acquire_fenced,
                [key, counter],
                vec![token.to_vec(), ttl_ms.to_string().into_bytes()],
            ),
            Op::RaiseFence {
                key,
                token,
                counter,
                fence,
            } => (
                &scripts.raise_fence,
                [key, counter],
                vec![token.to_vec(), fence.to_string().into_bytes()],
            ),
        };
        let two_keys = matches!(op, Op::AcquireFenced { .. } | Op::RaiseFence { .. });
        let mut cmd = if by_text {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script.text);
            cmd
        } else {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&script.sha);
            cmd
        };
        cmd.arg(if two_keys { 2 } else { 1 }).arg(keys[0]);
        if two_keys {
            cmd.arg(keys[1]);
        }
        for arg in &args {
            cmd.arg(arg.as_slice());
        }
        cmd.write_packed_command(buf);
    }
}

/// `ttl` in whole milliseconds, rounded up, at least 1.
///
/// Rounding down would let the key expire before the deadline the client
/// computed from `ttl`.
pub(super) fn ttl_millis(ttl: Duration) -> Result<u64, BackendError> {
    let nanos = ttl.as_nanos();
    let ms = nanos.div_ceil(1_000_000).max(1);
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_TTL_MS => Ok(ms),
        _ => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("TTL {ttl:?} is out of range for Redis"),
        )),
    }
}

fn op_key<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Acquire { key, .. }
        | Op::Release { key, .. }
        | Op::Extend { key, .. }
        | Op::AcquireFenced { key, .. }
        | Op::RaiseFence { key, .. } => key,
    }
}

fn op_token<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Acquire { token, .. }
        | Op::Release { token, .. }
        | Op::Extend { token, .. }
        | Op::AcquireFenced { token, .. }
        | Op::RaiseFence { token, .. } => token,
    }
}

fn op_name(op: &Op<'_>) -> &'static str {
    match op {
        Op::Acquire { .. } => "SET NX",
        Op::Release { .. } => "the release script",
        Op::Extend { .. } => "the extend script",
        Op::AcquireFenced { .. } => "the fenced acquire script",
        Op::RaiseFence { .. } => "the fence script",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn ttl_rounds_up_to_whole_milliseconds() {
        assert_eq!(ttl_millis(Duration::ZERO).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(999)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1001)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_secs(10)).unwrap(), 10_000);
        assert_eq!(
            ttl_millis(Duration::from_secs(10) + Duration::from_nanos(1)).unwrap(),
            10_001
        );
    }

    #[test]
    fn ttl_out_of_range_is_refused_before_any_call() {
        assert!(ttl_millis(Duration::from_millis(MAX_TTL_MS)).is_ok());
        let err = ttl_millis(Duration::from_millis(MAX_TTL_MS + 1)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Other);
        assert!(ttl_millis(Duration::MAX).is_err());
    }
}
