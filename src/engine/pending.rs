//! A round between scatter and gather: the votes known at once, the
//! channel the node threads answer on, and the count that says when the
//! outcome is decided (waiting longer could not change it).

use std::time::Instant;

use super::Gather;
use super::ballots::Ballots;
use super::node::Vote;
use crate::report::NodeOutcome;

/// A scattered round whose answers have not been gathered yet.
pub(crate) struct Pending {
    /// Votes known at scatter time (node down, worker gone, or the node
    /// the caller ran itself).
    pub(super) outcomes: Vec<Option<Vote>>,
    pub(super) answers: Ballots,
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
            .map(|vote| vote.outcome)
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
            let Ok((slot, vote)) = answers.take_until(tally.wanted(gather), deadline) else {
                timed_out = true;
                break;
            };
            tally.record(vote.outcome.is_granted());
            outcomes[slot] = Some(vote);
        }
        let missing = if timed_out {
            NodeOutcome::TimedOut
        } else {
            NodeOutcome::NotAwaited
        };
        if crate::trace::ON {
            let granted = outcomes.iter().flatten();
            let granted = granted.filter(|v| v.outcome.is_granted()).count();
            let unanswered = outcomes.iter().filter(|o| o.is_none()).count();
            answers.trace().decided(granted, unanswered, timed_out);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Vote::of(missing.clone())))
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
        .for_each(|vote| tally.record(vote.outcome.is_granted()));
    tally
}

/// The running count of one round's votes.
///
/// A round is decided as soon as `granted >= quorum` (success) or
/// `granted + pending < quorum` (success has become impossible): waiting
/// longer could not change the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    quorum: usize,
    pending: usize,
    granted: usize,
}

impl Tally {
    /// A round over `nodes` nodes that needs `quorum` grants.
    pub(crate) fn new(nodes: usize, quorum: usize) -> Self {
        Self {
            quorum,
            pending: nodes,
            granted: 0,
        }
    }

    /// Counts one node's answer: a grant, or anything else (refused, failed,
    /// timed out, down, quarantined).
    pub(crate) fn record(&mut self, granted: bool) {
        self.pending = self.pending.saturating_sub(1);
        if granted {
            self.granted += 1;
        }
    }

    /// Enough grants.
    pub(crate) fn reached(&self) -> bool {
        self.granted >= self.quorum
    }

    /// Enough grants, or no way left to get them.
    pub(crate) fn decided(&self) -> bool {
        self.reached() || self.granted + self.pending < self.quorum
    }

    /// Nodes not heard from yet.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// The fewest further votes that could decide the round gathered per
    /// `gather` (every one, for [`Gather::All`]): fewer cannot, whatever
    /// they say, so the caller need not look before they are in. With
    /// `granted` grants and `pending` nodes to hear from, success needs
    /// `quorum - granted` more grants, failure `granted + pending -
    /// quorum + 1` more refusals; each vote is one or the other.
    pub(crate) fn wanted(&self, gather: Gather) -> usize {
        if gather == Gather::All {
            return self.pending.max(1);
        }
        let grants = self.quorum.saturating_sub(self.granted);
        let refusals = (self.granted + self.pending + 1).saturating_sub(self.quorum);
        grants.min(refusals).max(1)
    }
}

/// The default quorum: a strict majority of `nodes`.
pub(crate) fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of N = 1..=7 nodes into yes / no / error / timeout, in
    /// every arrival order that matters (grants first, grants last): the
    /// tally must reach quorum exactly when yes >= N/2+1, and decide no
    /// earlier than the votes allow.
    #[test]
    fn quorum_for_every_split_up_to_seven_nodes() {
        for n in 1..=7usize {
            let q = majority(n);
            assert!(2 * q > n, "majority must exceed half");
            for yes in 0..=n {
                for no in 0..=n - yes {
                    for err in 0..=n - yes - no {
                        let timeout = n - yes - no - err;
                        // Answers that arrive; timeouts never arrive.
                        let answers: Vec<bool> = std::iter::repeat_n(true, yes)
                            .chain(std::iter::repeat_n(false, no + err))
                            .collect();
                        for order in [answers.clone(), answers.iter().rev().copied().collect()] {
                            let mut t = Tally::new(n, q);
                            let mut decided_after = None;
                            for (i, &a) in order.iter().enumerate() {
                                t.record(a);
                                if t.decided() && decided_after.is_none() {
                                    decided_after = Some(i + 1);
                                }
                            }
                            assert_eq!(t.reached(), yes >= q, "n={n} yes={yes}");
                            if timeout > 0 && yes < q && yes + timeout >= q {
                                // Timed-out nodes could still have granted.
                                assert!(!t.decided(), "n={n} yes={yes} timeout={timeout}");
                            }
                            if let Some(after) = decided_after {
                                // Deciding early must never contradict the final count.
                                let mut replay = Tally::new(n, q);
                                order[..after].iter().for_each(|&a| replay.record(a));
                                assert_eq!(replay.reached(), yes >= q);
                            }
                        }
                    }
                }
            }
        }
    }

    /// `wanted` never asks for more votes than the round needs: after
    /// fewer than `wanted` further votes, in any mix, the round is not
    /// decided, and some mix of exactly `wanted` votes decides it (so a
    /// caller woken once per `wanted` votes never misses its decision).
    #[test]
    fn wanted_is_the_fewest_votes_that_can_decide() {
        for n in 1..=7usize {
            let q = majority(n);
            for gather in [Gather::UntilDecided { quorum: q }, Gather::All] {
                let quorum = if gather == Gather::All { n } else { q };
                for granted in 0..=n {
                    for refused in 0..=n - granted {
                        let mut t = Tally::new(n, quorum);
                        (0..granted).for_each(|_| t.record(true));
                        (0..refused).for_each(|_| t.record(false));
                        if t.pending() == 0 || (gather != Gather::All && t.decided()) {
                            continue;
                        }
                        let k = t.wanted(gather);
                        assert!(k >= 1 && k <= t.pending(), "n={n} k={k}");
                        let finished = |t: &Tally| {
                            if gather == Gather::All {
                                t.pending() == 0
                            } else {
                                t.decided()
                            }
                        };
                        for yes in 0..k {
                            let mut fewer = t;
                            (0..yes).for_each(|_| fewer.record(true));
                            (yes..k - 1).for_each(|_| fewer.record(false));
                            assert!(!finished(&fewer), "n={n} {granted}/{refused} k={k}");
                        }
                        let decides = (0..=k).any(|yes| {
                            let mut exact = t;
                            (0..yes).for_each(|_| exact.record(true));
                            (yes..k).for_each(|_| exact.record(false));
                            finished(&exact)
                        });
                        assert!(decides, "n={n} {granted}/{refused} k={k}");
                    }
                }
            }
        }
    }

    #[test]
    fn decides_as_soon_as_possible() {
        let mut t = Tally::new(5, 3);
        t.record(true);
        t.record(true);
        assert!(!t.decided());
        t.record(true);
        assert!(t.decided() && t.reached());
        let mut t = Tally::new(5, 3);
        t.record(false);
        t.record(false);
        assert!(!t.decided());
        t.record(false);
        assert!(t.decided() && !t.reached(), "two pending cannot make three");
        assert_eq!(t.pending(), 2);
    }
}
