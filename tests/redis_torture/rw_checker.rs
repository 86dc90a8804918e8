//! The read-write arm's checker: pure functions of the recorded calls and
//! of the intents a watcher saw on the servers, tested on synthetic
//! histories at the end of this file.
//!
//! What it checks:
//!
//! * Exclusion: no write window meets another holder's window (read or
//!   write); read windows may meet each other.
//! * Fences: write windows (non-empty), in the order they began, carry
//!   strictly increasing fences.
//! * No overtaking, counted in events. A reader cannot see when a writer's
//!   intent is on a quorum; a watcher reads the writer's key on every
//!   server (directly, not through the proxies) while a writer call is in
//!   progress, and notes the first moment `T` a value was seen on a
//!   quorum, from one pass over the servers: each read saw the key at or
//!   before `T`, and it stays until its writer lets go, on a node that
//!   may still vote (a node restarted since is quarantined, one whose
//!   settings allow eviction does not count). So every reader round
//!   that starts after `T`, before that writer is done, is refused by a
//!   quorum. Asserted: no read call that *began* after `T` returned a
//!   guard before its writer was admitted; the reads granted between `T`
//!   and the admission are at most the read calls in flight at `T` (the
//!   former implies the latter; both are computed).
//!
//!   The brief's count, the reads that began after a writer's call began
//!   and were granted before it was admitted while it was the only
//!   writer around, is reported, not bounded: until the intent is on a
//!   quorum (one round, retried under faults for as long as the wait
//!   budget allows) readers are rightly let in, as many as time allows.

use std::time::{Duration, Instant};

use quorum_lock::Token;

/// One call of a read-write client (`read_with` or `write_with`): the
/// clock read right before it and right after it returned, and the hold
/// when it returned a guard.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwCall {
    pub(crate) client: usize,
    pub(crate) write: bool,
    pub(crate) began: Instant,
    pub(crate) returned: Instant,
    pub(crate) hold: Option<RwHold>,
}

/// What a holder did with its guard: its window is `[returned, end)`,
/// `end` being the deadline it last observed or its let-go, whichever
/// came first (as the main arms' windows).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwHold {
    pub(crate) end: Instant,
    pub(crate) let_go: Instant,
    pub(crate) fence: Option<u64>,
    pub(crate) token: Token,
}

impl RwCall {
    /// The window the holder relied on, if it got a guard.
    fn window(&self) -> Option<(Instant, Instant)> {
        self.hold.map(|h| (self.returned, h.end))
    }

    /// From the call's start to the let-go (or the return, without a
    /// guard): the time this writer waited for or held the lock.
    fn busy(&self) -> (Instant, Instant) {
        (self.began, self.hold.map_or(self.returned, |h| h.let_go))
    }
}

/// The first moment the watcher saw `value` in the writer's key on a
/// quorum of servers (the end of that pass over them).
#[derive(Debug, Clone)]
pub(crate) struct Sighting {
    pub(crate) value: Vec<u8>,
    pub(crate) at: Instant,
}

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct RwFigures {
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) failed_reads: u64,
    pub(crate) failed_writes: u64,
    /// Pairs of windows of different clients that meet, one a write.
    pub(crate) overlaps: u64,
    pub(crate) longest_overlap: Duration,
    pub(crate) first_overlap: Option<(RwCall, RwCall)>,
    /// Consecutive write windows whose fences do not increase.
    pub(crate) fence_violations: u64,
    pub(crate) first_fence_violation: Option<(u64, u64)>,
    /// Admitted writers that were the only writer from their call to their
    /// admission, and the reads that began after such a writer's call and
    /// were granted before its admission (the most for one writer).
    pub(crate) sole_writers: u64,
    pub(crate) overtook_sole_writers: u64,
    pub(crate) most_for_one_writer: u64,
    /// Admitted writers whose intent the watcher saw on a quorum.
    pub(crate) seen_writers: u64,
    /// Over those: reads granted between the sighting and the admission,
    /// read calls in flight at the sighting, reads that began after it
    /// and waited until the admission (they stood back), and reads that
    /// began after it and were granted before the admission (a violation).
    pub(crate) granted_after_sighting: u64,
    pub(crate) in_flight_at_sighting: u64,
    pub(crate) stood_back: u64,
    pub(crate) overtook_intent: u64,
    /// Writers for which more reads were granted between the sighting and
    /// the admission than were in flight at the sighting.
    pub(crate) bound_exceeded: u64,
    pub(crate) first_overtaking: Option<(RwCall, RwCall)>,
}

