//! Vote counting: when is a round decided?

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
}

/// The default quorum: a strict majority of `nodes`.
pub(crate) fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

#[cfg(test)]
mod tests {
    use crate::engine::tally::*;

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
