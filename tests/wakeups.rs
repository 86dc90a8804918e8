//! Wake-ups across processes on in-memory nodes (issue 18, item 5): two
//! managers over the same nodes stand for two processes (each has its own
//! engine and node threads). The real-server tests are in
//! `redis_wakeups.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};

/// A retry delay no wake-up test may wait out.
const RETRY_DELAY: Duration = Duration::from_secs(5);

fn nodes() -> Vec<MemoryBackend> {
    (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect()
}

fn manager(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap()
}

fn retries(delay: Duration) -> LockOptions {
    LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(30)
            .delay(delay)
            .jitter(Duration::ZERO),
    )
}

/// Holds `job` in `holder` until `waiter`, waiting for it with `options`,
/// listens for its release; returns how long after the release the
/// waiter got it.
fn wait_behind(holder: &LockManager, waiter: &LockManager, options: &LockOptions) -> Duration {
    let guard = holder.try_lock("job").unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with("job", options).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        testkit::until_listening(waiter);
        let released = Instant::now();
        guard.release().unwrap();
        waiting.join().unwrap().saturating_duration_since(released)
    })
}

/// A waiter for a set (`lock_all`) listens for each member: the release
/// of one that another manager held wakes it.
#[test]
fn a_set_waiter_wakes_at_the_release_of_a_member() {
    let nodes = nodes();
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let guard = holder.try_lock("b").unwrap();
    let after = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_all(["a", "b"], &retries(RETRY_DELAY)).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        testkit::until_listening(&waiter);
        let released = Instant::now();
        guard.release().unwrap();
        waiting.join().unwrap().saturating_duration_since(released)
    });
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
}

#[test]
fn a_waiter_in_another_manager_wakes_at_the_release() {
    let nodes = nodes();
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let after = wait_behind(&holder, &waiter, &retries(RETRY_DELAY));
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
    // Releases nobody hears make no one wait.
    assert_eq!(holder.health().locks.yielded, 0);
}

#[test]
fn with_notices_off_waiters_retry_on_their_timer() {
    let nodes = nodes();
    nodes.iter().for_each(|n| n.set_release_notices(false));
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let delay = Duration::from_millis(50);
    wait_behind(&holder, &waiter, &retries(delay));
    let locks = waiter.health().locks;
    assert_eq!(locks.woken, 0, "no notice can come: {locks:?}");
    assert!(locks.contended >= 2, "it retried on its timer: {locks:?}");
}

/// One node without notices: the others' notices still wake the waiter
/// (a quorum of the nodes that can send them).
#[test]
fn one_deaf_node_does_not_stop_the_wake_ups() {
    let nodes = nodes();
    nodes[2].set_release_notices(false);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let after = wait_behind(&holder, &waiter, &retries(RETRY_DELAY));
    assert!(after < RETRY_DELAY / 2, "woken {after:?} after the release");
    // With one node deaf, one notice is a quorum of the nodes that can
    // send any: the waiter may wake before the release reached the other
    // live node, fail, and wake again at that node's notice. Either way
    // it was woken, not timed out.
    let locks = waiter.health().locks;
    assert!(locks.woken >= 1 && locks.acquired == 1, "{locks:?}");
}