pub(crate) fn check_rw(calls: &[RwCall], sightings: &[Sighting]) -> RwFigures {
    let mut f = RwFigures::default();
    for c in calls {
        match (c.write, c.hold.is_some()) {
            (false, true) => f.reads += 1,
            (true, true) => f.writes += 1,
            (false, false) => f.failed_reads += 1,
            (true, false) => f.failed_writes += 1,
        }
    }
    exclusion(calls, &mut f);
    fences(calls, &mut f);
    let reads: Vec<&RwCall> = calls.iter().filter(|c| !c.write).collect();
    for w in calls.iter().filter(|c| c.write && c.hold.is_some()) {
        let granted_before_admission = |r: &&&RwCall| r.hold.is_some() && r.returned < w.returned;
        let sole = !calls.iter().any(|o| {
            let (from, to) = o.busy();
            o.write && o.client != w.client && from < w.returned && w.began < to
        });
        if sole {
            f.sole_writers += 1;
            let n = reads
                .iter()
                .filter(granted_before_admission)
                .filter(|r| r.began > w.began)
                .count() as u64;
            f.overtook_sole_writers += n;
            f.most_for_one_writer = f.most_for_one_writer.max(n);
        }
        let token = w.hold.map(|h| h.token);
        let Some(seen) = sightings
            .iter()
            .find(|s| token.is_some_and(|t| t.matches_stored(&s.value)))
        else {
            continue;
        };
        let t = seen.at;
        if t >= w.returned {
            continue; // seen after the admission: says nothing about the wait
        }
        f.seen_writers += 1;
        let granted = reads
            .iter()
            .filter(granted_before_admission)
            .filter(|r| r.returned > t)
            .count() as u64;
        let in_flight = reads
            .iter()
            .filter(|r| r.began < t && t < r.returned)
            .count() as u64;
        f.granted_after_sighting += granted;
        f.in_flight_at_sighting += in_flight;
        f.stood_back += reads
            .iter()
            .filter(|r| r.began > t && r.began < w.returned && r.returned > w.returned)
            .count() as u64;
        for r in reads
            .iter()
            .filter(granted_before_admission)
            .filter(|r| r.began > t)
        {
            f.overtook_intent += 1;
            f.first_overtaking.get_or_insert((*w, **r));
        }
        // Implied by the above (each read granted after `t` that began
        // before it was in flight at `t`), counted on its own.
        f.bound_exceeded += u64::from(granted > in_flight);
    }
    f
}

/// Pairs of windows of different clients that meet, one of them a write.
fn exclusion(calls: &[RwCall], f: &mut RwFigures) {
    let mut held: Vec<(&RwCall, Instant, Instant)> = calls
        .iter()
        .filter_map(|c| c.window().map(|(s, e)| (c, s, e)))
        .filter(|(_, s, e)| s < e)
        .collect();
    held.sort_by_key(|(_, s, _)| *s);
    for (i, (a, _, a_end)) in held.iter().enumerate() {
        for (b, b_start, b_end) in &held[i + 1..] {
            if b_start >= a_end {
                break; // sorted by start: no later window meets `a`
            }
            if a.client != b.client && (a.write || b.write) {
                f.overlaps += 1;
                f.longest_overlap = f.longest_overlap.max((*a_end).min(*b_end) - *b_start);
                f.first_overlap.get_or_insert((**a, **b));
            }
        }
    }
}

