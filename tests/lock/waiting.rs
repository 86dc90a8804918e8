//! Waiting for a lock as users expect: cancellation, no self-deadlock, a
//! local line bounded by the holder's validity, and a `lock()` that waits
//! like `Mutex::lock`. In-memory nodes; where time matters, an injected
//! clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use quorum_lock::backend::{Op, OpKind};
use quorum_lock::{CancellationToken, LockManager, LockOptions, MemoryBackend, RetryPolicy};
use testkit::memory_nodes;

const MS: Duration = Duration::from_millis(1);
/// A generous bound for "a few milliseconds" on a loaded machine.
const PROMPT: Duration = Duration::from_secs(2);
/// Far beyond any bound a test checks: a wait that long means it failed.
const LONG: Duration = Duration::from_secs(30);

fn manager(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn ops(nodes: &[MemoryBackend]) -> u64 {
    nodes.iter().map(MemoryBackend::operations).sum()
}

/// Waits (bounded) until `f` holds.
fn wait_until(what: &str, f: impl FnMut() -> bool) {
    let held = testkit::wait_until_with(LONG, MS, || false, f);
    assert!(held, "timed out waiting until {what}");
}

#[test]
fn an_already_cancelled_token_contacts_no_node() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let token = CancellationToken::new();
    token.cancel();
    for retry in [RetryPolicy::none(), RetryPolicy::new()] {
        let opts = LockOptions::new().retry(retry).cancellation(&token);
        let err = locks.lock_with("r", &opts).unwrap_err();
        assert!(err.is_cancelled(), "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().starts_with("cancelled"), "{err}");
    }
    assert_eq!(ops(&nodes), 0, "a node was contacted");
}

#[test]
fn cancel_interrupts_the_pause_between_attempts() {
    let nodes = memory_nodes(3);
    let (holder, locks) = (manager(&nodes), manager(&nodes));
    let held = holder.try_lock("r").unwrap();
    assert!(holder.flush(LONG), "the holder's key is on every node");
    let token = CancellationToken::new();
    let (done_tx, done) = mpsc::channel();
    let waiter = {
        let (locks, token) = (locks.clone(), token.clone());
        std::thread::spawn(move || {
            // Attempts 20 s apart: only cancellation can end this soon.
            let retry = RetryPolicy::new()
                .delay(Duration::from_secs(20))
                .attempts(3);
            let opts = LockOptions::new().retry(retry).cancellation(&token);
            let result = locks.lock_with("r", &opts).map(drop);
            done_tx.send(Instant::now()).unwrap();
            result
        })
    };
    wait_until("the first attempt was refused", || {
        locks.health().locks.contended >= 1
    });
    let cancelled_at = Instant::now();
    token.cancel();
    let returned = done.recv_timeout(LONG).expect("the waiter returned");
    let err = waiter.join().unwrap().unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    let took = returned.saturating_duration_since(cancelled_at);
    assert!(took < PROMPT, "returned {took:?} after cancel()");
    assert!(holder.flush(LONG) && locks.flush(LONG));
    for node in &nodes {
        assert_eq!(node.key_count(), 1, "only the holder's key: {node:?}");
    }
    drop(held);
}

#[test]
fn cancel_interrupts_the_wait_in_the_local_line() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    // `lock` (not `try_lock`) takes the local turn, so a second thread of
    // the same manager waits in line rather than at the servers.
    let held = locks.lock("r").unwrap();
    let token = CancellationToken::new();
    let waiter = {
        let (locks, token) = (locks.clone(), token.clone());
        std::thread::spawn(move || {
            let opts = LockOptions::new().wait(LONG).cancellation(&token);
            let result = locks.lock_with("r", &opts).map(drop);
            (result, Instant::now())
        })
    };
    wait_until("the waiter is in line", || locks.local_waiters("r") == 1);
    assert!(locks.flush(LONG), "every node has run the acquire");
    let ops_in_line = ops(&nodes);
    let cancelled_at = Instant::now();
    token.cancel();
    let (result, returned) = waiter.join().unwrap();
    assert!(result.unwrap_err().is_cancelled());
    let took = returned.saturating_duration_since(cancelled_at);
    assert!(took < PROMPT, "returned {took:?} after cancel()");
    assert_eq!(locks.local_waiters("r"), 0, "it left the line");
    assert_eq!(ops(&nodes), ops_in_line, "no node contacted after cancel");
    held.release().unwrap();
    // The line is still usable.
    locks.lock("r").unwrap().release().unwrap();
}

