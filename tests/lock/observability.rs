//! What operators see: the events the library logs through the `log`
//! facade, and `LockManager::health()` snapshots, for a node that goes down
//! and comes back, a restart (quarantine in and out), a lost lock and a
//! duplicate node. A capturing logger records every event of its process:
//! each test runs alone in a process of its own (`testkit::alone`; the
//! logger is global), and looks only at the lines naming its own nodes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::time::Duration;

use log::{Level, LevelFilter};
use quorum_lock::health::NodeState;
use quorum_lock::{LockManager, ManualClock, MemoryBackend, RetryPolicy};
use testkit::faces::Face;
use testkit::memory_nodes_with;
use testkit::wait_until;

/// Every event logged in this test binary, down to `debug`.
fn capture() -> &'static testkit::logs::Capture {
    testkit::logs::capture(LevelFilter::Debug)
}

/// The events so far that mention `word`.
fn events(word: &str) -> Vec<(Level, String)> {
    capture().events_with(&[word])
}

fn logged(level: Level, word: &str, what: &str) -> bool {
    events(word)
        .iter()
        .any(|(l, text)| *l == level && text.contains(what))
}

fn manager(nodes: &[MemoryBackend], clock: &ManualClock) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .ttl(Duration::from_secs(2))
        .max_ttl(Duration::from_secs(2))
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

#[test]
fn a_node_that_goes_down_and_comes_back() {
    if !testkit::alone("observability::a_node_that_goes_down_and_comes_back") {
        return;
    }
    capture();
    let clock = ManualClock::new();
    let nodes = memory_nodes_with("obs-down", 3, Some(&clock));
    let locks = manager(&nodes, &clock);
    nodes[2].set_down(true);
    for _ in 0..3 {
        let _ = locks.try_lock("r").map(|g| g.release());
    }
    // Node 2's failures are counted on its thread: let it finish them.
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        logged(Level::Warn, "obs-down-2", "marked down"),
        "{:?}",
        events("obs-down")
    );
    let health = locks.health();
    assert!(
        matches!(health.nodes[2].state, NodeState::Down { .. }),
        "{health}"
    );
    assert!(health.nodes[2].failures >= 2, "{health}");
    assert!(health.nodes[2].last_error.is_some(), "{health}");
    assert_eq!(health.voting(), 2, "{health}");
    assert!(health.has_quorum());
    assert!(
        health.to_string().contains("obs-down-2: down for"),
        "{health}"
    );

    nodes[2].set_down(false);
    assert!(wait_until(Duration::from_secs(10), || {
        locks.health().nodes[2].state == NodeState::Up
    }));
    assert!(
        logged(Level::Info, "obs-down-2", "back up"),
        "{:?}",
        events("obs-down")
    );
}

/// Regression: a node down for longer than `max_ttl` came back with
/// "sending 2 parked releases", then "gave up on 2 releases" (a warning)
/// for the same two: they were never sent. Releases kept past the window
/// are dropped when the node comes back, and said so once.
#[test]
fn releases_kept_past_max_ttl_are_dropped_not_said_to_be_sent() {
    if !testkit::alone("observability::releases_kept_past_max_ttl_are_dropped_not_said_to_be_sent")
    {
        return;
    }
    capture();
    let clock = ManualClock::new();
    let nodes = memory_nodes_with("obs-parked", 3, Some(&clock));
    let locks = manager(&nodes, &clock);
    nodes[2].set_down(true);
    assert!(wait_until(Duration::from_secs(10), || {
        let _ = locks.try_lock("r").map(|g| g.release());
        locks.flush(Duration::from_secs(10));
        matches!(locks.health().nodes[2].state, NodeState::Down { .. })
    }));
    // Parked for the node that is down.
    for resource in ["p1", "p2"] {
        let _ = locks.try_lock(resource).unwrap().release();
    }
    assert!(
        locks.health().nodes[2].releases_waiting >= 2,
        "{}",
        locks.health()
    );
    // The retry window is max_ttl (2 s) on the monotonic clock.
    std::thread::sleep(Duration::from_millis(2100));
    nodes[2].set_down(false);
    assert!(wait_until(Duration::from_secs(10), || {
        logged(Level::Info, "obs-parked-2", "back up")
    }));
    assert!(
        logged(Level::Info, "obs-parked-2", "dropped unsent"),
        "{:?}",
        events("obs-parked")
    );
    assert!(
        !logged(Level::Info, "obs-parked-2", "sending 2"),
        "{:?}",
        events("obs-parked")
    );
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        !logged(Level::Warn, "obs-parked-2", "stopped retrying"),
        "{:?}",
        events("obs-parked")
    );
}

