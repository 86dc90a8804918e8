//! What real servers can do to a lock besides failing: evict its keys under
//! memory pressure, forget their script cache, and hold keys the crate
//! itself writes (the fence counters). Each test is a schedule that broke
//! safety (or locked a resource for ever) before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::{self, KeySet, Op};
use quorum_lock::health::NodeState;
use quorum_lock::{LockGuard, LockManager, LostSignal, RedisBackend};
use testkit::{RedisServer, wait_until};

use crate::support::fresh_builder;

const TTL: Duration = Duration::from_secs(5);

fn manager(urls: &[String], fencing: bool) -> LockManager {
    builder(urls).fencing(fencing).build().unwrap()
}

/// Freshly started servers, no quarantine: this file is about other edges.
fn builder(urls: &[String]) -> quorum_lock::LockManagerBuilder {
    fresh_builder(urls, TTL, Duration::from_millis(300)).max_ttl(TTL)
}

fn evicting(policy: &str) -> Vec<RedisServer> {
    (0..3)
        .map(|_| RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", policy]))
        .collect()
}

/// Writes 32 KiB cache entries with an expiry (as an application sharing
/// the server does) until `key` is gone from at least two servers, or 2000
/// writes per server. Returns how many servers still hold `key`.
fn fill_until_evicted(servers: &[RedisServer], key: &[u8]) -> usize {
    let value = vec![b'x'; 32 * 1024];
    for i in 0..2000 {
        for server in servers {
            let _: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("cache:{i}"))
                .arg(&value)
                .arg("EX")
                .arg(3600)
                .query(&mut server.conn());
        }
        let holding = servers.iter().filter(|s| s.get(key).is_some()).count();
        if holding < 2 {
            return holding;
        }
    }
    servers.iter().filter(|s| s.get(key).is_some()).count()
}

/// Servers with `maxmemory` and an evicting policy (`volatile-lru`, the
/// default of large managed offerings, or any `allkeys-*`) drop idle lock
/// keys first. Before the fix A locked, cache writes evicted its keys, and
/// B's `try_lock` was granted while A's guard still reported seconds of
/// validity. Now such a server's grants do not count, and the error names
/// the setting and the fix.
#[test]
fn servers_that_evict_keys_never_give_two_valid_holders() {
    for policy in ["volatile-lru", "allkeys-lru"] {
        let servers = evicting(policy);
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let (a, b) = (manager(&urls, false), manager(&urls, false));
        match a.try_lock("r") {
            Ok(guard) => {
                let holding = fill_until_evicted(&servers, b"r");
                let left = guard.validity();
                if let Ok(second) = b.try_lock("r") {
                    assert!(
                        guard.validity().is_zero(),
                        "{policy}: two valid holders: A ({left:?} left) and B ({:?}); \
                         A's key left on {holding} of 3 servers",
                        second.validity()
                    );
                }
            }
            Err(e) => {
                let text = e.to_string();
                assert!(!e.is_retryable(), "{policy}: {text}");
                // Every node has answered (the round decided without one).
                assert!(a.flush(Duration::from_secs(5)));
                assert!(
                    text.contains(policy) && text.contains("maxmemory-policy noeviction"),
                    "{policy}: the error names the setting and the fix: {text}"
                );
                assert!(
                    a.health()
                        .nodes
                        .iter()
                        .all(|n| matches!(n.state, NodeState::MayEvict { .. })),
                    "{policy}: {}",
                    a.health()
                );
            }
        }
        assert!(a.flush(Duration::from_secs(5)));
        assert!(
            servers.iter().all(|s| s.get(b"r").is_none()),
            "{policy}: a refused lock leaves no key behind"
        );
    }
}

/// The explicit opt-in: a deployment that accepts the risk (documented in
/// docs/safety.md) locks on evicting servers, and `health()` still says so.
#[test]
fn accepting_the_eviction_risk_is_explicit_and_visible() {
    let servers = evicting("volatile-lru");
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let locks = builder(&urls).accept_eviction_risk(true).build().unwrap();
    let guard = locks.try_lock("r").unwrap();
    // Every node has answered (the round may decide without the last one).
    assert!(locks.flush(Duration::from_secs(5)));
    for node in &locks.health().nodes {
        assert_eq!(node.state, NodeState::Up, "{}", locks.health());
        assert_eq!(
            node.eviction.as_deref(),
            Some("maxmemory 4194304, maxmemory-policy volatile-lru")
        );
    }
    guard.release().unwrap();
    // Servers that do not evict are not marked.
    let safe: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"])
        })
        .collect();
    let urls: Vec<String> = safe.iter().map(RedisServer::url).collect();
    let locks = manager(&urls, false);
    locks.try_lock("r").unwrap().release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(locks.health().nodes.iter().all(|n| n.eviction.is_none()));
}

