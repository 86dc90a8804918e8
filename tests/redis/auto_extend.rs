//! Auto-extension against real redis-server nodes: the lock stays held
//! while the work runs, loss is reported at once, renewal is bounded, and
//! nothing is extended after a release.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions};
use testkit::{RedisServers, wait_until, wait_until_with};

use crate::support::fresh_builder;

const TTL: Duration = Duration::from_millis(600);
const KEY: &[u8] = b"auto-extend";

/// Fresh servers: no restart to guard against (tests/redis_torture/
/// covers quarantine).
fn manager(servers: &RedisServers) -> LockManager {
    fresh_builder(servers.urls(), TTL, Duration::from_millis(100))
        .build()
        .unwrap()
}

fn auto() -> LockOptions {
    LockOptions::new().auto_extend(true)
}

/// `EVALSHA` calls the server has run so far (the extend and release
/// scripts).
fn script_calls(server: &testkit::RedisServer) -> u64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Held for five TTLs under auto-extension, the lock stays exclusive: a
/// second manager is refused the whole time.
#[test]
fn held_for_five_ttls_stays_exclusive() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers);
    let other = manager(&servers);
    let guard = locks.lock_with(KEY, &auto()).unwrap();
    // Our acquire has landed on every node before the other client starts.
    assert!(locks.flush(Duration::from_secs(5)));
    let until = Instant::now() + TTL * 5;
    let mut refused = 0;
    while Instant::now() < until {
        let err = other.try_lock(KEY).unwrap_err();
        assert!(err.is_contended(), "{err}");
        assert!(guard.is_valid(), "the holder must stay valid");
        refused += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused >= 10);
    assert!(
        guard.extensions() >= 6,
        "extended {} times",
        guard.extensions()
    );
    for server in servers.iter() {
        let pttl = server.pttl(KEY);
        assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "pttl {pttl}");
    }
    guard.release().unwrap();
    drop(other.try_lock(KEY).unwrap());
}

/// A majority killed while a guard auto-extends: the guard reports the loss
/// within one TTL, and the notification fires.
#[test]
fn killing_a_majority_reports_lost_within_one_ttl() {
    let mut servers = RedisServers::start(3);
    let locks = manager(&servers);
    let guard = locks.lock_with(KEY, &auto()).unwrap();
    let lost = guard.lost_signal();
    servers[0].kill9();
    servers[1].kill9();
    let killed = Instant::now();
    let err = lost
        .recv_timeout(TTL)
        .expect("no loss notice within one TTL");
    assert!(err.is_lost(), "{err}");
    assert!(killed.elapsed() <= TTL);
    assert!(!guard.is_valid());
    assert!(guard.check().unwrap_err().is_lost());
    assert!(guard.renewal_stopped().unwrap().contains("extend failed"));
    drop(guard);
}

/// One node of three paused: extension goes on with the other two. Two
/// paused: the guard is lost.
#[test]
fn pausing_one_node_is_tolerated_pausing_two_is_not() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers);
    let guard = locks.lock_with(KEY, &auto()).unwrap();
    let lost = guard.lost_signal();
    servers[0].pause();
    let start = guard.extensions();
    // Bounded wait for three more extends (each TTL/3 apart).
    let every = Duration::from_millis(20);
    wait_until_with(TTL * 4, every, || false, || guard.extensions() >= start + 3);
    assert!(
        guard.extensions() >= start + 3,
        "extension stalled with one node paused"
    );
    assert!(lost.try_recv().is_none() && guard.is_valid());
    servers[1].pause();
    let err = lost
        .recv_timeout(TTL)
        .expect("no loss notice with two nodes paused");
    assert!(err.is_lost(), "{err}");
    servers[0].resume();
    servers[1].resume();
    drop(guard);
    assert!(locks.flush(Duration::from_secs(5)));
}

