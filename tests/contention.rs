//! Threads of one process contending for one resource take turns locally:
//! only the turn-holder asks the servers, and a release hands the turn on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};

const THREADS: usize = 8;
const ROUNDS: usize = 50;

fn cluster() -> (Vec<MemoryBackend>, LockManager) {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    for node in &nodes {
        node.set_latency(Duration::from_micros(50));
    }
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .retry(
            RetryPolicy::new()
                .attempts(1000)
                .max_wait(Duration::from_secs(60))
                .delay(Duration::from_millis(1))
                .jitter(Duration::from_millis(1)),
        )
        .build()
        .unwrap();
    (nodes, locks)
}

/// Every critical section is exclusive (no lost update), and the servers
/// see exactly one acquire and one release per critical section: waiting
/// threads never poll them.
#[test]
fn local_waiters_take_turns_without_polling_the_servers() {
    for explicit_release in [true, false] {
        let (nodes, locks) = cluster();
        let counter = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (locks, counter) = (locks.clone(), Arc::clone(&counter));
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let guard = locks.lock("hot").unwrap();
                        let seen = counter.load(Ordering::SeqCst);
                        std::thread::yield_now();
                        counter.store(seen + 1, Ordering::SeqCst);
                        if explicit_release {
                            guard.release().unwrap();
                        } else {
                            drop(guard);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(
            counter.load(Ordering::SeqCst),
            (THREADS * ROUNDS) as u64,
            "lost update"
        );
        assert!(locks.flush(Duration::from_secs(10)));
        for node in &nodes {
            assert_eq!(
                node.operations(),
                2 * (THREADS * ROUNDS) as u64,
                "{node:?}: extra remote attempts"
            );
            assert_eq!(node.key_count(), 0);
        }
    }
}

/// A waiter whose wait budget runs out leaves the line with an honest
/// error from one last attempt, and the line keeps working.
#[test]
fn a_waiter_that_runs_out_of_time_gets_a_real_report() {
    let (_nodes, locks) = cluster();
    let held = locks.lock("hot").unwrap();
    let err = locks
        .lock_with("hot", &LockOptions::new().wait(Duration::from_millis(30)))
        .unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(err.report().unwrap().refused() >= 2, "{err}");
    held.release().unwrap();
    drop(locks.lock("hot").unwrap());
}

/// A forgotten guard passes its turn on: the next waiter contends with the
/// servers (and waits for the TTL there), instead of waiting forever.
#[test]
fn forget_passes_the_turn_on() {
    let (_nodes, locks) = cluster();
    let short = LockOptions::new().ttl(Duration::from_millis(100));
    locks.lock_with("hot", &short).unwrap().forget();
    let guard = locks.lock_with("hot", &short).unwrap();
    assert!(guard.is_valid());
}
