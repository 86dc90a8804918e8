//! The read-write lock against real `redis-server` (or Valkey) processes:
//! each reader's entry and expiry on the servers, a crashed reader among
//! live ones, a writer under a stream of readers, a reader and a writer
//! that reach different nodes, and a server without scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{Error, LockManager, LockOptions, RetryPolicy, RwLock, Scripts};
use testkit::{RedisServer, RedisServers, free_port, wait_until};

use crate::support::Fresh;

const TTL: Duration = Duration::from_secs(10);
/// Generous for a loaded 2-core machine.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const FLUSH: Duration = Duration::from_secs(5);
/// Hang detector: no single call here may take longer.
const HANG: Duration = Duration::from_secs(5);

const FRESH: Fresh = Fresh {
    ttl: TTL,
    node_timeout: NODE_TIMEOUT,
};

/// The readers on `server` of `rw`: each one's value and its expiry
/// score (server ms).
fn readers_on(server: &RedisServer, rw: &RwLock) -> Vec<(Vec<u8>, i64)> {
    let (readers, _) = rw.keys();
    server.cmd(
        redis::cmd("ZRANGE")
            .arg(readers)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"),
    )
}

/// The server's clock, in ms.
fn server_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = server.cmd(&redis::cmd("TIME"));
    secs * 1000 + micros / 1000
}

