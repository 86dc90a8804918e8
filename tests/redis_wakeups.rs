//! Wake-ups across processes (issue 18, item 5) against real
//! `redis-server`s: a release publishes a notice on each node, and a
//! waiter in another process (here: another manager, which has its own
//! engine, connections and node threads, like another process) tries again
//! at once instead of sleeping out its retry delay.
//!
//! No timing here is tight: the retry delay is 5 s with no jitter, and a
//! wake-up only has to come well before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RetryPolicy};

use support::{RedisServers, connect};

const TTL: Duration = Duration::from_secs(10);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// The retry delay of the waiters: a wake-up must come well before it.
const RETRY_DELAY: Duration = Duration::from_secs(5);
/// How long the holder keeps the lock while the other one waits.
const HOLD: Duration = Duration::from_millis(300);
/// "Well before the retry delay", generously.
const WOKEN_WITHIN: Duration = Duration::from_millis(2500);

fn manager(urls: &[String]) -> LockManager {
    LockManager::builder()
        .redis_nodes(urls)
        .unwrap()
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        // The servers were just started: with restart quarantine none of
        // them would vote for a minute.
        .restart_quarantine(false)
        .build()
        .unwrap()
}

/// Retry every 5 s exactly, a few times: without a wake-up, the second
/// attempt comes 5 s after the first.
fn slow_retries() -> LockOptions {
    LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(4)
            .delay(RETRY_DELAY)
            .jitter(Duration::ZERO),
    )
}

#[test]
fn a_waiter_in_another_process_wakes_when_the_lock_is_released() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let (holder, waiter) = (manager(&urls), manager(&urls));
    let guard = holder.try_lock("wake").unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let started = Instant::now();
            let got = waiter.lock_with("wake", &slow_retries());
            (got.map(|g| g.release().unwrap()), Instant::now(), started)
        });
        std::thread::sleep(HOLD);
        let released_at = Instant::now();
        guard.release().unwrap();
        let (got, done, started) = waiting.join().unwrap();
        got.unwrap_or_else(|e| panic!("the waiter did not get the lock: {e}"));
        assert!(done >= released_at, "granted before the release");
        let waited = done - started;
        assert!(
            done - released_at < WOKEN_WITHIN,
            "the waiter got the lock {:?} after the release ({waited:?} in all): it slept out \
             its retry delay of {RETRY_DELAY:?} instead of being woken",
            done - released_at,
        );
    });
    assert!(holder.flush(Duration::from_secs(5)) && waiter.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        let mut conn = connect(&server.url());
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert!(keys.is_empty(), "keys left on {}", server.url());
    }
}
