//! Locks without Lua, on whatever server the suite runs on (Redis 7, Redis
//! 8.2, Valkey 8.1, Valkey 9.1: `scripts/test.sh` runs this file on each):
//! each test reads the server's version and asserts what that server can
//! do without a script, and that what it cannot fails at once, in one
//! line naming the server and what it lacks, leaving no key behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use quorum_lock::backend::{BackendErrorKind, ServerProduct, ServerVersion};
use quorum_lock::health::{LockOp, NodeState};
use quorum_lock::report::NodeOutcome;
use quorum_lock::{Error, LockManager, LockOptions, RedisBackend, RetryPolicy, Scripts};
use testkit::{RedisServer, RedisServers};

use crate::support::fresh_builder;

const OPERATIONS: &str = include_str!("../../docs/operations.md");
const PASSWORD: &str = "no-lua-pw";
const USER: &str = "locker";
const PREFIX: &str = "locks:";
const TTL: Duration = Duration::from_secs(5);

fn version(server: &RedisServer) -> ServerVersion {
    let node = RedisBackend::open(&server.url(), Duration::from_secs(2)).unwrap();
    let info = node.fetch_server_info().unwrap();
    info.version
        .unwrap_or_else(|| panic!("{}: no version in INFO", server.describe()))
}

/// The one `ACL SETUSER` line between `begin` and the next `end` marker.
fn documented(begin: &str, end: &str) -> String {
    let block = &OPERATIONS[OPERATIONS.find(begin).expect(begin)..];
    let block = &block[..block.find(end).expect(end)];
    let lines: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER"))
        .collect();
    assert_eq!(lines.len(), 1, "one ACL line after {begin}: {lines:?}");
    lines[0].to_owned()
}

/// A user without `@scripting` for this server: the documented script-free
/// line where the server has every command in it (Valkey 9.1, Redis 8.4
/// with `+delex`), else the documented line of the scripts with its script
/// rights taken out (its other commands exist everywhere).
fn no_script_line(v: ServerVersion) -> String {
    if v.at_least(ServerProduct::Valkey, 9, 1) {
        return documented(
            "<!-- acl-user-no-scripts: begin",
            "<!-- acl-user-no-scripts: end",
        );
    }
    let line = documented("<!-- acl-user: begin", "<!-- acl-user: end");
    let without: Vec<&str> = line
        .split_whitespace()
        .filter(|w| !matches!(*w, "+eval" | "+evalsha" | "+script|load"))
        .collect();
    assert!(
        without.len() + 3 == line.split_whitespace().count(),
        "{line}"
    );
    without.join(" ")
}

fn create_user(server: &RedisServer, line: &str) {
    let mut cmd = redis::cmd("ACL");
    for word in line.split_whitespace().skip(1) {
        cmd.arg(if word == ">CHANGE-ME" {
            format!(">{PASSWORD}")
        } else {
            word.to_owned()
        });
    }
    let created: redis::RedisResult<()> = cmd.query(&mut server.conn());
    if let Err(e) = created {
        panic!("{} refuses the ACL line: {e}\n  {line}", server.describe());
    }
}

/// Three servers with the user; their version.
fn servers() -> (RedisServers, ServerVersion) {
    let servers = RedisServers::start(3);
    let v = version(servers.iter().next().unwrap());
    let line = no_script_line(v);
    for server in servers.iter() {
        create_user(server, &line);
    }
    (servers, v)
}

fn manager(servers: &RedisServers, scripts: Scripts) -> LockManager {
    let urls = servers
        .iter()
        .map(|s| format!("redis://{USER}:{PASSWORD}@127.0.0.1:{}/0", s.port()));
    fresh_builder(urls, TTL, Duration::from_millis(500))
        .prefix(PREFIX)
        .max_ttl(TTL)
        .scripts(scripts)
        .build()
        .unwrap()
}

