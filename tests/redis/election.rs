//! Leader election against real `redis-server` (or Valkey) processes:
//! one leader across managers, terms that only grow (also across servers
//! killed and started again empty), what observers read, a leader whose
//! majority is killed, a server without scripts, and a cluster node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{Error, LockManager, LockOptions, MAX_LEADER_VALUE, RetryPolicy, Scripts};
use testkit::commandstats::{calls_of, lock_commands_of, reset};
use testkit::{RedisCluster, RedisServer, RedisServers, observed, wait_until};

use crate::support::Fresh;

const TTL: Duration = Duration::from_secs(3);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const FLUSH: Duration = Duration::from_secs(5);

const FRESH: Fresh = Fresh {
    ttl: TTL,
    node_timeout: NODE_TIMEOUT,
};

/// Keys on `server` (none of them a manager's own try of what locks
/// need, `{quorum-lock}:probe:*`, which lives a millisecond).
fn keys_on(server: &RedisServer) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = server.cmd(redis::cmd("KEYS").arg("*"));
    keys.into_iter()
        .filter(|k| !k.windows(6).any(|w| w == b":probe"))
        .collect()
}

#[test]
fn one_leader_across_managers_and_observers_see_its_term_and_values() {
    let servers = RedisServers::start(3);
    let [a, b, watcher] = [(); 3].map(|()| {
        FRESH
            .manager(&servers.urls())
            .election("scheduler")
            .unwrap()
    });
    assert_eq!(watcher.observe().unwrap(), None);
    let mut first = a.campaign(b"a:8080").unwrap();
    assert!(b.try_campaign(b"b:8080").unwrap_err().is_contended());
    let seen = watcher.observe().unwrap().expect("a leads");
    assert_eq!((seen.term(), seen.value()), (first.term(), &b"a:8080"[..]));
    first.proclaim(b"a:9090").unwrap();
    let seen = watcher.observe().unwrap().expect("a leads");
    assert_eq!(seen.value(), b"a:9090");
    // The record beside the lock key, on every server.
    let (lock, record) = watcher.keys();
    for server in servers.iter() {
        let keys = keys_on(server);
        assert!(keys.iter().any(|k| k == lock) && keys.iter().any(|k| k == record));
    }
    // b waits; a resigns; b leads with a higher term, seen at once by a
    // watcher waiting for the change.
    let term = first.term();
    let follower = thread::spawn(move || b.campaign(b"b:8080"));
    let waiter = {
        let watcher = watcher.clone();
        thread::spawn(move || watcher.wait_change(Some(term), Duration::from_secs(10)))
    };
    first.resign().unwrap();
    let second = follower.join().unwrap().unwrap();
    assert!(second.term() > term);
    let changed = waiter.join().unwrap().unwrap();
    assert_ne!(changed.map(|l| l.term()), Some(term));
    let seen = observed(&watcher).expect("b leads");
    assert_eq!((seen.term(), seen.value()), (second.term(), &b"b:8080"[..]));
    drop(second);
}

#[test]
fn fifty_successive_leaders_have_strictly_increasing_terms() {
    let servers = RedisServers::start(3);
    let managers: Vec<LockManager> = (0..3).map(|_| FRESH.manager(&servers.urls())).collect();
    let watcher = FRESH.manager(&servers.urls()).election("queue").unwrap();
    let mut last = 0;
    for i in 0..50 {
        let election = managers[i % 3].election("queue").unwrap();
        let value = format!("leader-{i}");
        let leading = election
            .campaign_with(value.as_bytes(), &LockOptions::new().wait(FLUSH))
            .unwrap();
        assert!(
            leading.term() > last,
            "term {} after {last}",
            leading.term()
        );
        last = leading.term();
        let seen = observed(&watcher).expect("a leader");
        assert_eq!((seen.term(), seen.value()), (last, value.as_bytes()));
        leading.resign().unwrap();
    }
}

#[test]
fn a_leader_whose_majority_is_killed_is_told_and_the_next_term_is_higher() {
    let mut servers = RedisServers::start(3);
    let urls = servers.urls();
    let election = FRESH.manager(&urls).election("jobs").unwrap();
    let watcher = FRESH.manager(&urls).election("jobs").unwrap();
    let leading = election.campaign(b"here").unwrap();
    let lost = leading.lost_signal();
    for server in servers.iter_mut().take(2) {
        server.kill9();
    }
    let error = lost.recv_timeout(TTL * 2).expect("a loss notice");
    assert!(error.is_lost(), "{error}");
    assert!(!leading.is_valid());
    // Too few servers answer: an error, never a guess.
    assert!(watcher.observe().unwrap_err().is_no_quorum());
    // Started again, empty (no persistence): nobody leads, and the next
    // leader's term is higher though two servers forgot their counters.
    for server in servers.iter_mut().take(2) {
        server.restart();
    }
    assert_eq!(observed(&watcher), None);
    let next = watcher
        .campaign_with(b"there", &LockOptions::new().wait(TTL * 3))
        .unwrap();
    assert!(
        next.term() > leading.term(),
        "{} after {}",
        next.term(),
        leading.term()
    );
    let seen = observed(&election).expect("the new leader");
    assert_eq!((seen.term(), seen.value()), (next.term(), &b"there"[..]));
}

