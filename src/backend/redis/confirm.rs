//! Holds confirmed by a cluster shard's replicas. After the ops of a
//! batch that writes a hold, in the same pipeline (and again after the
//! re-runs of a second round trip): the master's own count of its
//! replicas (`INFO replication`, `connected_slaves`), then `WAIT n` for
//! the `n` replicas the slot map listed (`Inner::replicas`; none sent
//! for 0). A hold counts only when the acknowledgements reach the larger
//! of the two counts: every replica the master has when it wrote the
//! hold, however old the slot map is. When the master counts more than
//! were listed and waited for (a Sentinel's list right after a failover),
//! one more round trip on the same connection waits for the master's
//! count (`WAIT` answers for every write the connection made), so a
//! hold every replica has counts instead of failing until the list
//! catches up. The holds it does not confirm are turned into errors. A
//! server of its own (not a cluster shard) sends neither.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Value;

use super::Inner;
use super::frame::value_text;
use super::pool::{Checkout, Failure};
use crate::backend::{BackendError, BackendErrorKind, Op, Reply};

/// What a batch learned about its holds' replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Confirmation {
    /// The replicas the slot map lists for the master (the `WAIT`'s `n`).
    listed: usize,
    /// The replicas the master itself counted right after the writes
    /// (`None`: its `INFO replication` was refused or unreadable).
    connected: Option<usize>,
    /// How many acknowledged the writes (the `WAIT`'s answer; 0 when
    /// none was sent).
    acked: usize,
}

impl Confirmation {
    /// How many acknowledgements a hold needs: every replica the master
    /// has, and every one the map lists; `None` when the master's count
    /// is unknown (nothing can be confirmed then).
    pub(super) fn required(self) -> Option<usize> {
        self.connected.map(|c| c.max(self.listed))
    }

    /// Whether the holds count.
    fn confirmed(self) -> bool {
        self.required().is_some_and(|r| self.acked >= r)
    }

    /// The replicas a second `WAIT` is to wait for: the master counted
    /// more than were listed and waited for (a Sentinel's list right after
    /// a failover, a replica started with `replica-announced no`, a slot
    /// map older than the replica), and too few acknowledged. `None`
    /// otherwise: confirmed already, the master's count unknown, or a
    /// listed replica the master lost (no wait brings that one back).
    pub(super) fn wider_wait(self) -> Option<usize> {
        let connected = self.connected?;
        (connected > self.listed && self.acked < connected).then_some(connected)
    }

    /// The confirmation after that second `WAIT`, `acked` its answer: it
    /// counts the acknowledgements of every write the connection made,
    /// those of earlier round trips included.
    pub(super) fn widened(self, acked: usize) -> Self {
        Self { acked, ..self }
    }

    /// The confirmation of a batch whose writes went in two round trips:
    /// each needed its own (the larger count, the fewer acknowledgements).
    pub(super) fn and(self, later: Self) -> Self {
        Self {
            listed: self.listed.max(later.listed),
            connected: self.connected.zip(later.connected).map(|(a, b)| a.max(b)),
            acked: self.acked.min(later.acked),
        }
    }
}

impl Inner {
    /// Packs the confirmation of a batch's holds into `buf` (`INFO
    /// replication`, then `WAIT` when the map lists replicas) and returns
    /// how many replies it adds.
    pub(super) fn pack_confirm(&self, deadline: Instant, buf: &mut Vec<u8>) -> usize {
        redis::cmd("INFO")
            .arg("replication")
            .write_packed_command(buf);
        if self.replicas == 0 {
            return 1;
        }
        pack_wait(self.replicas, deadline, buf);
        2
    }

