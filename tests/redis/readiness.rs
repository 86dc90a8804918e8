//! The readiness answer tells the truth on real servers: while every lock
//! fails for a reason that holds for the whole node (a wrong password, a
//! database the server does not have, an HTTP server on the port),
//! `health()` does not count the node as voting and `check_ready()` fails;
//! fixed, the node votes again without any lock traffic. (The ACL key
//! pattern case, a failure tied to keys, is in `tests/redis/acl.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::BackendErrorKind;
use quorum_lock::health::{Health, LockOp, NodeState};
use quorum_lock::{LockManager, Scripts};
use testkit::fake_server::{Behavior, FakeServer};
use testkit::{RedisServer, RedisServers, connect, wait_until};

use crate::support::{acl_user, fresh_builder};

const TTL: Duration = Duration::from_secs(2);
/// Generous: the servers answer at once; the bound only stops a hang.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);
const FLUSH: Duration = Duration::from_secs(5);
/// Bounds the wait for a fixed node to vote again (it is asked every
/// second).
const COME_BACK: Duration = Duration::from_secs(10);

const PASSWORD: &str = "readiness-right-pw";
const WRONG: &str = "readiness-wrong-pw";

fn manager(urls: &[String]) -> LockManager {
    manager_with(urls, Scripts::Auto)
}

fn manager_with(urls: &[String], scripts: Scripts) -> LockManager {
    fresh_builder(urls, TTL, NODE_TIMEOUT)
        .scripts(scripts)
        .build()
        .unwrap()
}

/// One failed `try_lock`, then the manager's rounds settled (the answer
/// of a node a decided round did not wait for is read by its thread).
fn fail_once(locks: &LockManager) -> String {
    let err = locks.try_lock("job").unwrap_err();
    assert!(locks.flush(FLUSH), "the rounds settle");
    err.to_string()
}

/// Every node that is not voting, with its reason; panics on one that is
/// not `Unusable` of `kind`.
fn unusable(health: &Health, kind: BackendErrorKind) -> Vec<String> {
    health
        .nodes
        .iter()
        .filter(|n| n.state != NodeState::Up)
        .map(|n| match &n.state {
            NodeState::Unusable { kind: k, reason } if *k == kind => reason.clone(),
            other => panic!("{}: {other}, expected unusable ({kind})\n{health}", n.name),
        })
        .collect()
}

#[test]
fn a_wrong_password_is_not_ready_and_votes_again_once_fixed() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&["--requirepass", PASSWORD]))
        .collect();
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://:{WRONG}@127.0.0.1:{}/0", s.port()))
        .collect();
    let locks = manager(&urls);
    let error = fail_once(&locks);
    let health = locks.health();
    assert!(!health.has_quorum(), "every lock fails: {error}\n{health}");
    let reasons = unusable(&health, BackendErrorKind::Auth);
    assert_eq!(reasons.len(), 3, "{health}");
    assert!(reasons.iter().all(|r| r.contains("AUTH")), "{reasons:?}");
    assert!(
        health.to_string().contains("0 of 3 nodes voting"),
        "{health}"
    );
    for text in [health.to_string(), format!("{health:?}"), error] {
        assert!(!text.contains(WRONG) && !text.contains(PASSWORD), "{text}");
    }
    let not_ready = locks.check_ready().unwrap_err();
    assert!(not_ready.is_no_quorum(), "{not_ready}");

    // The operator makes the servers take the manager's password: the
    // nodes vote again with no call of the user's, as soon as the manager
    // reaches them on its own (the failed attempts' releases, retried
    // every 100 ms, or the recheck of an unusable node every second).
    for server in &servers {
        let mut admin = connect(&format!(
            "redis://:{PASSWORD}@127.0.0.1:{}/0",
            server.port()
        ));
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(WRONG)
            .query(&mut admin)
            .unwrap();
    }
    assert!(
        wait_until(COME_BACK, || locks.health().has_quorum()),
        "fixed, but not voting: {}",
        locks.health()
    );
    assert_eq!(locks.check_ready().unwrap().granted(), 3);
    locks.try_lock("job").unwrap().release().unwrap();
}

#[test]
fn a_database_the_server_does_not_have_is_not_ready() {
    let servers = RedisServers::start(3);
    // Redis has 16 databases by default: 99 is out of range.
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/99", s.port()))
        .collect();
    let locks = manager(&urls);
    let error = fail_once(&locks);
    let health = locks.health();
    assert!(!health.has_quorum(), "every lock fails: {error}\n{health}");
    let reasons = unusable(&health, BackendErrorKind::Config);
    assert_eq!(reasons.len(), 3, "{health}");
    assert!(reasons.iter().all(|r| r.contains("SELECT")), "{reasons:?}");
    assert!(locks.check_ready().is_err());
}