#[test]
fn try_campaign_returns_at_once_and_bad_input_leaves_no_key() {
    let servers = RedisServers::start(3);
    let locks = FRESH.manager(&servers.urls());
    let leading = locks.election("x").unwrap().campaign(b"a").unwrap();
    let other = FRESH.manager(&servers.urls()).election("x").unwrap();
    let started = Instant::now();
    assert!(other.try_campaign(b"b").unwrap_err().is_contended());
    assert!(started.elapsed() < Duration::from_secs(1));
    leading.resign().unwrap();
    let too_long = vec![b'v'; MAX_LEADER_VALUE + 1];
    let refused = other.try_campaign(&too_long).unwrap_err();
    assert!(
        matches!(refused, Error::InvalidArgument { .. }),
        "{refused}"
    );
    assert!(matches!(
        locks.election("}x").unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        let keys = keys_on(server);
        let (lock, _) = other.keys();
        assert!(!keys.iter().any(|k| k == lock), "{keys:?}");
    }
}

#[test]
fn without_scripts_a_campaign_fails_naming_why_and_leaves_no_lock() {
    let servers = RedisServers::start(3);
    let locks = FRESH.with_scripts(&servers.urls(), Scripts::Never);
    let election = locks.election("no-scripts").unwrap();
    let error = election.try_campaign(b"v").unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    let text = error.to_string();
    assert!(text.contains("script"), "{text}");
    assert!(locks.flush(FLUSH));
    for server in servers.iter() {
        let keys = keys_on(server);
        let (lock, record) = election.keys();
        assert!(!keys.iter().any(|k| k == lock || k == record), "{keys:?}");
    }
}

/// A cluster as one node: the election's two keys (and its fence
/// counters) live in one slot, and it works as on plain servers.
#[test]
fn an_election_on_a_cluster_node() {
    let cluster = RedisCluster::start(3, 0);
    let plain = [RedisServer::start(), RedisServer::start()];
    let urls = [cluster.seed_url(), plain[0].url(), plain[1].url()];
    let (a, b) = (
        FRESH.manager(&urls).election("cluster").unwrap(),
        FRESH.manager(&urls).election("cluster").unwrap(),
    );
    let mut leading = a.campaign(b"v1").unwrap();
    leading.proclaim(b"v2").unwrap();
    let seen = b.observe().unwrap().expect("a leads");
    assert_eq!((seen.term(), seen.value()), (leading.term(), &b"v2"[..]));
    let term = leading.term();
    leading.resign().unwrap();
    let next = b
        .campaign_with(b"w", &LockOptions::new().wait(FLUSH))
        .unwrap();
    assert!(next.term() > term);
    next.resign().unwrap();
}

/// Reads (`observe`s) `server` answered since the counts were reset:
/// each reads the lock key and the record key (`STRLEN` each), and
/// nothing else here sends `STRLEN`.
fn reads_on(server: &RedisServer) -> u64 {
    calls_of(server, "strlen") / 2
}

/// Retries 5 s apart, without jitter: a waiter woken by a notice tries
/// again at once; one that is not sleeps for seconds.
fn slow_waits() -> LockOptions {
    LockOptions::new().wait(Duration::from_secs(30)).retry(
        RetryPolicy::new()
            .attempts(6)
            .delay(Duration::from_secs(5))
            .jitter(Duration::ZERO),
    )
}

/// An observer blocked in `wait_update`, in its quiet of a second between
/// reads, is woken by the proclaim's notice: its manager counts exactly
/// one notice wake-up, and the servers one read (two if a timed one was
/// on its way) after the proclaim. A lock waiter of another lock and a
/// campaign for the same election, both listening for releases, are not
/// woken (the proclaim announces on the record key's channel only, so
/// it spends no campaign's early wake-ups).
#[test]
fn a_proclaim_wakes_the_observers_waiting_and_no_lock_waiter() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let [leader, observer, campaigner, holder, waiter] = [(); 5].map(|()| FRESH.manager(&urls));
    let mut leading = leader.election("notice").unwrap().campaign(b"v1").unwrap();
    assert!(leader.flush(FLUSH));
    // Auto-extended: the lock waiter must not get it by an expiry.
    let held = holder
        .lock_with("other", &LockOptions::new().auto_extend(true))
        .unwrap();
    assert!(holder.flush(FLUSH));
    let watcher = observer.election("notice").unwrap();
    let seen = watcher.observe().unwrap().expect("v1 leads");
    let follower = campaigner.election("notice").unwrap();
    thread::scope(|s| {
        let lock_waiter = s.spawn(|| waiter.lock_with("other", &slow_waits()));
        let campaign = s.spawn(|| follower.campaign_with(b"next", &slow_waits()));
        testkit::until_listening(&waiter);
        testkit::until_listening(&campaigner);
        servers.iter().for_each(reset);
        let waiting = s.spawn(|| watcher.wait_update(Some(&seen), Duration::from_secs(60)));
        // Six reads: it listens (from its second read on) and its quiet
        // between reads is now a second.
        let quiet = || servers.iter().all(|server| reads_on(server) >= 6);
        assert!(
            wait_until(Duration::from_secs(10), quiet),
            "the observer never read 6 times"
        );
        let before: Vec<u64> = servers.iter().map(reads_on).collect();
        let proclaimed = Instant::now();
        leading.proclaim(b"v2").unwrap();
        let now = waiting.join().unwrap().unwrap().expect("a leader");
        let took = proclaimed.elapsed();
        assert_eq!((now.term(), now.value()), (leading.term(), &b"v2"[..]));
        let after: Vec<u64> = servers.iter().map(reads_on).collect();
        eprintln!("seen {took:?} after the proclaim; reads before {before:?}, after {after:?}");
        for (b, a) in before.iter().zip(&after) {
            assert!(a - b <= 2, "reads {before:?} -> {after:?}: it polled");
        }
        assert_eq!(
            observer.health().locks.woken,
            1,
            "the observer was not woken by the proclaim's notice: {}",
            observer.health()
        );
        for (who, locks) in [("lock waiter", &waiter), ("campaign", &campaigner)] {
            assert_eq!(
                locks.health().locks.woken,
                0,
                "the {who} was woken by a proclaim"
            );
        }
        assert!(!lock_waiter.is_finished() && !campaign.is_finished());
        held.release().unwrap();
        lock_waiter.join().unwrap().unwrap().release().unwrap();
        leading.resign().unwrap();
        campaign.join().unwrap().unwrap().resign().unwrap();
    });
}

