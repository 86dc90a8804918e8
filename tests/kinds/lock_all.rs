//! `LockManager::lock_all` on in-memory nodes: several resources held as
//! one lock, all or nothing on every node, contending with single locks
//! and overlapping sets. (`tests/redis/lock_all.rs` does the same on real
//! servers.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorum_lock::backend;
use quorum_lock::{
    Error, LockManager, LockManagerBuilder, LockOptions, MAX_SET_SIZE, MemoryBackend, RetryPolicy,
};
use testkit::memory_nodes_with;

const TTL: Duration = Duration::from_secs(10);
const FLUSH: Duration = Duration::from_secs(5);

fn builder(nodes: &[MemoryBackend]) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(TTL)
        .owner("")
        .retry(RetryPolicy::none())
        .restart_quarantine(false)
}

fn once() -> LockOptions {
    LockOptions::new().retry(RetryPolicy::none())
}

#[test]
fn a_set_holds_every_member_on_every_node_and_releases_them_together() {
    let nodes = memory_nodes_with("all-basic", 3, None);
    let locks = builder(&nodes).prefix("p:").build().unwrap();
    let guard = locks.lock_all(["b", "a", "b", "c"], &once()).unwrap();
    assert!(locks.flush(FLUSH));
    assert_eq!(guard.resources(), [&b"a"[..], b"b", b"c"]);
    assert!(guard.fence().is_none());
    for node in &nodes {
        for key in [&b"p:a"[..], b"p:b", b"p:c"] {
            assert_eq!(
                node.holder(key).as_deref(),
                Some(guard.token().as_bytes()),
                "{node:?}"
            );
        }
        assert_eq!(node.key_count(), 3, "only the members are stored");
    }
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}

#[test]
fn single_locks_and_overlapping_sets_contend_with_a_set_and_disjoint_ones_do_not() {
    let nodes = memory_nodes_with("all-contend", 3, None);
    let ours = builder(&nodes).build().unwrap();
    let theirs = builder(&nodes).build().unwrap();
    let set = ours.lock_all(["a", "b"], &once()).unwrap();
    for member in ["a", "b"] {
        let err = theirs.try_lock(member).unwrap_err();
        assert!(err.is_contended(), "{member}: {err}");
    }
    let err = theirs.lock_all(["b", "c"], &once()).unwrap_err();
    assert!(err.is_contended(), "{err}");
    let line = err.to_string();
    assert!(
        line.contains("{b, c}"),
        "the set is named in the error: {line}"
    );
    // Nothing of the failed set was left anywhere (all or nothing): c is
    // free on every node.
    assert!(theirs.flush(FLUSH));
    assert!(nodes.iter().all(|n| n.holder(b"c").is_none()));
    let disjoint = theirs.lock_all(["c", "d"], &once()).unwrap();
    drop(set);
    drop(disjoint);
    assert!(ours.flush(FLUSH) && theirs.flush(FLUSH));
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}

#[test]
fn a_node_where_one_member_is_taken_votes_no_and_writes_nothing() {
    let nodes = memory_nodes_with("all-partial", 3, None);
    backend::acquire(&nodes[0], b"b", b"someone-else", TTL).unwrap();
    let locks = builder(&nodes).build().unwrap();
    let guard = locks.lock_all(["a", "b"], &once()).unwrap();
    assert!(locks.flush(FLUSH));
    assert_eq!(
        nodes[0].holder(b"a"),
        None,
        "node 0 refused the whole set: no partial set there"
    );
    for node in &nodes[1..] {
        assert_eq!(node.holder(b"a").as_deref(), Some(guard.token().as_bytes()));
        assert_eq!(node.holder(b"b").as_deref(), Some(guard.token().as_bytes()));
    }
    // Taken on two nodes of three: now two nodes refuse the set.
    nodes[1].expire_now(b"a");
    nodes[1].expire_now(b"b");
    backend::acquire(&nodes[1], b"a", b"someone-else", TTL).unwrap();
    drop(guard);
    assert!(locks.flush(FLUSH));
    let err = locks.lock_all(["a", "b"], &once()).unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(locks.flush(FLUSH));
    assert_eq!(nodes[2].key_count(), 0, "the failed attempt was released");
}