    /// `WAIT replicas` on the connection that wrote the batch, as a
    /// round trip of its own (see [`Confirmation::wider_wait`]): how many
    /// acknowledged every write the connection made.
    pub(super) fn wait_wider(
        &self,
        c: &mut Checkout,
        replicas: usize,
        deadline: Instant,
    ) -> Result<usize, Failure> {
        let mut buf = Vec::new();
        pack_wait(replicas, deadline, &mut buf);
        let replies = c
            .conn
            .exchange(&buf, 1, deadline)
            .map_err(|(fault, _)| self.failure_after_first(&fault))?;
        Ok(replicas_confirmed(replies.into_iter().next()))
    }

    /// Reads the replies [`pack_confirm`](Self::pack_confirm) asked for,
    /// and remembers whether the master's count differs from the map's
    /// (a cluster node then reads its slot map again:
    /// [`replicas_differ`](super::RedisBackend::replicas_differ)).
    pub(super) fn read_confirm(&self, replies: &mut impl Iterator<Item = Value>) -> Confirmation {
        let connected = replies
            .next()
            .as_ref()
            .and_then(value_text)
            .and_then(|text| connected_replicas(&text));
        let acked = if self.replicas == 0 {
            0
        } else {
            replicas_confirmed(replies.next())
        };
        if connected.is_some_and(|c| c != self.replicas) {
            self.replicas_differ.store(true, Ordering::Relaxed);
        }
        Confirmation {
            listed: self.replicas,
            connected,
            acked,
        }
    }

    /// Turns the holds granted in a batch that `confirmation` does not
    /// confirm into errors: a failover may promote a replica without
    /// them, and then the key is gone while the lock still counts this
    /// node. An error says "may have been applied", so a failed acquire
    /// is still undone.
    pub(super) fn withhold_unconfirmed(
        &self,
        ops: &[Op<'_>],
        results: &mut [Option<Result<Reply, BackendError>>],
        confirmation: Confirmation,
    ) {
        if confirmation.confirmed() {
            return;
        }
        let why = match confirmation.required() {
            None => "the master's count of its replicas (INFO replication) could not be \
                     read, so whether every replica has the write is unknown"
                .to_owned(),
            Some(required) => {
                let listed = if required > confirmation.listed {
                    format!(
                        " (the master has {required}, the slot map or the sentinels listed \
                         {}: they are asked again)",
                        confirmation.listed
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} of {required} acknowledged the write in time (WAIT){listed}, and a \
                     failover could promote one without it",
                    confirmation.acked
                )
            }
        };
        for (op, slot) in ops.iter().zip(results.iter_mut()) {
            if grants_a_hold(op, slot) {
                let error = self.node_error(
                    BackendErrorKind::Other,
                    &format!("not confirmed by the replicas: {why}, so it does not count"),
                    None,
                );
                *slot = Some(Err(error.with_source(Unconfirmed)));
            }
        }
    }
}

/// Whether `op`'s answer `slot` says it wrote a hold that is to be
/// confirmed.
fn grants_a_hold(op: &Op<'_>, slot: &Option<Result<Reply, BackendError>>) -> bool {
    let held = matches!(slot, Some(Ok(reply)) if reply.is_yes() || *reply == Reply::AlreadyOurs);
    held && writes_a_hold(op)
}

/// Whether any op of a batch wrote a hold that is to be confirmed (a
/// batch whose acquires were all refused needs no second `WAIT`).
pub(super) fn any_hold_granted(
    ops: &[Op<'_>],
    results: &[Option<Result<Reply, BackendError>>],
) -> bool {
    ops.iter()
        .zip(results)
        .any(|(op, slot)| grants_a_hold(op, slot))
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
fn pack_wait(replicas: usize, deadline: Instant, buf: &mut Vec<u8>) {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = (left.as_millis() / 2).clamp(1, u128::from(u32::MAX));
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(ms.to_string())
        .write_packed_command(buf);
}

/// How many replicas a `WAIT` reply says acknowledged (an error, on a
/// replica say: none).
fn replicas_confirmed(reply: Option<Value>) -> usize {
    match reply {
        Some(Value::Int(n)) => usize::try_from(n).unwrap_or(0),
        _ => 0,
    }
}

/// `connected_slaves` of an `INFO replication` reply: every replica
/// attached to the master, also one still in its first sync (which
/// acknowledges nothing before it is online: a hold then waits for it).
fn connected_replicas(text: &str) -> Option<usize> {
    text.lines()
        .find_map(|line| line.trim_end().strip_prefix("connected_slaves:"))
        .and_then(|n| n.parse().ok())
}

/// The source of a hold's error when its shard's replicas did not all
/// acknowledge it: the cluster node then reads its slot map again (a
/// replica the cluster marked failed is no longer listed, and no longer
/// waited for; one added since is).
#[derive(Debug)]
pub(crate) struct Unconfirmed;

impl std::fmt::Display for Unconfirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not confirmed by the replicas")
    }
}

impl std::error::Error for Unconfirmed {}

/// Whether an op's error says its master's replicas did not all confirm
/// it (a cluster node then reads its slot map again, a Sentinel node
/// asks the sentinels again).
pub(crate) fn unconfirmed(e: &BackendError) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<Unconfirmed>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(listed: usize, connected: Option<usize>, acked: usize) -> Confirmation {
        Confirmation {
            listed,
            connected,
            acked,
        }
    }

