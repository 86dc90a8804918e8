//! `LockManager::lock_all` against real servers (`redis-server`, and
//! `valkey-server` in the second pass of scripts/test.sh): the set scripts
//! take every key or none, single locks and overlapping sets contend, and a
//! member of another type fails with a typed error before anything is
//! written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::BackendErrorKind;
use quorum_lock::report::NodeOutcome;
use quorum_lock::{LockManagerBuilder, LockOptions, RetryPolicy};
use testkit::RedisServers;

use crate::support::fresh_builder;

const TTL: Duration = Duration::from_secs(10);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const FLUSH: Duration = Duration::from_secs(5);

fn builder(servers: &RedisServers) -> LockManagerBuilder {
    fresh_builder(servers.urls(), TTL, NODE_TIMEOUT).prefix("locks:")
}

fn once() -> LockOptions {
    LockOptions::new().retry(RetryPolicy::none())
}

#[test]
fn a_set_is_taken_extended_and_released_as_one_on_real_servers() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers).build().unwrap();
    let other = builder(&servers).build().unwrap();
    let mut guard = locks.lock_all(["ledger:2", "ledger:1"], &once()).unwrap();
    // The round ends at a quorum: let the third node's script run too.
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        let mut keys = server.keys();
        keys.sort();
        assert_eq!(keys, [&b"locks:ledger:1"[..], b"locks:ledger:2"]);
        for key in &keys {
            assert!(guard.token().matches_stored(&server.get(key).unwrap()));
            assert!(server.pttl(key) > 0);
        }
    }
    assert!(other.try_lock("ledger:1").unwrap_err().is_contended());
    assert!(
        other
            .lock_all(["ledger:2", "ledger:3"], &once())
            .unwrap_err()
            .is_contended()
    );
    assert!(other.flush(FLUSH));
    guard.extend(TTL * 3).unwrap();
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        assert!(server.pttl(b"locks:ledger:1") > 20_000);
        assert!(server.pttl(b"locks:ledger:2") > 20_000);
        assert_eq!(
            server.get(b"locks:ledger:3"),
            None,
            "nothing of the failed set"
        );
    }
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    for server in servers.iter() {
        assert!(server.keys().is_empty(), "{}", server.describe());
    }
}

#[test]
fn a_fenced_set_raises_every_members_counter_on_real_servers() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers).fencing(true).build().unwrap();
    let single = locks.try_lock("a").unwrap();
    let a_fence = single.fence().unwrap();
    single.release().unwrap();
    let set = locks.lock_all(["a", "b"], &once()).unwrap();
    let fence = set.fence().expect("a fenced set has a fence");
    assert!(fence > a_fence);
    // The write-back ends at a quorum: let the third node's run too.
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        for member in ["locks:a", "locks:b"] {
            let counter: u64 = server.cmd(
                redis::cmd("HGET")
                    .arg("locks:{quorum-lock}:fences")
                    .arg(member),
            );
            assert_eq!(counter, fence, "{} {member}", server.describe());
        }
    }
    set.release().unwrap();
    let next = locks.try_lock("b").unwrap();
    assert!(next.fence().unwrap() > fence);
}

#[test]
fn one_member_held_elsewhere_on_a_quorum_refuses_the_whole_set() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers).build().unwrap();
    for server in servers.iter().take(2) {
        server.cmd::<()>(
            redis::cmd("SET")
                .arg("locks:b")
                .arg("another-client")
                .arg("PX")
                .arg(60_000),
        );
    }
    let err = locks.lock_all(["a", "b"], &once()).unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        assert_eq!(
            server.get(b"locks:a"),
            None,
            "{}: a partial set",
            server.describe()
        );
    }
}

#[test]
fn a_member_of_another_type_is_a_typed_error_and_nothing_is_written() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers).build().unwrap();
    for server in servers.iter() {
        server.cmd::<()>(redis::cmd("HSET").arg("locks:b").arg("f").arg("v"));
    }
    let err = locks.lock_all(["a", "b"], &once()).unwrap_err();
    let report = err.report().expect("a report");
    // The round ends once a quorum is out of reach: a node may be left
    // unread (its answer goes to its thread).
    let mut wrong_type = 0;
    for node in report.nodes() {
        match node.outcome() {
            NodeOutcome::Failed(e) => {
                assert_eq!(e.kind(), BackendErrorKind::WrongType, "{e}");
                wrong_type += 1;
            }
            NodeOutcome::NotAwaited => {}
            other => panic!("{}: {other:?}", node.node()),
        }
    }
    assert!(wrong_type >= 2, "{err}");
    assert!(err.to_string().contains("{a, b}"), "{err}");
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        assert_eq!(server.get(b"locks:a"), None, "{}", server.describe());
    }
}
