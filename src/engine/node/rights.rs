//! Whether a node refuses what locks need (a small state machine on
//! explicit times, like `refusal.rs` and `liveness.rs`).
//!
//! A server's access rules can refuse some operations and not others: an
//! ACL user with `+set +get` and no scripting takes every lock on Redis 7
//! and refuses every extend and release (each is a script there); a key
//! pattern that misses the manager's prefix refuses everything. Such a
//! node answers, so neither the liveness machine nor the refusal machine
//! (`refusal.rs`: node-wide failures) notices it, yet every lock rests on
//! the other nodes.
//!
//! A refusal by the access rules (`BackendErrorKind::Denied`) may also be
//! one resource's: a key pattern that covers the prefix but not that
//! name. The design's rule holds: a failure tied to one key is that
//! resource's, not the node's. So a `Denied` answer decides nothing by
//! itself; it makes the node's thread *try* what every lock needs (the
//! ops of [`TRIED`], one round trip) on a key of the crate's own under the
//! manager's prefix, `<prefix>{quorum-lock}:probe:<random>`, with a fresh
//! token. No resource is involved there: what the server refuses on that
//! key it refuses for every lock of this manager, so the node refuses
//! what locks need. A refusal tied to a resource's key leaves the try
//! clean. Each op of the try is judged on its own: answered (`Ok`, even
//! "no": the server let it run), refused (`Denied`), or no verdict (any
//! other error: a timeout says nothing of rights), which keeps what the
//! last try said of that op.
//!
//! Tries are at most one per [`RETRY`]. While the node refuses it is
//! tried again every [`RETRY`], with or without lock traffic, so it votes
//! again within about a second of the fix.

use std::time::{Duration, Instant};

use crate::backend::{BackendError, BackendErrorKind, Reply};
use crate::health::LockOp;

/// The least time between two tries of one node, and how often a node
/// that refuses is tried again.
pub(super) const RETRY: Duration = Duration::from_secs(1);

/// The TTL of the key a try takes (and sets again with its extend): its
/// own release deletes it at once, and on a node that refuses releases it
/// is gone this long after. A try judges rights, not outcomes: an extend
/// or release that finds the key gone is an answer ("no"), let through.
pub(super) const TRY_TTL: Duration = Duration::from_millis(1);

/// The ops of a try, sent in this order on one fresh key and token: the
/// acquire takes the key, the extend prolongs it, the release deletes it.
pub(super) const TRIED: [LockOp; 3] = [LockOp::Acquire, LockOp::Extend, LockOp::Release];

/// What a node's access rules refuse, and when to try it next.
#[derive(Debug, Default)]
pub(super) struct Rights {
    /// What the last try found refused, while it refuses anything.
    refused: Option<Refused>,
    /// When a try is due (`None`: none wanted).
    try_at: Option<Instant>,
    /// When the last try was made.
    tried_at: Option<Instant>,
}

/// The ops a node refuses (in [`TRIED`] order, at least one) and the
/// first refusal's error.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    pub(super) ops: Vec<LockOp>,
    pub(super) error: BackendError,
}

/// What changed with a try.
#[derive(Debug, Clone)]
pub(super) enum Change {
    /// It refuses these ops now (it did not, or other ones, or for
    /// another reason).
    Refuses(Refused),
    /// It refused some, and lets every op through again.
    Serves,
}

fn denied(result: &Result<Reply, BackendError>) -> Option<&BackendError> {
    result
        .as_ref()
        .err()
        .filter(|e| e.kind() == BackendErrorKind::Denied)
}

impl Rights {
    /// When a try is due.
    pub(super) fn try_at(&self) -> Option<Instant> {
        self.try_at
    }

    /// Whether a try is due at `now`.
    pub(super) fn try_due(&self, now: Instant) -> bool {
        self.try_at.is_some_and(|at| now >= at)
    }

    /// A round trip's results at `now`: an op refused by the access rules
    /// asks for a try (at most one per [`RETRY`]).
    pub(super) fn on_round_trip(&mut self, results: &[Result<Reply, BackendError>], now: Instant) {
        if results.iter().any(|r| denied(r).is_some()) {
            let earliest = self.tried_at.map_or(now, |at| (at + RETRY).max(now));
            self.try_at = Some(self.try_at.map_or(earliest, |at| at.min(earliest)));
        }
    }