/// After `SCRIPT FLUSH` (or a restart, or a failover) the first `EVALSHA`
/// of a pipeline answers `NOSCRIPT`. Before the fix that op was re-run by
/// `EVAL` in a second round trip, after the later ops of the same batch:
/// `[fenced acquire(k), release(k)]` ran the release first, and the failed
/// attempt's key stayed for its TTL.
#[test]
fn a_flushed_script_cache_does_not_reorder_a_nodes_pipeline() {
    let server = RedisServer::start();
    let node = RedisBackend::open(&server.url(), Duration::from_secs(2)).unwrap();
    let token = b"0123456789abcdefghij";
    // The cache is flushed, then a release caches its own script again:
    // the fenced acquire's script is missing, the release's is not.
    assert!(!backend::release(&node, b"warm", token).unwrap());
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    assert!(!backend::release(&node, b"warm", token).unwrap());
    let k = KeySet::one("k");
    let ops = [
        Op::acquire_fenced(&k, token, TTL, b"{quorum-lock}:fences"),
        Op::release(&k, token),
    ];
    let results = backend::run(&node, &ops).into_results();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        server.get(b"k"),
        None,
        "the release ran before the acquire it undoes: {results:?}"
    );
}

/// Fence counters lived in `<key>:fence`, in the same key space as locks:
/// after `job` was fenced once, the resource `job:fence` could never be
/// locked (the counter has no expiry), and while `job:fence` was held a
/// fenced lock of `job` failed. Now every counter of a node sits in one
/// hash under a name the crate refuses as a resource.
#[test]
fn fence_counters_never_collide_with_a_resource() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let fenced = manager(&urls, true);
    let plain = manager(&urls, false);
    let first = fenced.try_lock("job").unwrap();
    let fence = first.fence().unwrap();
    first.release().unwrap();
    let neighbour = plain
        .try_lock("job:fence")
        .expect("a resource named like an old counter key is free");
    let second = fenced
        .try_lock("job")
        .expect("a fenced lock beside a held job:fence");
    assert!(second.fence().unwrap() > fence);
    second.release().unwrap();
    neighbour.release().unwrap();
    // The counters' own name is refused as a resource.
    let reserved = fenced.try_lock("{quorum-lock}:fences").unwrap_err();
    assert!(
        matches!(reserved, quorum_lock::Error::InvalidArgument { .. }),
        "{reserved}"
    );
    // A foreign value where the counters live is a clear, typed error.
    for server in &servers {
        server.flushall();
        server.set(b"{quorum-lock}:fences", b"not a hash");
    }
    let err = fenced.try_lock("job").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("WRONGTYPE") && text.contains("fence"),
        "{text}"
    );
    assert!(!err.is_retryable(), "{text}");
    assert!(fenced.flush(Duration::from_secs(5)));
    assert!(
        wait_until(Duration::from_secs(2), || servers
            .iter()
            .all(|s| s.get(b"job").is_none())),
        "a failed fenced attempt leaves no lock key behind"
    );
}

/// A 64 MiB resource name was sent to every node, timed out, and got all
/// three marked down: another thread's small lock, made at once, failed
/// with 0 of 3 granted. Now the name is refused before any node is
/// contacted, and the other thread's lock is granted.
#[test]
fn a_huge_name_never_takes_the_nodes_away_from_other_callers() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let locks = manager(&urls, false);
    // Connections are open and every node is up before the race.
    locks.try_lock("warm-up").unwrap().release().unwrap();
    let huge = vec![b'h'; 64 << 20];
    let caller = locks.clone();
    let huge_result = std::thread::spawn(move || caller.try_lock(&huge).map(drop))
        .join()
        .unwrap();
    // At once, on another thread: the nodes are still there for it.
    let small_result = locks.try_lock("small").map(LockGuard::release);
    small_result
        .expect("the other thread's lock is granted")
        .expect("and released");
    let err = huge_result.unwrap_err();
    assert!(err.is_invalid(), "the huge name is refused: {err}");
    assert!(locks.flush(Duration::from_secs(5)));
    assert_eq!(locks.health().voting(), 3, "{}", locks.health());
}

