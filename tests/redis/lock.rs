//! `LockManager` against real `redis-server` processes: the Redlock promises
//! as a user sees them (keys, tokens and expiries on every node, node
//! failures, pauses, foreign tokens, bad input), checked on the servers.
//!
//! Every test ends by checking that no lock key is left on any node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::{Duration, Instant};

use quorum_lock::backend::BackendErrorKind;
use quorum_lock::report::{NodeOutcome, Report};
use quorum_lock::{Error, LockGuard, LockManager, LockManagerBuilder, LockOptions, RetryPolicy};
use testkit::{RedisServer, RedisServers, connect, free_port, wait_until};

use crate::support::fresh_builder;

/// Default TTL of the managers here.
const TTL: Duration = Duration::from_secs(10);
/// A per-node timeout generous enough for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// A short per-node timeout, for the tests that make nodes time out.
const SHORT_NODE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long `flush` may take.
const FLUSH: Duration = Duration::from_secs(5);
/// Hang detector: no single call here may take longer.
const HANG: Duration = Duration::from_secs(5);

const PASSWORD: &str = "Sup3r-Secret-Pw";
const WRONG: &str = "Wr0ng-Secret-Guess";

fn builder(urls: &[String]) -> LockManagerBuilder {
    fresh_builder(urls, TTL, NODE_TIMEOUT)
}

fn manager(urls: &[String]) -> LockManager {
    builder(urls).build().unwrap()
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap()
}

/// Flushes every manager, then asserts that no key at all is left on any
/// of `servers`.
fn assert_no_keys_left(managers: &[&LockManager], servers: &[&RedisServer]) {
    for m in managers {
        assert!(m.flush(FLUSH), "flush of {m:?} did not finish in {FLUSH:?}");
    }
    for s in servers {
        let keys = s.keys();
        assert!(
            keys.is_empty(),
            "{} still holds keys {:?}",
            s.url(),
            keys.iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

/// Every node holds `guard`'s token under its key, with a PTTL in
/// `(0, max_ms]`. Flushes first: a round returns once decided, so the last
/// nodes may still be working.
fn assert_held_everywhere(locks: &LockManager, guard: &LockGuard, servers: &[&RedisServer]) {
    assert!(locks.flush(FLUSH));
    let max_ms = ttl_ms(guard.ttl());
    for s in servers {
        assert!(
            s.get(guard.key())
                .is_some_and(|v| guard.token().matches_stored(&v)),
            "{} does not hold our token",
            s.url()
        );
        let pttl = s.pttl(guard.key());
        assert!(
            pttl > 0 && pttl <= max_ms,
            "{}: PTTL {pttl} outside (0, {max_ms}]",
            s.url()
        );
    }
}

/// Runs `f` and fails if it took longer than the hang detector allows.
fn within_hang_limit<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(took < HANG, "{what} took {took:?}: a hang?");
    out
}

fn failed_kind(outcome: &NodeOutcome) -> Option<BackendErrorKind> {
    match outcome {
        NodeOutcome::Failed(e) => Some(e.kind()),
        _ => None,
    }
}

/// The outcome reported for the node named `url`.
fn outcome_of<'r>(report: &'r Report, url: &str) -> &'r NodeOutcome {
    report
        .nodes()
        .iter()
        .find(|n| n.node() == url)
        .unwrap_or_else(|| panic!("{url} is not in the report {report}"))
        .outcome()
}

/// A node that did not answer in time: timed out in the round, failed
/// with a timeout in its worker, or skipped as down.
fn is_slow(outcome: &NodeOutcome) -> bool {
    matches!(outcome, NodeOutcome::TimedOut | NodeOutcome::Down)
        || failed_kind(outcome) == Some(BackendErrorKind::Timeout)
}

fn no_quorum_report(result: Result<LockGuard, Error>) -> Report {
    match result {
        Err(Error::NoQuorum { report }) => *report,
        other => panic!("expected Error::NoQuorum, got {other:?}"),
    }
}

