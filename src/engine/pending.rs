//! A round between scatter and gather: the votes known at once, and the
//! channel the node threads answer on until the outcome is decided.

use std::time::Instant;

use crossbeam_channel::Receiver;

use super::Gather;
use super::node::Vote;
use super::tally::Tally;
use crate::report::NodeOutcome;

/// A scattered round whose answers have not been gathered yet.
pub(crate) struct Pending {
    /// Votes known at scatter time (node down, worker gone, or the node
    /// the caller ran itself).
    pub(super) outcomes: Vec<Option<Vote>>,
    pub(super) answers: Receiver<(usize, Vote)>,
    /// When gathering stops (`None`: the wait was too long to express).
    pub(super) deadline: Option<Instant>,
    /// Per node: whether the operation was queued (or run) there.
    pub(super) queued: Vec<bool>,
}

impl Pending {
    /// Per node, whether the operation may have reached it: it was queued
    /// or run there (not skipped as down, not refused). Only those nodes
    /// need the release that undoes an acquire.
    pub(crate) fn reached(&self) -> Vec<bool> {
        self.queued.clone()
    }

    /// Gathers answers per `gather` until the deadline set at scatter time.
    /// Returns one outcome per node, in node order.
    pub(crate) fn gather(self, gather: Gather) -> Vec<NodeOutcome> {
        self.gather_votes(gather)
            .into_iter()
            .map(|(outcome, _)| outcome)
            .collect()
    }

    /// [`gather`](Self::gather), with the fence counter each granting node
    /// read (fenced acquires).
    pub(crate) fn gather_votes(self, gather: Gather) -> Vec<Vote> {
        let Self {
            mut outcomes,
            answers,
            deadline,
            queued: _,
        } = self;
        let mut tally = known_tally(gather, &outcomes);
        let mut timed_out = false;
        while tally.pending() > 0 && !(gather != Gather::All && tally.decided()) {
            let answer = match deadline {
                Some(deadline) => answers.recv_deadline(deadline).ok(),
                None => answers.recv().ok(),
            };
            let Some((slot, vote)) = answer else {
                timed_out = true;
                break;
            };
            tally.record(vote.0.is_granted());
            outcomes[slot] = Some(vote);
        }
        let missing = if timed_out {
            NodeOutcome::TimedOut
        } else {
            NodeOutcome::NotAwaited
        };
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| (missing.clone(), None)))
            .collect()
    }
}

/// The count for a round gathered per `gather`, with the votes already
/// known in `outcomes`.
pub(super) fn known_tally(gather: Gather, outcomes: &[Option<Vote>]) -> Tally {
    let n = outcomes.len();
    let quorum = match gather {
        Gather::UntilDecided { quorum } => quorum,
        Gather::All => n,
    };
    let mut tally = Tally::new(n, quorum);
    outcomes
        .iter()
        .flatten()
        .for_each(|(o, _)| tally.record(o.is_granted()));
    tally
}