    #[test]
    fn a_hold_needs_every_replica_of_the_map_and_of_the_master() {
        // The map is older than the replica: the master's count decides.
        assert!(!seen(0, Some(1), 0).confirmed());
        assert_eq!(seen(0, Some(1), 0).required(), Some(1));
        assert!(seen(0, Some(0), 0).confirmed());
        assert!(seen(1, Some(1), 1).confirmed());
        // A listed replica the master lost: still waited for (the map
        // is read again, and the cluster stops listing a failed one).
        assert!(!seen(2, Some(1), 1).confirmed());
        assert!(seen(1, Some(2), 2).confirmed());
        // The master's count unknown: nothing confirmed.
        assert!(!seen(0, None, 0).confirmed());
        assert!(!seen(1, None, 1).confirmed());
        // Two round trips: each needed its own.
        assert!(!seen(1, Some(1), 1).and(seen(1, Some(2), 2)).confirmed());
        assert!(!seen(1, Some(1), 1).and(seen(1, None, 1)).confirmed());
        assert!(seen(1, Some(1), 1).and(seen(1, Some(1), 1)).confirmed());
    }

    #[test]
    fn a_master_counting_more_than_were_listed_is_waited_for_again() {
        // Listed 0, the master has 1: a second WAIT for 1, whose answer
        // decides.
        assert_eq!(seen(0, Some(1), 0).wider_wait(), Some(1));
        assert!(seen(0, Some(1), 0).widened(1).confirmed());
        assert!(!seen(0, Some(1), 0).widened(0).confirmed());
        assert_eq!(seen(1, Some(3), 1).wider_wait(), Some(3));
        assert!(!seen(1, Some(3), 1).widened(2).confirmed());
        // Confirmed already, the count unknown, or a listed replica the
        // master lost: no second WAIT.
        assert_eq!(seen(0, Some(1), 1).wider_wait(), None);
        assert_eq!(seen(1, Some(1), 0).wider_wait(), None);
        assert_eq!(seen(0, None, 0).wider_wait(), None);
        assert_eq!(seen(2, Some(1), 1).wider_wait(), None);
        assert_eq!(seen(0, Some(0), 0).wider_wait(), None);
    }

    #[test]
    fn the_masters_count_is_read_from_info_replication() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=1,lag=0\r\n";
        assert_eq!(connected_replicas(text), Some(2));
        assert_eq!(connected_replicas("role:master\r\n"), None);
        assert_eq!(connected_replicas("connected_slaves:x\r\n"), None);
        assert_eq!(replicas_confirmed(Some(Value::Int(3))), 3);
        assert_eq!(replicas_confirmed(None), 0);
    }
}