/// How old a node's settings may be when a grant is counted (the crate's
/// documented bound, docs/safety.md).
const SETTINGS_MAX_AGE: Duration = Duration::from_millis(500);

/// `CONFIG SET maxmemory <used + 3 MiB>` and `maxmemory-policy <policy>`
/// on every server, as an operator (or a managed service's parameter
/// change) does at run time.
fn switch_eviction_on(servers: &[RedisServer], policy: &str) {
    for server in servers {
        let info: String = server.cmd(redis::cmd("INFO").arg("memory"));
        let used: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        let _: () = server.cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory")
                .arg(used + (3 << 20)),
        );
        let _: () = server.cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy),
        );
    }
}

/// B's `try_lock("r")` is refused while A's `guard` holds it (its key left
/// on `holding` servers), and A's `lost` signal fires before its TTL
/// ends. Returns the notice.
fn refused_and_told(
    b: &LockManager,
    guard: &LockGuard,
    lost: &LostSignal,
    holding: usize,
) -> quorum_lock::Error {
    let left = guard.validity();
    if let Ok(second) = b.try_lock("r") {
        panic!(
            "two valid holders: A ({left:?} left, valid now: {}) and B ({:?}); A's key left \
             on {holding} of 3 servers; B's health: {}",
            guard.is_valid(),
            second.validity(),
            b.health()
        );
    }
    let notice = lost
        .recv_timeout(left)
        .expect("A is told before its TTL ends");
    assert!(notice.is_lost(), "{notice}");
    notice
}

/// Managers A and B past the start quarantine, with their pooled
/// connections open; then an evicting policy is switched on at run time.
/// Before the fix the settings were read once per connection: A's keys were
/// evicted, B was granted the lock while A's guard was valid with seconds
/// left, and `health()` said every node voted. Now the settings are at most
/// `SETTINGS_MAX_AGE` old when a grant counts: B is refused, A's lost
/// signal fires at once (not a TTL later), `health()` names the setting,
/// and a node whose policy goes back to `noeviction` is quarantined, as
/// after a restart, until every lock it may have dropped has expired.
#[test]
fn an_evicting_policy_switched_on_at_run_time_never_gives_two_valid_holders() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (manager(&urls, false), manager(&urls, false));
    b.try_lock("warm-up").unwrap().release().unwrap();
    let b_read = std::time::Instant::now();
    let guard = a.try_lock("r").unwrap();
    let lost = guard.lost_signal();
    switch_eviction_on(&servers, "volatile-lru");
    let holding = fill_until_evicted(&servers, b"r");
    // B's last read of the settings is at least the documented age old.
    std::thread::sleep(
        (b_read + SETTINGS_MAX_AGE).saturating_duration_since(std::time::Instant::now()),
    );
    // A holds the lock without traffic: its nodes' settings are read in
    // the background, and the loss reaches it before its TTL would.
    let notice = refused_and_told(&b, &guard, &lost, holding);
    assert!(notice.to_string().contains("volatile-lru"), "{notice}");
    assert!(!guard.is_valid());
    assert!(b.flush(Duration::from_secs(5)));
    let health = b.health();
    assert_eq!(health.voting(), 0, "{health}");
    assert!(
        health.to_string().contains("maxmemory-policy volatile-lru"),
        "health names the setting: {health}"
    );
    drop(guard);
    // Back to `noeviction`: the nodes may have dropped keys of locks that
    // are still held, so they do not vote until those have expired.
    for server in &servers {
        let _: () = server.cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("noeviction"),
        );
    }
    let b_read = std::time::Instant::now();
    std::thread::sleep(SETTINGS_MAX_AGE);
    let err = b.try_lock("r").unwrap_err();
    assert!(!err.is_contended(), "refused for the quarantine: {err}");
    assert!(b.flush(Duration::from_secs(5)));
    let health = b.health();
    assert!(
        health
            .nodes
            .iter()
            .all(|n| matches!(n.state, NodeState::Quarantined { .. })),
        "quarantined after {:?}: {health}",
        b_read.elapsed()
    );
}