/// Write windows in the order they began: strictly increasing fences.
fn fences(calls: &[RwCall], f: &mut RwFigures) {
    let mut writes: Vec<(Instant, u64)> = calls
        .iter()
        .filter(|c| c.write)
        .filter_map(|c| {
            let (start, end) = c.window()?;
            (start < end).then_some((start, c.hold?.fence.unwrap_or(0)))
        })
        .collect();
    writes.sort_by_key(|(start, _)| *start);
    for pair in writes.windows(2) {
        let (a, b) = (pair[0].1, pair[1].1);
        if a >= b {
            f.fence_violations += 1;
            f.first_fence_violation.get_or_insert((a, b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens of the synthetic histories: what a guard would carry.
    fn token(n: u8) -> Token {
        let locks = quorum_lock::LockManager::builder()
            .node(quorum_lock::MemoryBackend::new("synthetic"))
            .build()
            .unwrap();
        let guard = locks.try_lock(format!("token-{n}")).unwrap();
        *guard.token()
    }

    fn ms(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// A call of `client` from `began` to `returned`, holding until `end`.
    fn call(t0: Instant, client: usize, write: bool, times: (u64, u64, Option<u64>)) -> RwCall {
        let (began, returned, end) = times;
        RwCall {
            client,
            write,
            began: ms(t0, began),
            returned: ms(t0, returned),
            hold: end.map(|end| RwHold {
                end: ms(t0, end),
                let_go: ms(t0, end),
                fence: write.then_some(end),
                token: token(client as u8),
            }),
        }
    }

    #[test]
    fn readers_may_meet_a_writer_may_not() {
        let t = Instant::now();
        let shared = [
            call(t, 0, false, (0, 1, Some(10))),
            call(t, 1, false, (0, 2, Some(12))),
            call(t, 2, true, (0, 13, Some(20))),
        ];
        assert_eq!(check_rw(&shared, &[]).overlaps, 0);
        let writer_over_reader = [
            call(t, 0, false, (0, 1, Some(10))),
            call(t, 2, true, (0, 5, Some(20))),
        ];
        let f = check_rw(&writer_over_reader, &[]);
        assert_eq!(f.overlaps, 1);
        assert!(f.first_overlap.is_some());
        let two_writers = [
            call(t, 2, true, (0, 1, Some(10))),
            call(t, 3, true, (0, 9, Some(20))),
        ];
        assert_eq!(check_rw(&two_writers, &[]).overlaps, 1);
    }

    #[test]
    fn fences_must_increase_from_one_write_window_to_the_next() {
        let t = Instant::now();
        // Fences are the windows' end times here: 10, then 5.
        let calls = [
            call(t, 2, true, (0, 1, Some(10))),
            call(t, 3, true, (0, 11, Some(5))),
        ];
        // The second window is empty (its end before its start): skipped.
        assert_eq!(check_rw(&calls, &[]).fence_violations, 0);
        let mut late = call(t, 3, true, (0, 11, Some(30)));
        late.hold.as_mut().unwrap().fence = Some(7);
        let f = check_rw(&[calls[0], late], &[]);
        assert_eq!(f.first_fence_violation, Some((10, 7)));
    }

    #[test]
    fn a_read_begun_after_the_intent_was_seen_must_not_be_granted_before_the_writer() {
        let t = Instant::now();
        let writer = call(t, 9, true, (0, 50, Some(60)));
        let seen = Sighting {
            value: writer.hold.unwrap().token.as_bytes().to_vec(),
            at: ms(t, 20),
        };
        // In flight at the sighting and granted after it: allowed. Begun
        // before the writer, granted before the sighting: allowed.
        let ok = [
            writer,
            call(t, 0, false, (15, 25, Some(40))),
            call(t, 1, false, (5, 10, Some(15))),
            // Begun after the sighting, granted after the writer: stood back.
            call(t, 2, false, (30, 61, Some(70))),
        ];
        let f = check_rw(&ok, std::slice::from_ref(&seen));
        assert_eq!((f.seen_writers, f.overtook_intent), (1, 0));
        assert_eq!((f.granted_after_sighting, f.in_flight_at_sighting), (1, 1));
        assert_eq!((f.stood_back, f.overtook_sole_writers), (1, 2));
        // Begun after the sighting, granted before the admission.
        let bad = [writer, call(t, 0, false, (21, 30, Some(40)))];
        let f = check_rw(&bad, &[seen]);
        assert_eq!((f.overtook_intent, f.bound_exceeded), (1, 1));
        assert!(f.first_overtaking.is_some());
    }

    #[test]
    fn the_sole_writer_count_leaves_out_writers_that_met_another() {
        let t = Instant::now();
        let calls = [
            call(t, 8, true, (0, 50, Some(60))),
            call(t, 9, true, (40, 70, Some(80))),
            call(t, 0, false, (10, 20, Some(30))),
        ];
        let f = check_rw(&calls, &[]);
        assert_eq!((f.sole_writers, f.overtook_sole_writers), (0, 0));
    }
}