fn assert_no_keys_left(managers: &[&LockManager], servers: &[RedisServer]) {
    for m in managers {
        assert!(m.flush(FLUSH), "flush did not finish in {FLUSH:?}");
    }
    for s in servers {
        // Not the key of a manager's own try of what locks need
        // (`{quorum-lock}:probe:*`), which lives a millisecond on a node
        // that refuses releases (here: `Scripts::Never` on Redis 7).
        let keys: Vec<Vec<u8>> = s
            .keys()
            .into_iter()
            .filter(|k| !k.starts_with(b"{quorum-lock}:probe:"))
            .collect();
        assert!(
            keys.is_empty(),
            "{} still holds {:?}",
            s.url(),
            keys.iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn readers_share_a_writer_is_alone_and_nothing_is_left_behind() {
    let servers = RedisServers::start(3);
    let [a, b, c] = [(); 3].map(|()| FRESH.manager(&servers.urls()));
    let [ra, rb, rc] = [&a, &b, &c].map(|m| m.rw_lock("config").unwrap());
    let first = ra.try_read().unwrap();
    let second = rb.try_read().unwrap();
    assert!(a.flush(FLUSH) && b.flush(FLUSH));
    for s in servers.iter() {
        assert_eq!(readers_on(s, &ra).len(), 2, "{}: two readers", s.url());
        let (readers, writer) = ra.keys();
        assert_eq!(s.get(writer), None, "no writer");
        let pttl = s.pttl(readers);
        assert!(
            pttl > 0 && pttl <= 10_000,
            "{}: the set lives as its last reader: {pttl}",
            s.url()
        );
    }
    let refused = rc.try_write().expect_err("readers are in");
    assert!(refused.is_contended(), "{refused}");
    first.release().unwrap();
    second.release().unwrap();
    let writer = rc.try_write().expect("no reader left");
    assert!(c.flush(FLUSH));
    for s in servers.iter() {
        let (_, key) = rc.keys();
        assert!(
            s.get(key)
                .is_some_and(|v| writer.token().matches_stored(&v))
        );
        assert!(readers_on(s, &rc).is_empty());
    }
    for refused in [ra.try_read(), rb.try_write()] {
        assert!(refused.expect_err("the writer is alone").is_contended());
    }
    writer.release().unwrap();
    assert_no_keys_left(&[&a, &b, &c], &servers);
}

#[test]
fn a_crashed_reader_expires_on_its_own_among_live_readers() {
    let servers = RedisServers::start(3);
    let (crashed, live) = (
        FRESH.manager(&servers.urls()),
        FRESH.manager(&servers.urls()),
    );
    let short = Duration::from_millis(1500);
    let rw_crashed = crashed.rw_lock("report").unwrap();
    let rw_live = live.rw_lock("report").unwrap();
    // The crashed reader: never extended, never released.
    let gone = rw_crashed
        .read_with(&LockOptions::new().ttl(short))
        .unwrap();
    let crashed_value = {
        assert!(crashed.flush(FLUSH));
        let entries = readers_on(&servers[0], &rw_crashed);
        assert_eq!(entries.len(), 1);
        entries[0].clone()
    };
    std::mem::forget(gone);
    // A live reader that extends itself (at about a third of its TTL).
    let live_guard = rw_live
        .read_with(&LockOptions::new().ttl(short).auto_extend(true))
        .unwrap();
    // Each entry's expiry is its own, on the server's clock: the crashed
    // one's is at most its TTL from when it was set, and the live one's
    // extends never move it.
    for s in servers.iter() {
        let (value, score) = readers_on(s, &rw_crashed)
            .into_iter()
            .find(|(v, _)| *v == crashed_value.0)
            .expect("the crashed reader is on every node");
        assert_eq!(value, crashed_value.0);
        assert!(score - server_ms(s) <= 1500, "{}: {score}", s.url());
    }
    let crashed_scores: Vec<i64> = servers
        .iter()
        .map(|s| {
            readers_on(s, &rw_crashed)
                .into_iter()
                .find(|(v, _)| *v == crashed_value.0)
                .unwrap()
                .1
        })
        .collect();
    // Wait (bounded) until the crashed reader is gone from every node:
    // its TTL passes while the live reader keeps extending.
    let expired = wait_until(Duration::from_secs(10), || {
        servers.iter().all(|s| {
            readers_on(s, &rw_live)
                .iter()
                .all(|(v, _)| *v != crashed_value.0)
        })
    });
    assert!(expired, "the crashed reader expired on every node");
    assert!(live_guard.is_valid(), "the live reader still holds");
    assert!(live.flush(FLUSH));
    for (s, crashed_score) in servers.iter().zip(crashed_scores) {
        let entries = readers_on(s, &rw_live);
        assert_eq!(entries.len(), 1, "{}: only the live reader", s.url());
        assert!(
            entries[0].1 > crashed_score,
            "{}: the live one was extended",
            s.url()
        );
    }
    assert!(live_guard.extensions() > 0, "it extended meanwhile");
    live_guard.release().unwrap();
    // No reader left: a writer gets in at once.
    let writer = live.rw_lock("report").unwrap().try_write().unwrap();
    writer.release().unwrap();
    assert_no_keys_left(&[&live, &crashed], &servers);
}

#[test]
fn a_writer_waiting_under_a_stream_of_readers_gets_in() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, reads, urls) = (Arc::clone(&stop), Arc::clone(&reads), urls.clone());
            thread::spawn(move || {
                let rw = FRESH.manager(&urls).rw_lock("stream").unwrap();
                let wait = LockOptions::new()
                    .retry(RetryPolicy::default())
                    .wait(Duration::from_secs(30));
                while !stop.load(Ordering::SeqCst) {
                    let guard = rw.read_with(&wait).expect("the writer leaves");
                    reads.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(10));
                    drop(guard);
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || reads
        .load(Ordering::SeqCst)
        >= 20));
    let locks = FRESH.manager(&servers.urls());
    let rw = locks.rw_lock("stream").unwrap();
    let wait = LockOptions::new()
        .retry(RetryPolicy::default())
        .wait(Duration::from_secs(30));
    let writer = rw.write_with(&wait).expect("the writer is not starved");
    assert!(locks.flush(FLUSH));
    // The writer is alone on a quorum: there its key is set and no reader
    // lives (it was admitted there, and its key keeps new readers out).
    // Elsewhere its key may be set while a reader's entry still lives: an
    // attempt refused on the other nodes until its undo lands, or a
    // dropped reader's release on its way (seen in CI on Redis 8.2); so
    // no reader may live on a quorum of nodes.
    let (_, writer_key) = rw.keys();
    let quorum = servers.len() / 2 + 1;
    let mut alone = 0;
    let mut nodes_of_reader: HashMap<Vec<u8>, usize> = HashMap::new();
    for s in servers.iter() {
        let left = server_ms(s);
        let live: Vec<Vec<u8>> = readers_on(s, &rw)
            .into_iter()
            .filter(|(_, at)| *at > left)
            .map(|(value, _)| value)
            .collect();
        if s.get(writer_key).is_some() && live.is_empty() {
            alone += 1;
        }
        for value in live {
            *nodes_of_reader.entry(value).or_default() += 1;
        }
    }
    assert!(alone >= quorum, "the writer alone on {alone} nodes");
    for (value, nodes) in &nodes_of_reader {
        assert!(
            *nodes < quorum,
            "a reader ({} bytes) lives on {nodes} nodes while the writer holds",
            value.len()
        );
    }
    writer.release().unwrap();
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn a_reader_on_a_minority_and_a_writer_on_the_complement_conflict() {
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let (dead_a, dead_b) = (
        format!("redis://127.0.0.1:{}", free_port()),
        format!("redis://127.0.0.1:{}", free_port()),
    );
    // The reader reaches servers 0 and 1; the writer 1 and 2: they meet on
    // server 1 only.
    let reader_side = FRESH.manager(&[urls[0].clone(), urls[1].clone(), dead_a]);
    let writer_side = FRESH.manager(&[dead_b, urls[1].clone(), urls[2].clone()]);
    let (r, w) = (
        reader_side.rw_lock("split").unwrap(),
        writer_side.rw_lock("split").unwrap(),
    );
    let reader = r
        .try_read()
        .expect("servers 0 and 1 are a quorum of its three");
    let error = w.try_write().expect_err("server 1 has a reader");
    assert!(error.is_contended(), "{error}");
    reader.release().unwrap();
    let writer = w
        .try_write()
        .expect("servers 1 and 2 are a quorum of its three");
    let error = r.try_read().expect_err("server 1 has the writer");
    assert!(!error.to_string().is_empty());
    assert!(
        matches!(error, Error::Contended { .. } | Error::NoQuorum { .. }),
        "{error}"
    );
    writer.release().unwrap();
    drop(r.try_read().expect("free again"));
    assert_no_keys_left(&[&reader_side, &writer_side], &servers);
}

#[test]
fn without_scripts_it_fails_at_once_naming_why() {
    let servers = RedisServers::start(3);
    let locks = FRESH.with_scripts(&servers.urls(), Scripts::Never);
    let rw = locks.rw_lock("no-lua").unwrap();
    let waiting = LockOptions::new()
        .retry(RetryPolicy::default())
        .wait(Duration::from_secs(30));
    let started = Instant::now();
    for attempt in [rw.try_read(), rw.read_with(&waiting)] {
        let error = attempt.expect_err("no script-free form");
        let text = error.to_string();
        assert!(!error.is_retryable(), "{text}");
        assert!(text.contains("needs EVAL"), "{text}");
    }
    // A reader wrote nothing.
    assert_no_keys_left(&[&locks], &servers);
    // The writer's intent is a plain lock, which a server with the
    // commands takes, and releases when the admission fails; without
    // them (Redis before 8.4) the intent's release needs a script too,
    // and the key stays until its TTL: as for any lock under
    // `Scripts::Never` there.
    let error = rw.write_with(&waiting).expect_err("no script-free form");
    let text = error.to_string();
    assert!(!error.is_retryable(), "{text}");
    assert!(text.contains("needs EVAL"), "{text}");
    assert!(started.elapsed() < HANG, "at once, not after the wait");
}

#[test]
fn through_a_cluster_node_the_locks_keys_share_a_slot_and_it_works() {
    let cluster = testkit::RedisCluster::start(3, 1);
    let mut plain = RedisServer::start();
    let other = RedisServer::start();
    let urls = [cluster.seed_url(), plain.url(), other.url()];
    let [a, b] = [(); 2].map(|()| FRESH.manager(&urls));
    let (ra, rb) = (a.rw_lock("orders").unwrap(), b.rw_lock("orders").unwrap());
    // Both keys on one shard: the master of the name's slot.
    let (readers, writer) = ra.keys();
    assert_eq!(
        cluster.server_for_key(readers).port(),
        cluster.server_for_key(writer).port()
    );
    // One plain server gone: every quorum needs the cluster's vote.
    plain.kill9();
    let first = ra.try_read().unwrap();
    let second = rb.try_read().unwrap();
    assert!(rb.try_write().is_err(), "no upgrade, and readers are in");
    drop(second);
    assert!(a.flush(FLUSH) && b.flush(FLUSH));
    let refused = rb.try_write().unwrap_err();
    assert!(
        matches!(refused, Error::Contended { .. } | Error::NoQuorum { .. }),
        "{refused}"
    );
    first.release().unwrap();
    let mut writer_guard = rb
        .write_with(&LockOptions::new().fencing(true))
        .expect("alone now");
    assert!(writer_guard.fence().is_some());
    writer_guard.extend(TTL).unwrap();
    // Refused by the cluster (or decided without it, once the other
    // plain server refused: with one node down, no quorum is left).
    let refused = ra.try_read().unwrap_err();
    assert!(
        matches!(refused, Error::Contended { .. } | Error::NoQuorum { .. }),
        "{refused}"
    );
    writer_guard.release().unwrap();
    drop(ra.try_read().unwrap());
    assert!(a.flush(FLUSH) && b.flush(FLUSH));
    let left: Vec<String> = cluster
        .keys_everywhere()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .filter(|k| !k.ends_with(":fences"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