    /// A try's results at `now`, one per op of [`TRIED`] (missing ones
    /// give no verdict).
    pub(super) fn on_try(
        &mut self,
        results: &[Result<Reply, BackendError>],
        now: Instant,
    ) -> Option<Change> {
        self.tried_at = Some(now);
        let before = self.refused.take();
        let mut ops = Vec::new();
        let mut error = None;
        for (i, op) in TRIED.iter().enumerate() {
            let result = results.get(i);
            let refused = match (result, result.and_then(denied)) {
                (Some(Ok(_)), _) => false,
                (_, Some(e)) => {
                    error.get_or_insert_with(|| e.clone());
                    true
                }
                // No verdict: as the last try said.
                _ => before.as_ref().is_some_and(|b| b.ops.contains(op)),
            };
            if refused {
                ops.push(*op);
            }
        }
        let now_refused = match (ops.is_empty(), error, &before) {
            (true, _, _) => None,
            (false, Some(error), _) => Some(Refused { ops, error }),
            // Only ops without a verdict still count as refused: the last
            // reason stands.
            (false, None, Some(b)) => Some(Refused {
                ops,
                error: b.error.clone(),
            }),
            (false, None, None) => None,
        };
        self.try_at = now_refused.as_ref().map(|_| now + RETRY);
        let change = match (&before, &now_refused) {
            (None, None) => None,
            (Some(_), None) => Some(Change::Serves),
            (Some(b), Some(n)) if b.ops == n.ops && b.error.message() == n.error.message() => None,
            (_, Some(n)) => Some(Change::Refuses(n.clone())),
        };
        self.refused = now_refused;
        change
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::backend::BackendErrorKind as K;

    fn error(kind: K, message: &str) -> BackendError {
        BackendError::new(kind, format!("node-a: {message}"))
    }

    fn noperm() -> Result<Reply, BackendError> {
        Err(error(
            K::Denied,
            "NOPERM this user has no permissions to run the 'eval' command",
        ))
    }

    fn ops(change: Option<Change>) -> Vec<LockOp> {
        match change {
            Some(Change::Refuses(r)) => r.ops,
            other => panic!("expected Refuses, got {other:?}"),
        }
    }

    #[test]
    fn only_a_denial_asks_for_a_try_and_tries_are_a_second_apart() {
        let t0 = Instant::now();
        let mut node = Rights::default();
        node.on_round_trip(
            &[
                Ok(Reply::Yes),
                Err(error(K::Timeout, "timed out")),
                Err(error(K::WrongType, "WRONGTYPE")),
                Err(error(K::Auth, "WRONGPASS")),
            ],
            t0,
        );
        assert_eq!(node.try_at(), None, "nothing the access rules refused");
        node.on_round_trip(&[Ok(Reply::Yes), noperm()], t0);
        assert!(node.try_due(t0));
        // The try finds every op let through: the denial was a resource's.
        assert!(
            node.on_try(&[Ok(Reply::Yes), Ok(Reply::Yes), Ok(Reply::Yes)], t0)
                .is_none()
        );
        assert_eq!(node.try_at(), None, "nothing to try again");
        // Another denial soon after: the next try waits for the second.
        let soon = t0 + RETRY / 4;
        node.on_round_trip(&[noperm()], soon);
        assert_eq!(node.try_at(), Some(t0 + RETRY));
        assert!(!node.try_due(soon));
        // Long after: at once.
        let later = t0 + 5 * RETRY;
        node.on_round_trip(&[noperm()], later);
        assert!(node.try_at().is_some_and(|at| at <= t0 + RETRY));
        assert!(node.try_due(later));
    }

    #[test]
    fn refused_ops_are_named_retried_every_second_and_cleared_by_a_clean_try() {
        let t0 = Instant::now();
        let mut node = Rights::default();
        node.on_round_trip(&[noperm()], t0);
        // No scripting: the acquire is a plain SET, the rest scripts.
        let change = node.on_try(&[Ok(Reply::Yes), noperm(), noperm()], t0);
        let Some(Change::Refuses(refused)) = change else {
            panic!("expected Refuses, got {change:?}");
        };
        assert_eq!(refused.ops, [LockOp::Extend, LockOp::Release]);
        assert!(refused.error.message().contains("NOPERM"));
        assert_eq!(node.try_at(), Some(t0 + RETRY), "tried again in a second");
        // The same again: no news, the next try a second later.
        let t1 = t0 + RETRY;
        assert!(
            node.on_try(&[Ok(Reply::Yes), noperm(), noperm()], t1)
                .is_none()
        );
        assert_eq!(node.try_at(), Some(t1 + RETRY));
        // A try without a verdict on the release (a timeout) keeps it
        // refused; the extend is let through now.
        let t2 = t1 + RETRY;
        let timeout = Err(error(K::Timeout, "timed out"));
        let change = node.on_try(&[Ok(Reply::Yes), Ok(Reply::No), timeout.clone()], t2);
        assert_eq!(ops(change), [LockOp::Release]);
        let t3 = t2 + RETRY;
        let change = node.on_try(&[timeout.clone(), timeout.clone(), timeout], t3);
        assert!(change.is_none(), "no verdict at all: as before");
        assert_eq!(node.try_at(), Some(t3 + RETRY));
        // Fixed: every op let through.
        let t4 = t3 + RETRY;
        let change = node.on_try(&[Ok(Reply::Yes), Ok(Reply::Yes), Ok(Reply::Yes)], t4);
        assert!(matches!(change, Some(Change::Serves)), "{change:?}");
        assert_eq!(node.try_at(), None);
    }

    #[test]
    fn a_key_pattern_that_misses_the_prefix_refuses_every_op() {
        let t0 = Instant::now();
        let mut node = Rights::default();
        let keys = || {
            Err(error(
                K::Denied,
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ))
        };
        node.on_round_trip(&[keys()], t0);
        let change = node.on_try(&[keys(), keys(), keys()], t0);
        assert_eq!(
            ops(change),
            [LockOp::Acquire, LockOp::Extend, LockOp::Release]
        );
        // A try cut short (the node out of reach) says nothing.
        assert!(node.on_try(&[], t0 + RETRY).is_none());
    }
}
