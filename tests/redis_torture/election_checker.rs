//! The election arm's checker (`election.rs`): the leaderships, the log
//! writes and the log read back, judged: one leader at a time, terms
//! strictly increasing from one leader to the next, the log in term order
//! with each term written by one candidate, no write refused that ended
//! within its writer's validity, no accepted write missing. Its own tests
//! run it on synthetic histories, each rule seen to fail.

use std::time::Instant;

/// One leadership: from the campaign's return to the deadline last
/// observed (or the let-go, if earlier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reign {
    pub(crate) candidate: usize,
    pub(crate) term: u64,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// One write to the log, as its writer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogWrite {
    pub(crate) candidate: usize,
    pub(crate) term: u64,
    /// The deadline its writer observed just before (`None`: written
    /// after the validity ran out, a stale leader's write).
    pub(crate) deadline: Option<Instant>,
    pub(crate) returned: Instant,
    pub(crate) accepted: bool,
}

/// One entry of the log, as read back at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) candidate: usize,
    pub(crate) term: u64,
}

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct ElectionFigures {
    pub(crate) leaders: usize,
    /// Two leaderships whose windows overlap.
    pub(crate) overlap: Option<(Reign, Reign)>,
    /// A leadership whose term is not above the one before it.
    pub(crate) term_order: Option<(Reign, Reign)>,
    /// Two log entries with a lower term after a higher one, or one term
    /// written by two candidates.
    pub(crate) log_order: Option<(Entry, Entry)>,
    pub(crate) shared_term: Option<(Entry, Entry)>,
    /// Writes refused though they ended within their writer's validity.
    pub(crate) refused_while_valid: u64,
    pub(crate) writes: u64,
    pub(crate) stale_writes: u64,
    pub(crate) stale_refused: u64,
    /// Accepted writes missing from the log read back.
    pub(crate) missing: u64,
}

/// The verdict on the leaderships `reigns`, the `writes` made and the
/// `log` read back.
pub(crate) fn check_election(
    reigns: &[Reign],
    writes: &[LogWrite],
    log: &[Entry],
) -> ElectionFigures {
    let mut f = ElectionFigures {
        leaders: reigns.len(),
        ..ElectionFigures::default()
    };
    let mut by_start = reigns.to_vec();
    by_start.sort_by_key(|r| r.start);
    for pair in by_start.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if f.overlap.is_none() && a.end > b.start {
            f.overlap = Some((a.clone(), b.clone()));
        }
        if f.term_order.is_none() && b.term <= a.term {
            f.term_order = Some((a.clone(), b.clone()));
        }
    }
    for pair in log.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if f.log_order.is_none() && b.term < a.term {
            f.log_order = Some((a, b));
        }
        if f.shared_term.is_none() && b.term == a.term && b.candidate != a.candidate {
            f.shared_term = Some((a, b));
        }
    }
    for w in writes {
        f.writes += 1;
        match w.deadline {
            None => {
                f.stale_writes += 1;
                f.stale_refused += u64::from(!w.accepted);
            }
            Some(deadline) => {
                f.refused_while_valid += u64::from(!w.accepted && w.returned < deadline);
            }
        }
    }
    let logged = |w: &LogWrite| {
        log.iter()
            .any(|e| e.term == w.term && e.candidate == w.candidate)
    };
    f.missing = writes.iter().filter(|w| w.accepted && !logged(w)).count() as u64;
    f
}

#[cfg(test)]
mod checker {
    use std::time::Duration;

    use super::*;

    fn reign(candidate: usize, term: u64, from_ms: u64, to_ms: u64, at: Instant) -> Reign {
        Reign {
            candidate,
            term,
            start: at + Duration::from_millis(from_ms),
            end: at + Duration::from_millis(to_ms),
        }
    }

    fn entry(term: u64, candidate: usize) -> Entry {
        Entry { candidate, term }
    }

    #[test]
    fn leaders_one_after_another_with_rising_terms_pass() {
        let t = Instant::now();
        let reigns = [
            reign(0, 3, 0, 10, t),
            reign(1, 5, 10, 20, t),
            reign(0, 6, 25, 30, t),
        ];
        let log = [entry(3, 0), entry(3, 0), entry(5, 1), entry(6, 0)];
        let f = check_election(&reigns, &[], &log);
        assert_eq!(f.leaders, 3);
        assert!(f.overlap.is_none() && f.term_order.is_none());
        assert!(f.log_order.is_none() && f.shared_term.is_none());
    }

    #[test]
    fn two_leaders_at_once_and_a_term_that_does_not_rise_are_caught() {
        let t = Instant::now();
        let overlapping = [reign(0, 3, 0, 15, t), reign(1, 5, 10, 20, t)];
        assert!(check_election(&overlapping, &[], &[]).overlap.is_some());
        let falling = [reign(0, 5, 0, 10, t), reign(1, 5, 10, 20, t)];
        assert!(check_election(&falling, &[], &[]).term_order.is_some());
    }

    #[test]
    fn a_lower_term_after_a_higher_one_and_a_shared_term_are_caught() {
        let f = check_election(&[], &[], &[entry(5, 0), entry(3, 1)]);
        assert_eq!(f.log_order, Some((entry(5, 0), entry(3, 1))));
        let f = check_election(&[], &[], &[entry(5, 0), entry(5, 1)]);
        assert!(f.shared_term.is_some());
    }

    #[test]
    fn a_refusal_within_validity_counts_and_a_stale_one_does_not() {
        let t = Instant::now();
        let write = |deadline: Option<Instant>, accepted| LogWrite {
            candidate: 0,
            term: 3,
            deadline,
            returned: t + Duration::from_millis(5),
            accepted,
        };
        let writes = [
            write(Some(t + Duration::from_millis(10)), false),
            write(Some(t + Duration::from_millis(1)), false),
            write(None, false),
            write(None, true),
        ];
        let f = check_election(&[], &writes, &[entry(3, 0)]);
        assert_eq!(
            (f.refused_while_valid, f.stale_writes, f.stale_refused),
            (1, 2, 1)
        );
        assert_eq!(f.missing, 0);
        let f = check_election(&[], &writes, &[]);
        assert_eq!(f.missing, 1, "an accepted write must be in the log");
    }
}
