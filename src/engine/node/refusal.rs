//! A node that answers but refuses this client as a whole (a small state
//! machine, on explicit times like `liveness.rs`).
//!
//! Every operation of a round trip failed with a node-wide error that is
//! not about reaching the server: authentication, a database the server
//! does not have, TLS, a peer that does not speak the protocol (an HTTP
//! server on the port). No lock can get this node's vote, so `health()`
//! does not count it as voting (a readiness probe that reads `health()`
//! says "not ready" while every lock fails). Unlike a node out of reach it
//! is not skipped: it answers at once, and every report then names the
//! cause. While no operation goes to it, it is asked again every
//! [`RECHECK`] with the backend's probe (for Redis a connection of its
//! own: `AUTH`, `SELECT`, then `INFO` or `PING`, what failed), so it votes
//! again as soon as it is fixed.
//!
//! A failure tied to one key or command (an ACL key pattern's `NOPERM`,
//! `WRONGTYPE`) says nothing of the node: it never makes a node unusable.
//! (A `NOPERM` that holds on the crate's own keys makes it refuse what
//! locks need: `rights.rs`.)

use std::time::{Duration, Instant};

use crate::backend::{BackendError, Reply};

/// How often an unusable node is asked again while no operation goes to it.
pub(super) const RECHECK: Duration = Duration::from_secs(1);

/// Whether the node refuses this client, and when to ask it again.
#[derive(Debug, Default)]
pub(super) struct Refusal {
    /// The refusal and the next recheck, while unusable.
    refusing: Option<(BackendError, Instant)>,
}

/// What changed.
#[derive(Debug, Clone)]
pub(super) enum Change {
    /// It refuses every operation, for this reason.
    Began(BackendError),
    /// It serves again.
    Ended,
}

/// What one round trip or probe says of the node as a whole.
enum Says {
    /// It refused, node-wide, for this reason.
    Refuses(BackendError),
    /// It served (at least one answer, or an error tied to what was asked).
    Serves,
    /// Nothing: it was not reached (the liveness machine's business).
    Nothing,
}

fn judge<'a>(errors: impl IntoIterator<Item = Option<&'a BackendError>>) -> Says {
    let mut refusal = None;
    for error in errors {
        match error {
            None => return Says::Serves,
            Some(e) if !e.kind().is_node_wide() => return Says::Serves,
            Some(e) if !e.kind().is_connectivity() => {
                refusal.get_or_insert_with(|| e.clone());
            }
            Some(_) => {}
        }
    }
    refusal.map_or(Says::Nothing, Says::Refuses)
}

impl Refusal {
    /// When to ask it again, while it refuses.
    pub(super) fn recheck_at(&self) -> Option<Instant> {
        self.refusing.as_ref().map(|(_, at)| *at)
    }

    /// Whether a recheck is due at `now`.
    pub(super) fn recheck_due(&self, now: Instant) -> bool {
        self.recheck_at().is_some_and(|at| now >= at)
    }

    /// A round trip's results at `now`.
    pub(super) fn on_round_trip(
        &mut self,
        results: &[Result<Reply, BackendError>],
        now: Instant,
    ) -> Option<Change> {
        self.on(judge(results.iter().map(|r| r.as_ref().err())), now)
    }

    /// A probe's outcome at `now`.
    pub(super) fn on_probe(
        &mut self,
        result: Result<(), &BackendError>,
        now: Instant,
    ) -> Option<Change> {
        self.on(judge([result.err()]), now)
    }

    fn on(&mut self, says: Says, now: Instant) -> Option<Change> {
        match says {
            Says::Refuses(error) => {
                let began = self.refusing.is_none();
                self.refusing = Some((error.clone(), now + RECHECK));
                began.then_some(Change::Began(error))
            }
            Says::Serves => self.refusing.take().map(|_| Change::Ended),
            Says::Nothing => {
                // Not reached: ask again later (the liveness machine marks
                // the node down if this goes on).
                if let Some((_, at)) = &mut self.refusing {
                    *at = now + RECHECK;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::backend::BackendErrorKind as K;

    fn error(kind: K) -> BackendError {
        BackendError::new(kind, format!("node-a: {kind}"))
    }

    #[test]
    fn node_wide_refusals_make_it_unusable_until_an_answer_or_a_probe_succeeds() {
        let t0 = Instant::now();
        let mut node = Refusal::default();
        let wrongpass = error(K::Auth);
        let change = node.on_round_trip(&[Err(wrongpass.clone()), Err(error(K::Auth))], t0);
        assert!(
            matches!(&change, Some(Change::Began(e)) if e.to_string() == wrongpass.to_string()),
            "{change:?}"
        );
        assert!(node.recheck_at().is_some());
        assert_eq!(node.recheck_at(), Some(t0 + RECHECK));
        assert!(!node.recheck_due(t0 + RECHECK / 2));
        // Still refusing: no news, the recheck moves on.
        let later = t0 + RECHECK / 2;
        assert!(
            node.on_round_trip(&[Err(error(K::Config))], later)
                .is_none()
        );
        assert_eq!(node.recheck_at(), Some(later + RECHECK));
        let probe_at = later + RECHECK;
        assert!(node.recheck_due(probe_at));
        assert!(node.on_probe(Err(&error(K::Protocol)), probe_at).is_none());
        assert!(node.recheck_at().is_some());
        assert!(matches!(
            node.on_probe(Ok(()), probe_at),
            Some(Change::Ended)
        ));
        assert!(node.recheck_at().is_none());
    }

    #[test]
    fn a_failure_tied_to_a_key_or_an_answer_serves_and_unreachable_says_nothing() {
        let t0 = Instant::now();
        for serving in [
            vec![Err(error(K::Denied))],
            vec![Err(error(K::WrongType))],
            vec![Err(error(K::Auth)), Ok(Reply::Yes)],
            vec![Err(error(K::Auth)), Err(error(K::Other))],
        ] {
            let mut node = Refusal::default();
            assert!(node.on_round_trip(&serving, t0).is_none(), "{serving:?}");
            assert!(node.recheck_at().is_none(), "{serving:?}");
        }
        let mut node = Refusal::default();
        assert!(node.on_round_trip(&[Err(error(K::Timeout))], t0).is_none());
        assert!(
            node.recheck_at().is_none(),
            "unreachable is the liveness machine's"
        );
        node.on_round_trip(&[Err(error(K::Auth))], t0);
        assert!(
            node.on_round_trip(&[Err(error(K::Unreachable))], t0 + RECHECK)
                .is_none()
        );
        assert!(node.recheck_at().is_some(), "not reached: still refusing");
        assert_eq!(node.recheck_at(), Some(t0 + 2 * RECHECK));
        // A mix of timeouts and a refusal is a refusal.
        let mut node = Refusal::default();
        let change = node.on_round_trip(&[Err(error(K::Timeout)), Err(error(K::Protocol))], t0);
        assert!(matches!(change, Some(Change::Began(e)) if e.kind() == K::Protocol));
    }
}
