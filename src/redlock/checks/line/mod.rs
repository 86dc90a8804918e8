//! An exhaustive check of the local line: every order of the line's steps
//! taken by three threads that want one key, run on the crate's own
//! [`LocalQueue`].
//!
//! Why this is complete: every step that reads or changes the line is one
//! critical section under the lines' lock (`join`, `look`, `leave_line`,
//! `Ticket::hold`, `pass_with`, `nudge`), and between them a thread only
//! blocks or takes a message from its own channel. So the interleavings of
//! those steps are all the interleavings there are. Each schedule is
//! replayed on a fresh queue (the queue's channels and `Arc`s cannot be
//! cloned), depth first, and states already seen are not explored again.
//!
//! A thread's program: join the line; while in line, look (when it has
//! just joined, was nudged, or its look-again timer is due on the manager
//! clock), take a message, or (an impatient thread only) leave at any
//! moment, as a deadline or a cancellation would make it. With the turn:
//! get the lock (when no other valid lock exists, as the servers would
//! decide) or fail to; with the lock: release, drop with a hand-over,
//! lose it (the line is nudged, as `Rounds::lose` does) or get stuck (never
//! act again). The clock steps to the next deadline of a held lock.
//!
//! Properties: at most one valid lock; a handed-over lock is what its
//! waiter asked for (same TTL, never to a fenced waiter); a thread gets
//! the turn only when every other thread holding a ticket holds an expired
//! or lost lock (the line never lets two contend at once); no patient
//! waiter is ever left waiting with nothing left to wake it (a lost turn);
//! and when every thread is done, the line is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use crate::canary::{self, Canary};
use crate::redlock::line::Want;

use self::world::{Seen, Spec, Step, World};

mod world;

const SECOND: Duration = Duration::from_secs(1);
const PLAIN: Want = Want {
    ttl: SECOND,
    fenced: false,
};
const SHORT: Want = Want {
    ttl: Duration::from_millis(500),
    fenced: false,
};
const FENCED: Want = Want {
    ttl: SECOND,
    fenced: true,
};

/// What one exploration found.
struct Found {
    states: usize,
    schedules: usize,
    /// Whether some schedule went through each ingredient.
    seen: Seen,
    violation: Option<(String, Vec<Step>)>,
}

/// Explores every schedule of `specs`, with `broken` (a canary) on if set.
fn explore(specs: &[Spec], broken: Option<Canary>) -> Found {
    match broken {
        Some(broken) => canary::with(broken, || explore_all(specs)),
        None => explore_all(specs),
    }
}

/// Explores every schedule of `specs`, replaying each prefix on a fresh
/// world, breadth first (so a violation comes with a shortest schedule);
/// stops at the first violation.
fn explore_all(specs: &[Spec]) -> Found {
    let mut seen = HashSet::new();
    let mut found = Found {
        states: 0,
        schedules: 0,
        seen: Seen::default(),
        violation: None,
    };
    let mut queue = VecDeque::from([Vec::new()]);
    while let Some(path) = queue.pop_front() {
        let mut world = World::new(specs);
        let mut failed = None;
        for &step in &path {
            if let Err(why) = world.take(step) {
                failed = Some(why);
                break;
            }
        }
        if let Some(why) = failed {
            found.violation = Some((why, path));
            return found;
        }
        found.seen.merge(world.seen);
        if !seen.insert(world.key()) {
            continue;
        }
        found.states += 1;
        let steps = world.steps();
        if steps.is_empty() {
            found.schedules += 1;
            if let Err(why) = world.check_end() {
                found.violation = Some((why, path));
                return found;
            }
        }
        for step in steps {
            let mut longer = path.clone();
            longer.push(step);
            queue.push_back(longer);
        }
    }
    found
}

/// The thread sets explored: a hand-over to a waiter that matches, one
/// that does not (another TTL, fenced), waiters that leave.
fn configurations() -> [Vec<Spec>; 2] {
    let spec = |want, patient, rounds| Spec {
        want,
        patient,
        rounds,
    };
    [
        vec![
            spec(PLAIN, true, 2),
            spec(PLAIN, false, 1),
            spec(PLAIN, true, 1),
        ],
        vec![
            spec(PLAIN, true, 1),
            spec(FENCED, true, 2),
            spec(SHORT, false, 1),
        ],
    ]
}

#[test]
fn the_line_keeps_its_promises_in_every_order() {
    let mut seen = Seen::default();
    for specs in configurations() {
        let found = explore(&specs, None);
        println!(
            "line {specs:?}: {} states, {} complete schedules, no violation",
            found.states, found.schedules
        );
        if let Some((why, path)) = found.violation {
            panic!("{why} after {path:?}");
        }
        seen.merge(found.seen);
    }
    assert!(seen.all(), "an ingredient was never reached: {seen:?}");
}

/// Each canary undoes one protection; the explorer must find a schedule
/// that breaks a property, and prints a shortest one.
#[test]
fn canaries_are_caught() {
    let canaries = [
        Canary::LeaveIgnoresTurns,
        Canary::IgnoreValidity,
        Canary::StaleTicketsPass,
    ];
    for broken in canaries {
        let caught = configurations()
            .iter()
            .find_map(|specs| explore(specs, Some(broken)).violation);
        let Some((why, path)) = caught else {
            panic!("canary {broken:?} was not caught");
        };
        println!(
            "canary {broken:?}: {why} after {} steps: {path:?}",
            path.len()
        );
    }
}
