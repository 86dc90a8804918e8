//! How ops are written into a batch's buffer: an op in its form (a
//! script by `EVALSHA` or `EVAL`, `SET NX PX`, the server's own commands),
//! the `GET` and `PTTL` of a refused acquire, and the buffer's size. Apart
//! from `mod.rs` because writing an op reads nothing: the same packing
//! serves the first round trip and the re-run.

use crate::backend::{Op, OpKind};

use super::super::Inner;
use super::super::encode::command;
use super::super::forms::{Form, wire};
use super::super::scripts::Digests;

impl Inner {
    /// `op` in `form`: `SET NX PX` for a plain acquire of one key; a
    /// script by `EVALSHA` when its digest is known (`digests`), else by
    /// `EVAL` with its text: the one-key scripts for one key, the set
    /// scripts (all or nothing) for several; the server's own commands
    /// (`forms/wire.rs`).
    pub(super) fn pack_op(
        &self,
        op: &Op<'_>,
        form: Form,
        ttl_ms: u64,
        digests: Option<&Digests>,
        buf: &mut Vec<u8>,
    ) {
        let Form::Script(script) = form else {
            return wire::pack_command(form, op, ttl_ms, buf);
        };
        let Op { keys, token, kind } = *op;
        // The lock's keys, then the fence counters' hash when the script
        // reads it (the last of `KEYS`); a read-write lock's two keys in
        // the order of their roles in its script: the op's own key (the
        // readers', or the writer's for the admission), then the other.
        // `ARGV`: the token, then the TTL, the fence or the record.
        let (extra_key, second): (Option<&[u8]>, Second<'_>) = match kind {
            OpKind::Acquire { .. } | OpKind::Extend { .. } | OpKind::ReadExtend { .. } => {
                (None, Second::Number(ttl_ms))
            }
            OpKind::Release | OpKind::ReadRelease => (None, Second::Nothing),
            OpKind::AcquireFenced { counter, .. } => (Some(counter), Second::Number(ttl_ms)),
            OpKind::RaiseFence { counter, fence } => (Some(counter), Second::Number(fence)),
            OpKind::ReadAcquire { writer, .. } => (Some(writer), Second::Number(ttl_ms)),
            OpKind::Admit { readers, .. } => (Some(readers), Second::Number(ttl_ms)),
            OpKind::Proclaim { record_key, record } => (Some(record_key), Second::Bytes(record)),
        };
        let key_count = keys.len() + usize::from(extra_key.is_some());
        // An empty argument is left out (as before: a script reads only
        // the arguments it is given).
        let second = match second {
            Second::Bytes([]) => Second::Nothing,
            other => other,
        };
        let args = usize::from(!token.is_empty()) + usize::from(!matches!(second, Second::Nothing));
        let mut cmd = command(buf, 3 + key_count + args);
        match digests {
            Some(digests) => cmd
                .encoded(b"$7\r\nEVALSHA\r\n", 1)
                .bytes(digests.of(script).as_bytes()),
            None => cmd.bytes(b"EVAL").bytes(script.text().as_bytes()),
        };
        cmd.number(key_count as u64);
        for key in keys.iter().chain(extra_key) {
            cmd.bytes(key);
        }
        if !token.is_empty() {
            cmd.bytes(token);
        }
        match second {
            Second::Nothing => {}
            Second::Number(n) => {
                cmd.number(n);
            }
            Second::Bytes(b) => {
                cmd.bytes(b);
            }
        }
    }
}

/// Room for the first round trip's ops, so that the buffer is allocated
/// once in the usual case: per key, the key twice (a release's notice
/// channel names it) and a command's framing; per op, the token and a
/// script's call (`EVALSHA`, its digest, the counts and the TTL).
pub(super) fn request_size(ops: &[Op<'_>], sent: &[(usize, Form)]) -> usize {
    sent.iter()
        .map(|&(i, _)| {
            let op = &ops[i];
            let keys: usize = op.keys.iter().map(|k| 2 * k.len() + 96).sum();
            keys + op.token.len() + 128
        })
        .sum::<usize>()
        + 64
}

/// A script's second argument (after the token).
enum Second<'a> {
    Nothing,
    /// A TTL in milliseconds, or a fence.
    Number(u64),
    Bytes(&'a [u8]),
}

/// `GET` and `PTTL` of a refused acquire's key, one round trip: who holds
/// it, and for how long yet.
pub(super) fn pack_holder_check(op: &Op<'_>, buf: &mut Vec<u8>) {
    redis::cmd("GET")
        .arg(op.keys.first())
        .write_packed_command(buf);
    redis::cmd("PTTL")
        .arg(op.keys.first())
        .write_packed_command(buf);
}