/// A round in flight is not cut off; the lock it won is released on every
/// node and the call still reports the cancellation.
#[test]
fn a_lock_won_by_a_round_in_flight_when_cancelled_is_released() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let token = CancellationToken::new();
    for node in &nodes {
        let token = token.clone();
        node.set_hook(Some(Arc::new(move |op: &Op<'_>| {
            if matches!(op.kind, OpKind::Acquire { .. }) {
                token.cancel();
            }
        })));
    }
    for retry in [RetryPolicy::none(), RetryPolicy::new()] {
        let opts = LockOptions::new()
            .retry(retry)
            .cancellation(&token)
            .auto_extend(true);
        let err = locks.lock_with("r", &opts).unwrap_err();
        assert!(err.is_cancelled(), "{err}");
    }
    assert!(locks.flush(LONG));
    for node in &nodes {
        assert_eq!(node.key_count(), 0, "left behind on {node:?}");
    }
    // Waiting with a fresh token works again, on the same line.
    for node in &nodes {
        node.set_hook(None);
    }
    let fresh = CancellationToken::new();
    let guard = locks
        .lock_with("r", &LockOptions::new().cancellation(&fresh))
        .unwrap();
    guard.release().unwrap();
}

/// Regression: holding `r`, the same thread's `lock_with("r", wait 1.5 s)`
/// returned after 1.5 s as "held elsewhere", `lock("r")` after 1.8 s. It
/// fails at once now, contacting no node; another thread of the manager
/// simply waits its turn.
#[test]
fn locking_again_on_the_same_thread_fails_at_once_with_deadlock() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let held = locks.lock("r").unwrap();
    assert!(locks.flush(LONG), "every node has run the acquire");
    let before = ops(&nodes);
    let started = Instant::now();
    let again = [
        locks.lock("r").map(drop),
        locks
            .lock_with("r", &LockOptions::new().wait(Duration::from_secs(5)))
            .map(drop),
    ];
    for result in again {
        let err = result.unwrap_err();
        assert!(err.is_deadlock(), "{err}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("already holds"), "{err}");
    }
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
    assert_eq!(ops(&nodes), before, "a node was contacted");
    // One attempt cannot deadlock: it reports what the servers say, as
    // `Mutex::try_lock` does, and says that this thread holds the lock.
    let mine = locks.try_lock("r").unwrap_err();
    assert!(mine.is_contended(), "{mine}");
    let text = mine.to_string();
    assert!(
        text.contains("held by this thread") && !text.contains("elsewhere"),
        "{text}"
    );
    // Another resource, and the same resource through another manager, are
    // independent (the latter is contention, not a deadlock).
    locks.try_lock("s").unwrap().release().unwrap();
    let other = manager(&nodes);
    let theirs = other.try_lock("r").unwrap_err();
    assert!(theirs.is_contended());
    assert!(theirs.to_string().contains("held elsewhere"), "{theirs}");
    // Another thread of the same manager is told "elsewhere" too.
    let from_another_thread = std::thread::scope(|s| {
        s.spawn(|| locks.try_lock("r").unwrap_err().to_string())
            .join()
            .unwrap()
    });
    assert!(
        from_another_thread.contains("held elsewhere"),
        "{from_another_thread}"
    );
    // Another thread of the manager waits its turn.
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let guard = locks.lock_with("r", &LockOptions::new().wait(LONG))?;
            guard.release().map(drop)
        })
    };
    wait_until("the other thread is in line", || {
        locks.local_waiters("r") == 1
    });
    held.release().unwrap();
    waiter.join().unwrap().unwrap();
    // Once the guard is gone, this thread may lock again.
    locks.lock("r").unwrap().release().unwrap();
    let forgotten = locks.lock("r").unwrap();
    forgotten.forget();
    // (Its keys stay until their TTL: held elsewhere, not a deadlock.)
    assert!(locks.try_lock("r").unwrap_err().is_contended());
}

/// Regression: `lock()` gave up after about 1.3 s (10 attempts), which is
/// not what a method named like `Mutex::lock` suggests. A holder in another
/// process that keeps the lock for 2 s no longer makes it fail.
#[test]
fn lock_waits_longer_than_ten_attempts_by_default() {
    let nodes = memory_nodes(3);
    let (holder, locks) = (manager(&nodes), manager(&nodes));
    let held = holder.try_lock("r").unwrap();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || locks.lock("r")?.release().map(drop))
    };
    wait_until("the waiter tried", || locks.health().locks.contended >= 1);
    // The holder's work takes 2 s: longer than ten default attempts.
    std::thread::sleep(Duration::from_secs(2));
    held.release().unwrap();
    waiter.join().unwrap().unwrap();
}