/// The extension bound is reached: renewal stops, the holder is told at
/// once (not a TTL later), the lock expires at its deadline, and another
/// client takes it.
#[test]
fn the_bound_stops_renewal_and_the_lock_expires() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers);
    let other = manager(&servers);
    let guard = locks.lock_with(KEY, &auto().max_extensions(2)).unwrap();
    let lost = guard.lost_signal();
    let err = lost
        .recv_timeout(TTL * 5)
        .expect("no notice when renewal stopped");
    assert!(err.to_string().contains("2 extensions"), "{err}");
    assert!(err.to_string().contains("ends at its deadline"), "{err}");
    assert_eq!(guard.extensions(), 2);
    assert!(guard.renewal_stopped().unwrap().contains("2 extensions"));
    // The keys expire within the drift after the guard's deadline.
    let (mut theirs, mut last) = (None, None);
    let every = Duration::from_millis(5);
    wait_until_with(
        TTL * 2,
        every,
        || false,
        || match other.try_lock(KEY) {
            Ok(g) => {
                assert!(!guard.is_valid(), "two valid holders");
                theirs = Some(g);
                true
            }
            Err(e) => {
                assert!(e.is_contended(), "{e}");
                last = Some(e);
                false
            }
        },
    );
    let theirs = theirs.unwrap_or_else(|| panic!("never acquired after expiry: {last:?}"));
    drop(guard); // its release does not touch the new holder's keys
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(
        other.flush(Duration::from_secs(5)),
        "their acquire reached every node"
    );
    // Their keys are untouched: a quorum holds their token, and no server
    // holds anything else. (A server whose old key had not expired yet
    // when they locked refused them and is empty now.)
    let values: Vec<Option<Vec<u8>>> = servers.iter().map(|s| s.get(KEY)).collect();
    let theirs_token = *theirs.token();
    let holding = values
        .iter()
        .flatten()
        .filter(|v| theirs_token.matches_stored(v))
        .count();
    assert!(holding >= 2, "{holding} servers hold the new holder's key");
    assert!(
        values
            .iter()
            .flatten()
            .all(|v| theirs_token.matches_stored(v)),
        "a server holds another value than the new holder's token"
    );
    theirs.release().unwrap();

    let held = locks.lock_with("hold", &auto().max_hold(TTL)).unwrap();
    let err = held
        .lost_signal()
        .recv_timeout(TTL * 4)
        .expect("max_hold never ended renewal");
    assert!(err.to_string().contains("maximum hold time"), "{err}");
}

/// After release (explicit or drop), the key is gone on every node and
/// stays gone: no extend script runs for that lock again.
#[test]
fn no_extend_after_release() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers);
    for explicit in [true, false] {
        let guard = locks.lock_with(KEY, &auto()).unwrap();
        // Let at least one automatic extend happen first.
        wait_until(TTL * 2, || guard.extensions() > 0);
        assert!(guard.extensions() > 0);
        if explicit {
            guard.release().unwrap();
        } else {
            drop(guard);
        }
        assert!(locks.flush(Duration::from_secs(5)));
        let calls: Vec<u64> = servers.iter().map(script_calls).collect();
        // Watch for two TTLs (six renewal periods).
        let until = Instant::now() + TTL * 2;
        while Instant::now() < until {
            for server in servers.iter() {
                assert!(server.keys().is_empty(), "a key came back");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let after: Vec<u64> = servers.iter().map(script_calls).collect();
        assert_eq!(calls, after, "a script ran after the release");
    }
}

/// A panic inside `with_lock` releases the lock, and the panic continues.
#[test]
fn with_lock_releases_when_the_closure_panics() {
    let servers = RedisServers::start(3);
    let locks = manager(&servers);
    let value = locks.with_lock(KEY, &LockOptions::new(), |guard| {
        assert!(guard.is_valid());
        7
    });
    assert_eq!(value.unwrap(), 7);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = locks.with_lock(KEY, &LockOptions::new(), |_| panic!("work failed"));
    }));
    assert!(panicked.is_err(), "the panic must propagate");
    assert!(locks.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert!(server.keys().is_empty(), "released after the panic");
    }
    drop(locks.try_lock(KEY).unwrap());
}
