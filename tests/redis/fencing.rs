//! Fencing tokens on real redis-servers: fences increase from one holder to
//! the next across managers, survive a majority restart (wall-clock floor
//! plus quarantine), live in the nodes' counters hash with no expiry, and
//! cost plain locks nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, RetryPolicy};
use testkit::{RedisServer, RedisServers, wait_until};

/// Where every node keeps its fence counters: one hash, a field per lock.
const COUNTERS: &[u8] = b"{quorum-lock}:fences";

/// The fence counter of `key` on `server`, if it has one.
fn counter(server: &RedisServer, key: &str) -> Option<u64> {
    let value: Option<u64> = server.cmd(redis::cmd("HGET").arg(COUNTERS).arg(key));
    value
}

fn manager(servers: &RedisServers, quarantine: bool) -> LockManager {
    LockManager::builder()
        .redis_nodes(servers.urls())
        .unwrap()
        .ttl(Duration::from_secs(1))
        .max_ttl(Duration::from_secs(1))
        .node_timeout(Duration::from_millis(200))
        .restart_quarantine(quarantine)
        .fencing(true)
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

#[test]
fn fences_increase_across_managers_and_live_beside_the_lock() {
    let servers = RedisServers::start(3);
    let a = manager(&servers, false);
    let b = manager(&servers, false);
    let mut last = 0;
    for round in 0..20 {
        let locks = if round % 2 == 0 { &a } else { &b };
        let guard = locks.lock("ledger").unwrap();
        let fence = guard.fence().expect("fenced");
        assert!(fence > last, "round {round}: {fence} after {last}");
        assert!(fence < 1 << 53);
        last = fence;
        assert!(locks.flush(Duration::from_secs(5)));
        // The write-back reached a quorum; the counter has no expiry.
        let holding = servers
            .iter()
            .filter(|s| counter(s, "ledger") == Some(fence))
            .count();
        assert!(
            holding >= 2,
            "round {round}: fence {fence} on {holding} nodes"
        );
        assert!(servers.iter().all(|s| s.pttl(COUNTERS) == -1));
        guard.release().unwrap();
    }
    // Extends keep the fence.
    let mut guard = a.lock("ledger").unwrap();
    let fence = guard.fence();
    guard.extend(Duration::from_secs(1)).unwrap();
    assert_eq!(guard.fence(), fence);
    guard.release().unwrap();
}

#[test]
fn plain_locks_have_no_fence_and_write_no_counter() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers, false);
    let guard = locks
        .lock_with("plain", &LockOptions::new().fencing(false))
        .unwrap();
    assert_eq!(guard.fence(), None);
    guard.release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(servers.iter().all(|s| counter(s, "plain").is_none()));
    assert!(servers.iter().all(|s| s.keys().is_empty()), "no key at all");
}

/// A majority restarts without persistence and forgets its counters; once
/// its quarantine is over, the next fence is still larger: the wall-clock
/// floor has moved past the forgotten one.
#[test]
fn a_majority_that_forgot_its_counters_does_not_lower_the_fence() {
    let mut servers = RedisServers::start(3);
    let locks = manager(&servers, true);
    let first = || locks.lock_with("job", &LockOptions::new().retry(RetryPolicy::none()));
    // Fresh servers are in quarantine for about a second: wait it out.
    let mut guard = None;
    assert!(wait_until(Duration::from_secs(10), || {
        guard = first().ok();
        guard.is_some()
    }));
    let before = guard.take().unwrap();
    let fence_a = before.fence().unwrap();
    before.release().unwrap();
    servers[0].restart();
    servers[1].restart();
    assert!(counter(&servers[0], "job").is_none(), "restarted empty");
    let mut after = None;
    assert!(wait_until(Duration::from_secs(10), || {
        after = first().ok();
        after.is_some()
    }));
    let fence_b = after.unwrap().fence().unwrap();
    assert!(fence_b > fence_a, "{fence_b} after {fence_a}");
}
