//! Named regression tests: one per safety hole found by review, each a
//! deterministic schedule that gave two valid holders (or a wrong answer)
//! before its fix. In-memory nodes on an injected clock; the extend-order
//! holes are unit tests beside the lease code (`src/manager.rs`) because
//! they need the watchdog's two-step extend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;

use std::sync::Arc;
use std::time::Duration;

use quorum_lock::{
    Backend, LockManager, LockOptions, ManualClock, MemoryBackend, RetryPolicy, UptimeReport,
};
use support::faces::Face;

const MS: Duration = Duration::from_millis(1);

fn nodes(n: usize, clock: &ManualClock) -> Vec<MemoryBackend> {
    (0..n)
        .map(|i| MemoryBackend::with_clock(format!("mem-{i}"), Arc::new(clock.clone())))
        .collect()
}

fn manager(nodes: &[MemoryBackend], clock: &ManualClock, ttl: Duration) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .ttl(ttl)
        .max_ttl(ttl)
        .restart_quarantine(true)
        .node_timeout(Duration::from_millis(200))
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

/// Issue 9, hole 1. Redis reports `uptime_in_seconds` as floor(wall now) -
/// floor(wall start): 60 ms after a start at wall time x.95 it already
/// reads 1 s. A manager that first meets such a server must not credit it
/// with a second it has not been up. Schedule: TTL = max_ttl = 1 s; A
/// locks 3/3; two nodes restart empty at wall time x.95; B makes first
/// contact 60 ms later. Before the fix B was quarantined for only 12 ms and
/// won 15 ms later, while A still had ~900 ms of validity.
#[test]
fn first_contact_does_not_trust_a_whole_second_of_uptime() {
    let clock = ManualClock::new();
    let nodes = nodes(3, &clock);
    for node in &nodes {
        node.set_uptime_report(UptimeReport::WholeSeconds { phase: 950 * MS });
    }
    let ttl = Duration::from_secs(1);
    let a = manager(&nodes, &clock, ttl);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)), "A holds all three");
    nodes[0].restart();
    nodes[1].restart();
    clock.advance(60 * MS); // wall x+1.01: uptime reads 1 s
    let b = manager(&nodes, &clock, ttl);
    let first = b.try_lock("r");
    assert!(first.is_err(), "quarantined at first contact");
    drop(first);
    clock.advance(15 * MS);
    assert!(b.flush(Duration::from_secs(5)));
    let second = b.try_lock("r");
    assert!(
        !(guard_a.is_valid() && second.as_ref().is_ok_and(|g| g.is_valid())),
        "two valid holders: A ({:?} left) and B",
        guard_a.validity()
    );
}

/// Issue 9, hole 3. A node that reports no identity (a Redis-compatible
/// proxy whose `INFO` lacks `run_id`) cannot be checked for restarts, so
/// under quarantine its grants must not count. Before the fix they counted,
/// and two nodes restarted empty under A's lock let B in.
#[test]
fn a_node_without_identity_does_not_vote_under_quarantine() {
    let clock = ManualClock::new();
    let nodes = nodes(3, &clock);
    let ttl = Duration::from_secs(1);
    let a = manager(&nodes, &clock, ttl);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)));
    for node in &nodes {
        node.set_identity_hidden(true);
    }
    nodes[0].restart();
    nodes[1].restart();
    let b = manager(&nodes, &clock, ttl);
    let got = b.try_lock("r");
    assert!(
        !(guard_a.is_valid() && got.as_ref().is_ok_and(|g| g.is_valid())),
        "two valid holders"
    );
    let err = got.unwrap_err();
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().contains("identity"), "{err}");
}

/// Issue 9, duplicates. The same server under two names: the duplicate's
/// `SET` may land first, its vote is discarded, and the owning name then
/// found "our own key" and refused. With only the two names a free lock was
/// reported as contended in about a third of the attempts. A key that
/// already holds our token is a grant, so a free lock is never contended.
#[test]
fn a_duplicate_node_never_makes_a_free_lock_look_contended() {
    let server = MemoryBackend::new("mem-a");
    for attempt in 0..30 {
        let locks = LockManager::builder()
            .node(Face::alias(&server, "alias-1"))
            .node(Face::alias(&server, "alias-2"))
            .restart_quarantine(false)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        let err = locks
            .try_lock(format!("r{attempt}"))
            .map(drop)
            .expect_err("one server cannot make a quorum of two");
        assert!(!err.is_contended(), "attempt {attempt}: {err}");
        assert!(locks.flush(Duration::from_secs(5)));
        assert_eq!(server.key_count(), 0, "the failed attempt left a key");
    }
}

