//! The ACL user that docs/operations.md documents, on real servers: the
//! test reads the `ACL SETUSER` line between the docs' `acl-user` markers,
//! creates that user on three servers, and locks, extends, releases, takes
//! fenced locks and contends through it. A docs edit that breaks the line
//! (a right the crate needs, a token the server refuses) breaks this test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::Probe;
use quorum_lock::health::{LockOp, NodeState};
use quorum_lock::report::NodeOutcome;
use quorum_lock::{Error, LockGuard, LockManager, LockOptions, RedisBackend, RetryPolicy};
use testkit::{RedisServer, RedisServers, wait_until};

/// The documentation the line is read from (compiled in, so an edit of
/// the docs rebuilds the test).
const OPERATIONS: &str = include_str!("../../docs/operations.md");
const BEGIN: &str = "<!-- acl-user: begin";
const END: &str = "<!-- acl-user: end -->";
/// The password placeholder in the documented line.
const PLACEHOLDER: &str = ">CHANGE-ME";
const USER: &str = "locker";
const PASSWORD: &str = "acl-test-pw";
/// The prefix the documented key pattern (`~locks:*`) covers.
const PREFIX: &str = "locks:";
const TTL: Duration = Duration::from_secs(1);
/// Fresh servers are in quarantine for `max_ttl` plus drift: wait longer.
const QUARANTINE_WAIT: Duration = Duration::from_secs(10);

/// The one `ACL SETUSER` line between the markers of docs/operations.md.
fn documented_line() -> &'static str {
    let start = OPERATIONS
        .find(BEGIN)
        .unwrap_or_else(|| panic!("docs/operations.md has no `{BEGIN}` marker"));
    let block = &OPERATIONS[start..];
    let end = block
        .find(END)
        .unwrap_or_else(|| panic!("docs/operations.md has no `{END}` after `{BEGIN}`"));
    let lines: Vec<&str> = block[..end]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one `ACL SETUSER` line between the acl-user markers: {lines:?}"
    );
    lines[0]
}

/// Creates the documented user on `server`, with [`PASSWORD`] for the
/// placeholder. Fails, naming the server, when the server refuses the line.
fn create_user(server: &RedisServer, line: &str) {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words.iter().filter(|w| **w == PLACEHOLDER).count(),
        1,
        "the documented line sets its password with `{PLACEHOLDER}`: {line}"
    );
    assert_eq!(words[2], USER, "the documented user is `{USER}`: {line}");
    let password = format!(">{PASSWORD}");
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(if *word == PLACEHOLDER {
            &password
        } else {
            *word
        });
    }
    let created: redis::RedisResult<()> = cmd.query(&mut server.conn());
    if let Err(e) = created {
        panic!(
            "{} refuses the ACL line of docs/operations.md: {e}\n  {line}",
            server.describe()
        );
    }
}

/// Three servers with the documented user on each.
fn servers_with_user() -> RedisServers {
    let line = documented_line();
    let servers = RedisServers::start(3);
    for server in servers.iter() {
        create_user(server, line);
    }
    servers
}

fn user_url(server: &RedisServer) -> String {
    format!("redis://{USER}:{PASSWORD}@127.0.0.1:{}/0", server.port())
}