#[test]
fn a_set_extends_all_its_members_together() {
    let nodes = memory_nodes_with("all-extend", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let mut guard = locks.lock_all(["x", "y"], &once()).unwrap();
    guard.extend(TTL * 3).unwrap();
    assert!(locks.flush(FLUSH));
    for node in &nodes {
        for key in [&b"x"[..], b"y"] {
            assert!(node.remaining_ttl(key).unwrap() > TTL, "{node:?}");
        }
    }
    // One member gone on two nodes: the extend is refused there as a whole.
    for node in &nodes[..2] {
        node.expire_now(b"y");
    }
    let err = guard.extend(TTL * 3).unwrap_err();
    assert!(err.is_lost(), "{err}");
}

#[test]
fn overlapping_sets_from_many_threads_never_share_a_resource_and_all_finish() {
    let nodes = memory_nodes_with("all-threads", 3, None);
    let locks = builder(&nodes)
        .retry(
            RetryPolicy::new()
                .delay(Duration::from_millis(1))
                .jitter(Duration::from_millis(2))
                .max_wait(Duration::from_secs(30)),
        )
        .build()
        .unwrap();
    let inside = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let sets: [&[usize]; 4] = [&[0, 1], &[1, 2], &[0, 2], &[1]];
    let names = ["r0", "r1", "r2"];
    let threads: Vec<_> = sets
        .iter()
        .map(|set| {
            let (locks, inside) = (locks.clone(), Arc::clone(&inside));
            let set = set.to_vec();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let guard = locks
                        .lock_all(set.iter().map(|&i| names[i]), &LockOptions::new())
                        .unwrap();
                    for &i in &set {
                        assert_eq!(inside[i].fetch_add(1, Ordering::SeqCst), 0, "r{i} shared");
                    }
                    std::thread::yield_now();
                    for &i in &set {
                        inside[i].fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}

#[test]
fn a_fenced_set_gets_one_fence_above_each_members_and_raises_them_all() {
    let nodes = memory_nodes_with("all-fenced", 3, None);
    let locks = builder(&nodes).fencing(true).build().unwrap();
    let fenced = LockOptions::new().retry(RetryPolicy::none());
    // Each member has a history of its own: a is far ahead of b.
    let mut a_fence = 0;
    for _ in 0..3 {
        let a = locks.lock_with("a", &fenced).unwrap();
        a_fence = a.fence().unwrap();
        a.release().unwrap();
    }
    let b = locks.lock_with("b", &fenced).unwrap();
    let b_fence = b.fence().unwrap();
    b.release().unwrap();
    let set = locks.lock_all(["a", "b"], &fenced).unwrap();
    let set_fence = set.fence().expect("a fenced set has a fence");
    assert!(set_fence > a_fence && set_fence > b_fence);
    set.release().unwrap();
    // Each member's next holder, alone or in a set, gets a higher fence.
    for member in ["a", "b"] {
        let next = locks.lock_with(member, &fenced).unwrap();
        assert!(next.fence().unwrap() > set_fence, "{member}");
        next.release().unwrap();
    }
    let again = locks.lock_all(["b", "c"], &fenced).unwrap();
    assert!(again.fence().unwrap() > set_fence);
}

#[test]
fn waiting_for_a_member_of_a_set_this_thread_holds_is_a_deadlock_error() {
    let nodes = memory_nodes_with("all-self", 3, None);
    let locks = builder(&nodes)
        .retry(RetryPolicy::new().max_wait(Duration::from_secs(30)))
        .build()
        .unwrap();
    let set = locks.lock_all(["a", "b"], &LockOptions::new()).unwrap();
    assert!(locks.flush(FLUSH), "every node's part of the lock is done");
    let before: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    let err = locks.lock("a").unwrap_err();
    assert!(err.is_deadlock(), "{err}");
    let err = locks.lock_all(["b", "c"], &LockOptions::new()).unwrap_err();
    assert!(err.is_deadlock(), "{err}");
    let after: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    assert_eq!(before, after, "no node was asked");
    // One attempt reports what the servers say, as for one lock.
    assert!(locks.try_lock("a").unwrap_err().is_contended());
    // And the other way round: a member held alone.
    let single = locks.lock("c").unwrap();
    let err = locks.lock_all(["c", "d"], &LockOptions::new()).unwrap_err();
    assert!(err.is_deadlock(), "{err}");
    // Another thread waits as usual (here: until the set is released).
    let other = locks.clone();
    let waiter = std::thread::spawn(move || other.lock("a").map(|g| g.resources().len()));
    set.release().unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), 1);
    drop(single);
}

#[test]
fn bad_sets_are_refused_before_any_node_is_asked() {
    let nodes = memory_nodes_with("all-bad", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let fenced = builder(&nodes).fencing(true).build().unwrap();
    let before: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    let too_many: Vec<String> = (0..=MAX_SET_SIZE).map(|i| format!("r{i}")).collect();
    let cases: Vec<(&str, Result<_, Error>)> = vec![
        ("empty", locks.lock_all(Vec::<&str>::new(), &once())),
        ("too many", locks.lock_all(&too_many, &once())),
        ("empty member", locks.lock_all(["a", ""], &once())),
        (
            "reserved member",
            locks.lock_all(["a", "{quorum-lock}:fences"], &once()),
        ),
        (
            "member in the reserved namespace",
            locks.lock_all(["a", "{quorum-lock}:sets"], &once()),
        ),
    ];
    for (case, result) in cases {
        let err = result.unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{case}: {err}"
        );
        assert!(!err.to_string().contains('\n'), "{case}: {err}");
    }
    let after: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    assert_eq!(before, after, "no node was asked");
    // A fenced manager may still lock a set without fences, when asked.
    let set = fenced.lock_all(["a", "b"], &once().fencing(false)).unwrap();
    assert!(set.fence().is_none());
    drop(set);
    assert!(fenced.flush(FLUSH));
    // One resource is a plain lock.
    let one = locks.lock_all(["solo", "solo"], &once()).unwrap();
    assert_eq!(one.key(), b"solo");
    assert_eq!(one.resources(), [&b"solo"[..]]);
}

/// Regression: `lock_all` stopped reading names at its cap before it
/// removed duplicates: 300 times "a" then "b" gave a guard for `["a"]`
/// alone, and another manager then took "b". Duplicates must never hide a
/// member: the cap counts distinct names.
#[test]
fn duplicates_never_hide_a_member_of_a_set() {
    let nodes = memory_nodes_with("all-dups", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let other = builder(&nodes).build().unwrap();
    let mut names = vec!["a"; 300];
    names.push("b");
    let set = locks.lock_all(&names, &once()).unwrap();
    let members = set.resources();
    assert_eq!(members, [&b"a"[..], b"b"]);
    let err = other.try_lock("b").unwrap_err();
    assert!(err.is_contended(), "b is a member of the set: {err}");
    set.release().unwrap();
}

/// A set of more distinct names than the cap is refused, however many
/// repeats come first; an endless list is refused, never read for ever.
#[test]
fn the_set_cap_counts_distinct_names_and_an_endless_list_is_refused() {
    let nodes = memory_nodes_with("all-cap", 3, None);
    let locks = builder(&nodes).build().unwrap();
    let mut names: Vec<String> = vec!["a".into(); 500];
    names.extend((1..=MAX_SET_SIZE).map(|i| format!("r{i}")));
    let err = locks.lock_all(&names, &once()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = locks.lock_all(std::iter::repeat("a"), &once()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let full: Vec<String> = (0..MAX_SET_SIZE).map(|i| format!("r{i}")).collect();
    locks.lock_all(&full, &once()).unwrap().release().unwrap();
}
