//! A Sentinel-managed master set as one lock node
//! (`redis+sentinel://`), against real sentinels the harness starts on
//! loopback (`testkit::SentinelSet`: a master, a replica, three
//! sentinels): the master the sentinels agree on, holds confirmed by
//! the replica, a failover while a lock is held, a sentinel down, the
//! replica paused, credentials never shown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::{self, Backend};
use quorum_lock::report::NodeOutcome;
use quorum_lock::{LockManager, RedisSentinelBackend, Scripts};
use testkit::{SentinelSet, commandstats, wait_until};

use crate::support::{fresh_builder, manager_of, warnings_with};
use crate::wakeups::{assert_woken, slow_retries, woken_after};

const TTL: Duration = Duration::from_secs(10);
const LONG_TTL: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(2);

/// A manager over the set alone (one node, one vote), failing at once;
/// restart quarantine off (the servers started a moment ago).
fn manager(set: &SentinelSet) -> LockManager {
    manager_of([set.url()], TTL, TIMEOUT)
}

/// Whether a key's value is a hold of `token` (an owner label may
/// follow it).
fn holds(value: Option<Vec<u8>>, token: &[u8]) -> bool {
    value.is_some_and(|v| v.starts_with(token))
}

/// Lock, extend and release through the node: the hold is on the master
/// the sentinels name, and on its replica before the lock is granted.
#[test]
fn lock_extend_release_on_the_master_the_sentinels_agree_on() {
    let set = SentinelSet::start();
    let locks = manager(&set);
    let mut guard = locks.try_lock("orders:1").unwrap();
    let token = guard.token().as_bytes().to_vec();
    assert!(holds(set.master().get(b"orders:1"), &token));
    assert!(
        holds(set.replica().get(b"orders:1"), &token),
        "a granted hold is on the replica (WAIT)"
    );
    guard.extend(TTL).unwrap();
    assert!(set.master().pttl(b"orders:1") > 5_000);
    guard.release().unwrap();
    assert_eq!(set.master().get(b"orders:1"), None);
    let name = &locks.health().nodes[0].name;
    assert!(name.starts_with("redis+sentinel://127.0.0.1:"), "{name}");
    assert!(name.ends_with("/quorum-lock-test"), "{name}");
}