fn invalid_argument(result: Result<LockGuard, Error>) -> String {
    match result {
        Err(Error::InvalidArgument { reason }) => reason,
        other => panic!("expected Error::InvalidArgument, got {other:?}"),
    }
}

fn config_error<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(e @ Error::Config { .. }) => format!("{e} {e:?}"),
        other => panic!("expected Error::Config, got {other:?}"),
    }
}

fn assert_no_secret(text: &str) {
    for secret in [PASSWORD, WRONG] {
        assert!(!text.contains(secret), "secret leaked: {text}");
    }
}

/// N = 1, 3, 5: while held, every node stores the guard's token with a
/// PTTL within the TTL; an extend moves the PTTL up; a release removes the
/// key everywhere and reports every node as released.
#[test]
fn lock_extend_release_on_one_three_and_five_nodes() {
    for n in [1, 3, 5] {
        let servers = RedisServers::start(n);
        let all: Vec<&RedisServer> = servers.iter().collect();
        let locks = manager(&servers.urls());
        assert_eq!(locks.quorum(), n / 2 + 1);
        let resource = format!("orders:{n}");

        let mut guard = locks.try_lock(&resource).unwrap();
        assert!(guard.is_valid());
        assert!(guard.validity() <= TTL);
        assert_eq!(guard.key(), resource.as_bytes(), "no prefix by default");
        assert_held_everywhere(&locks, &guard, &all);

        let extended = Duration::from_secs(30);
        let validity = guard.extend(extended).unwrap();
        assert!(validity > TTL && validity <= extended, "{validity:?}");
        assert_eq!(guard.ttl(), extended);
        assert_held_everywhere(&locks, &guard, &all);
        for s in &all {
            let pttl = s.pttl(guard.key());
            assert!(pttl > ttl_ms(TTL), "{}: extend left PTTL {pttl}", s.url());
        }

        let report = guard.release().unwrap();
        assert_eq!(report.granted(), n, "{report}");
        assert_eq!(report.nodes().len(), n);
        assert_no_keys_left(&[&locks], &all);
    }
}

/// Dropping a guard releases it on every node (in the background), so the
/// resource is free again for another client.
#[test]
fn dropped_guard_is_released_on_every_node() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = manager(&servers.urls());
    let other = manager(&servers.urls());
    let guard = locks.try_lock("dropped").unwrap();
    assert_held_everywhere(&locks, &guard, &all);
    drop(guard);
    assert_no_keys_left(&[&locks], &all);
    other.try_lock("dropped").unwrap().release().unwrap();
    assert_no_keys_left(&[&locks, &other], &all);
}

/// A configured prefix is part of the key on the servers.
#[test]
fn prefix_is_prepended_to_the_key_on_the_servers() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = builder(&servers.urls()).prefix("app:").build().unwrap();
    let guard = locks.try_lock("job").unwrap();
    assert_eq!(guard.key(), b"app:job");
    assert_eq!(guard.resource(), b"job");
    assert_held_everywhere(&locks, &guard, &all);
    for s in &all {
        assert_eq!(s.keys(), vec![b"app:job".to_vec()]);
    }
    guard.release().unwrap();
    assert_no_keys_left(&[&locks], &all);
}

