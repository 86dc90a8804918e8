//! The quorum semaphore on in-memory nodes: at most K permits across
//! managers (as across processes), a permit is a lock, waiting and
//! cancelling work, bad input is a typed error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use quorum_lock::{CancellationToken, Error, LockOptions, MAX_PERMITS, RetryPolicy};
use testkit::memory_nodes;

use crate::support::manager;

#[test]
fn two_managers_share_k_permits_and_a_released_one_is_taken_again() {
    let nodes = memory_nodes(3);
    let (a, b) = (manager(&nodes), manager(&nodes));
    let first = a.semaphore("uploads", 2).expect("valid").try_acquire();
    let second = b.semaphore("uploads", 2).expect("valid").try_acquire();
    let (first, second) = (
        first.expect("a free permit"),
        second.expect("a free permit"),
    );
    assert_ne!(
        first.resource(),
        second.resource(),
        "two permits, two slots"
    );
    let third = a.semaphore("uploads", 2).expect("valid").try_acquire();
    let error = third.expect_err("both permits are held");
    assert!(error.is_contended(), "{error}");
    second.release().expect("released");
    let again = b.semaphore("uploads", 2).expect("valid").try_acquire();
    assert!(again.is_ok(), "a released permit is free: {again:?}");
    drop(first);
}

#[test]
fn try_acquire_finds_the_last_free_slot_wherever_its_scan_starts() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let pool = locks.semaphore("pool", 4).expect("valid");
    // Scans start at a random slot: ten fills of four permits make every
    // start meet held slots before the free one.
    for _ in 0..10 {
        let permits: Vec<_> = (0..4)
            .map(|i| {
                pool.try_acquire()
                    .unwrap_or_else(|e| panic!("permit {i}: {e}"))
            })
            .collect();
        assert!(pool.try_acquire().unwrap_err().is_contended());
        drop(permits);
    }
}

#[test]
fn many_threads_never_hold_more_than_k_permits() {
    let nodes = memory_nodes(3);
    let permits = 3;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let locks = manager(&nodes);
            let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
            thread::spawn(move || {
                let jobs = locks.semaphore("jobs", permits).expect("valid");
                let options = LockOptions::new().wait(Duration::from_secs(30));
                for _ in 0..5 {
                    let permit = jobs.acquire_with(&options).expect("a permit within 30 s");
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::yield_now();
                    holding.fetch_sub(1, Ordering::SeqCst);
                    permit.release().expect("released");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("no worker panicked");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=permits as usize).contains(&most),
        "{most} holders at once"
    );
}

#[test]
fn a_permit_is_a_lock_with_a_fence_of_its_slot() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let printers = locks.semaphore("printers", 1).expect("valid");
    let fenced = LockOptions::new().fencing(true).retry(RetryPolicy::none());
    let first = printers.acquire_with(&fenced).expect("free");
    let first_fence = first.fence().expect("a fenced permit has a fence");
    assert_eq!(first.resource(), printers.slot_resource(0));
    // A plain lock on the slot's name contends with the permit.
    assert!(locks.try_lock(printers.slot_resource(0)).is_err());
    drop(first);
    let second = printers.acquire_with(&fenced).expect("free again");
    assert!(
        second.fence().expect("fenced") > first_fence,
        "fences increase"
    );
}

#[test]
fn a_cancelled_wait_for_a_permit_returns_cancelled_and_holds_nothing() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let single = locks.semaphore("single", 1).expect("valid");
    let held = single.try_acquire().expect("free");
    let token = CancellationToken::new();
    token.cancel();
    let options = LockOptions::new().cancellation(&token);
    let error = single.acquire_with(&options).expect_err("cancelled");
    assert!(error.is_cancelled(), "{error}");
    drop(held);
}

/// A thread that holds every permit and asks the same manager for one more
/// would wait for itself: `Deadlock` at once, counted in attempts (none
/// made), as a lock does. With one permit held by another manager it waits
/// as usual. `acquire()` waits with the manager's defaults.
#[test]
fn asking_for_a_permit_while_holding_every_one_is_a_deadlock() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let single = locks.semaphore("single", 1).expect("valid");
    let held = single.acquire().expect("free");
    let error = single
        .acquire()
        .expect_err("this thread holds the only permit");
    assert!(error.is_deadlock(), "{error}");
    assert!(error.to_string().contains("single"), "{error}");
    let pair = locks.semaphore("pair", 2).expect("valid");
    let first = pair.acquire().expect("free");
    let second = pair.acquire().expect("one permit is still free");
    assert!(pair.acquire().expect_err("both held here").is_deadlock());
    // `try_acquire` does not wait, so it cannot deadlock: it answers what
    // the servers say, as `Mutex::try_lock` does.
    assert!(pair.try_acquire().expect_err("both held").is_contended());
    drop((held, first, second));
    assert!(locks.flush(Duration::from_secs(5)));
    single
        .acquire()
        .expect("free again")
        .release()
        .expect("released");
}

#[test]
fn bad_semaphores_are_refused_with_a_typed_error() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    for (name, permits) in [("", 1), ("ok", 0), ("ok", MAX_PERMITS + 1)] {
        match locks.semaphore(name, permits) {
            Err(Error::InvalidArgument { reason }) => assert!(!reason.is_empty()),
            other => panic!("semaphore({name:?}, {permits}): {other:?}"),
        }
    }
}