/// A failover forced while a lock is held: the promoted replica has the
/// hold, so nobody else gets the lock; the holder's extend either keeps
/// it (on the new master) or reports it lost, and a kept lock is on the
/// new master.
#[test]
fn a_failover_while_held_never_gives_a_second_holder() {
    let mut set = SentinelSet::start();
    // Long enough to outlive the failover (several seconds).
    let long = |set: &SentinelSet| manager_of([set.url()], LONG_TTL, TIMEOUT);
    let (locks, other) = (long(&set), long(&set));
    let mut guard = locks.try_lock("orders:2").unwrap();
    let token = guard.token().as_bytes().to_vec();
    let old = set.master().port();
    set.failover();
    assert_ne!(set.master().port(), old, "the replica was promoted");
    assert!(
        holds(set.master().get(b"orders:2"), &token),
        "the new master has the hold: {:?} {:?}",
        set.master().keys(),
        set.replica().keys()
    );
    // The other manager meets the new master (after the old one refuses
    // writes as a replica, or directly): held elsewhere.
    let mut refused = 0;
    for _ in 0..3 {
        match other.try_lock("orders:2") {
            Ok(g) => panic!(
                "a second holder after the failover (first still valid: {}): {:?}",
                guard.is_valid(),
                g.token()
            ),
            Err(e) => {
                assert!(e.is_contended() || e.is_no_quorum(), "{e}");
                refused += usize::from(e.is_contended());
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "the new master was never asked");
    // The holder: an extend meets the old master (now a replica: it
    // refuses, and the sentinels are asked again) or the new one; within
    // a few tries the lock is kept there, or reported lost.
    let mut kept = false;
    let mut seen = Vec::new();
    for _ in 0..3 {
        match guard.extend(LONG_TTL) {
            Ok(_) => {
                kept = true;
                break;
            }
            Err(e) => {
                assert!(e.is_lost(), "an extend fails as a loss: {e}");
                seen.push(format!("{e:?}"));
            }
        }
    }
    assert!(
        kept,
        "the hold is on the promoted replica: the extend keeps it: {seen:#?}\n{}",
        locks.health()
    );
    assert!(holds(set.master().get(b"orders:2"), &token));
    assert!(
        other.try_lock("orders:2").is_err_and(|e| e.is_contended()),
        "kept means held"
    );
    guard.release().unwrap();
    assert_eq!(set.master().get(b"orders:2"), None);
}

/// A replica the master counts but no sentinel lists (started with
/// `replica-announced no`; the same as right after a failover, before
/// the sentinels have seen the old master come back as a replica): a
/// hold waits for it too, with a `WAIT` for the master's own count, and
/// is granted once it has the hold instead of failing as unconfirmed.
/// Paused, it still keeps a hold from counting.
#[test]
fn a_replica_the_sentinels_do_not_list_still_confirms_every_hold() {
    let set = SentinelSet::start_with_unlisted_replica();
    let locks = manager_of([set.url()], TTL, Duration::from_millis(500));
    let mut guard = locks.try_lock("orders:8").unwrap();
    let token = guard.token().as_bytes().to_vec();
    assert!(
        holds(set.replica().get(b"orders:8"), &token),
        "granted once the unlisted replica has the hold"
    );
    guard.extend(TTL).unwrap();
    guard.release().unwrap();
    // What the master receives for each hold: one `WAIT` (for its own
    // count), and no new connection: the sentinels are not asked again,
    // as they would be after a hold they did not confirm (they would
    // list the same, and each answer makes a new connection, `ROLE` and
    // `SCRIPT LOAD`s). Counted over 20 locks.
    let calls = |command| commandstats::calls_of(set.master(), command);
    let (waits, roles) = (calls("wait"), calls("role"));
    for _ in 0..20 {
        locks.try_lock("orders:8").unwrap().release().unwrap();
    }
    assert_eq!(calls("wait") - waits, 20, "one WAIT per hold");
    assert!(
        calls("role") - roles <= 1,
        "the sentinels asked again for every hold: {} ROLEs",
        calls("role") - roles
    );
    set.pause_replica();
    let e = locks.try_lock("orders:8").unwrap_err();
    set.resume_replica();
    let report = format!("{e:?}");
    assert!(report.contains("not confirmed by the replicas"), "{report}");
    assert!(locks.flush(TIMEOUT), "the refused attempt's undo was sent");
    assert_eq!(set.master().get(b"orders:8"), None, "and nothing is left");
}

/// One sentinel down: the two others are a majority of the three given,
/// and name the master. Two down: no majority, and the node says so in
/// one line naming it.
#[test]
fn a_majority_of_the_sentinels_is_enough_and_needed() {
    let mut set = SentinelSet::start();
    set.kill_sentinel(0);
    let locks = manager(&set);
    locks.try_lock("orders:3").unwrap().release().unwrap();
    set.kill_sentinel(1);
    let alone = manager(&set);
    let e = alone.try_lock("orders:3").unwrap_err();
    assert!(e.is_no_quorum(), "{e}");
    let said = e.to_string();
    let report = format!("{e:?}");
    assert!(report.contains("sentinels"), "{report}");
    assert!(report.contains("redis+sentinel://"), "{report}");
    assert!(!said.contains('\n'), "one line: {said}");
}

/// The replica paused: the master cannot have a hold acknowledged, so
/// it grants nothing (as a cluster shard); back, it grants again.
#[test]
fn a_paused_replica_makes_the_hold_refused() {
    let set = SentinelSet::start();
    let loads = || commandstats::calls_of(set.master(), "script|load");
    let fresh = loads();
    // With the scripts on every server (a Valkey 9.1 master would run
    // without them, and load none), so that a new backend for the master
    // shows in what the master receives: its scripts loaded (by its first
    // batch, or by the node's first look at the server, which may come
    // before).
    let locks = fresh_builder([set.url()], TTL, Duration::from_millis(500))
        .max_ttl(TTL)
        .scripts(Scripts::Always)
        .build()
        .unwrap();
    locks.try_lock("orders:4").unwrap().release().unwrap();
    let per_backend = loads() - fresh;
    assert!(per_backend > 0, "the first lock loaded the scripts");
    set.pause_replica();
    let loaded = loads();
    let e = locks.try_lock("orders:4").unwrap_err();
    let report = format!("{e:?}");
    assert!(report.contains("not confirmed by the replicas"), "{report}");
    // Each refusal makes the node ask the sentinels again; when they name
    // the same master with as many replicas, its backend serves again:
    // no new connection, no scripts loaded again (before: 140 `SCRIPT
    // LOAD`s over these attempts, a new backend for each). One new
    // backend is allowed: the sentinels may flag the paused replica down
    // meanwhile, and list one fewer.
    for _ in 0..10 {
        assert!(locks.try_lock("orders:4").is_err());
    }
    assert!(
        loads() - loaded <= per_backend,
        "{} SCRIPT LOADs over 11 refused attempts",
        loads() - loaded
    );
    set.resume_replica();
    assert!(
        wait_until(Duration::from_secs(10), || locks
            .try_lock("orders:4")
            .is_ok_and(|g| g.release().is_ok())),
        "the replica back, locks are granted again"
    );
}

/// A replica that stopped answering (paused: its link to the master stays
/// open), once the sentinels flag it down: the master still counts it,
/// so every hold is refused (it cannot acknowledge), and the node asks
/// the sentinels again after each; they list no replica. The node warns
/// of a master without a listed replica once, when it finds that master
/// so, not again at every attempt (before: at every one, a flood in the
/// log at the moment an operator reads it).
#[test]
fn a_master_listed_without_replicas_is_warned_about_once() {
    let set = SentinelSet::start();
    let url = set.url();
    let warned = || warnings_with(&[&url, "the sentinels list no replica"]);
    let at_start = warned();
    let locks = manager_of([&url], TTL, Duration::from_millis(300));
    locks.try_lock("orders:10").unwrap().release().unwrap();
    set.pause_replica();
    let flagged = wait_until(Duration::from_secs(15), || set.listed_replicas() == 0);
    for _ in 0..6 {
        assert!(
            locks.try_lock("orders:10").is_err(),
            "the paused replica cannot confirm"
        );
    }
    // The undos of the refused attempts settled (they may ask too).
    locks.flush(TIMEOUT);
    let times = warned() - at_start;
    set.resume_replica();
    assert!(
        flagged,
        "the sentinels never flagged the paused replica down"
    );
    assert_eq!(times, 1, "warned {times} times over 6 attempts");
}

/// Passwords (the sentinels' and the data nodes') never appear: not in
/// the node's name, its `Debug`, an error, nor `health()`.
#[test]
fn credentials_never_appear() {
    let set = SentinelSet::start_with_sentinel_password("s3ntinel-pw");
    for server in [set.master(), set.replica()] {
        let mut acl = redis::cmd("ACL");
        acl.arg("SETUSER")
            .arg("locker")
            .arg("on")
            .arg(">d4ta-pw")
            .arg("~*")
            .arg("&*")
            .arg("+@all");
        let () = server.cmd(&acl);
    }
    let url = set
        .url()
        .replace("redis+sentinel://", "redis+sentinel://locker:d4ta-pw@");
    let node = RedisSentinelBackend::open(&url, TIMEOUT).unwrap();
    let secret = |text: &str| text.contains("s3ntinel-pw") || text.contains("d4ta-pw");
    assert!(!secret(&node.describe()), "{}", node.describe());
    assert!(!secret(&format!("{node:?}")));
    assert!(backend::acquire(&node, b"k", b"0123456789abcdefghij", TTL).unwrap());
    // A wrong data-node password, and a wrong sentinel password: errors
    // naming the node, without either password.
    let wrong_data = url.replace("d4ta-pw", "d4ta-pw-wrong");
    let wrong_sentinel = url.replace("s3ntinel-pw", "s3ntinel-pw-wrong");
    for url in [wrong_data, wrong_sentinel] {
        let node = RedisSentinelBackend::open(&url, TIMEOUT).unwrap();
        let e = backend::acquire(&node, b"k2", b"0123456789abcdefghij", TTL).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!secret(&text), "{text}");
        assert!(text.contains("redis+sentinel://locker:***@"), "{text}");
        let locks = fresh_builder([url.as_str()], TTL, TIMEOUT).build().unwrap();
        let e = locks.try_lock("k3").unwrap_err();
        let text = format!("{e} {e:?} {}", locks.health());
        assert!(!secret(&text), "{text}");
    }
}

/// Bad URLs are refused before any connection, in one line, without
/// the password.
#[test]
fn bad_urls_are_refused_before_any_connection() {
    for url in [
        "redis+sentinel://:pw@127.0.0.1:26379",
        "redis+sentinel://:pw@127.0.0.1:26379/",
        "redis+sentinel://:pw@/mymaster",
        "redis+sentinel://:pw@127.0.0.1:99999/mymaster",
        "redis+sentinel://:pw@127.0.0.1:x/mymaster",
        "redis+sentinel://:pw@127.0.0.1:26379,/mymaster",
    ] {
        let e = LockManager::builder().redis_nodes([url]).unwrap_err();
        assert!(e.is_invalid(), "{url}: {e}");
        let text = e.to_string();
        assert!(!text.contains("pw@"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}

/// `uptime_in_seconds` of a server.
fn uptime(server: &testkit::RedisServer) -> u64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("server"));
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("uptime_in_seconds:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A promotion and the restart quarantine: the promoted replica is a
/// server of its own, judged at first contact by its own uptime (as a
/// cluster's promoted replica is). Up for longer than max TTL, it votes
/// at once: every hold that counted is on it (`WAIT`), so it forgot
/// nothing. Were it taken for the old master restarted, nobody could
/// lock through this node for max TTL after every failover.
#[test]
fn a_promoted_replica_up_for_long_votes_at_once() {
    let mut set = SentinelSet::start();
    let max_ttl = Duration::from_secs(1);
    let locks = LockManager::builder()
        .redis_nodes([set.url()])
        .unwrap()
        .ttl(max_ttl)
        .max_ttl(max_ttl)
        .node_timeout(Duration::from_millis(500))
        .retry(quorum_lock::RetryPolicy::none())
        .restart_quarantine(true)
        .build()
        .unwrap();
    // Both servers up for longer than max TTL + drift + 1 s (the uptime's
    // resolution).
    let up_long = || uptime(set.master()) >= 3 && uptime(set.replica()) >= 3;
    assert!(wait_until(Duration::from_secs(10), up_long));
    locks.try_lock("q:1").unwrap().release().unwrap();
    set.failover();
    // The first attempts may still meet the old master (a replica now:
    // it refuses, and the sentinels are asked again), or the new master
    // before its replica, the old master, has caught up, so that `WAIT`
    // confirms nothing (seen in CI with both cores saturated: "0 of 1
    // acknowledged" three times in a row). Neither is the quarantine
    // this test is about: no attempt is answered with the node
    // quarantined, and a lock is granted within the wait.
    // The refusals, the last few kept (an attempt every 10 ms or so).
    let mut seen = std::collections::VecDeque::new();
    let mut refused = 0;
    let granted = wait_until(Duration::from_secs(20), || match locks.try_lock("q:2") {
        Ok(guard) => guard.release().is_ok(),
        Err(e) => {
            let quarantined = e.report().is_some_and(|r| {
                !r.nodes_where(|o| matches!(o, NodeOutcome::Quarantined { .. }))
                    .is_empty()
            });
            assert!(!quarantined, "quarantined after the failover: {e}");
            refused += 1;
            if seen.len() == 5 {
                seen.pop_front();
            }
            seen.push_back(format!("{e:?}"));
            false
        }
    });
    assert!(
        granted,
        "{refused} refusals, the last: {seen:#?}\n{}",
        locks.health()
    );
}

/// The replica gone for good: the master drops it, the sentinels flag it
/// down, and the master is a plain server: its holds are refused until
/// then, granted after, and `health()` says that no replica confirms
/// them.
#[test]
fn a_master_without_a_replica_is_a_plain_server_and_health_says_so() {
    let mut set = SentinelSet::start();
    let locks = manager_of([set.url()], TTL, Duration::from_millis(500));
    locks.try_lock("p:1").unwrap().release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    let health = locks.health();
    assert_eq!(health.nodes[0].confirming_replicas, Some(1), "{health}");
    set.kill_replica();
    let granted = || locks.try_lock("p:2").is_ok_and(|g| g.release().is_ok());
    assert!(
        wait_until(Duration::from_secs(15), granted),
        "{}",
        locks.health()
    );
    assert!(locks.flush(Duration::from_secs(5)));
    let health = locks.health();
    assert_eq!(health.nodes[0].confirming_replicas, Some(0), "{health}");
    assert!(
        health
            .to_string()
            .contains("no replica confirms its holds (a plain server)"),
        "{health}"
    );
}

/// A waiter in another process is woken by the release notice of the
/// master the sentinels name, well before its retry delay.
#[test]
fn a_waiter_is_woken_by_the_release_on_the_master() {
    let set = SentinelSet::start();
    let (holder, waiter) = (manager(&set), manager(&set));
    let guard = testkit::hold_settled(&holder, "wake");
    let after = woken_after(&waiter, "wake", &slow_retries(), guard, || {
        testkit::until_listening(&waiter);
    });
    assert_woken(after);
}

/// An old master that still says `master` but has lost its replicas (as
/// one cut off in a minority): the node, which found it before the
/// failover, sends it a hold; it cannot be acknowledged, so it counts
/// nothing, and the node asks the sentinels again: once they have made
/// the old master a replica again, holds count on the new master.
/// (The node alone, without a manager: a manager's background look at
/// the node would ask the sentinels again before the hold. The sentinels
/// are paused meanwhile: they would soon make the stray master a replica
/// again, killing its clients' connections with it, and on a loaded
/// machine that can land in the middle of the hold, which then fails as
/// unreachable before it tested anything.)
#[test]
fn an_old_master_without_its_replicas_counts_no_hold() {
    let mut set = SentinelSet::start();
    let node = RedisSentinelBackend::open(&set.url(), TIMEOUT).unwrap();
    let token = b"0123456789abcdefghij";
    assert!(backend::acquire(&node, b"m:1", token, TTL).unwrap());
    assert!(backend::release(&node, b"m:1", token).unwrap());
    let old = set.master().port();
    set.failover();
    // The old master, a replica now, made a master of nothing again.
    let stale = set.replica();
    assert_eq!(stale.port(), old);
    set.pause_sentinels();
    let () = stale.cmd(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    let attempt = backend::acquire(&node, b"m:2", token, TTL);
    set.resume_sentinels();
    let text = attempt.unwrap_err().to_string();
    assert!(text.contains("not confirmed by the replicas"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{old}/")), "{text}");
    // Undone, as a failed acquire is.
    let _ = backend::release(&node, b"m:2", token);
    let on_the_new_master = || {
        backend::acquire(&node, b"m:3", token, TTL).is_ok_and(|granted| granted)
            && holds(set.master().get(b"m:3"), token)
    };
    assert!(
        testkit::wait_until_with(
            Duration::from_secs(20),
            Duration::from_millis(100),
            || false,
            on_the_new_master
        ),
        "never granted on the new master"
    );
    assert!(backend::release(&node, b"m:3", token).unwrap());
}

/// Lock, extend and release through `rediss+sentinel://`: TLS to the
/// sentinels (their TLS ports) and to the master they name (its TLS
/// port: they watch it over TLS), the self-signed certificate taken with
/// `#insecure` as on a `rediss://` URL; without it the sentinels' are
/// refused, so no master is found.
#[cfg(feature = "tls")]
#[test]
fn lock_extend_release_over_tls_through_the_sentinels() {
    let set = SentinelSet::start_tls();
    let url = set.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    assert!(url.ends_with("#insecure"), "{url}");
    let master_tls = set.master().tls_port().unwrap();
    let node = RedisSentinelBackend::open(&url, TIMEOUT).unwrap();
    assert_eq!(
        node.master_address().unwrap(),
        ("127.0.0.1".to_owned(), master_tls)
    );
    let locks = manager_of([&url], TTL, TIMEOUT);
    let mut guard = locks.try_lock("orders:tls").unwrap();
    let token = guard.token().as_bytes().to_vec();
    assert!(holds(set.master().get(b"orders:tls"), &token));
    assert!(
        holds(set.replica().get(b"orders:tls"), &token),
        "a granted hold is on the replica (WAIT, replicated over TLS)"
    );
    guard.extend(TTL).unwrap();
    assert!(set.master().pttl(b"orders:tls") > 5_000);
    guard.release().unwrap();
    assert_eq!(set.master().get(b"orders:tls"), None);
    let strict = RedisSentinelBackend::open(&url.replace("#insecure", ""), TIMEOUT).unwrap();
    let e = strict.master_address().unwrap_err();
    assert!(e.to_string().contains("0 of them answered"), "{e}");
}