/// With 2 of 5 nodes killed the lock still works (lock, extend, release),
/// and the reports name the dead nodes as failed (unreachable) while the
/// live ones did the work. With a quorum of 5 the same cluster refuses
/// with NoQuorum, and its message names the dead nodes' failure.
#[test]
fn two_of_five_killed_still_locks_and_reports_the_dead_nodes() {
    let mut servers = RedisServers::start(5);
    let urls = servers.urls();
    servers[0].kill9();
    servers[1].kill9();
    let mut dead = vec![urls[0].clone(), urls[1].clone()];
    dead.sort();
    let live: Vec<&RedisServer> = servers[2..].iter().collect();

    let locks = manager(&urls);
    let mut guard = within_hang_limit("try_lock", || locks.try_lock("two-dead")).unwrap();
    assert_held_everywhere(&locks, &guard, &live);
    guard.extend(Duration::from_secs(20)).unwrap();
    assert_held_everywhere(&locks, &guard, &live);
    for s in &live {
        assert!(s.pttl(guard.key()) > ttl_ms(TTL));
    }

    // A release reports every node: the dead ones show as failed
    // (unreachable), or as skipped once they are marked down (the release
    // is still queued for them, but nobody waits for a dead node).
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    let mut failed = report.nodes_where(|o| !o.is_granted());
    failed.sort_unstable();
    assert_eq!(failed, dead, "{report}");
    for url in &dead {
        let outcome = outcome_of(&report, url);
        assert!(
            matches!(outcome, NodeOutcome::Down)
                || failed_kind(outcome) == Some(BackendErrorKind::Unreachable),
            "{report}"
        );
    }

    // Quorum 5: the round stops at the first dead answer, so the other
    // dead node may not have been waited for; neither was granted, and the
    // message says that at least one was unreachable.
    let strict = builder(&urls).quorum(5).build().unwrap();
    let err = within_hang_limit("try_lock", || strict.try_lock("two-dead-q5")).unwrap_err();
    let text = err.to_string();
    let report = match &err {
        Error::NoQuorum { report } => report,
        other => panic!("expected NoQuorum, got {other:?}"),
    };
    let mut unavailable =
        report.nodes_where(|o| !o.is_granted() && !matches!(o, NodeOutcome::NotAwaited));
    unavailable.sort_unstable();
    assert!(
        !unavailable.is_empty() && unavailable.iter().all(|u| dead.iter().any(|d| d == u)),
        "only dead nodes may be unavailable: {text}"
    );
    for url in &dead {
        assert!(
            !outcome_of(report, url).is_granted(),
            "dead {url} granted: {text}"
        );
        let named = ["failed (unreachable", "skipped", "not awaited"]
            .iter()
            .any(|what| testkit::said_of(&text, url).starts_with(what));
        assert!(named, "{url} is not named as unavailable in: {text}");
    }
    assert!(
        dead.iter()
            .any(|url| testkit::said_of(&text, url).starts_with("failed (unreachable")),
        "{text}"
    );
    // Every cause is in the one-line message; the typed errors are in the
    // report (no single node's error is chained as the source).
    assert!(std::error::Error::source(&err).is_none());
    assert!(
        report
            .nodes()
            .iter()
            .any(|n| matches!(n.outcome(), NodeOutcome::Failed(e) if e.kind().is_connectivity())),
        "{text}"
    );
    assert_no_keys_left(&[&locks, &strict], &live);
}

/// With 3 of 5 nodes killed there is no quorum: `try_lock` and `lock`
/// (with retries) fail with NoQuorum and return, and the live nodes hold
/// no key afterwards.
#[test]
fn three_of_five_killed_is_no_quorum_and_leaves_no_key() {
    let mut servers = RedisServers::start(5);
    let urls = servers.urls();
    for s in &mut servers[..3] {
        s.kill9();
    }
    let live: Vec<&RedisServer> = servers[3..].iter().collect();
    let locks = manager(&urls);

    let report = no_quorum_report(within_hang_limit("try_lock", || {
        locks.try_lock("three-dead")
    }));
    assert!(report.granted() < 3, "{report}");
    assert_eq!(report.attempts(), 1);
    for url in &urls[3..] {
        assert!(
            !matches!(
                outcome_of(&report, url),
                NodeOutcome::Failed(_) | NodeOutcome::Down
            ),
            "live node {url} reported as failing: {report}"
        );
    }

    let retrying = LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(3)
            .delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(10)),
    );
    let report = no_quorum_report(within_hang_limit("lock_with", || {
        locks.lock_with("three-dead", &retrying)
    }));
    assert_eq!(report.attempts(), 3, "{report}");
    assert_no_keys_left(&[&locks], &live);
}