/// A manager that connects as the documented user, with restart
/// quarantine on (so every grant needs the server's `INFO` identity).
fn manager(servers: &RedisServers) -> LockManager {
    LockManager::builder()
        .redis_nodes(servers.iter().map(user_url))
        .unwrap()
        .prefix(PREFIX)
        .ttl(TTL)
        .max_ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

/// Fails with the report when any node failed (e.g. `NOPERM`).
fn assert_no_node_failed(what: &str, err: &Error) {
    if let Some(report) = err.report() {
        let failed = report.nodes_where(|o| matches!(o, NodeOutcome::Failed(_)));
        assert!(
            failed.is_empty(),
            "{what}: nodes failed through the documented ACL user: {err}"
        );
    }
}

/// The first lock of `resource` once the fresh servers' quarantine is
/// over; any error other than a retryable one (an `Auth` failure is not)
/// fails at once.
fn first_lock(locks: &LockManager, resource: &str, options: &LockOptions) -> LockGuard {
    let mut guard = None;
    let mut last = String::new();
    let got = wait_until(QUARANTINE_WAIT, || {
        match locks.lock_with(resource, options) {
            Ok(g) => {
                guard = Some(g);
                true
            }
            Err(e) if e.is_retryable() => {
                last = e.to_string();
                false
            }
            Err(e) => panic!("lock({resource}) through the documented ACL user: {e}"),
        }
    });
    assert!(got, "no lock within {QUARANTINE_WAIT:?}: {last}");
    guard.unwrap()
}

fn key(resource: &str) -> Vec<u8> {
    format!("{PREFIX}{resource}").into_bytes()
}

/// Every key on every server is under the prefix: the user could not
/// have written others, and the crate must not need to.
fn assert_keys_under_prefix(servers: &RedisServers) {
    for server in servers.iter() {
        for k in server.keys() {
            assert!(
                k.starts_with(PREFIX.as_bytes()),
                "{}: key {:?} outside the prefix",
                server.describe(),
                String::from_utf8_lossy(&k)
            );
        }
    }
}

/// Lock, extend and release through the documented user: the lock is on
/// every server with the guard's token, the extend is confirmed, and the
/// release deletes the key everywhere (its script needs `get` and `del`).
#[test]
fn the_documented_acl_user_locks_extends_and_releases() {
    let servers = servers_with_user();
    let locks = manager(&servers);
    let mut guard = first_lock(&locks, "job", &LockOptions::new());
    let token = *guard.token();
    for server in servers.iter() {
        assert!(
            server
                .get(&key("job"))
                .is_some_and(|v| token.matches_stored(&v)),
            "{}",
            server.describe()
        );
    }
    if let Err(e) = guard.extend(TTL) {
        assert_no_node_failed("extend", &e);
        panic!("extend through the documented ACL user: {e}");
    }
    let seen = locks.inspect("job").unwrap();
    assert!(
        seen.is_held() && seen.owner() == Some(locks.owner()),
        "inspect through the documented ACL user: {seen}"
    );
    // The set scripts (lock_all) need no other right.
    let mut set = locks
        .lock_all(["set:a", "set:b"], &LockOptions::new())
        .unwrap_or_else(|e| {
            assert_no_node_failed("lock_all", &e);
            panic!("lock_all through the documented ACL user: {e}")
        });
    set.extend(TTL)
        .unwrap_or_else(|e| panic!("extend of a set through the documented ACL user: {e}"));
    let report = set
        .release()
        .unwrap_or_else(|e| panic!("release of a set through the documented ACL user: {e}"));
    assert_eq!(report.granted(), 3, "{report}");
    let report = guard
        .release()
        .unwrap_or_else(|e| panic!("release through the documented ACL user: {e}"));
    assert_eq!(report.granted(), 3, "release on every node: {report}");
    assert!(locks.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert_eq!(
            server.get(&key("job")),
            None,
            "{}: the release left the key",
            server.describe()
        );
    }
    assert_keys_under_prefix(&servers);
}

/// Two fenced locks in a row through the documented user: the second
/// fence is larger, and the fence counters stay under the prefix.
#[test]
fn the_documented_acl_user_takes_fenced_locks() {
    let servers = servers_with_user();
    let locks = manager(&servers);
    let fenced = LockOptions::new().fencing(true);
    let first = first_lock(&locks, "ledger", &fenced);
    let a = first.fence().expect("a fenced lock has a fence");
    first
        .release()
        .unwrap_or_else(|e| panic!("release of a fenced lock: {e}"));
    let second = locks
        .lock_with("ledger", &fenced)
        .unwrap_or_else(|e| panic!("second fenced lock: {e}"));
    let b = second.fence().expect("a fenced lock has a fence");
    assert!(b > a, "fence {b} after fence {a}");
    second
        .release()
        .unwrap_or_else(|e| panic!("release of a fenced lock: {e}"));
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(servers.iter().all(|s| s.get(&key("ledger")).is_none()));
    assert_keys_under_prefix(&servers);
}

/// A second manager's `try_lock` of a held resource is told that it is
/// held elsewhere (the `GET` after the refused `SET NX` is allowed), not
/// refused with `NOPERM`.
#[test]
fn contention_through_the_documented_acl_user_is_contended() {
    let servers = servers_with_user();
    let holder = manager(&servers);
    let other = manager(&servers);
    let guard = first_lock(&holder, "busy", &LockOptions::new());
    // The other manager meets the servers after their quarantine.
    match other.try_lock("busy") {
        Ok(_) => panic!("a second holder of a held lock"),
        Err(e) => {
            assert_no_node_failed("try_lock of a held resource", &e);
            assert!(e.is_contended(), "expected Contended, got: {e}");
        }
    }
    guard.release().unwrap();
}

/// The identity and probe commands: a new connection reads `INFO server`
/// (`run_id` known), a connection that has read it is checked with `PING`.
#[test]
fn the_documented_acl_user_reads_identity_and_pings() {
    let servers = servers_with_user();
    let backend = RedisBackend::open(&user_url(&servers[0]), Duration::from_secs(2)).unwrap();
    for call in ["INFO (new connection)", "PING (known connection)"] {
        let info = backend
            .server_info()
            .unwrap_or_else(|e| panic!("{call} through the documented ACL user: {e}"));
        assert!(
            info.run_id.is_some(),
            "{call}: no identity through the documented ACL user"
        );
    }
}

/// Subscribers to `resource`'s release announcements, summed over the
/// servers (read as the default user).
fn listening(servers: &RedisServers, resource: &str) -> i64 {
    let channel = format!("quorum-lock:released:{PREFIX}{resource}");
    servers
        .iter()
        .map(|server| server.subscribers(&channel))
        .sum()
}

/// Wake-ups through the documented user: the release script's `PUBLISH`
/// and the waiter's `SUBSCRIBE` are allowed on the prefix's channels, so a
/// waiter in another manager tries again when the lock is released, not
/// when its retry delay of 5 s has passed.
#[test]
fn the_documented_acl_user_wakes_a_waiter_on_release() {
    let servers = servers_with_user();
    let holder = manager(&servers);
    let waiter = manager(&servers);
    let guard = first_lock(&holder, "wake", &LockOptions::new().auto_extend(true));
    // The waiter, too, past the fresh servers' quarantine: a woken attempt
    // that the quarantine refuses would wait out the retry delay.
    first_lock(&waiter, "warm", &LockOptions::new())
        .release()
        .unwrap();
    let slow = LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(4)
            .delay(Duration::from_secs(5))
            .jitter(Duration::ZERO),
    );
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with("wake", &slow);
            let at = std::time::Instant::now();
            got.map(|g| g.release().map(|_| at))
        });
        // Listening on a quorum of the servers, after its first attempt.
        assert!(
            wait_until(QUARANTINE_WAIT, || listening(&servers, "wake") >= 2),
            "the waiter never subscribed through the documented user"
        );
        // And past the attempt it makes right after subscribing (for a
        // release made before the nodes listened): a release during that
        // attempt may be refused by a node the release has not reached,
        // as in the other wake-up tests.
        testkit::until_listening(&waiter);
        let released = std::time::Instant::now();
        guard.release().unwrap();
        let got = waiting.join().unwrap().unwrap().unwrap();
        let after = got.saturating_duration_since(released);
        assert!(
            after < Duration::from_millis(2500),
            "the waiter got the lock {after:?} after the release: not woken"
        );
    });
    assert_keys_under_prefix(&servers);
}

