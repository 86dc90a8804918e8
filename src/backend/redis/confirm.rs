//! Holds confirmed by a cluster shard's replicas: a `WAIT` after the ops
//! of a batch (in the same pipeline, and after the re-runs of a second
//! round trip), and the holds it does not confirm turned into errors. A
//! server of its own (`Inner::replicas` 0) sends none.

use std::time::Instant;

use redis::Value;

use super::Inner;
use crate::backend::{BackendError, BackendErrorKind, Op, Reply};

impl Inner {
    /// Turns the holds granted in a batch whose writes only `confirmed` of
    /// the shard's replicas acknowledged (fewer than `self.replicas`)
    /// into errors: a failover may promote a replica without them, and
    /// then the key is gone while the lock still counts this node.
    /// An error says "may have been applied", so a failed acquire is
    /// still undone.
    pub(super) fn withhold_unconfirmed(
        &self,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        confirmed: usize,
    ) {
        if confirmed >= self.replicas {
            return;
        }
        for (op, slot) in ops.iter().zip(results.iter_mut()) {
            let held =
                matches!(slot, Some(Ok(reply)) if reply.is_yes() || *reply == Reply::AlreadyOurs);
            if held && writes_a_hold(op) {
                let error = self.node_error(
                    BackendErrorKind::Other,
                    &format!(
                        "not confirmed by the replicas: {confirmed} of {} acknowledged the \
                         write in time (WAIT), and a failover could promote one without it, \
                         so it does not count",
                        self.replicas
                    ),
                    None,
                );
                *slot = Some(Err(error.with_source(Unconfirmed)));
            }
        }
    }
}

/// Whether `op` writes a hold that a failover must not lose: an acquire,
/// an extend, a fence raise (a release lost in a failover leaves a key
/// that expires on its own).
pub(super) fn writes_a_hold(op: &Op<'_>) -> bool {
    !op.kind.is_release()
}

/// `WAIT replicas timeout`: blocks the connection until `replicas`
/// replicas have acknowledged its writes, or for at most half the time
/// left to `deadline` (at least 1 ms: `WAIT 0` blocks forever), so that
/// its answer arrives before the deadline.
pub(super) fn pack_wait(replicas: usize, deadline: Instant, buf: &mut Vec<u8>) {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = (left.as_millis() / 2).clamp(1, u128::from(u32::MAX));
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(ms.to_string())
        .write_packed_command(buf);
}

/// How many replicas a `WAIT` reply says acknowledged (an error, on a
/// replica say: none).
pub(super) fn replicas_confirmed(reply: Option<Value>) -> usize {
    match reply {
        Some(Value::Int(n)) => usize::try_from(n).unwrap_or(0),
        _ => 0,
    }
}

/// The source of a hold's error when its shard's replicas did not all
/// acknowledge it: the cluster node then reads its slot map again (a
/// replica the cluster marked failed is no longer listed, and no longer
/// waited for).
#[derive(Debug)]
pub(crate) struct Unconfirmed;

impl std::fmt::Display for Unconfirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not confirmed by the replicas")
    }
}

impl std::error::Error for Unconfirmed {}
