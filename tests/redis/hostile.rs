//! `RedisBackend` against peers that do not behave: garbage, endless and
//! trickling replies, and absurd declared sizes. (Credentials in every URL
//! form are never shown: `tests/redis/backend.rs`, `src/backend/redis/tests.rs`.)
//!
//! Every call must end by its deadline with a typed, one-line error that
//! names the node, and must not allocate what the peer announces.
// Tests fail by panicking; unwrap/expect/panic are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use quorum_lock::LockManager;
use quorum_lock::RedisBackend;
use quorum_lock::backend::{self, BackendError, BackendErrorKind, KeySet, Op, Probe};

use testkit::fake_server::{Behavior, FakeServer};
use testkit::{RedisServers, free_port};

const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Generous: 10x the node timeout.
const BOUND: Duration = Duration::from_millis(1000);
const TTL: Duration = Duration::from_secs(10);
/// RSS growth allowed over a whole hostile exchange. (Each test that
/// reads it runs alone in a process of its own, `testkit::alone`: another
/// test's allocations would count.)
const RSS_LIMIT_KB: u64 = 64 * 1024;

fn token(n: u8) -> Vec<u8> {
    let mut t = vec![0xff, 0xfe, n];
    t.extend((0u8..17).map(|i| i.wrapping_mul(31).wrapping_add(n)));
    t
}

/// `VmHWM` (peak resident set) of this process, in KiB.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn open(url: &str) -> RedisBackend {
    RedisBackend::open(url, NODE_TIMEOUT).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// Runs `f`, checks it ended within [`BOUND`] with an error of one of
/// `kinds`, on one line, naming `node`.
fn assert_bounded_error<T: std::fmt::Debug>(
    what: &str,
    node: &str,
    kinds: &[BackendErrorKind],
    f: impl FnOnce() -> Result<T, BackendError>,
) -> BackendError {
    let start = Instant::now();
    let r = f();
    let elapsed = start.elapsed();
    assert!(elapsed < BOUND, "{what}: took {elapsed:?}");
    let e = match r {
        Err(e) => e,
        Ok(v) => panic!("{what}: expected an error, got Ok({v:?})"),
    };
    assert!(kinds.contains(&e.kind()), "{what}: {:?}: {e}", e.kind());
    let text = e.to_string();
    assert!(
        !text.contains('\n') && !text.contains('\r'),
        "{what}: {text:?}"
    );
    assert!(text.contains(node), "{what}: {text} does not name {node}");
    e
}

fn hostile_calls(behavior: Behavior, kinds: &[BackendErrorKind]) -> Vec<BackendError> {
    let fake = FakeServer::start(behavior);
    let b = open(&fake.url());
    let node = format!("127.0.0.1:{}", fake.port());
    let t = token(1);
    let before = peak_rss_kb();
    let mut errors = vec![
        assert_bounded_error("acquire", &node, kinds, || {
            backend::acquire(&b, b"k", &t, TTL)
        }),
        assert_bounded_error("release", &node, kinds, || backend::release(&b, b"k", &t)),
        assert_bounded_error("extend", &node, kinds, || {
            backend::extend(&b, b"k", &t, TTL)
        }),
        assert_bounded_error("server_info", &node, kinds, || b.server_info()),
    ];
    let a = KeySet::one("a");
    let ops = [Op::acquire(&a, &t, TTL), Op::release(&a, &t)];
    let start = Instant::now();
    let answers = backend::run(&b, &ops);
    assert!(start.elapsed() < BOUND, "batch took {:?}", start.elapsed());
    assert!(answers.server().is_none(), "{:?}", answers.server());
    for r in answers.results() {
        let e = r.as_ref().expect_err("a hostile peer grants nothing");
        assert!(kinds.contains(&e.kind()), "batch: {e}");
        errors.push(e.clone());
    }
    let grown = peak_rss_kb().saturating_sub(before);
    assert!(
        grown < RSS_LIMIT_KB,
        "{behavior:?}: peak RSS grew by {grown} KiB"
    );
    errors
}

#[test]
fn garbage_reply_is_a_one_line_protocol_error() {
    if !testkit::alone("hostile::garbage_reply_is_a_one_line_protocol_error") {
        return;
    }
    let errors = hostile_calls(Behavior::Garbage, &[BackendErrorKind::Protocol]);
    assert!(
        errors[0].to_string().contains("not a Redis reply"),
        "{}",
        errors[0]
    );
    assert!(errors[0].kind().is_permanent());
}