/// Freezes node 2 of 3 (SIGSTOP) and, while it is frozen, takes and
/// releases a lock with quorum 2 (`locks`, `ttl`) and fails a round with
/// quorum 3 (`strict`). Checks the rounds' outcomes, lets both managers'
/// workers run every queued operation while the node is still frozen,
/// then resumes it and waits until it answers again.
fn sigstop_scenario(servers: &RedisServers, ttl: Duration) -> (LockManager, LockManager) {
    let urls = servers.urls();
    let make = |quorum: usize| {
        builder(&urls)
            .ttl(ttl)
            .node_timeout(SHORT_NODE_TIMEOUT)
            .quorum(quorum)
            .build()
            .unwrap()
    };
    let (locks, strict) = (make(2), make(3));
    // Pooled connections first, so the frozen node's acquires are written
    // to the server and only their replies never come.
    locks.try_lock("warm").unwrap().release().unwrap();
    strict.try_lock("warm").unwrap().release().unwrap();

    servers[2].pause();
    let ok = within_hang_limit("try_lock", || locks.try_lock("stopped:ok"));
    let released = ok.map(|guard| {
        assert!(guard.is_valid());
        within_hang_limit("release", || guard.release())
    });
    let failed = within_hang_limit("try_lock", || strict.try_lock("stopped:fail"));
    // Every queued operation (the releases included) runs while frozen.
    let flushed = [locks.flush(FLUSH), strict.flush(FLUSH)];
    servers[2].resume();

    let released = released
        .expect("lock with one frozen node of 3")
        .expect("release with one frozen node of 3");
    assert_eq!(released.granted(), 2, "{released}");
    assert!(is_slow(outcome_of(&released, &urls[2])), "{released}");
    let report = no_quorum_report(failed);
    // Once the frozen node's timeout decides the round, the others may not
    // have been waited for (a quorum of 3 cannot be reached either way).
    assert!(report.granted() <= 2, "{report}");
    assert!(is_slow(outcome_of(&report, &urls[2])), "{report}");
    assert_eq!(flushed, [true, true], "flush while frozen did not finish");

    assert!(wait_until(HANG, || {
        let pong: String = servers[2].cmd(&redis::cmd("PING"));
        pong == "PONG"
    }));
    (locks, strict)
}

/// One of 3 nodes frozen with SIGSTOP: locking and releasing succeed on
/// the other two, a round that needs all three fails with the frozen node
/// timed out, and whatever the frozen node applied late expires with the
/// TTL at the latest.
#[test]
fn sigstopped_node_is_outvoted_by_the_others() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let ttl = Duration::from_secs(1);
    let (locks, strict) = sigstop_scenario(&servers, ttl);
    for s in &all[..2] {
        assert!(s.keys().is_empty(), "{}: {:?}", s.url(), s.keys());
    }
    assert!(
        wait_until(ttl + HANG, || servers[2].keys().is_empty()),
        "a late acquire outlived its TTL: {:?}",
        servers[2].keys()
    );
    assert_no_keys_left(&[&locks, &strict], &all);
}

/// The promise of per-node FIFO: after a frozen node wakes up, the late
/// acquires it applies (of a failed round, and of a lock that was then
/// released) are undone by the releases queued behind them, so no key is
/// left on it, not even until the TTL.
#[test]
fn sigstopped_node_keeps_no_key_after_resume() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let (locks, strict) = sigstop_scenario(&servers, TTL);
    // The releases that could not reach the frozen node are retried in the
    // background once it answers again: well before the 10 s TTL.
    assert!(
        wait_until(HANG, || servers[2].keys().is_empty()),
        "the frozen node kept a key: {:?}",
        servers[2].keys()
    );
    assert_no_keys_left(&[&locks, &strict], &all);
}

