//! The verdicts of acquire and extend as pure functions: the votes, the
//! quorum, the TTL, the time the round took and the drift in, the outcome
//! (and the deadline it gives) out. No clock, no lock, no I/O: the rounds
//! call them with what they measured, and the lease explorer
//! (`checks/lease.rs`) calls the same functions on a model.

use std::time::{Duration, Instant};

use super::validity::validity;
use crate::canary::{self, Canary};
use crate::report::NodeOutcome;

/// What one acquire round's votes decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireVerdict {
    /// A quorum granted in time: the lock is held until `deadline`.
    Granted { deadline: Instant },
    /// A quorum granted, but too slowly: no validity was left.
    TooSlow,
    /// Too many nodes hold the key for someone else.
    Contended,
    /// Too many nodes failed or did not answer.
    NoQuorum,
}

/// The verdict of an acquire begun at `start` that took `elapsed`, with
/// `granted` grants and `refused` refusals out of `nodes`. The deadline is
/// conservative: `start + ttl - drift`, measured from before the first send.
pub(crate) fn acquire_verdict(
    votes: Votes,
    ttl: Duration,
    drift: Duration,
    start: Instant,
    elapsed: Duration,
) -> AcquireVerdict {
    if votes.granted >= votes.quorum {
        return match validity(ttl, elapsed, drift) {
            Some(_) => AcquireVerdict::Granted {
                deadline: start + (ttl - drift),
            },
            None => AcquireVerdict::TooSlow,
        };
    }
    if votes.refused > votes.nodes.saturating_sub(votes.quorum) {
        AcquireVerdict::Contended
    } else {
        AcquireVerdict::NoQuorum
    }
}

/// One round's count of answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Votes {
    pub(crate) granted: usize,
    pub(crate) refused: usize,
    pub(crate) nodes: usize,
    pub(crate) quorum: usize,
}

impl Votes {
    /// The count of a round's `outcomes` (one per node), as its
    /// [`Report`](crate::report::Report) counts them.
    pub(crate) fn of<'a>(outcomes: impl Iterator<Item = &'a NodeOutcome>, quorum: usize) -> Self {
        let mut votes = Self {
            granted: 0,
            refused: 0,
            nodes: 0,
            quorum,
        };
        for outcome in outcomes {
            votes.nodes += 1;
            votes.granted += usize::from(outcome.is_granted());
            votes.refused += usize::from(outcome.is_refused());
        }
        votes
    }
}

/// What one extend round's votes decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtendVerdict {
    /// A quorum confirmed in time: the keys live at least until `deadline`.
    Confirmed { deadline: Instant },
    /// Fewer than a quorum confirmed.
    TooFewVotes { granted: usize, quorum: usize },
    /// A quorum confirmed, but only after the old validity ran out (or
    /// the round used up the new one).
    TooLate,
}

impl ExtendVerdict {
    /// Why the lock may be lost, for the error; `None` when confirmed.
    pub(crate) fn failure(&self) -> Option<String> {
        match self {
            Self::Confirmed { .. } => None,
            Self::TooFewVotes { granted, quorum } => Some(format!(
                "only {granted} of the {quorum} needed nodes confirmed the extend"
            )),
            Self::TooLate => {
                Some("the extend was confirmed only after the lock's validity ran out".into())
            }
        }
    }
}

/// The verdict of an extend begun at `start` with `ttl`, gathered at `end`,
/// on a lease whose deadline was `old_deadline` when it began.
pub(crate) fn extend_verdict(
    granted: usize,
    quorum: usize,
    ttl: Duration,
    drift: Duration,
    start: Instant,
    old_deadline: Instant,
    end: Instant,
) -> ExtendVerdict {
    if granted < quorum {
        return ExtendVerdict::TooFewVotes { granted, quorum };
    }
    let elapsed = end.saturating_duration_since(start);
    if end >= old_deadline || validity(ttl, elapsed, drift).is_none() {
        return ExtendVerdict::TooLate;
    }
    ExtendVerdict::Confirmed {
        deadline: start + (ttl - drift),
    }
}

/// The deadline a lease may claim while an extend begun at `start` with
/// `ttl` is in flight: a node may apply it at any moment, and `PEXPIRE`
/// can shorten a key, so no more than that extend would give.
pub(crate) fn begin_cap(
    deadline: Instant,
    start: Instant,
    ttl: Duration,
    drift: Duration,
) -> Instant {
    if canary::on(Canary::NoBeginCap) {
        return deadline;
    }
    deadline.min(start + (ttl - drift))
}

