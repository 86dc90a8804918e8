//! `LockManager::inspect` against real servers (`redis-server`, and
//! `valkey-server` in the second pass of scripts/test.sh): the owner label
//! stored with the lock, the verdicts, and what other programs can leave
//! under a lock's key (a foreign value, a huge one, a key of another type,
//! a paused server).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::LockManagerBuilder;
use quorum_lock::backend::{BackendErrorKind, MAX_INSPECTED_VALUE};
use quorum_lock::inspection::{KeyState, Verdict};
use testkit::RedisServers;

use crate::support::fresh_builder;

const TTL: Duration = Duration::from_secs(10);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn builder(servers: &RedisServers) -> LockManagerBuilder {
    fresh_builder(servers.urls(), TTL, NODE_TIMEOUT)
}

#[test]
fn the_owner_is_stored_with_the_lock_and_read_back_by_another_client() {
    let servers = RedisServers::start(3);
    let ours = builder(&servers)
        .owner("billing-cron@host-7")
        .build()
        .unwrap();
    let theirs = builder(&servers).build().unwrap();
    assert_eq!(theirs.inspect("invoices").unwrap().verdict(), Verdict::Free);

    let guard = ours.try_lock("invoices").unwrap();
    // The round ends at a quorum: let the third node's acquire run too.
    assert!(ours.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        let value = server.get(b"invoices").expect("held on every node");
        assert!(guard.token().matches_stored(&value));
        assert!(value.ends_with(b";owner=billing-cron@host-7"));
    }
    let seen = theirs.inspect("invoices").unwrap();
    assert!(seen.is_held(), "{seen}");
    assert_eq!(seen.owner(), Some("billing-cron@host-7"));
    assert!(
        seen.time_left() > Duration::ZERO && seen.time_left() < TTL,
        "{seen}"
    );

    // Extend and release compare the whole stored value: they still work.
    let mut guard = guard;
    guard.extend(TTL * 2).unwrap();
    assert!(ours.flush(Duration::from_secs(5)));
    assert!(
        theirs.inspect("invoices").unwrap().time_left() > TTL,
        "extended"
    );
    guard.release().unwrap();
    assert!(ours.flush(Duration::from_secs(5)));
    assert_eq!(theirs.inspect("invoices").unwrap().verdict(), Verdict::Free);
    for server in servers.iter() {
        assert!(server.keys().is_empty(), "{}", server.describe());
    }
}

#[test]
fn foreign_huge_and_wrong_type_values_are_reported_not_trusted() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers).build().unwrap();
    let nodes: Vec<_> = servers.iter().collect();

    // Another Redlock client's value on a quorum: held, no owner.
    for server in &nodes[..2] {
        server.cmd::<()>(
            redis::cmd("SET")
                .arg("shared")
                .arg("3f2a-other-client")
                .arg("PX")
                .arg(5_000),
        );
    }
    let seen = locks.inspect("shared").unwrap();
    assert!(seen.is_held(), "{seen}");
    assert_eq!(seen.owner(), None);
    assert!(matches!(seen.nodes()[2].state(), KeyState::Free));

    // A megabyte under the key: read back bounded, still one holder.
    let huge = vec![b'x'; 1 << 20];
    for server in &nodes {
        server.cmd::<()>(redis::cmd("SET").arg("huge").arg(&huge[..]));
    }
    let seen = locks.inspect("huge").unwrap();
    assert!(seen.is_held(), "{seen}");
    assert_eq!(seen.time_left(), Duration::MAX, "no expiry: {seen}");
    assert!(seen.to_string().contains("without expiry"), "{seen}");
    assert_eq!(MAX_INSPECTED_VALUE, 256);

    // A hash where a lock would be: a typed error per node, no verdict.
    for server in &nodes {
        server.cmd::<()>(redis::cmd("HSET").arg("hashed").arg("f").arg("v"));
    }
    let seen = locks.inspect("hashed").unwrap();
    assert_eq!(seen.verdict(), Verdict::Unknown, "{seen}");
    for node in seen.nodes() {
        match node.state() {
            KeyState::Failed(e) => assert_eq!(e.kind(), BackendErrorKind::WrongType, "{e}"),
            other => panic!("{}: {other:?}", node.node()),
        }
    }
    // Nothing was written anywhere.
    for server in &nodes {
        let mut keys = server.keys();
        keys.sort();
        assert!(keys.len() <= 3, "{keys:?}");
        assert!(server.pttl(b"shared") <= 5_000);
    }
}

#[test]
fn a_paused_server_counts_as_failed_and_the_others_still_judge() {
    let servers = RedisServers::start(3);
    let locks = builder(&servers)
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = locks.try_lock("job").unwrap();
    // Every server holds the lock before the first one stops.
    assert!(locks.flush(Duration::from_secs(5)));
    let paused = servers.iter().next().unwrap();
    paused.pause();
    let seen = locks.inspect("job");
    paused.resume();
    let seen = seen.unwrap();
    assert!(seen.is_held(), "{seen}");
    assert!(
        matches!(seen.nodes()[0].state(), KeyState::Failed(e) if e.kind().is_connectivity()),
        "{:?}",
        seen.nodes()[0]
    );
    guard.release().unwrap();
}