/// `CLIENT PAUSE WRITE` on 2 of 3 nodes: the round fails with NoQuorum and
/// the paused nodes time out; once the pause ends nothing is left on any
/// node, and locking works again.
#[test]
fn client_pause_write_on_a_majority_fails_and_leaves_nothing() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = builder(&urls)
        .node_timeout(SHORT_NODE_TIMEOUT)
        .build()
        .unwrap();
    locks.try_lock("warm").unwrap().release().unwrap();

    servers[0].client_pause_write(1000);
    servers[1].client_pause_write(1000);
    let report = no_quorum_report(within_hang_limit("try_lock", || locks.try_lock("paused")));
    for url in &urls[..2] {
        assert!(is_slow(outcome_of(&report, url)), "{report}");
    }
    assert!(report.granted() <= 1, "{report}");

    // A write on an inspection connection waits for the pause to end.
    for s in &servers[..2] {
        let _: i64 = s.cmd(redis::cmd("DEL").arg("no-such-key"));
    }
    assert_no_keys_left(&[&locks], &all);

    // The nodes are back (after any down-marking backoff).
    let patient = LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(50)
            .max_wait(HANG)
            .delay(Duration::from_millis(50))
            .jitter(Duration::from_millis(50)),
    );
    let guard = locks.lock_with("paused", &patient).unwrap();
    assert_held_everywhere(&locks, &guard, &[&servers[2]]);
    guard.release().unwrap();
    assert_no_keys_left(&[&locks], &all);
}

/// Another client cannot take our lock (Contended), and its token can
/// neither release nor extend it. After our keys vanished early (a node
/// clock jump, emulated by `PEXPIRE key 1`) and the other client took the
/// lock, our extend is refused (Lost) and our release is refused too:
/// neither touches the other client's keys.
#[test]
fn another_client_cannot_take_release_or_extend_our_lock() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let all: Vec<&RedisServer> = servers.iter().collect();
    let ours = manager(&urls);
    let theirs = manager(&urls);

    let guard = ours.try_lock("shared").unwrap();
    // Our acquire has landed on every node (a round returns once a quorum
    // answered) before the other client tries: otherwise it may win the
    // last node first, legitimately.
    assert!(ours.flush(FLUSH));
    let err = theirs.try_lock("shared").unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(err.report().unwrap().refused() >= 2, "{err}");
    // Their failed attempt released with their token: ours is untouched.
    assert!(theirs.flush(FLUSH));
    assert_held_everywhere(&ours, &guard, &all);
    guard.release().unwrap();

    let mut guard = ours.try_lock("jump").unwrap();
    assert_held_everywhere(&ours, &guard, &all);
    for s in &all {
        let set: i64 = s.cmd(redis::cmd("PEXPIRE").arg(guard.key()).arg(1));
        assert_eq!(set, 1);
    }
    assert!(wait_until(HANG, || all
        .iter()
        .all(|s| s.pttl(b"jump") == -2)));
    let their_guard = theirs.try_lock("jump").unwrap();
    assert_held_everywhere(&theirs, &their_guard, &all);
    assert!(guard.is_valid(), "our clock did not jump");

    let err = guard.extend(Duration::from_secs(30)).unwrap_err();
    assert!(err.is_lost(), "{err}");
    let report = err.report().expect("the failed extend's report");
    assert_eq!(report.granted(), 0, "{report}");
    assert!(report.refused() >= 2, "{report}");
    assert!(!guard.is_valid());
    assert_held_everywhere(&theirs, &their_guard, &all);

    let report = guard.release().unwrap();
    assert_eq!(report.refused(), 3, "{report}");
    assert!(report.to_string().contains("not held by us"), "{report}");
    assert_held_everywhere(&theirs, &their_guard, &all);
    assert_eq!(their_guard.release().unwrap().granted(), 3);
    assert_no_keys_left(&[&ours, &theirs], &all);
}