/// The documented user with the prefix forgotten: its key pattern denies
/// every lock's key (`NOPERM`), and the crate's own keys under the
/// (empty) prefix too, so the nodes refuse what every lock of this
/// manager needs, not one resource's: `health()` shows each node as
/// refusing, counts none of them as voting, and the readiness check,
/// whose probe lock lives under the configured prefix, says "not ready",
/// naming `NOPERM`. With the prefix, the same check says ready.
#[test]
fn a_key_pattern_that_misses_the_prefix_refuses_on_every_node_and_is_not_ready() {
    let servers = servers_with_user();
    let forgot_prefix = LockManager::builder()
        .redis_nodes(servers.iter().map(user_url))
        .unwrap()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::none())
        .restart_quarantine(false)
        .build()
        .unwrap();
    let error = forgot_prefix.try_lock("job").unwrap_err();
    assert!(error.to_string().contains("NOPERM"), "{error}");
    assert!(forgot_prefix.flush(Duration::from_secs(5)));
    let health = forgot_prefix.health();
    assert!(
        !health.has_quorum() && health.voting() == 0,
        "no node serves this manager's locks: {health}"
    );
    for node in &health.nodes {
        assert!(
            matches!(&node.state, NodeState::Refuses { ops, .. } if ops.len() == 3),
            "{health}"
        );
    }
    let not_ready = forgot_prefix.check_ready().unwrap_err();
    assert!(not_ready.to_string().contains("NOPERM"), "{not_ready}");

    let with_prefix = manager(&servers);
    let mut last = String::new();
    let ready = wait_until(QUARANTINE_WAIT, || match with_prefix.check_ready() {
        Ok(report) => report.granted() == 3,
        Err(e) => {
            last = e.to_string();
            false
        }
    });
    assert!(ready, "not ready within {QUARANTINE_WAIT:?}: {last}");
    assert_keys_under_prefix(&servers);
    assert!(with_prefix.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert!(
            server.keys().is_empty(),
            "{}: the probe lock is left",
            server.describe()
        );
    }
}

