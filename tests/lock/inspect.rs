//! `LockManager::inspect` and owner labels on in-memory nodes: who holds a
//! lock, for how long at least, and what the nodes say when they disagree
//! or fail. (`tests/redis/inspect.rs` does the same on real servers.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend;
use quorum_lock::inspection::{KeyState, Verdict};
use quorum_lock::{Error, LockManager, LockManagerBuilder, MAX_OWNER_LEN, MemoryBackend};
use testkit::memory_nodes_with;

const TTL: Duration = Duration::from_secs(10);

fn builder(nodes: &[MemoryBackend]) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(TTL)
        .restart_quarantine(false)
}

#[test]
fn a_held_lock_shows_its_owner_and_a_time_left_below_its_ttl() {
    let nodes = memory_nodes_with("insp-held", 3, None);
    let ours = builder(&nodes).owner("report-job@host-1").build().unwrap();
    let theirs = builder(&nodes).build().unwrap();
    assert_eq!(theirs.inspect("report").unwrap().verdict(), Verdict::Free);

    let guard = ours.lock("report").unwrap();
    // The round may end at a quorum: let the third node's acquire run too.
    assert!(ours.flush(Duration::from_secs(5)));
    // Seen from another manager, as an operator would.
    let seen = theirs.inspect("report").unwrap();
    assert!(seen.is_held(), "{seen}");
    assert_eq!(seen.owner(), Some("report-job@host-1"));
    assert!(seen.time_left() > Duration::ZERO, "{seen}");
    assert!(seen.time_left() < TTL, "{seen}");
    assert_eq!(seen.nodes().len(), 3);
    assert!(seen.nodes().iter().all(|n| matches!(
        n.state(),
        KeyState::Held {
            quorum_holder: true,
            ..
        }
    )));
    let line = seen.to_string();
    assert!(line.contains("held by report-job@host-1"), "{line}");
    // Never the token, in the line or in Debug.
    let hex: String = guard
        .token()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(!format!("{line} {seen:?}").contains(&hex));

    guard.release().unwrap();
    // Another manager's view: let ours finish every node's release first.
    assert!(ours.flush(Duration::from_secs(5)));
    assert_eq!(theirs.inspect("report").unwrap().verdict(), Verdict::Free);
}

#[test]
fn the_default_owner_is_host_and_pid_and_an_empty_label_stores_none() {
    let nodes = memory_nodes_with("insp-default", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let pid = format!(":{}", std::process::id());
    assert!(locks.owner().ends_with(&pid), "{}", locks.owner());
    let _guard = locks.lock("a").unwrap();
    assert_eq!(locks.inspect("a").unwrap().owner(), Some(locks.owner()));

    let bare = builder(&nodes).owner("").build().unwrap();
    let guard = bare.lock("b").unwrap();
    // The round may end at a quorum of nodes 1 and 2, leaving node 0's
    // acquire to its thread: wait for it before reading node 0.
    assert!(bare.flush(Duration::from_secs(5)));
    assert_eq!(
        nodes[0].holder(b"b").as_deref(),
        Some(guard.token().as_bytes()),
        "an empty label stores the token alone"
    );
    let seen = bare.inspect("b").unwrap();
    assert!(seen.is_held());
    assert_eq!(seen.owner(), None);
}

#[test]
fn holders_on_a_minority_each_are_a_split_not_a_holder() {
    let nodes = memory_nodes_with("insp-split", 3, None);
    backend::acquire(&nodes[0], b"job", b"one-client", TTL).unwrap();
    backend::acquire(&nodes[1], b"job", b"another-client", TTL).unwrap();
    let locks = builder(&nodes).build().unwrap();
    let seen = locks.inspect("job").unwrap();
    assert_eq!(seen.verdict(), Verdict::Split, "{seen}");
    assert!(!seen.is_held());
    assert_eq!(seen.time_left(), Duration::ZERO);
    // A foreign holder on a quorum is a holder, without an owner.
    backend::acquire(&nodes[2], b"job", b"one-client", TTL).unwrap();
    let seen = locks.inspect("job").unwrap();
    assert!(seen.is_held(), "{seen}");
    assert_eq!(seen.owner(), None);
}

#[test]
fn too_few_answers_is_unknown_and_names_the_nodes_that_failed() {
    let nodes = memory_nodes_with("insp-down", 3, None);
    let locks = builder(&nodes).build().unwrap();
    nodes[1].set_down(true);
    nodes[2].set_down(true);
    let seen = locks.inspect("job").unwrap();
    assert_eq!(seen.verdict(), Verdict::Unknown, "{seen}");
    let line = seen.to_string();
    assert!(
        line.contains("insp-down-1") && line.contains("insp-down-2"),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line}");
}

#[test]
fn a_paused_node_costs_at_most_the_wait_and_counts_as_failed() {
    let nodes = memory_nodes_with("insp-paused", 3, None);
    let locks = builder(&nodes)
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let guard = locks.lock("job").unwrap();
    // Every node holds the lock before node 0 stalls.
    assert!(locks.flush(Duration::from_secs(5)));
    nodes[0].pause();
    let seen = locks.inspect("job").unwrap();
    nodes[0].resume();
    assert!(seen.is_held(), "two of three still hold it: {seen}");
    assert!(
        matches!(seen.nodes()[0].state(), KeyState::Failed(e) if e.to_string().contains("no answer")),
        "{:?}",
        seen.nodes()[0]
    );
    drop(guard);
}

#[test]
fn bad_resources_and_labels_are_refused_before_any_node_is_asked() {
    let nodes = memory_nodes_with("insp-bad", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let before: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    for bad in [&b""[..], &b"{quorum-lock}:fences"[..]] {
        let err = locks.inspect(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    }
    let after: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    assert_eq!(before, after, "no node was asked");

    for label in ["two\nlines", &"x".repeat(MAX_OWNER_LEN + 1), "naïve"] {
        let err = builder(&nodes).owner(label).build().unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        assert!(err.to_string().contains("owner label"), "{err}");
        assert!(!err.to_string().contains('\n'), "{err}");
    }
}
