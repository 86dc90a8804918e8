//! Wake-ups across processes against real `redis-server`s: a release
//! publishes a notice on each node, and a waiter in another process (here:
//! another manager, which has its own engine, connections and node threads,
//! like another process) tries again at once instead of sleeping out its
//! retry delay.
//!
//! No timing here is tight: the retry delay is 5 s with no jitter, and a
//! wake-up only has to come well before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, LockManager, LockOptions, RedisBackend, RetryPolicy};

use testkit::{CountedNotices, RedisServers, connect};

use crate::support::acl_user;

const TTL: Duration = Duration::from_secs(10);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// The retry delay of the waiters: a wake-up must come well before it.
const RETRY_DELAY: Duration = Duration::from_secs(5);
/// How long the second holder keeps the lock in the fairness test.
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

/// Three servers, and two managers over them standing for two processes.
fn two_processes() -> (RedisServers, LockManager, LockManager) {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let (a, b) = (manager(&urls), manager(&urls));
    (servers, a, b)
}

/// Retry every 5 s exactly, a few times: without a wake-up, the second
/// attempt comes 5 s after the first.
pub(crate) fn slow_retries() -> LockOptions {
    LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(4)
            .delay(RETRY_DELAY)
            .jitter(Duration::ZERO),
    )
}

/// `waiter` waits for `key`, which `guard` holds, with `options` on a
/// thread of its own; once `ready` returned (it waits until the waiter
/// listens, and may cut its subscriptions), `guard` is released. How long
/// after the release the waiter got the lock (released again at once).
pub(crate) fn woken_after(
    waiter: &LockManager,
    key: &str,
    options: &LockOptions,
    guard: LockGuard,
    ready: impl FnOnce(),
) -> Duration {
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with(key, options);
            (got.map(|g| g.release().unwrap()), Instant::now())
        });
        ready();
        let released_at = Instant::now();
        guard.release().unwrap();
        let (got, done) = waiting.join().unwrap();
        got.unwrap_or_else(|e| panic!("the waiter did not get the lock: {e}"));
        assert!(done >= released_at, "granted before the release");
        done - released_at
    })
}

/// The waiter got the lock `after` the release, well before its retry
/// delay: a notice woke it.
pub(crate) fn assert_woken(after: Duration) {
    assert!(
        after < WOKEN_WITHIN,
        "the waiter got the lock {after:?} after the release: it slept out its retry delay \
         of {RETRY_DELAY:?} instead of being woken",
    );
}

#[test]
fn a_waiter_in_another_process_wakes_when_the_lock_is_released() {
    let (servers, holder, waiter) = two_processes();
    // Settled first: a waiter granted where the holder's last acquire had
    // not landed yet would see "no quorum", and never count as contended.
    let guard = testkit::hold_settled(&holder, "wake");
    let after = woken_after(&waiter, "wake", &slow_retries(), guard, || {
        testkit::until_listening(&waiter);
    });
    assert_woken(after);
    assert!(holder.flush(Duration::from_secs(5)) && waiter.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        let mut conn = connect(&server.url());
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert!(keys.is_empty(), "keys left on {}", server.url());
    }
}

/// Every server's subscribers to release notices, summed.
fn subscribers(servers: &RedisServers) -> i64 {
    servers
        .iter()
        .map(|server| server.subscribers("quorum-lock:released:gone"))
        .sum()
}

#[test]
fn nothing_stays_subscribed_once_the_waiters_are_gone() {
    let (servers, holder, waiter) = two_processes();
    let guard = holder.try_lock("gone").unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock_with("gone", &slow_retries()).unwrap());
        // The waiter listens on every node while it waits.
        assert!(
            testkit::wait_until(Duration::from_secs(5), || subscribers(&servers) == 3),
            "the waiter does not listen on every node: {} subscribers",
            subscribers(&servers)
        );
        testkit::until_listening(&waiter);
        guard.release().unwrap();
        waiting.join().unwrap().release().unwrap();
    });
    assert!(
        testkit::wait_until(Duration::from_secs(5), || subscribers(&servers) == 0),
        "still subscribed with nobody waiting: {}",
        subscribers(&servers)
    );
    assert_eq!(waiter.health().locks.woken, 1, "{}", waiter.health());
}