/// A manager as the default user, with the default [`Scripts::Auto`].
fn default_manager(servers: &RedisServers) -> LockManager {
    LockManager::builder()
        .redis_nodes(servers.urls())
        .unwrap()
        .ttl(TTL)
        .restart_quarantine(false)
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

fn key(resource: &str) -> Vec<u8> {
    format!("{PREFIX}{resource}").into_bytes()
}

/// Calls of `command` the server has counted (`INFO commandstats`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(redis::cmd("INFO").arg("commandstats"));
    let line = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// The error is one line, names a node and says what the server lacks.
fn assert_refused_at_once(err: &Error, lacks: &str) {
    let text = err.to_string();
    assert!(!text.contains('\n'), "one line: {text}");
    assert!(
        text.contains("127.0.0.1:") || text.contains("all 3 nodes"),
        "names the nodes: {text}"
    );
    assert!(text.contains(lacks), "names {lacks}: {text}");
    assert!(!text.contains(PASSWORD), "no password in: {text}");
    if let Some(report) = err.report() {
        let denied = report.nodes_where(
            |o| matches!(o, NodeOutcome::Failed(e) if e.kind() == BackendErrorKind::Denied),
        );
        // Decided once a quorum has refused; the last node may be pending.
        assert!(denied.len() >= 2, "refused on a quorum: {report}");
        let granted = report.nodes_where(|o| matches!(o, NodeOutcome::Granted));
        assert!(granted.is_empty(), "granted somewhere: {report}");
    }
}

/// Through a user denied `@scripting`, with scripts off: a lock always
/// works (`SET NX PX`), and inspection (`MULTI`); extend, release and
/// `lock_all` work where the server has their commands and otherwise fail
/// at once naming what is missing; fencing always fails at once. No
/// script ran, and nothing is left behind where release works.
#[test]
fn a_user_without_scripting_does_what_the_server_can_do_without_lua() {
    let (servers, v) = servers();
    let can = v.without_scripts();
    let locks = manager(&servers, Scripts::Never);
    let mut guard = locks
        .try_lock("job")
        .unwrap_or_else(|e| panic!("{v}: lock without scripts: {e}"));
    let seen = locks.inspect("job").unwrap();
    assert!(seen.is_held(), "{v}: inspect without scripts: {seen}");
    match guard.extend(TTL) {
        Ok(_) => assert!(can.extend, "{v}: extended without SET IFEQ"),
        Err(e) => {
            assert!(!can.extend, "{v}: extend without scripts: {e}");
            assert_refused_at_once(&e, "SET .. IFEQ");
        }
    }
    let fenced = locks.lock_with("ledger", &LockOptions::new().fencing(true));
    match fenced {
        Ok(_) => panic!("{v}: a fenced lock without scripts"),
        Err(e) => assert_refused_at_once(&e, "fencing"),
    }
    match locks.lock_all(["set:a", "set:b"], &LockOptions::new()) {
        Ok(set) => {
            assert!(can.lock_all, "{v}: lock_all without MSETEX");
            set.release()
                .unwrap_or_else(|e| panic!("{v}: release of a set without scripts: {e}"));
        }
        Err(e) => {
            assert!(!can.lock_all, "{v}: lock_all without scripts: {e}");
            assert_refused_at_once(&e, "MSETEX");
        }
    }
    match guard.release() {
        Ok(report) => {
            assert!(can.release, "{v}: released without DELIFEQ/DELEX");
            assert_eq!(report.granted(), 3, "{v}: {report}");
        }
        Err(e) => {
            assert!(!can.release, "{v}: release without scripts: {e}");
            assert_refused_at_once(&e, "DELIFEQ");
        }
    }
    assert!(locks.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert_eq!(
            calls(server, "evalsha") + calls(server, "eval"),
            0,
            "{v}: a script ran"
        );
        if can.release {
            assert!(
                server.keys().is_empty(),
                "{v}: keys left on {}: {:?}",
                server.describe(),
                server.keys()
            );
        } else {
            // Only the plain lock's key, until its TTL: nothing the
            // refused ops would have written. (The key of the manager's
            // own try of what locks need, `<prefix>{quorum-lock}:probe:*`,
            // lives a millisecond where the release is refused: not one
            // of them.)
            let keys: Vec<Vec<u8>> = server
                .keys()
                .into_iter()
                .filter(|k| !k.starts_with(b"locks:{quorum-lock}:probe:"))
                .collect();
            assert_eq!(keys, vec![key("job")], "{v}: {}", server.describe());
        }
    }
}

/// With the default setting and a user that may run scripts, each server
/// gets its own commands where it has them and scripts elsewhere: counted
/// by the server itself.
#[test]
fn auto_uses_the_servers_commands_where_it_has_them() {
    let servers = RedisServers::start(3);
    let v = version(servers.iter().next().unwrap());
    let can = v.without_scripts();
    let locks = default_manager(&servers);
    let mut guard = locks.try_lock("job").unwrap();
    guard.extend(TTL).unwrap();
    guard.release().unwrap();
    let set = locks.lock_all(["a", "b"], &LockOptions::new()).unwrap();
    set.release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        let scripts = calls(server, "evalsha") + calls(server, "eval");
        let expected_scripts = u64::from(!can.extend)
            + u64::from(!can.release)
            + u64::from(!can.lock_all)
            + u64::from(!can.release);
        assert_eq!(
            scripts,
            expected_scripts,
            "{v}: scripts run on {}",
            server.describe()
        );
        let deletes = calls(server, "delifeq") + calls(server, "delex");
        assert_eq!(deletes, if can.release { 1 + 2 } else { 0 }, "{v}");
        assert!(server.keys().is_empty(), "{v}: {:?}", server.keys());
    }
}