/// A guard released after its lock expired and someone else took it
/// reports "not held by us" on every node and leaves their keys alone.
#[test]
fn release_after_expiry_is_refused_and_leaves_the_new_holder() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let all: Vec<&RedisServer> = servers.iter().collect();
    let ours = manager(&urls);
    let theirs = manager(&urls);

    let short = LockOptions::new().ttl(Duration::from_millis(600));
    let mut guard = ours.lock_with("expiring", &short).unwrap();
    assert!(guard.validity() <= Duration::from_millis(600));
    assert!(ours.flush(FLUSH));
    // Bounded wait for the servers to expire the key.
    assert!(
        wait_until(HANG, || all.iter().all(|s| s.pttl(b"expiring") == -2)),
        "the 600 ms keys did not expire"
    );
    assert!(!guard.is_valid());
    assert!(guard.check().unwrap_err().is_lost());

    let their_guard = theirs.try_lock("expiring").unwrap();
    assert_held_everywhere(&theirs, &their_guard, &all);

    // Too late to extend: refused without a quorum, their keys untouched.
    assert!(guard.extend(TTL).unwrap_err().is_lost());
    let report = guard.release().unwrap();
    assert_eq!(report.refused(), 3, "{report}");
    assert_eq!(report.granted(), 0, "{report}");
    assert!(report.to_string().contains("not held by us"), "{report}");
    assert_held_everywhere(&theirs, &their_guard, &all);

    their_guard.release().unwrap();
    assert_no_keys_left(&[&ours, &theirs], &all);
}

/// After `SCRIPT FLUSH` on every node (as after a restart or failover),
/// extend and release still work.
#[test]
fn script_flush_then_extend_and_release_still_work() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = manager(&servers.urls());
    let mut guard = locks.try_lock("scripts").unwrap();
    guard.extend(TTL).unwrap(); // the scripts are cached now
    assert!(locks.flush(FLUSH));
    for s in &all {
        let _: () = s.cmd(redis::cmd("SCRIPT").arg("FLUSH"));
    }
    guard.extend(Duration::from_secs(30)).unwrap();
    assert_held_everywhere(&locks, &guard, &all);
    for s in &all {
        assert!(s.pttl(b"scripts") > ttl_ms(TTL));
        let _: () = s.cmd(redis::cmd("SCRIPT").arg("FLUSH"));
    }
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    assert_no_keys_left(&[&locks], &all);
}

/// Empty resources and unusable TTLs are typed errors (InvalidArgument at
/// call time, Config at build time), never panics, and nothing reaches the
/// servers; a rejected extend leaves the guard valid.
#[test]
fn empty_resource_and_bad_ttls_are_typed_errors() {
    let servers = RedisServers::start(1);
    let urls = servers.urls();
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = manager(&urls);

    assert!(invalid_argument(locks.try_lock("")).contains("empty"));
    assert!(invalid_argument(locks.lock(b"")).contains("empty"));
    assert!(
        invalid_argument(locks.lock_with(Vec::<u8>::new(), &LockOptions::new())).contains("empty")
    );
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(u64::MAX),
        Duration::MAX,
    ] {
        let reason = invalid_argument(locks.lock_with("ttl", &LockOptions::new().ttl(ttl)));
        assert!(!reason.is_empty());
    }
    assert!(servers[0].keys().is_empty(), "nothing may reach the server");

    let mut guard = locks.try_lock("ttl").unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(u64::MAX),
    ] {
        match guard.extend(ttl) {
            Err(Error::InvalidArgument { .. }) => {}
            other => panic!("extend({ttl:?}): expected InvalidArgument, got {other:?}"),
        }
        assert!(guard.is_valid(), "a rejected extend must not lose the lock");
    }
    assert_held_everywhere(&locks, &guard, &all);
    guard.release().unwrap();

    for ttl in [Duration::ZERO, Duration::from_millis(1)] {
        config_error(builder(&urls).ttl(ttl).build());
    }
    let reason = config_error(
        builder(&urls)
            .ttl(Duration::from_millis(300))
            .node_timeout(Duration::from_millis(300))
            .build(),
    );
    assert!(reason.contains("node timeout"), "{reason}");
    assert_no_keys_left(&[&locks], &all);
}