/// The fairness rule: a process that releases a lock others were waiting
/// for does not take it again ahead of them.
#[test]
fn a_releaser_lets_the_processes_already_waiting_go_first() {
    let (servers, first, other) = two_processes();
    let guard = first.try_lock("fair").unwrap();
    let (order_tx, order) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        let (order_tx2, other) = (order_tx.clone(), &other);
        let waiting = s.spawn(move || {
            let guard = other.lock_with("fair", &slow_retries()).unwrap();
            order_tx2.send("other").unwrap();
            std::thread::sleep(HOLD);
            guard.release().unwrap();
        });
        assert!(
            testkit::wait_until(Duration::from_secs(5), || {
                other_listens(&servers, "fair")
            }),
            "the other process never listened"
        );
        testkit::until_listening(other);
        guard.release().unwrap();
        // At once, as a loop would: without the rule this acquire, queued
        // right behind the release, would beat the woken waiter.
        let again = first.lock_with("fair", &slow_retries()).unwrap();
        order_tx.send("first").unwrap();
        again.release().unwrap();
        waiting.join().unwrap();
        assert_eq!(other.health().locks.woken, 1, "{}", other.health());
    });
    assert_eq!(order.try_iter().collect::<Vec<_>>(), ["other", "first"]);
    assert_eq!(first.health().locks.yielded, 1, "{}", first.health());
    assert!(
        first.health().locks.woken >= 1,
        "the releaser waited for the other's release: {}",
        first.health()
    );
}

/// Whether someone listens for `key`'s release on every server.
fn other_listens(servers: &RedisServers, key: &str) -> bool {
    servers.iter().all(|server| {
        let mut conn = connect(&server.url());
        let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(format!("quorum-lock:released:{key}"))
            .query(&mut conn)
            .unwrap();
        matches!(counts.get(1), Some(redis::Value::Int(n)) if *n >= 1)
    })
}

/// An ACL user with every command but no channel (`resetchannels`): its
/// `SUBSCRIBE` is refused, and the release script's `PUBLISH` too.
fn without_channels(servers: &RedisServers) -> Vec<String> {
    servers
        .iter()
        .map(|server| {
            acl_user(
                server,
                "locker",
                "locker-pw",
                &["~*", "+@all", "resetchannels"],
            )
        })
        .collect()
}

#[test]
fn without_the_pubsub_rights_the_release_works_and_waiters_retry_on_their_timer() {
    let servers = RedisServers::start(3);
    let urls = without_channels(&servers);
    let (holder, waiter) = (manager(&urls), manager(&urls));
    let retry = LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(20)
            .delay(Duration::from_millis(100))
            .jitter(Duration::ZERO),
    );
    let guard = holder.try_lock("deaf").unwrap();
    let failed_at_release = std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock_with("deaf", &retry));
        testkit::until_listening(&waiter);
        // The PUBLISH inside the release script is denied: the release
        // still succeeds everywhere.
        let report = guard.release().unwrap();
        assert_eq!(report.granted(), 3, "{report}");
        let failed_at_release = waiter.health().locks.contended;
        let got = waiting.join().unwrap();
        got.unwrap_or_else(|e| panic!("the timer did not bring the waiter its lock: {e}"))
            .release()
            .unwrap();
        failed_at_release
    });
    let locks = waiter.health().locks;
    assert_eq!(
        (locks.woken, locks.acquired),
        (0, 1),
        "no notice can arrive here: {locks:?}"
    );
    // Its timer brought it the lock: at most the attempt in flight while
    // the release ran failed after it, the next one succeeded.
    assert!(
        locks.contended <= failed_at_release + 1,
        "{failed_at_release} failed attempts at the release: {locks:?}"
    );
    assert_eq!(holder.health().locks.yielded, 0);
}

