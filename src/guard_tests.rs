//! The forget watch (a held lock is told when a node it counted on may have
//! forgotten its keys) as a guard sees it: the engine's forgets noted by
//! hand on in-memory nodes, the lost signal, validity and registration race
//! of a real `LockGuard`. The rounds' helpers come from
//! `src/redlock/tests.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use super::LockGuard;
use crate::backend::memory::MemoryBackend;
use crate::clock::ManualClock;
use crate::redlock::tests::{LONG, lock, rounds};
use crate::redlock::{Core, Lease, Want};

/// Generous: the signal is sent before `note` returns.
const AT_ONCE: Duration = Duration::from_secs(10);
const EVICTING: &str = "may have evicted the lock's keys (maxmemory 3145728, \
                        maxmemory-policy volatile-lru)";

/// Three nodes (node 2 down when `third_down`) under one manager's core.
fn core(clock: &ManualClock, third_down: bool) -> (Vec<MemoryBackend>, Arc<Core>) {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::with_clock(format!("mem-{i}"), Arc::new(clock.clone())))
        .collect();
    nodes[2].set_down(third_down);
    let core = Arc::new(Core::new(rounds(&nodes, clock)));
    (nodes, core)
}

/// The nodes whose grants the lease counted.
fn support(lease: &Lease) -> Vec<usize> {
    lease.state().support().nodes().collect()
}

/// A forget of a node the lock did not count, or that leaves a quorum of
/// the nodes it counted, leaves the guard valid and its signal silent. (A
/// round is decided at a quorum of grants, so the lock usually counted
/// exactly two of the three nodes.)
#[test]
fn a_forget_that_leaves_a_quorum_leaves_the_guard_valid() {
    let clock = ManualClock::new();
    let (_nodes, core) = core(&clock, false);
    let lease = lock(core.rounds()).unwrap();
    let counted = support(&lease);
    assert!(counted.len() >= 2, "counted {counted:?}");
    let other = (0..3).find(|n| !counted.contains(n)).unwrap_or(0);
    let guard = LockGuard::new(Arc::clone(&core), lease);
    let signal = guard.lost_signal();
    core.rounds().engine().forgets().note(other, EVICTING);
    assert!(signal.try_recv().is_none(), "told of a loss");
    assert!(guard.is_valid());
    assert_eq!(core.rounds().counters().snapshot().lost, 0);
}

/// A guard whose quorum counted a node seen forgetting since is told at
/// once: its lost signal fires, its validity is zero, and the reason names
/// the node and why.
#[test]
fn a_forget_that_takes_the_quorum_fires_the_lost_signal_at_once() {
    let clock = ManualClock::new();
    let (_nodes, core) = core(&clock, true);
    let lease = lock(core.rounds()).unwrap();
    assert_eq!(support(&lease), [0, 1]);
    let guard = LockGuard::new(Arc::clone(&core), lease);
    let signal = guard.lost_signal();
    assert!(guard.is_valid());
    core.rounds().engine().forgets().note(1, EVICTING);
    let notice = signal.recv_timeout(AT_ONCE).expect("the loss is told");
    let text = notice.to_string();
    assert!(notice.is_lost(), "{text}");
    assert!(
        text.contains(&format!("node mem-1 {EVICTING}: 1 of the 2 nodes")),
        "{text}"
    );
    assert_eq!(guard.validity(), Duration::ZERO);
    assert!(guard.check().is_err());
    assert_eq!(core.rounds().counters().snapshot().lost, 1);
}

/// The race with registration: a forget seen after the round was sent but
/// before the guard registered its lease (the hook cannot see the lease
/// yet) is caught when the guard registers.
#[test]
fn a_forget_before_the_guard_registers_is_caught_when_it_does() {
    let clock = ManualClock::new();
    let (_nodes, core) = core(&clock, true);
    let lease = lock(core.rounds()).unwrap();
    core.rounds().engine().forgets().note(0, EVICTING);
    assert!(
        lease.state().lost().is_none(),
        "the hook saw an unregistered lease"
    );
    let guard = LockGuard::new(Arc::clone(&core), lease);
    let notice = guard.lost_signal().recv_timeout(AT_ONCE);
    assert!(notice.is_some_and(|e| e.is_lost()));
    assert_eq!(guard.validity(), Duration::ZERO);
}

/// An extend moves the support to its own grants, read against the epochs
/// from before it was sent: a forget of a node that granted it, seen while
/// it was in flight, loses the lease when it finishes (the hook, seeing the
/// old support, could not).
#[test]
fn a_forget_during_an_extend_is_caught_when_it_finishes() {
    let clock = ManualClock::new();
    let (nodes, core) = core(&clock, false);
    let rounds = core.rounds();
    let lease = lock(rounds).unwrap();
    let guard = LockGuard::new(Arc::clone(&core), Arc::clone(&lease));
    // The round was decided by two nodes; the third got the acquire too.
    assert!(rounds.engine().flush(AT_ONCE));
    let counted = support(&lease);
    let (gone, kept) = (counted[0], counted[1]);
    let third = (0..3).find(|n| !counted.contains(n)).expect("two counted");
    // One counted node fails: the extend is granted by the other two.
    nodes[gone].set_down(true);
    let extend = rounds.begin_extend(&lease, LONG).unwrap();
    rounds.engine().forgets().note(third, EVICTING);
    assert!(guard.is_valid(), "the third node was not counted yet");
    let finished = rounds.finish_extend(&lease, extend);
    assert!(finished.is_err_and(|e| e.is_lost()));
    let mut now_counted = vec![kept, third];
    now_counted.sort_unstable();
    assert_eq!(support(&lease), now_counted);
    assert_eq!(guard.validity(), Duration::ZERO);
}

/// A hand-over gives the next holder the same keys on the same nodes:
/// the same support.
#[test]
fn a_hand_over_carries_the_support() {
    let clock = ManualClock::new();
    let (_nodes, core) = core(&clock, true);
    let lease = lock(core.rounds()).unwrap();
    let want = Want {
        ttl: LONG,
        fenced: false,
    };
    let handed = core.rounds().handoff(&lease, &want, Default::default());
    let handed = handed.expect("handed over");
    assert_eq!(support(&handed), [0, 1]);
    let guard = LockGuard::new(Arc::clone(&core), handed);
    core.rounds().engine().forgets().note(0, EVICTING);
    assert!(!guard.is_valid());
}
