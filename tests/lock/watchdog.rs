//! One timer thread serves every auto-extended lock: 10,000 of them cost
//! the node workers plus one thread, not a thread each. (Alone in a
//! process of its own, `testkit::alone`, so no other test's threads are
//! counted.)
//!
//! On an injected clock shared by the manager and the nodes: the renewals
//! fall due when the test moves the clock, and no lock expires while a
//! loaded machine works through 10,000 extends. (On the real clock, with a
//! 1.5 s TTL, 2,052 guards were still waiting for their first extend after
//! the 10 s the test allowed.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::{LockOptions, ManualClock};
use testkit::{builder_on, memory_nodes_on};

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
    if !testkit::alone("watchdog::ten_thousand_auto_extended_guards_share_one_timer_thread") {
        return;
    }
    const NODES: usize = 3;
    const LOCKS: usize = 10_000;
    const TTL: Duration = Duration::from_millis(1500);
    let before = threads();
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(NODES, &clock);
    // One attempt each, a node timeout of 1 s: with the default 100 ms one
    // of the 10,000 acquires timed out on two nodes when both cores were
    // busy (10 runs of 10), and the test is not about slow nodes.
    let locks = builder_on(&nodes, &clock).ttl(TTL).build().unwrap();
    let opts = LockOptions::new().auto_extend(true);
    let guards: Vec<_> = (0..LOCKS)
        .map(|i| locks.lock_with(format!("job:{i}"), &opts).unwrap())
        .collect();
    assert_eq!(
        threads(),
        before + NODES + 1,
        "node workers plus one timer thread"
    );
    // Past every guard's first renewal (a third of the TTL), well within
    // its validity: every guard gets extended once. The clock stands
    // still while the timer thread works, so the bound only catches a
    // hang (about 1 s of work unloaded, in a debug build).
    clock.advance(TTL / 2);
    testkit::wait_until(Duration::from_secs(120), || {
        guards.iter().all(|g| g.extensions() >= 1)
    });
    let idle = guards.iter().filter(|g| g.extensions() == 0).count();
    assert_eq!(idle, 0, "{idle} guards were never extended");
    assert!(guards.iter().all(|g| g.is_valid()));
    assert_eq!(threads(), before + NODES + 1);
    drop(guards);
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}