/// A release by command announces itself only when it deleted the key
/// and someone listens: a failed attempt publishes nothing, the holder's
/// release publishes nothing with nobody listening, and once per node
/// where a subscriber listens.
#[test]
fn a_release_by_command_publishes_only_what_it_deleted() {
    let servers = RedisServers::start(3);
    let v = version(servers.iter().next().unwrap());
    if !v.without_scripts().release {
        // The script publishes inside its own step: the rule is the
        // script's (tests/redis/wakeups.rs), not this one.
        assert!(!v.at_least(ServerProduct::Valkey, 9, 0));
        return;
    }
    let (holder, other) = (default_manager(&servers), default_manager(&servers));
    let guard = testkit::hold_settled(&holder, "job");
    let published = |s: &RedisServer| calls(s, "publish");
    let before: Vec<u64> = servers.iter().map(published).collect();
    let err = other.try_lock("job").unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(other.flush(Duration::from_secs(5)));
    let after: Vec<u64> = servers.iter().map(published).collect();
    assert_eq!(before, after, "{v}: a failed attempt's undo published");
    guard.release().unwrap();
    assert!(holder.flush(Duration::from_secs(5)));
    let released: Vec<u64> = servers.iter().map(published).collect();
    assert_eq!(released, after, "{v}: published with nobody listening");

    // Someone listens on every node: the release announces itself once.
    let channel = "quorum-lock:released:job";
    let listeners: Vec<TcpStream> = servers.iter().map(|s| subscribe(s, channel)).collect();
    let guard = testkit::hold_settled(&holder, "job");
    guard.release().unwrap();
    assert!(holder.flush(Duration::from_secs(5)));
    let heard: Vec<u64> = servers.iter().map(published).collect();
    let once: Vec<u64> = released.iter().map(|n| n + 1).collect();
    assert_eq!(heard, once, "{v}: not one notice per node with a listener");
    drop(listeners);
}

/// A raw connection to `server` subscribed to `channel`, confirmed by the
/// server's count of its subscribers.
fn subscribe(server: &RedisServer, channel: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    let request = format!(
        "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut confirm = [0u8; 64];
    assert!(
        stream.read(&mut confirm).unwrap() > 0,
        "no SUBSCRIBE confirmation"
    );
    assert_eq!(server.subscribers(channel), 1, "{}", server.describe());
    stream
}

/// An op refused for want of a script is that kind of lock's (fencing
/// needs a script on every server): the refusal makes each node try what
/// every plain lock needs, and where the server does that without a
/// script the node still votes. Where it cannot (no `SET .. IFEQ` or no
/// `DELIFEQ`/`DELEX`: Redis 7), the node refuses what locks need, named
/// in `health()` (issue 43 §3: a degraded node is never silent). Either
/// way a plain lock right after gets every node's grant.
#[test]
fn an_op_refused_for_want_of_a_script_leaves_the_node_voting() {
    let (servers, v) = servers();
    let can = v.without_scripts();
    let locks = manager(&servers, Scripts::Never);
    // Fencing needs a script on every server.
    let err = locks
        .lock_with("ledger", &LockOptions::new().fencing(true))
        .unwrap_err();
    assert_refused_at_once(&err, "fencing");
    assert!(locks.flush(Duration::from_secs(5)));
    let health = locks.health();
    let cannot: Vec<LockOp> = [(LockOp::Extend, can.extend), (LockOp::Release, can.release)]
        .into_iter()
        .filter(|(_, can)| !can)
        .map(|(op, _)| op)
        .collect();
    if cannot.is_empty() {
        assert_eq!(health.voting(), 3, "{v}: {health}");
    } else {
        assert_eq!(health.voting(), 0, "{v}: {health}");
        for node in &health.nodes {
            assert!(
                matches!(&node.state, NodeState::Refuses { ops, .. } if *ops == cannot),
                "{v}: expected it to refuse {cannot:?}: {health}"
            );
        }
    }
    let guard = locks
        .try_lock("job")
        .unwrap_or_else(|e| panic!("{v}: a plain lock after a refused fenced one: {e}"));
    assert!(locks.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert!(
            server.get(&key("job")).is_some(),
            "{v}: {}",
            server.describe()
        );
    }
    drop(guard);
}

/// The read-write lock needs scripts: through a user denied `@scripting`
/// it fails at once, in one line naming why, whether scripts are off
/// (nothing is sent) or on (the server refuses them), also for a call that
/// would wait. Its readers leave no key.
#[test]
fn the_rw_lock_without_scripting_fails_at_once_naming_why() {
    let (servers, _) = servers();
    for (scripts, lacks) in [(Scripts::Never, "needs EVAL"), (Scripts::Always, "'eval'")] {
        let locks = manager(&servers, scripts);
        let rw = locks.rw_lock("report").unwrap();
        let waiting = LockOptions::new()
            .retry(RetryPolicy::default())
            .wait(Duration::from_secs(30));
        let started = std::time::Instant::now();
        for attempt in [rw.try_read(), rw.read_with(&waiting)] {
            let error = attempt.expect_err("scripts are needed");
            assert!(!error.is_retryable(), "{error}");
            assert_refused_at_once(&error, lacks);
        }
        let error = rw.write_with(&waiting).expect_err("scripts are needed");
        assert!(!error.is_retryable(), "{error}");
        assert!(error.to_string().contains(lacks), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{scripts:?}: at once"
        );
        assert!(locks.flush(Duration::from_secs(5)));
        for server in servers.iter() {
            let (readers, _) = rw.keys();
            assert_eq!(server.get(readers), None, "{}", server.describe());
        }
    }
}