#[test]
fn two_http_servers_of_three_nodes_leave_no_quorum() {
    let server = RedisServer::start();
    let http: Vec<FakeServer> = (0..2)
        .map(|_| FakeServer::start(Behavior::Garbage))
        .collect();
    let urls = vec![server.url(), http[0].url(), http[1].url()];
    let locks = manager(&urls);
    let error = fail_once(&locks);
    let health = locks.health();
    assert!(!health.has_quorum(), "every lock fails: {error}\n{health}");
    assert_eq!(health.voting(), 1, "the real server still votes: {health}");
    let reasons = unusable(&health, BackendErrorKind::Protocol);
    assert_eq!(reasons.len(), 2, "{health}");
    let not_ready = locks.check_ready().unwrap_err();
    assert!(not_ready.is_no_quorum(), "{not_ready}");
    // The real server holds nothing afterwards: the failed attempts and
    // the probe lock were released there.
    assert!(locks.flush(FLUSH));
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut connect(&server.url()))
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

/// A user who may take and release locks but not extend them (no
/// `PEXPIRE`, which the extend script runs): every lock would be lost at
/// its first extend, so the readiness check, which extends its probe lock,
/// says "not ready", and leaves no key behind. With the scripts: a server
/// with `SET .. IFEQ` (Valkey 8.1+) would extend without `PEXPIRE`.
#[test]
fn a_user_who_cannot_extend_is_not_ready() {
    let servers = RedisServers::start(3);
    let rights = [
        "+set",
        "+get",
        "+del",
        "+eval",
        "+evalsha",
        "+script|load",
        "+info",
        "+ping",
    ];
    let urls: Vec<String> = servers
        .iter()
        .map(|server| create_user(server, "noextend", &rights))
        .collect();
    let locks = manager_with(&urls, Scripts::Always);
    let not_ready = locks.check_ready().unwrap_err();
    assert!(not_ready.is_lost(), "{not_ready}");
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut connect(&server.url()))
            .unwrap();
        assert!(keys.is_empty(), "{}: {keys:?}", server.describe());
    }
}

/// Creates user `name` (password `pw`, every key and channel) with no
/// right but `rights` on `server`; its URL.
fn create_user(server: &RedisServer, name: &str, rights: &[&str]) -> String {
    let rules: Vec<&str> = ["~*", "&*", "-@all"]
        .into_iter()
        .chain(rights.iter().copied())
        .collect();
    acl_user(server, name, "pw", &rules)
}

/// Issue 43 §3: one node of three reached through a user who may `SET`
/// and `GET` but run no script. On Redis 7 every extend and release is a
/// script, so the node grants every acquire and refuses every extend and
/// release (`NOPERM`): each lock rests on a bare quorum after its first
/// extend, and its release leaves the key there until its TTL. `health()`
/// must not show that node as up nor count it as voting, and
/// `check_ready()` must say that a node refuses.
#[test]
fn a_node_that_refuses_extends_and_releases_is_not_up_nor_ready() {
    let servers = RedisServers::start(3);
    let urls = vec![
        create_user(&servers[0], "noscript", &["+set", "+get"]),
        servers[1].url(),
        servers[2].url(),
    ];
    let locks = manager(&urls);
    let mut guard = locks.try_lock("job").unwrap();
    guard.extend(TTL).unwrap();
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 2, "{report}");
    assert!(locks.flush(FLUSH), "the rounds settle");
    let health = locks.health();
    match &health.nodes[0].state {
        NodeState::Refuses { ops, reason } => {
            assert_eq!(ops, &[LockOp::Extend, LockOp::Release], "{health}");
            assert!(
                reason.contains("NOPERM") && reason.contains("eval"),
                "{reason}"
            );
        }
        other => panic!("node 0 is {other}, expected it to refuse\n{health}"),
    }
    assert_eq!(health.voting(), 2, "{health}");
    assert!(health.has_quorum(), "the other two still vote: {health}");
    let text = health.to_string();
    assert!(text.contains("2 of 3 nodes voting"), "{health}");
    assert!(
        text.contains("refuses what locks need (extend, release)"),
        "{health}"
    );
    for text in [text, format!("{health:?}")] {
        assert!(!text.contains(":pw@"), "{text}");
    }
    let not_ready = locks.check_ready().unwrap_err();
    assert!(not_ready.is_degraded(), "{not_ready}");
    let message = not_ready.to_string();
    assert!(
        message.contains(&health.nodes[0].name) && message.contains("NOPERM"),
        "{message}"
    );
    assert!(
        locks.check_ready_all().unwrap_err().is_degraded(),
        "every node is required"
    );

    // The operator gives the user every right: the node votes again with
    // no call of the user's (it is tried again every second).
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noscript")
        .arg("+@all")
        .query(&mut connect(&servers[0].url()))
        .unwrap();
    assert!(
        wait_until(COME_BACK, || locks.health().nodes[0].state == NodeState::Up),
        "fixed, but not up: {}",
        locks.health()
    );
    assert_eq!(locks.check_ready_all().unwrap().granted(), 3);
}