/// Issue 17, hole 8. One server under two names that cannot be identified
/// (quarantine off, as docs/safety.md tells such deployments to run):
/// "a key that already holds our token counts as a grant" let the second
/// name's answer count too, so one server cast two votes. Schedule: nodes
/// [A, A (alias), B], B held by someone else; before the fix the lock was
/// granted 2 of 3 while only one of the two servers held it.
#[test]
fn one_server_under_two_names_never_casts_two_votes_without_an_identity() {
    let clock = ManualClock::new();
    let server = MemoryBackend::with_clock("mem-a", Arc::new(clock.clone()));
    server.set_identity_hidden(true);
    let other = MemoryBackend::with_clock("mem-b", Arc::new(clock.clone()));
    assert!(
        other
            .acquire(b"r", b"someone-else", Duration::from_secs(10))
            .unwrap()
    );
    let locks = LockManager::builder()
        .node(Face::alias(&server, "alias-1"))
        .node(Face::alias(&server, "alias-2"))
        .node(other.clone())
        .clock(Arc::new(clock.clone()))
        .restart_quarantine(false)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let got = locks.try_lock("r");
    assert!(
        got.is_err(),
        "granted by one server under two names: {:?}",
        got.map(|g| g.validity())
    );
    assert!(locks.flush(Duration::from_secs(5)));
    assert_eq!(server.holder(b"r"), None, "the failed attempt left a key");
}

/// Issue 17, hole 6. Only connectivity errors kept a release for retry: a
/// release that failed otherwise (a connection reset mid-request, `LOADING`,
/// `BUSY`, a script error) was dropped, though the acquire it undoes had
/// landed, and the key stayed for its whole TTL. A release whose outcome is
/// unknown is now retried until the key must have expired.
#[test]
fn a_release_that_failed_for_any_reason_is_retried() {
    let clock = ManualClock::new();
    let nodes = nodes(3, &clock);
    let locks = manager(&nodes, &clock, Duration::from_secs(30));
    let guard = locks.try_lock("r").unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    nodes[0].fail_next(1); // an error that is not about connectivity
    drop(guard);
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(
        support::wait_until(Duration::from_secs(3), || nodes[0].holder(b"r").is_none()),
        "the release that failed once was dropped: the key stays for its TTL ({:?} left)",
        nodes[0].remaining_ttl(b"r")
    );
}

/// Issue 17, hole 2. The local line knew only a waiter's TTL, so a thread
/// that asked for `fencing(true)` and waited behind a plain holder was
/// handed that holder's lease on drop: same token, `fence() == None`. A
/// hand-over must give a waiter the lock it asked for, or none.
#[test]
fn a_fenced_waiter_is_never_handed_a_plain_lock() {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap();
    for (holder_fenced, waiter_fenced) in [(false, true), (true, false), (true, true)] {
        let holder_opts = LockOptions::new().fencing(holder_fenced);
        let held = locks.lock_with("r", &holder_opts).unwrap();
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                let opts = LockOptions::new()
                    .fencing(waiter_fenced)
                    .wait(Duration::from_secs(30));
                let guard = locks.lock_with("r", &opts).unwrap();
                (guard.fence(), *guard.token())
            })
        };
        assert!(
            support::wait_until(Duration::from_secs(30), || locks.local_waiters("r") == 1),
            "the waiter never queued"
        );
        let held_token = *held.token();
        drop(held); // the hand-over point
        let (fence, token) = waiter.join().unwrap();
        assert_eq!(
            fence.is_some(),
            waiter_fenced,
            "holder fenced: {holder_fenced}, waiter fenced: {waiter_fenced}, got fence {fence:?}"
        );
        if holder_fenced || waiter_fenced {
            assert_ne!(token, held_token, "the holder's lease was handed over");
        }
    }
    assert!(locks.flush(Duration::from_secs(10)));
}
