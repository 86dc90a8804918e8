//! Restart quarantine and duplicate-node detection on in-memory nodes with
//! an injected clock (the real-Redis scenario is in
//! `tests/redis_torture/main.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::time::Duration;

use quorum_lock::report::NodeOutcome;
use quorum_lock::{Error, LockManager, ManualClock, MemoryBackend, RetryPolicy};
use testkit::faces::Face;
use testkit::{builder_on, memory_nodes_on};

const TTL: Duration = Duration::from_secs(5);
const MAX_TTL: Duration = Duration::from_secs(10);

fn manager(nodes: &[MemoryBackend], clock: &ManualClock, quarantine: bool) -> LockManager {
    builder_on(nodes, clock)
        .ttl(TTL)
        .max_ttl(MAX_TTL)
        .restart_quarantine(quarantine)
        .build()
        .unwrap()
}

/// The violation Redlock's description warns about: A holds the lock on all
/// five nodes, three restart empty, and B wins a quorum while A's guard is
/// still valid. Quarantine prevents it.
#[test]
fn restarted_majority_without_quarantine_lets_a_second_holder_in() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(5, &clock);
    let a = manager(&nodes, &clock, false);
    let b = manager(&nodes, &clock, false);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)), "A holds all five");
    for node in &nodes[..3] {
        node.restart();
    }
    let guard_b = b.try_lock("r").unwrap();
    assert!(
        guard_a.is_valid() && guard_b.is_valid(),
        "two valid holders: the violation"
    );
}

#[test]
fn quarantine_refuses_until_every_forgotten_lock_has_expired() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(5, &clock);
    let a = manager(&nodes, &clock, true);
    let b = manager(&nodes, &clock, true);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)));
    for node in &nodes[..3] {
        node.restart();
    }
    let err = b.try_lock("r").unwrap_err();
    let Error::NoQuorum { report } = &err else {
        panic!("expected NoQuorum, got {err}");
    };
    let quarantined = report.nodes_where(|o| matches!(o, NodeOutcome::Quarantined { .. }));
    // The round stops once a quorum is out of reach, so not every
    // restarted node need have answered; those that did are quarantined.
    assert!(!quarantined.is_empty(), "{err}");
    assert!(
        quarantined
            .iter()
            .all(|n| ["mem-0", "mem-1", "mem-2"].contains(n)),
        "{err}"
    );
    assert_eq!(report.granted(), 0, "{err}");
    assert!(
        err.to_string()
            .contains("quarantined: started or restarted"),
        "{err}"
    );
    // Still refused just before the quarantine (max TTL + drift) ends.
    let drift = b.drift_for(MAX_TTL);
    assert!(guard_a.is_valid());
    clock.advance(MAX_TTL + drift - Duration::from_millis(1));
    assert!(!guard_a.is_valid(), "A's lock has expired by now");
    assert!(b.flush(Duration::from_secs(5)));
    assert!(b.try_lock("r").unwrap_err().is_no_quorum());
    clock.advance(Duration::from_millis(1));
    assert!(b.flush(Duration::from_secs(5)));
    let guard_b = b.try_lock("r").unwrap();
    assert!(guard_b.is_valid());
}

/// The quarantine time left is reported and counts down on the clock.
#[test]
fn quarantine_reports_the_time_left() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(5, &clock);
    let locks = manager(&nodes, &clock, true);
    nodes[4].restart();
    clock.advance(Duration::from_secs(3));
    let guard = locks.try_lock("r").unwrap(); // four voting nodes suffice
    assert!(locks.flush(Duration::from_secs(5)));
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 5, "releases are not withheld");
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    let err = locks.try_lock("r").unwrap_err();
    let remaining = err
        .report()
        .unwrap()
        .nodes()
        .iter()
        .find_map(|n| match *n.outcome() {
            NodeOutcome::Quarantined { remaining } => Some(remaining),
            _ => None,
        })
        .expect("mem-4 is quarantined");
    // The reported uptime is credited less its one-second resolution.
    assert_eq!(
        remaining,
        MAX_TTL + locks.drift_for(MAX_TTL) - Duration::from_secs(3) + Duration::from_secs(1)
    );
}

/// One server configured under two names casts one vote, never two.
#[test]
fn the_same_server_twice_never_counts_twice() {
    let shared = MemoryBackend::new("mem-a");
    let other = MemoryBackend::new("mem-b");
    let third = MemoryBackend::new("mem-c");
    let locks = LockManager::builder()
        .node(Face::alias(&shared, "alias-1"))
        .node(Face::alias(&shared, "alias-2"))
        .node(other.clone())
        .node(third.clone())
        .node(Face::of(MemoryBackend::new("mem-d")))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    // Warm up: every worker learns its server's identity.
    drop(locks.try_lock("warm").unwrap());
    assert!(locks.flush(Duration::from_secs(5)));
    // An acquire cannot count the same server twice by itself (its second
    // SET NX is refused), but an extend can: both names would confirm.
    // Without the check, alias-1 + alias-2 + mem-d would be three of five,
    // a quorum on two real servers out of four.
    let mut guard = locks.try_lock("r").unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    other.set_down(true);
    third.set_down(true);
    let err = guard.extend(Duration::from_secs(5)).unwrap_err();
    assert!(err.is_lost(), "{err}");
    let text = err.to_string();
    assert!(text.contains("one server casts one vote"), "{text}");
    let granted = err.report().unwrap().nodes_where(NodeOutcome::is_granted);
    let aliases = granted.iter().filter(|n| n.starts_with("alias")).count();
    assert!(aliases <= 1, "{text}");
}

/// Quarantine is on unless switched off.
#[test]
fn quarantine_is_on_by_default() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(5, &clock);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    for node in &nodes[..3] {
        node.restart();
    }
    let err = locks.try_lock("r").unwrap_err();
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().contains("quarantined"), "{err}");
}

/// Regression: with quarantine on, a grant from a node whose identity
/// cannot be read after it answered does not count (it may be a restarted
/// server); with quarantine off it does.
#[test]
fn grants_without_a_readable_identity_do_not_count_under_quarantine() {
    for quarantine in [true, false] {
        let nodes: Vec<Face> = (0..3)
            .map(|i| Face::without_identity(MemoryBackend::new(format!("mem-{i}"))))
            .collect();
        let locks = LockManager::builder()
            .nodes(nodes.iter().cloned())
            .restart_quarantine(quarantine)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        match locks.try_lock("r") {
            Ok(_guard) => assert!(!quarantine, "granted without a known identity"),
            Err(e) => {
                assert!(quarantine, "{e}");
                assert!(
                    e.to_string()
                        .contains("identity (run_id in INFO server) is unknown"),
                    "{e}"
                );
            }
        }
    }
}