/// Whether a confirmed extend, the `seq`-th begun, sets the deadline when
/// `latest` extends have been begun: only the one begun last, since the
/// nodes apply extends in the order they were begun (per-node FIFO), so
/// its expiry is what the keys end with, whichever finishes last.
pub(crate) fn sets_deadline(seq: u64, latest: u64) -> bool {
    if canary::on(Canary::AnyExtendSetsDeadline) {
        return true;
    }
    seq == latest
}

/// Where a failed attempt (or one whose fence was not acknowledged) must
/// be released: every node it `reached` (queued or sent to), except those
/// whose answer was a definite "held by another token". Such a node did
/// not take the key (the acquire, plain, fenced or of a set, is all or
/// nothing per node), and the attempt's token is fresh, so no earlier op
/// of ours left it there either. A grant, an error, a timeout, a node not
/// waited for, a quarantined or unverified grant may all have landed: the
/// release goes there, behind the acquire (per-node FIFO).
///
/// `nodes`: per node, whether the attempt reached it, and its outcome.
pub(crate) fn undo_where<'a>(
    nodes: impl IntoIterator<Item = (bool, &'a NodeOutcome)>,
) -> Vec<bool> {
    nodes
        .into_iter()
        .map(|(reached, outcome)| reached && !outcome.is_refused())
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::redlock::verdict::*;

    const MS: Duration = Duration::from_millis(1);

    /// Only a definite "held by another token" spares a node the undo:
    /// every other outcome may have left the key, and a node the attempt
    /// never reached gets nothing.
    #[test]
    fn a_failed_attempt_is_undone_wherever_it_may_have_landed() {
        use crate::backend::{BackendError, BackendErrorKind};
        let maybe_landed = [
            NodeOutcome::Granted,
            NodeOutcome::Failed(BackendError::new(BackendErrorKind::Timeout, "lost")),
            NodeOutcome::TimedOut,
            NodeOutcome::NotAwaited,
            NodeOutcome::Quarantined { remaining: MS },
            NodeOutcome::Down,
            NodeOutcome::HandedOver,
        ];
        for outcome in &maybe_landed {
            assert_eq!(undo_where([(true, outcome)]), [true], "{outcome:?}");
            assert_eq!(undo_where([(false, outcome)]), [false], "{outcome:?}");
        }
        assert_eq!(undo_where([(true, &NodeOutcome::Refused)]), [false]);
        let mixed = [
            NodeOutcome::Refused,
            NodeOutcome::Granted,
            NodeOutcome::NotAwaited,
        ];
        let reached_all = mixed.iter().map(|outcome| (true, outcome));
        assert_eq!(undo_where(reached_all), [false, true, true]);
    }

    #[test]
    fn acquire_needs_a_quorum_and_validity() {
        let t0 = Instant::now();
        let ttl = 1000 * MS;
        let d = 12 * MS;
        let votes = |granted, refused| Votes {
            granted,
            refused,
            nodes: 3,
            quorum: 2,
        };
        assert_eq!(
            acquire_verdict(votes(2, 1), ttl, d, t0, 10 * MS),
            AcquireVerdict::Granted {
                deadline: t0 + ttl - d
            }
        );
        assert_eq!(
            acquire_verdict(votes(3, 0), ttl, d, t0, ttl - d),
            AcquireVerdict::TooSlow
        );
        assert_eq!(
            acquire_verdict(votes(1, 2), ttl, d, t0, MS),
            AcquireVerdict::Contended
        );
        assert_eq!(
            acquire_verdict(votes(1, 1), ttl, d, t0, MS),
            AcquireVerdict::NoQuorum
        );
    }

    #[test]
    fn extend_needs_a_quorum_before_the_old_deadline() {
        let t0 = Instant::now();
        let ttl = 300 * MS;
        let d = 5 * MS;
        let old = t0 + 100 * MS;
        let v = |granted, end| extend_verdict(granted, 2, ttl, d, t0, old, end);
        assert_eq!(
            v(2, t0 + MS),
            ExtendVerdict::Confirmed {
                deadline: t0 + ttl - d
            }
        );
        assert_eq!(
            v(1, t0 + MS),
            ExtendVerdict::TooFewVotes {
                granted: 1,
                quorum: 2
            }
        );
        assert_eq!(v(2, old), ExtendVerdict::TooLate);
        assert!(v(2, old).failure().is_some());
        assert_eq!(v(2, t0).failure(), None);
    }

    #[test]
    fn beginning_an_extend_caps_and_only_the_last_begun_sets() {
        let t0 = Instant::now();
        let far = t0 + 3000 * MS;
        assert_eq!(begin_cap(far, t0, 300 * MS, 5 * MS), t0 + 295 * MS);
        assert_eq!(begin_cap(t0 + MS, t0, 300 * MS, 5 * MS), t0 + MS);
        assert!(sets_deadline(3, 3));
        assert!(!sets_deadline(2, 3));
    }
}
