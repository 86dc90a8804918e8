//! One timer thread serves every auto-extended lock: 10,000 of them cost
//! the node workers plus one thread, not a thread each. (Alone in its test
//! binary, so no other test's threads are counted.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn ten_thousand_auto_extended_guards_share_one_timer_thread() {
    const NODES: usize = 3;
    const LOCKS: usize = 10_000;
    let before = threads();
    let nodes: Vec<MemoryBackend> = (0..NODES)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(Duration::from_millis(1500))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let opts = LockOptions::new().auto_extend(true);
    let guards: Vec<_> = (0..LOCKS)
        .map(|i| locks.lock_with(format!("job:{i}"), &opts).unwrap())
        .collect();
    assert_eq!(
        threads(),
        before + NODES + 1,
        "node workers plus one timer thread"
    );
    // Every guard gets extended at least once (bounded wait: 10 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    while guards.iter().any(|g| g.extensions() == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = guards.iter().filter(|g| g.extensions() == 0).count();
    assert_eq!(idle, 0, "{idle} guards were never extended");
    assert!(guards.iter().all(|g| g.is_valid()));
    assert_eq!(threads(), before + NODES + 1);
    drop(guards);
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}