/// A `PSUBSCRIBE *` client (a redis-cli session, a dashboard) hears every
/// release; it is not a process waiting for the lock, and a releaser must
/// not let it "go first".
#[test]
fn a_pattern_subscriber_never_makes_a_releaser_yield() {
    use std::io::{Read, Write};

    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let server = servers.iter().next().unwrap();
    let mut watcher = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    watcher
        .write_all(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$1\r\n*\r\n")
        .unwrap();
    let mut confirm = [0u8; 64];
    let read = watcher.read(&mut confirm).unwrap();
    assert!(read > 0, "no PSUBSCRIBE confirmation");
    let mut conn = connect(&server.url());
    let patterns: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(&mut conn).unwrap();
    assert_eq!(patterns, 1, "the pattern subscriber is not in place");
    let locks = manager(&urls);
    for _ in 0..10 {
        locks.lock("solo").unwrap().release().unwrap();
    }
    let counters = locks.health().locks;
    assert_eq!(
        (counters.acquired, counters.yielded),
        (10, 0),
        "a pattern subscriber made the releaser yield: {counters:?}"
    );
    drop(watcher);
}

/// A client that may only `PUBLISH` (no key access) forges release notices
/// on every node in a loop while the lock is held. Notices are hints: they
/// bring a retry forward at most a bounded number of times per retry delay,
/// so the waiter makes a few times the attempts it makes without the
/// forger, not one per forged notice.
#[test]
fn forged_notices_bring_a_retry_forward_a_bounded_number_of_times() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const ATTEMPTS: u32 = 15;
    let (servers, holder, waiter) = two_processes();
    let guard = holder.try_lock("forged").unwrap();
    let retry = LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(ATTEMPTS)
            .delay(Duration::from_millis(30))
            .jitter(Duration::ZERO),
    );
    let (stop, published) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|s| {
        let forger = s.spawn(|| {
            let mut conns: Vec<_> = servers.iter().map(|sv| connect(&sv.url())).collect();
            while !stop.load(Ordering::Relaxed) {
                for conn in &mut conns {
                    let _: i64 = redis::cmd("PUBLISH")
                        .arg("quorum-lock:released:forged")
                        .arg("")
                        .query(conn)
                        .unwrap();
                }
                published.fetch_add(1, Ordering::Relaxed);
            }
        });
        let e = waiter.lock_with("forged", &retry).unwrap_err();
        stop.store(true, Ordering::Relaxed);
        forger.join().unwrap();
        assert!(e.is_contended(), "{e}");
    });
    drop(guard);
    let locks = waiter.health().locks;
    assert_eq!(locks.contended, u64::from(ATTEMPTS), "{locks:?}");
    // The first attempt, then the one right after the subscription, come
    // without a wait; each later attempt follows a wait that a notice or
    // the retry delay ended.
    let waits = u64::from(ATTEMPTS) - 2;
    let timed_out = waits - locks.woken;
    assert!(
        locks.woken <= 3 * (timed_out + 1),
        "{} of {waits} waits were cut short by {} rounds of forged notices: {locks:?}",
        locks.woken,
        published.load(Ordering::Relaxed)
    );
    assert!(
        locks.held_back >= 1,
        "no wait went on past a notice: {locks:?}"
    );
}

/// On real servers too, a waiter behind a long-held lock makes about one
/// timed attempt a second (it reads the holder's PTTL with each refusal,
/// and waits for it, at most a second), not one per retry delay of the
/// default policy. Counted in attempts: a loaded machine only makes
/// fewer.
#[test]
fn a_waiter_behind_a_long_held_lock_tries_about_once_a_second() {
    let (_servers, holder, waiter) = two_processes();
    let _held = testkit::hold_settled(&holder, "long");
    let err = waiter
        .lock_with(
            "long",
            &LockOptions::new().wait(Duration::from_millis(2_500)),
        )
        .unwrap_err();
    let attempts = waiter.health().locks.contended;
    assert!(
        attempts <= 6,
        "{attempts} attempts in a wait of 2.5 s behind a lock held for {TTL:?}: {err}"
    );
}

/// A process whose one thread waits for a held lock sleeps: its node
/// threads wake when a notice (or the waiter's own attempt) comes, not
/// every millisecond. Counted in calls, not time.
#[test]
fn a_waiting_process_does_not_poll_its_subscriptions() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let holder = manager(&urls);
    let receives = Arc::new(AtomicU64::new(0));
    let nodes = urls
        .iter()
        .map(|url| CountedNotices::new(RedisBackend::open(url, NODE_TIMEOUT).unwrap(), &receives));
    let waiter = LockManager::builder()
        .nodes(nodes)
        .ttl(TTL)
        .restart_quarantine(false)
        .build()
        .unwrap();
    let _held = testkit::hold_settled(&holder, "sleep");
    let wait = LockOptions::new().wait(Duration::from_millis(800)).retry(
        RetryPolicy::new()
            .delay(Duration::from_millis(100))
            .jitter(Duration::ZERO),
    );
    let err = waiter.lock_with("sleep", &wait).unwrap_err();
    assert!(err.to_string().contains("sleep"), "{err}");
    let attempts = waiter.health().locks.contended;
    let looked = receives.load(Ordering::Relaxed);
    // Per node: the subscription and its confirmation, each attempt's
    // batch (and its timer), the unsubscription; 3 nodes.
    let bound = 3 * (2 * attempts + 6);
    assert!(
        looked <= bound,
        "the node threads looked for notices {looked} times during a wait of 800 ms \
         with {attempts} attempts (at most {bound} without polling)"
    );
}

