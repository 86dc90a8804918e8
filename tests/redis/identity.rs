//! Which server answered: the answers of a `RedisBackend` batch report the
//! identity of the connection that carried the batch (a per-backend cache
//! once reported another server), and an acquire that finds our own token
//! is a grant (the same server under two names never makes a free lock look
//! contended).
// Tests fail by panicking; unwrap/expect/panic are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use quorum_lock::LockManager;
use quorum_lock::RedisBackend;
use quorum_lock::backend::{self, BackendErrorKind, KeySet, Op, Probe, Reply};

use testkit::RedisServer;
use testkit::proxy::Proxy;

use crate::support::acl_user;

const TIMEOUT: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(30);

fn token(n: u8) -> Vec<u8> {
    let mut t = vec![0xff, 0xfe, n];
    t.extend((0u8..17).map(|i| i.wrapping_mul(31).wrapping_add(n)));
    t
}

fn backend(url: &str) -> RedisBackend {
    RedisBackend::open(url, TIMEOUT).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// Acquires `key` in one batch and checks that the identity reported with
/// the grant is the run id of a server that holds the key; returns which.
fn acquire_and_check(b: &RedisBackend, key: &[u8], servers: &[(&RedisServer, String)]) -> usize {
    match try_acquire_and_check(b, key, servers) {
        Through::Set(holder) => holder,
        other => panic!("{other:?}: no connection was dropped"),
    }
}

/// How a batch went through a proxy that may drop its connection.
#[derive(Debug)]
enum Through {
    /// The reported server (its index) set the key.
    Set(usize),
    /// The reported server (its index) already held the key with our
    /// token: the batch was applied, its connection closed before the
    /// reply, and the backend sent it again on a fresh connection (it
    /// retries a stale pooled connection once).
    AlreadyOurs(usize),
    /// The connection was closed under the batch and not retried: an
    /// error ("could not tell"), with no identity.
    Closed,
}

/// [`acquire_and_check`], telling a batch that met a dropped connection
/// apart ([`Through`]).
fn try_acquire_and_check(
    b: &RedisBackend,
    key: &[u8],
    servers: &[(&RedisServer, String)],
) -> Through {
    let t = token(1);
    let answers = backend::run(b, &[Op::acquire(&KeySet::one(key), &t, TTL)]);
    if let [Err(e)] = answers.results() {
        // The proxy closed the connection: seen as closed (EOF) or reset.
        let text = e.to_string().to_lowercase();
        assert!(
            matches!(
                e.kind(),
                BackendErrorKind::Unreachable | BackendErrorKind::Other
            ) && ["closed", "reset", "broken pipe"]
                .iter()
                .any(|w| text.contains(w)),
            "{e}"
        );
        return Through::Closed;
    }
    let already_ours = matches!(answers.results(), [Ok(Reply::AlreadyOurs)]);
    assert!(
        already_ours || matches!(answers.results(), [Ok(Reply::Yes)]),
        "{:?}",
        answers.results()
    );
    let reported = answers
        .server()
        .and_then(|s| s.run_id.as_deref().map(str::to_owned));
    let holder = servers
        .iter()
        .position(|(_, run_id)| Some(run_id) == reported.as_ref())
        .unwrap_or_else(|| panic!("reported {reported:?}: none of the servers"));
    // The reported server holds the key. (The other one may hold it too:
    // a request the proxy forwarded just before dropping the connection is
    // applied, then retried on a fresh connection, like any "maybe
    // applied" answer.)
    assert!(
        servers[holder].0.get(key).is_some(),
        "{}: reported server {holder}, which does not hold the key",
        String::from_utf8_lossy(key)
    );
    if already_ours {
        Through::AlreadyOurs(holder)
    } else {
        Through::Set(holder)
    }
}

/// Concurrent batches through a proxy that sends new connections to the
/// other server each round: old pooled connections still reach the old
/// server, new ones the new server, and every batch reports its own.
///
/// The per-backend `INFO` cache this replaced failed here: the fresh
/// connection's `INFO` overwrote the cache, and a batch answered on an old
/// connection then reported the new server.
#[test]
fn batch_identity_is_the_server_that_answered_through_a_retargeted_proxy() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let servers = [(&s1, s1.run_id()), (&s2, s2.run_id())];
    let proxy = Proxy::start(s1.port());
    let b = backend(&proxy.url());
    assert_eq!(acquire_and_check(&b, b"warm", &servers), 0);
    // Requests wait in the proxy so that the threads' batches overlap and
    // need several connections at once.
    proxy.delay(Duration::from_millis(60));
    let mut used = [0usize; 2];
    for round in 0..4u8 {
        proxy.retarget(servers[usize::from((round + 1) % 2)].0.port());
        let barrier = Barrier::new(3);
        let holders: Vec<usize> = thread::scope(|s| {
            let handles: Vec<_> = (0..3u8)
                .map(|n| {
                    let (b, barrier, servers) = (b.clone(), &barrier, &servers);
                    s.spawn(move || {
                        barrier.wait();
                        let key = format!("r{round}:t{n}").into_bytes();
                        acquire_and_check(&b, &key, servers)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for h in holders {
            used[h] += 1;
        }
    }
    // Both servers answered (old and new connections side by side).
    assert!(used[0] > 0 && used[1] > 0, "{used:?}");
}

/// Two clones of one backend, used from two threads while the proxy keeps
/// moving new connections between two servers and dropping the open ones:
/// neither thread ever reports the other one's server.
///
/// A batch whose connection the proxy closes is an error without an
/// identity, or, when it was applied and then sent again, finds the key
/// already ours ([`Through`]): on a loaded machine a batch can outlive the
/// 30 ms between drops. Each such batch met a drop while it ran, and a
/// thread's batches do not overlap, so a thread sees at most as many as
/// there were drops.
#[test]
fn clones_from_two_threads_never_report_each_others_server() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let servers = [(&s1, s1.run_id()), (&s2, s2.run_id())];
    let proxy = Proxy::start(s1.port());
    let b = backend(&proxy.url());
    let stop = AtomicBool::new(false);
    let mut drops = 0;
    let (used, closed) = thread::scope(|s| {
        let handles: Vec<_> = (0..2u8)
            .map(|n| {
                let (b, servers, stop) = (b.clone(), &servers, &stop);
                s.spawn(move || {
                    let (mut used, mut closed) = ([0usize; 2], 0);
                    for i in 0..500 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let key = format!("c{n}:{i}").into_bytes();
                        match try_acquire_and_check(&b, &key, servers) {
                            Through::Set(holder) => used[holder] += 1,
                            Through::AlreadyOurs(holder) => {
                                used[holder] += 1;
                                closed += 1;
                            }
                            Through::Closed => closed += 1,
                        }
                    }
                    (used, closed)
                })
            })
            .collect();
        for flip in 0..40 {
            proxy.retarget(servers[flip % 2].0.port());
            if flip % 3 == 0 {
                proxy.drop_connections();
                drops += 1;
            }
            thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        let per_thread: Vec<([usize; 2], usize)> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        let used = per_thread
            .iter()
            .fold([0, 0], |acc, (u, _)| [acc[0] + u[0], acc[1] + u[1]]);
        let closed: Vec<usize> = per_thread.iter().map(|(_, c)| *c).collect();
        (used, closed)
    });
    assert!(used[0] > 0 && used[1] > 0, "{used:?}");
    assert!(
        closed.iter().all(|&c| c <= drops),
        "batches that met a dropped connection, per thread: {closed:?}, with {drops} drops"
    );
}

/// An ACL user without `INFO`: the grants carry no identity (`None`), and
/// the connection does not ask again.
#[test]
fn refused_info_leaves_the_identity_unknown_and_is_asked_once() {
    let server = RedisServer::start();
    let b = backend(&acl_user(
        &server,
        "locker",
        "locker-pw",
        &["~*", "+@all", "-info"],
    ));
    let t = token(2);
    for i in 0..5 {
        let key = format!("noinfo:{i}").into_bytes();
        let answers = backend::run(&b, &[Op::acquire(&KeySet::one(&key), &t, TTL)]);
        assert!(matches!(answers.results(), [Ok(Reply::Yes)]), "{answers:?}");
        assert!(answers.server().is_none(), "{:?}", answers.server());
    }
    // Reached, identity unknown.
    assert_eq!(b.server_info().unwrap().run_id, None);
    assert!(b.fetch_server_info().is_err());
    // One connection asked INFO once; fetch_server_info asked once more.
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .unwrap();
    let count: i64 = log
        .iter()
        .filter_map(|entry| {
            let field = |name: &str| {
                entry
                    .chunks(2)
                    .find(|kv| kv[0] == redis::Value::BulkString(name.as_bytes().to_vec()))
                    .map(|kv| kv[1].clone())
            };
            let object = field("object")?;
            (object == redis::Value::BulkString(b"info".to_vec())).then_some(())?;
            match field("count")? {
                redis::Value::Int(n) => Some(n),
                _ => None,
            }
        })
        .sum();
    assert_eq!(count, 2, "{log:?}");
}

/// The same server under two names (plus, in one setup, another server):
/// over 30 fresh managers, a free lock is never reported as contended.
#[test]
fn same_server_under_two_names_never_makes_a_free_lock_contended() {
    let (s, other) = (RedisServer::start(), RedisServer::start());
    let names = [
        format!("redis://127.0.0.1:{}", s.port()),
        format!("redis://localhost:{}", s.port()),
    ];
    let mut outcomes = [0usize; 3]; // ok, no quorum, with 3 nodes ok
    for i in 0..30 {
        let mut urls = names.to_vec();
        let three = i % 2 == 0;
        if three {
            urls.push(other.url());
        }
        let locks = LockManager::builder()
            .redis_nodes(urls)
            .unwrap()
            .node_timeout(Duration::from_millis(500))
            .restart_quarantine(false)
            .build()
            .unwrap();
        let resource = format!("free:{i}");
        match locks.try_lock(&resource) {
            Ok(guard) => {
                outcomes[if three { 2 } else { 0 }] += 1;
                guard.release().ok();
            }
            Err(e) => {
                assert!(!e.is_contended(), "free lock reported contended: {e}");
                assert!(!three, "one server plus another must lock: {e}");
                outcomes[1] += 1;
            }
        }
        assert!(locks.flush(Duration::from_secs(2)));
    }
    assert_eq!(outcomes[2], 15, "{outcomes:?}");
}