#[test]
fn endless_reply_is_cut_off_at_the_size_cap() {
    if !testkit::alone("hostile::endless_reply_is_cut_off_at_the_size_cap") {
        return;
    }
    let errors = hostile_calls(
        Behavior::Endless,
        &[BackendErrorKind::Protocol, BackendErrorKind::Timeout],
    );
    // Loopback delivers 64 KiB long before 100 ms are up.
    assert!(
        errors.iter().any(|e| e.to_string().contains("larger than")),
        "{errors:?}"
    );
}

#[test]
fn trickling_reply_ends_by_the_deadline() {
    if !testkit::alone("hostile::trickling_reply_ends_by_the_deadline") {
        return;
    }
    let errors = hostile_calls(
        Behavior::Trickle(Duration::from_millis(5)),
        &[BackendErrorKind::Timeout],
    );
    assert!(errors[0].to_string().contains("timed out"), "{}", errors[0]);
}

#[test]
fn huge_declared_array_is_refused_without_allocating() {
    if !testkit::alone("hostile::huge_declared_array_is_refused_without_allocating") {
        return;
    }
    let errors = hostile_calls(Behavior::HugeArray, &[BackendErrorKind::Protocol]);
    assert!(
        errors[0].to_string().contains("99999999999"),
        "{}",
        errors[0]
    );
}

#[test]
fn huge_declared_bulk_is_refused_without_allocating() {
    if !testkit::alone("hostile::huge_declared_bulk_is_refused_without_allocating") {
        return;
    }
    let errors = hostile_calls(Behavior::HugeBulk, &[BackendErrorKind::Protocol]);
    assert!(
        errors[0].to_string().contains("99999999999"),
        "{}",
        errors[0]
    );
}

#[test]
fn silent_peer_times_out_by_the_deadline() {
    if !testkit::alone("hostile::silent_peer_times_out_by_the_deadline") {
        return;
    }
    hostile_calls(Behavior::Silent, &[BackendErrorKind::Timeout]);
}

#[test]
fn refused_port_is_unreachable_on_one_line() {
    let port = free_port();
    let b = open(&format!("redis://:hunter2@127.0.0.1:{port}/0"));
    let e = assert_bounded_error(
        "acquire",
        &format!("127.0.0.1:{port}"),
        &[BackendErrorKind::Unreachable],
        || backend::acquire(&b, b"k", &token(2), TTL),
    );
    assert!(!format!("{e} {e:?}").contains("hunter2"));
}

/// A manager with two real nodes and one hostile one still locks (the
/// hostile node is a minority), and each call ends within the bound.
#[test]
fn manager_with_one_hostile_node_still_locks_within_the_bound() {
    if !testkit::alone("hostile::manager_with_one_hostile_node_still_locks_within_the_bound") {
        return;
    }
    let servers = RedisServers::start(2);
    for behavior in [
        Behavior::Garbage,
        Behavior::Endless,
        Behavior::Trickle(Duration::from_millis(5)),
        Behavior::HugeArray,
        Behavior::Silent,
    ] {
        let fake = FakeServer::start(behavior);
        let mut urls = servers.urls();
        urls.push(fake.url());
        let locks = LockManager::builder()
            .redis_nodes(urls)
            .unwrap()
            .node_timeout(NODE_TIMEOUT)
            .restart_quarantine(false)
            .build()
            .unwrap();
        let before = peak_rss_kb();
        for i in 0..3 {
            let resource = format!("hostile:{i}");
            let start = Instant::now();
            let guard = locks
                .try_lock(&resource)
                .unwrap_or_else(|e| panic!("{behavior:?}: {e}"));
            let locked = start.elapsed();
            assert!(locked < BOUND, "{behavior:?}: try_lock took {locked:?}");
            let start = Instant::now();
            let report = guard.release();
            let released = start.elapsed();
            assert!(
                released < BOUND,
                "{behavior:?}: release took {released:?} ({report:?})"
            );
        }
        let grown = peak_rss_kb().saturating_sub(before);
        assert!(
            grown < RSS_LIMIT_KB,
            "{behavior:?}: peak RSS grew by {grown} KiB"
        );
        // A release may end without a slow node's answer: let every node
        // thread finish before the servers are read (each call is bounded
        // by the node timeout, so this is quick even for the hostile one).
        assert!(locks.flush(Duration::from_secs(10)), "{behavior:?}");
        drop(locks);
    }
    for server in servers.iter() {
        assert!(server.keys().is_empty(), "{:?}", server.keys());
    }
}