/// The subscriber connections cut while a process waits (the servers
/// stay up): the waiter subscribes again, and a release after that still
/// wakes it well before its retry delay. (Each node that listens again
/// wakes the waiter once, as notices may have been missed meanwhile: the
/// waiter may spend a few attempts, so it is not limited to 4.)
#[test]
fn a_waiter_hears_releases_again_after_its_subscriptions_were_cut() {
    let (servers, holder, waiter) = two_processes();
    let guard = testkit::hold_settled(&holder, "gone");
    let patient = LockOptions::new().retry(
        RetryPolicy::new()
            .max_wait(Duration::from_secs(60))
            .delay(RETRY_DELAY)
            .jitter(Duration::ZERO),
    );
    let after = woken_after(&waiter, "gone", &patient, guard, || {
        assert!(
            testkit::wait_until(Duration::from_secs(10), || subscribers(&servers) == 3),
            "the waiter does not listen on every node: {} subscribers",
            subscribers(&servers)
        );
        for server in servers.iter() {
            let mut conn = connect(&server.url());
            let cut: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query(&mut conn)
                .unwrap();
            assert_eq!(cut, 1, "{}: subscriber connections cut", server.url());
        }
        // Back on every node, on new connections.
        assert!(
            testkit::wait_until(Duration::from_secs(10), || subscribers(&servers) == 3),
            "the waiter did not listen again on every node: {} subscribers",
            subscribers(&servers)
        );
    });
    assert_woken(after);
}

/// Over TLS the listener cannot be read by a thread of its own (one TLS
/// session, two threads), so it declines to ring and the node thread
/// polls it while someone waits: the waiter is still woken at the
/// release, well before its retry delay.
#[cfg(feature = "tls")]
#[test]
fn over_tls_a_waiter_is_still_woken_at_the_release() {
    let server = testkit::RedisServer::start_tls();
    let urls = [server.tls_url()];
    let (holder, waiter) = (manager(&urls), manager(&urls));
    let guard = holder.try_lock("tls-wake").unwrap();
    let after = woken_after(&waiter, "tls-wake", &slow_retries(), guard, || {
        testkit::until_listening(&waiter);
    });
    assert_woken(after);
    assert_eq!(waiter.health().locks.woken, 1, "{}", waiter.health());
}

/// A release nobody waits for costs the servers no subscriber count: the
/// release script asks `PUBSUB NUMSUB` only when its `PUBLISH` reached
/// someone (counted by the servers, `INFO commandstats`). With a waiter
/// listening, it does ask: the count is what tells the releaser that
/// someone waits.
#[test]
fn a_release_nobody_waits_for_asks_no_subscriber_count() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let locks = LockManager::builder()
        .redis_nodes(&urls)
        .unwrap()
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .restart_quarantine(false)
        // The script on every server (Valkey 9.1's DELIFEQ form asks the
        // count first, by design: it publishes only to listeners).
        .scripts(quorum_lock::Scripts::Always)
        .build()
        .unwrap();
    // Connections and scripts loaded before the count starts.
    locks.try_lock("warm").unwrap().release().unwrap();
    servers.iter().for_each(testkit::commandstats::reset);
    for _ in 0..10 {
        locks.try_lock("nobody-waits").unwrap().release().unwrap();
    }
    for server in servers.iter() {
        let (publish, numsub) = (
            testkit::commandstats::calls_of(server, "publish"),
            testkit::commandstats::calls_of(server, "pubsub|numsub"),
        );
        assert_eq!(
            (publish, numsub),
            (10, 0),
            "{}: publish, numsub",
            server.url()
        );
    }

    let waiter = manager(&urls);
    let guard = locks.try_lock("one-waits").unwrap();
    servers.iter().for_each(testkit::commandstats::reset);
    let after = woken_after(&waiter, "one-waits", &slow_retries(), guard, || {
        testkit::until_listening(&waiter);
    });
    assert_woken(after);
    for server in servers.iter() {
        assert!(
            testkit::commandstats::calls_of(server, "pubsub|numsub") >= 1,
            "{}: the release that a waiter heard did not count its listeners",
            server.url()
        );
    }
}