/// A master turned replica at run time (`REPLICAOF`, what a failover does
/// to the old master) drops its keys for its new master's. A's lost signal
/// fires at once, B is refused while the nodes are replicas, and once they
/// are masters again (a new replication history) they are quarantined until
/// every lock they may have dropped expired.
#[test]
fn a_master_turned_replica_at_run_time_is_a_forget_and_then_a_quarantine() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let source = RedisServer::start();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (manager(&urls, false), manager(&urls, false));
    let guard = a.try_lock("r").unwrap();
    let lost = guard.lost_signal();
    let left = guard.validity();
    for server in &servers[..2] {
        let _: () = server.cmd(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(source.port()));
    }
    let notice = lost
        .recv_timeout(left)
        .expect("A is told before its TTL ends");
    assert!(notice.to_string().contains("replica"), "{notice}");
    // Refused: the replicas' grants do not count (until their sync from
    // the new master ends they may still hold A's key and say so).
    b.try_lock("r").unwrap_err();
    assert!(b.flush(Duration::from_secs(5)));
    let health = b.health();
    let replicas = health
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Replica)
        .count();
    assert_eq!(replicas, 2, "health names the replicas: {health}");
    assert_eq!(health.voting(), 1, "{health}");
    for server in &servers[..2] {
        let _: () = server.cmd(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    }
    // A lets go: its key is deleted wherever it is left.
    drop(guard);
    assert!(a.flush(Duration::from_secs(5)));
    // Their next read of the settings shows the new history.
    std::thread::sleep(SETTINGS_MAX_AGE);
    let err = b.try_lock("r").unwrap_err();
    assert!(!err.is_contended(), "refused for the quarantine: {err}");
    assert!(b.flush(Duration::from_secs(5)));
    let health = b.health();
    let quarantined = health
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Quarantined { .. }))
        .count();
    assert_eq!(quarantined, 2, "{health}");
}

/// An evicting policy switched on, keys evicted, and the policy switched
/// back before B reads the settings again. B's next read shows
/// `noeviction`, but `evicted_keys` grew since its last read: the nodes are
/// quarantined and B is refused; A is told.
#[test]
fn evictions_between_two_reads_show_in_the_evicted_keys_count() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (manager(&urls, false), manager(&urls, false));
    b.try_lock("warm-up").unwrap().release().unwrap();
    assert!(b.flush(Duration::from_secs(5)));
    let guard = a.try_lock("r").unwrap();
    let lost = guard.lost_signal();
    switch_eviction_on(&servers, "volatile-lru");
    let holding = fill_until_evicted(&servers, b"r");
    for server in &servers {
        let _: () = server.cmd(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("noeviction"),
        );
    }
    // B's last read was before the switch; its next one is after both.
    std::thread::sleep(SETTINGS_MAX_AGE);
    refused_and_told(&b, &guard, &lost, holding);
    assert!(b.flush(Duration::from_secs(5)));
    let health = b.health();
    assert!(
        health
            .nodes
            .iter()
            .all(|n| matches!(n.state, NodeState::Quarantined { .. })),
        "{health}"
    );
}

/// A manager that holds a lock and sends nothing reads each node's
/// settings itself (the looks that find an evicting policy switched on,
/// above) about once a second, and wakes its nodes for nothing else.
/// Before the fix the look's clock ran ahead of the connection's: every
/// other wake found the settings "fresh" and sent a bare `PING`, twice
/// the wakes for the same reads. Counted by the servers: over 3.5 s of
/// holding, each receives 2 to 4 looks (three `INFO <section>` each) and
/// no `PING`.
#[test]
fn an_idle_holder_reads_the_settings_about_once_a_second_and_sends_nothing_else() {
    use testkit::commandstats::{calls, lock_commands, reset};

    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let ttl = Duration::from_secs(10);
    let locks = fresh_builder(&urls, ttl, Duration::from_millis(300))
        .max_ttl(ttl)
        .build()
        .unwrap();
    let guard = locks.try_lock("held").unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    servers.iter().for_each(reset);
    // The window the servers count over (not a wait for a state).
    std::thread::sleep(Duration::from_millis(3_500));
    for (server, url) in servers.iter().zip(&urls) {
        let received = calls(server);
        let of = |command: &str| {
            received
                .iter()
                .find(|(name, _)| name == command)
                .map_or(0, |(_, n)| *n)
        };
        assert_eq!(of("ping"), 0, "{url}: bare PINGs: {received:?}");
        // Nothing of a lock's (the inspection connections' own set-up,
        // `CLIENT SETINFO` on newer servers, is bookkeeping).
        assert_eq!(lock_commands(server), 0, "{url}: {received:?}");
        assert!(
            (2 * 3..=4 * 3).contains(&of("info")),
            "{url}: {} INFO in 3.5 s, not 2 to 4 looks of three: {received:?}",
            of("info")
        );
    }
    guard.release().unwrap();
}
