//! A round between scatter and gather: the votes known at once, the
//! box the node threads answer in, and the count that says when the
//! outcome is decided (waiting longer could not change it); then the
//! gathered round.

use std::cell::Cell;
use std::time::Instant;

use super::Gather;
use super::ballots::Ballots;
use super::node::Vote;
use crate::report::NodeOutcome;

/// One node's place in a round.
#[derive(Clone)]
pub(super) struct Slot {
    /// Its vote, once known.
    pub(super) vote: Option<Vote>,
    /// Whether the operation went there (queued, or sent by the caller,
    /// whatever its outcome: a timed-out run may have been applied). Only
    /// a node skipped as down or refusing the job never got it.
    pub(super) reached: bool,
}

impl Slot {
    /// A node the operation went to, its vote not known yet.
    pub(super) const REACHED: Self = Self {
        vote: None,
        reached: true,
    };
}

/// The most slots a thread keeps the room of between two rounds.
const KEPT_SLOTS: usize = 8;

std::thread_local! {
    /// The room of the calling thread's last round's slots, empty: a
    /// list allocated and freed per round was two of a lock +
    /// `release()`'s allocations. One list per thread, of at most
    /// [`KEPT_SLOTS`] slots.
    static SPARE_SLOTS: Cell<Vec<Slot>> = const { Cell::new(Vec::new()) };
}

/// `n` slots of nodes the operation went to, their votes not known, in
/// the calling thread's spare room when it has one.
pub(super) fn reached_slots(n: usize) -> Vec<Slot> {
    // `try_with`: a round run while the thread's locals are torn down
    // (from another local's destructor) allocates, it does not panic.
    let mut slots = SPARE_SLOTS.try_with(Cell::take).unwrap_or_default();
    slots.clear();
    slots.resize(n, Slot::REACHED);
    slots
}

/// Keeps the room of `slots`, a gathered round's, for the calling
/// thread's next round ([`crate::spare::keep`]: a list without room, a
/// round's whose slots went to its outcomes, is not kept).
fn spare(slots: Vec<Slot>) {
    let _ = SPARE_SLOTS.try_with(|spare| {
        let mut kept = spare.take();
        crate::spare::keep(&mut kept, slots, KEPT_SLOTS);
        spare.set(kept);
    });
}

/// A scattered round whose answers have not been gathered yet.
pub(crate) struct Pending {
    /// Per node, in node order: votes known at scatter time (node down,
    /// worker gone, or a node the caller ran itself), and where the
    /// operation went.
    pub(super) slots: Vec<Slot>,
    /// Where the node threads post their votes; `None` when no node thread
    /// answers this round (the caller drove every node itself, untraced):
    /// the round then needs no box.
    pub(super) answers: Option<Ballots>,
    /// When gathering stops (`None`: the wait was too long to express).
    pub(super) deadline: Option<Instant>,
}

impl Pending {
    /// Gathers answers per `gather` until the deadline set at scatter
    /// time. A node that has not answered by then counts as
    /// [`TimedOut`](NodeOutcome::TimedOut), or as
    /// [`NotAwaited`](NodeOutcome::NotAwaited) once the round was decided
    /// without it.
    pub(crate) fn gather(self, gather: Gather) -> Gathered {
        let Self {
            mut slots,
            answers,
            deadline,
        } = self;
        let mut tally = known_tally(gather, &slots);
        let mut timed_out = false;
        while tally.pending() > 0 && !(gather != Gather::All && tally.decided()) {
            let taken = answers
                .as_ref()
                .map(|answers| answers.take_until(tally.wanted(gather), deadline));
            let Some(Ok((slot, vote))) = taken else {
                timed_out = true;
                break;
            };
            tally.record(vote.outcome.is_granted());
            slots[slot].vote = Some(vote);
        }
        let missing = if timed_out {
            NodeOutcome::TimedOut
        } else {
            NodeOutcome::NotAwaited
        };
        if crate::trace::ON
            && let Some(answers) = &answers
        {
            let votes = slots.iter().map(|s| s.vote.as_ref());
            let granted = votes.clone().flatten();
            let granted = granted.filter(|v| v.outcome.is_granted()).count();
            let unanswered = votes.filter(Option::is_none).count();
            answers.trace().decided(granted, unanswered, timed_out);
        }
        for slot in &mut slots {
            slot.vote.get_or_insert_with(|| Vote::of(missing.clone()));
        }
        Gathered { slots }
    }
}

/// A gathered round: per node, in node order, its vote and whether the
/// operation reached it.
pub(crate) struct Gathered {
    /// Every slot holds a vote ([`Pending::gather`] made it so).
    slots: Vec<Slot>,
}

impl Gathered {
    /// Each node's vote, in node order.
    fn votes(&self) -> impl Iterator<Item = &Vote> + Clone {
        self.slots.iter().filter_map(|slot| slot.vote.as_ref())
    }

    /// Each node's outcome, in node order.
    pub(crate) fn outcomes(&self) -> impl Iterator<Item = &NodeOutcome> + Clone {
        self.votes().map(|vote| &vote.outcome)
    }

    /// Each node's outcome, in node order, for a report.
    pub(crate) fn into_outcomes(mut self) -> impl Iterator<Item = NodeOutcome> {
        Outcomes {
            slots: std::mem::take(&mut self.slots),
            next: 0,
        }
    }

    /// The fence counters the granting nodes read (fenced acquires).
    pub(crate) fn fences(&self) -> Vec<u64> {
        self.votes().filter_map(|vote| vote.fence).collect()
    }

    /// Per node, whether the operation may have reached it, with its
    /// outcome: only nodes it reached need the release that undoes an
    /// acquire.
    pub(crate) fn reached(&self) -> impl Iterator<Item = (bool, &NodeOutcome)> {
        let slots = self.slots.iter();
        slots.filter_map(|slot| Some((slot.reached, &slot.vote.as_ref()?.outcome)))
    }
}

impl Drop for Gathered {
    fn drop(&mut self) {
        spare(std::mem::take(&mut self.slots));
    }
}

/// [`Gathered::into_outcomes`]: takes each vote out of its slot, and
/// keeps the slots' room once done.
struct Outcomes {
    slots: Vec<Slot>,
    next: usize,
}

impl Iterator for Outcomes {
    type Item = NodeOutcome;

    fn next(&mut self) -> Option<NodeOutcome> {
        while let Some(slot) = self.slots.get_mut(self.next) {
            self.next += 1;
            if let Some(vote) = slot.vote.take() {
                return Some(vote.outcome);
            }
        }
        None
    }
}

impl Drop for Outcomes {
    fn drop(&mut self) {
        spare(std::mem::take(&mut self.slots));
    }
}

/// The count for a round gathered per `gather`, with the votes already
/// known in `slots`.
pub(super) fn known_tally(gather: Gather, slots: &[Slot]) -> Tally {
    let n = slots.len();
    let quorum = match gather {
        Gather::UntilDecided { quorum } => quorum,
        Gather::All => n,
    };
    let mut tally = Tally::new(n, quorum);
    slots
        .iter()
        .filter_map(|slot| slot.vote.as_ref())
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