/// A malformed URL is a Config error that does not show the password; the
/// same server twice is a Config error naming it.
#[test]
fn malformed_url_and_duplicate_node_are_config_errors() {
    for url in [
        "not a url".to_owned(),
        format!("redis://user:{PASSWORD}@127.0.0.1:notaport/0"),
        format!("redis://:{PASSWORD}@127.0.0.1:6379/db"),
        format!("http://:{PASSWORD}@127.0.0.1:6379"),
    ] {
        let text = config_error(LockManager::builder().redis_nodes([&url]));
        assert_no_secret(&text);
    }
    #[cfg(not(feature = "tls"))]
    {
        let text = config_error(
            LockManager::builder().redis_nodes([format!("rediss://:{PASSWORD}@127.0.0.1:6379/0")]),
        );
        assert_no_secret(&text);
    }
    let servers = RedisServers::start(1);
    let url = servers[0].url();
    let text = config_error(
        LockManager::builder()
            .redis_nodes([&url, &url])
            .unwrap()
            .build(),
    );
    assert!(text.contains(&url) && text.contains("twice"), "{text}");
    assert_no_keys_left(&[], &[&servers[0]]);
}

/// A node nobody listens on (a closed port) makes the round fail with
/// NoQuorum, promptly, and the report says the node is unreachable.
#[test]
fn closed_port_is_no_quorum_with_unreachable() {
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    let locks = manager(std::slice::from_ref(&url));
    let report = no_quorum_report(within_hang_limit("try_lock", || locks.try_lock("closed")));
    assert_eq!(
        failed_kind(outcome_of(&report, &url)),
        Some(BackendErrorKind::Unreachable),
        "{report}"
    );
    assert!(locks.flush(FLUSH));
}

/// A resource key that holds a hash (not a lock) fails the round with
/// WrongType in the report, not "held elsewhere", and the hash is left
/// untouched. A hash on one node of 3 only costs that node's vote.
#[test]
fn key_holding_a_hash_fails_with_wrongtype_and_is_untouched() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = manager(&urls);
    let hash_intact = |s: &RedisServer, key: &str| {
        let kind: String = s.cmd(redis::cmd("TYPE").arg(key));
        let value: Option<String> = s.cmd(redis::cmd("HGET").arg(key).arg("f"));
        assert_eq!(
            (kind.as_str(), value.as_deref(), s.pttl(key.as_bytes())),
            ("hash", Some("v"), -1),
            "{}: the hash was touched",
            s.url()
        );
    };
    for s in &all {
        let _: i64 = s.cmd(redis::cmd("HSET").arg("h").arg("f").arg("v"));
    }
    let err = locks.try_lock("h").unwrap_err();
    assert!(err.is_no_quorum(), "a hash is not a held lock: {err}");
    let report = err.report().unwrap();
    assert_eq!(report.granted(), 0, "{report}");
    let wrongtype = report.nodes_where(|o| failed_kind(o) == Some(BackendErrorKind::WrongType));
    assert!(wrongtype.len() >= 2, "{report}");
    assert!(locks.flush(FLUSH));
    for s in &all {
        hash_intact(s, "h");
    }

    // Only one node has a hash under the key: the other two grant.
    let _: i64 = servers[0].cmd(redis::cmd("HSET").arg("h1").arg("f").arg("v"));
    let guard = locks.try_lock("h1").unwrap();
    assert_held_everywhere(&locks, &guard, &all[1..]);
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 2, "{report}");
    assert_eq!(
        failed_kind(outcome_of(&report, &urls[0])),
        Some(BackendErrorKind::WrongType),
        "{report}"
    );
    assert!(locks.flush(FLUSH));
    hash_intact(&servers[0], "h");
    hash_intact(&servers[0], "h1");

    for s in &all {
        let _: i64 = s.cmd(redis::cmd("DEL").arg("h").arg("h1"));
    }
    assert_no_keys_left(&[&locks], &all);
}