#[test]
fn a_restart_is_quarantined_and_its_end_announced() {
    if !testkit::alone("observability::a_restart_is_quarantined_and_its_end_announced") {
        return;
    }
    capture();
    let clock = ManualClock::new();
    let nodes = memory_nodes_with("obs-restart", 3, Some(&clock));
    let locks = manager(&nodes, &clock);
    locks.try_lock("r").unwrap().release().unwrap();
    nodes[0].restart();
    locks.try_lock("r").unwrap().release().unwrap(); // two others suffice
    // The round may be decided by the other two: let node 0's thread finish.
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        logged(Level::Info, "obs-restart-0", "quarantined for"),
        "{:?}",
        events("obs-restart")
    );
    let health = locks.health();
    assert!(
        matches!(health.nodes[0].state, NodeState::Quarantined { .. }),
        "{health}"
    );
    clock.advance(Duration::from_secs(3));
    locks.try_lock("r").unwrap().release().unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        logged(Level::Info, "obs-restart-0", "quarantine is over"),
        "{:?}",
        events("obs-restart")
    );
    assert_eq!(locks.health().nodes[0].state, NodeState::Up);
}

#[test]
fn a_lost_lock_is_a_warning_and_counted() {
    if !testkit::alone("observability::a_lost_lock_is_a_warning_and_counted") {
        return;
    }
    capture();
    let clock = ManualClock::new();
    let nodes = memory_nodes_with("obs-lost", 3, Some(&clock));
    let locks = manager(&nodes, &clock);
    let mut guard = locks.lock("obs-lost-resource").unwrap();
    let token = guard.token().as_bytes().to_vec();
    // The lock may be decided at a quorum: let every node run its acquire
    // before two of them go down, so the extend is what fails.
    assert!(locks.flush(Duration::from_secs(10)));
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    assert!(guard.extend(Duration::from_secs(2)).is_err());
    assert!(
        logged(Level::Warn, "obs-lost-resource", "may be lost"),
        "{:?}",
        events("obs-lost")
    );
    let counters = locks.health().locks;
    assert_eq!((counters.acquired, counters.lost), (1, 1), "{counters:?}");
    assert_eq!(counters.extends_failed, 1, "{counters:?}");
    // No whole token in any event.
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    assert!(events(&hex).is_empty());
}

#[test]
fn a_duplicate_node_is_reported() {
    if !testkit::alone("observability::a_duplicate_node_is_reported") {
        return;
    }
    capture();
    let server = MemoryBackend::new("obs-dup-server");
    let locks = LockManager::builder()
        .node(Face::alias(&server, "obs-dup-a"))
        .node(Face::alias(&server, "obs-dup-b"))
        .node(MemoryBackend::new("obs-dup-c"))
        .restart_quarantine(false)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let _ = locks.try_lock("r").map(|g| g.release());
    assert!(locks.flush(Duration::from_secs(5)));
    let warned = logged(Level::Warn, "obs-dup-a", "same server")
        || logged(Level::Warn, "obs-dup-b", "same server");
    assert!(warned, "{:?}", events("obs-dup"));
    let duplicates = locks
        .health()
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::DuplicateOf(_)))
        .count();
    assert_eq!(duplicates, 1, "{}", locks.health());
}

/// The `:port` part of a one-node manager's node name.
#[cfg(feature = "redis")]
fn url_port(locks: &LockManager) -> String {
    let name = &locks.nodes()[0];
    let port = name.rsplit(':').next().unwrap();
    format!(":{port}")
}

/// A password in a node's URL never reaches an event.
#[cfg(feature = "redis")]
#[test]
fn no_password_in_events() {
    if !testkit::alone("observability::no_password_in_events") {
        return;
    }
    capture();
    let url = format!("redis://:obs-hunter2@127.0.0.1:{}", testkit::free_port());
    let locks = LockManager::builder()
        .redis_nodes([url])
        .unwrap()
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    for _ in 0..3 {
        let _ = locks.try_lock("r");
    }
    let port_events = events(&url_port(&locks));
    assert!(
        port_events
            .iter()
            .any(|(l, t)| *l == Level::Warn && t.contains("marked down") && t.contains(":***@")),
        "{port_events:?}"
    );
    assert!(events("obs-hunter2").is_empty());
    assert!(!locks.health().to_string().contains("obs-hunter2"));
}