/// `wait_change` waits for another term: a proclaim within the term
/// does not end it (it returns at its timeout, showing the new value).
#[test]
fn wait_change_is_not_ended_by_a_proclaim_within_the_term() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let mut leading = FRESH
        .manager(&urls)
        .election("e")
        .unwrap()
        .campaign(b"v1")
        .unwrap();
    let watcher = FRESH.manager(&urls).election("e").unwrap();
    let term = leading.term();
    thread::scope(|s| {
        let waiting = s.spawn(|| watcher.wait_change(Some(term), Duration::from_secs(2)));
        leading.proclaim(b"v2").unwrap();
        let seen = waiting.join().unwrap().unwrap().expect("a leader");
        assert_eq!((seen.term(), seen.value()), (term, &b"v2"[..]));
    });
}

/// A campaign on servers that have all just restarted (started a moment
/// ago: each in restart quarantine for `max_ttl`, 3 s here) is paced as
/// a lock's waiter is: the servers receive a bounded number of commands
/// per second while it waits (counted by `INFO commandstats`), and it
/// leads once the quarantine ends.
#[test]
fn a_campaign_on_quarantined_servers_is_paced_and_leads_when_the_quarantine_ends() {
    let servers = RedisServers::start(3);
    let locks = LockManager::builder()
        .redis_nodes(servers.urls())
        .unwrap()
        .node_timeout(NODE_TIMEOUT)
        .max_ttl(Duration::from_secs(3))
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let election = locks.election("restarted").unwrap();
    servers.iter().for_each(reset);
    let started = Instant::now();
    // Refused while the servers are quarantined, naming when they vote.
    let refused = election.try_campaign(b"early").unwrap_err();
    assert!(
        refused.is_no_quorum() && refused.to_string().contains("again in"),
        "{refused}"
    );
    let leading = election.campaign(b"after").unwrap();
    let waited = started.elapsed();
    let sent = lock_commands_of(&servers);
    let per_second: Vec<f64> = sent
        .iter()
        .map(|n| *n as f64 / waited.as_secs_f64())
        .collect();
    eprintln!(
        "led after {waited:?}; the servers received {sent:?} lock commands ({per_second:.1?}/s)"
    );
    // At most 10 commands a second while it waits, and 10 more for the
    // grant, the proclaim and the first extends (before issue 43 a waiter
    // sent thousands through a quarantine).
    let bound = (10.0 + 10.0 * waited.as_secs_f64()).min(60.0);
    assert!(
        sent.iter().all(|n| (*n as f64) < bound),
        "a campaign through a 3 s quarantine cost the servers {sent:?} lock commands in \
         {waited:?}"
    );
    let seen = observed(&election).expect("it leads");
    assert_eq!((seen.term(), seen.value()), (leading.term(), &b"after"[..]));
    leading.resign().unwrap();
}