/// Issue 43 §3: one node of three reached through the documented user,
/// whose key pattern (`~locks:*`) misses the manager's prefix (`app:`):
/// the node fails every operation (`NOPERM` on every key under the
/// prefix, the crate's own included) while the other two grant. `health()`
/// must not show that node as up nor count it as voting, and
/// `check_ready()` must say that a node refuses.
#[test]
fn a_node_whose_key_pattern_misses_the_prefix_is_not_up_nor_ready() {
    let servers = servers_with_user();
    let urls = vec![user_url(&servers[0]), servers[1].url(), servers[2].url()];
    let locks = LockManager::builder()
        .redis_nodes(&urls)
        .unwrap()
        .prefix("app:")
        .ttl(TTL)
        .max_ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::none())
        .restart_quarantine(false)
        .build()
        .unwrap();
    let mut guard = locks.try_lock("job").unwrap();
    guard.extend(TTL).unwrap();
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 2, "{report}");
    assert!(locks.flush(Duration::from_secs(5)), "the rounds settle");
    let health = locks.health();
    match &health.nodes[0].state {
        NodeState::Refuses { ops, reason } => {
            assert_eq!(
                ops,
                &[LockOp::Acquire, LockOp::Extend, LockOp::Release],
                "{health}"
            );
            assert!(
                // Redis 7: "... access one of the keys ...", Valkey: "... a key".
                reason.contains("NOPERM") && reason.contains("key"),
                "{reason}"
            );
        }
        other => panic!("node 0 is {other}, expected it to refuse\n{health}"),
    }
    assert_eq!(health.voting(), 2, "{health}");
    assert!(health.has_quorum(), "the other two still vote: {health}");
    for text in [health.to_string(), format!("{health:?}")] {
        assert!(!text.contains(PASSWORD), "{text}");
    }
    let not_ready = locks.check_ready().unwrap_err();
    assert!(not_ready.is_degraded(), "{not_ready}");
    let message = not_ready.to_string();
    assert!(
        message.contains(&health.nodes[0].name) && message.contains("NOPERM"),
        "{message}"
    );
    assert!(!message.contains(PASSWORD), "{message}");
}

/// The read-write lock through the documented user: its scripts' sorted
/// set commands, `TIME` and `PEXPIREAT` are in the line, its keys under
/// the prefix, and a reader's release wakes a waiting writer's channel.
#[test]
fn the_documented_acl_user_takes_read_and_write_locks() {
    let servers = servers_with_user();
    let locks = manager(&servers);
    let second = manager(&servers);
    // The fresh servers' quarantine first (a plain lock waits it out).
    drop(first_lock(&locks, "warm-up", &LockOptions::new()));
    drop(first_lock(&second, "warm-up", &LockOptions::new()));
    let rw = locks.rw_lock("config").unwrap();
    let other = second.rw_lock("config").unwrap();
    let mut reader = rw
        .try_read()
        .unwrap_or_else(|e| panic!("read through the documented ACL user: {e}"));
    reader
        .extend(TTL)
        .unwrap_or_else(|e| panic!("a reader's extend: {e}"));
    let refused = other.try_write().expect_err("a reader is in");
    assert_no_node_failed("a writer's admission", &refused);
    assert!(refused.is_contended(), "{refused}");
    reader
        .release()
        .unwrap_or_else(|e| panic!("a reader's release: {e}"));
    let writer = other
        .write_with(&LockOptions::new().fencing(true))
        .unwrap_or_else(|e| panic!("write through the documented ACL user: {e}"));
    assert!(writer.fence().is_some());
    let refused = rw.try_read().expect_err("the writer is alone");
    assert_no_node_failed("a reader refused by the writer", &refused);
    writer.release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    assert_keys_under_prefix(&servers);
}