/// A read-only replica configured as the only node: the lock fails with
/// ReadOnly in the report (configure masters only).
#[test]
fn replica_node_fails_with_readonly() {
    let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let url = replica.url();
    let locks = manager(std::slice::from_ref(&url));
    let report = no_quorum_report(within_hang_limit("try_lock", || locks.try_lock("ro")));
    assert_eq!(
        failed_kind(outcome_of(&report, &url)),
        Some(BackendErrorKind::ReadOnly),
        "{report}"
    );
    assert_no_keys_left(&[&locks], &[&primary, &replica]);
}

/// A wrong (or missing) password fails with Auth in the report, and no
/// password appears in the error's Display or Debug, nor in the manager's
/// Debug or node names. The right password works.
#[test]
fn wrong_password_is_auth_and_never_shown() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let port = server.port();
    for url in [
        format!("redis://:{WRONG}@127.0.0.1:{port}/0"),
        format!("redis://default:{WRONG}@127.0.0.1:{port}/0"),
        format!("redis://127.0.0.1:{port}/0"),
    ] {
        let locks = manager(std::slice::from_ref(&url));
        assert_no_secret(&format!("{locks:?} {:?}", locks.nodes()));
        let err = within_hang_limit("try_lock", || locks.try_lock("auth")).unwrap_err();
        let text = format!("{err} {err:?} {:?}", std::error::Error::source(&err));
        assert_no_secret(&text);
        assert!(err.is_no_quorum(), "{text}");
        let report = err.report().unwrap();
        assert_eq!(
            failed_kind(report.nodes()[0].outcome()),
            Some(BackendErrorKind::Auth),
            "{text}"
        );
        assert!(locks.flush(FLUSH));
    }

    let right = format!("redis://:{PASSWORD}@127.0.0.1:{port}/0");
    let locks = manager(std::slice::from_ref(&right));
    assert_no_secret(&format!("{locks:?} {:?}", locks.nodes()));
    let guard = locks.try_lock("auth").unwrap();
    assert_no_secret(&format!("{guard:?}"));
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 1);
    assert_no_secret(&format!("{report} {report:?}"));
    assert!(locks.flush(FLUSH));
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut connect(&right))
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

/// TLS to a plain (non-TLS) port is an error, promptly, not a hang, and
/// the password is not shown.
#[cfg(feature = "tls")]
#[test]
fn tls_to_a_plain_port_is_an_error_not_a_hang() {
    let server = RedisServer::start();
    for fragment in ["", "#insecure"] {
        let url = format!(
            "rediss://:{PASSWORD}@127.0.0.1:{}/0{fragment}",
            server.port()
        );
        let locks = manager(std::slice::from_ref(&url));
        let err = within_hang_limit("try_lock", || locks.try_lock("tls")).unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(err.is_no_quorum(), "{text}");
        assert_eq!(err.report().unwrap().granted(), 0, "{text}");
        assert_no_secret(&text);
        assert!(locks.flush(FLUSH));
    }
    assert_no_keys_left(&[], &[&server]);
}

/// Resource names need not be UTF-8: lock, extend and release work, and
/// the servers hold exactly those key bytes.
#[test]
fn non_utf8_resource_names_work() {
    let servers = RedisServers::start(3);
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = manager(&servers.urls());
    let resource: &[u8] = b"\xff\x00lock:\xfe\x80";
    let mut guard = locks.try_lock(resource).unwrap();
    assert_eq!(guard.key(), resource);
    assert_held_everywhere(&locks, &guard, &all);
    for s in &all {
        assert_eq!(s.keys(), vec![resource.to_vec()]);
    }
    assert!(locks.try_lock(resource).unwrap_err().is_contended());
    guard.extend(Duration::from_secs(30)).unwrap();
    assert_held_everywhere(&locks, &guard, &all);
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    assert!(!report.to_string().is_empty());
    assert_no_keys_left(&[&locks], &all);
}
