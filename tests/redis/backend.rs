//! `RedisBackend` against real `redis-server` processes (no manager).
// Tests fail by panicking; unwrap/expect/panic are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::RedisBackend;
use quorum_lock::backend::{
    self, Backend, BackendError, BackendErrorKind, KeySet, Op, Probe, Reply,
};

use testkit::proxy::Proxy;
use testkit::{RedisServer, RedisServers, connect, free_port, wait_until};

const TIMEOUT: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(10);

fn open(url: &str, timeout: Duration) -> RedisBackend {
    RedisBackend::open(url, timeout).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// A 20-byte token that is not UTF-8, like the real ones.
fn token(n: u8) -> Vec<u8> {
    let mut t = vec![0xff, 0xfe, n];
    t.extend((0u8..17).map(|i| i.wrapping_mul(31).wrapping_add(n)));
    t
}

fn kind<T: std::fmt::Debug>(r: &Result<T, BackendError>) -> BackendErrorKind {
    match r {
        Err(e) => e.kind(),
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
    }
}

#[test]
fn acquire_release_extend_semantics() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let (mine, theirs) = (token(1), token(2));

    assert!(backend::acquire(&b, b"res", &mine, TTL).unwrap());
    assert_eq!(server.get(b"res"), Some(mine.clone()));
    let pttl = server.pttl(b"res");
    assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");

    // Held: another token can neither take, release nor extend it.
    assert!(!backend::acquire(&b, b"res", &theirs, TTL).unwrap());
    assert!(!backend::release(&b, b"res", &theirs).unwrap());
    assert!(!backend::extend(&b, b"res", &theirs, Duration::from_secs(60)).unwrap());
    assert_eq!(server.get(b"res"), Some(mine.clone()));
    assert!(server.pttl(b"res") <= 10_000);
    // Our own second acquire is not a second vote: the key already holds
    // our token (the same server under another name set it). The batch
    // says so apart from "held elsewhere"; the TTL is left alone.
    assert!(!backend::acquire(&b, b"res", &mine, TTL).unwrap());
    let again = backend::run(&b, &[Op::acquire(&KeySet::one("res"), &mine, TTL)]).into_results();
    assert_eq!(again[0].as_ref().ok(), Some(&Reply::AlreadyOurs));
    assert_eq!(server.get(b"res"), Some(mine.clone()));

    assert!(backend::extend(&b, b"res", &mine, Duration::from_secs(60)).unwrap());
    assert!(server.pttl(b"res") > 10_000);

    assert!(backend::release(&b, b"res", &mine).unwrap());
    assert_eq!(server.get(b"res"), None);
    assert!(server.keys().is_empty());
    assert!(!backend::release(&b, b"res", &mine).unwrap());
    assert!(!backend::extend(&b, b"res", &mine, TTL).unwrap());
    assert!(server.keys().is_empty(), "extend must not create the key");
}

#[test]
fn extend_never_recreates_an_expired_key() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let t = token(3);
    assert!(backend::acquire(&b, b"short", &t, Duration::from_millis(30)).unwrap());
    assert!(wait_until(Duration::from_secs(3), || server.pttl(b"short") == -2));
    assert!(!backend::extend(&b, b"short", &t, TTL).unwrap());
    assert_eq!(server.pttl(b"short"), -2);
    assert!(!backend::release(&b, b"short", &t).unwrap());
}

#[test]
fn sub_millisecond_ttl_rounds_up_not_to_zero() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    // PX 0 would be "invalid expire time": the backend must send 1.
    assert!(backend::acquire(&b, b"tiny", &token(4), Duration::from_micros(500)).unwrap());
    assert!(backend::extend(&b, b"tiny2", &token(4), Duration::from_nanos(1)).is_ok());
    // A just-over-a-second TTL is sent as 1001 ms, never 1000.
    assert!(backend::acquire(&b, b"ceil", &token(4), Duration::from_micros(1_000_001)).unwrap());
    assert!(server.pttl(b"ceil") <= 1001);
}

#[test]
fn non_utf8_keys_and_tokens_work() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let key = b"\xff\x00lock:\xfe\x80";
    let t = token(5);
    assert!(backend::acquire(&b, key, &t, TTL).unwrap());
    assert_eq!(server.get(key), Some(t.clone()));
    assert!(backend::extend(&b, key, &t, TTL).unwrap());
    assert!(!backend::release(&b, key, &token(6)).unwrap());
    assert!(backend::release(&b, key, &t).unwrap());
    assert!(server.keys().is_empty());
}

#[test]
fn batch_returns_per_op_results_in_order_with_wrongtype_isolated() {
    let server = RedisServer::start();
    let _: () = server.cmd(redis::cmd("HSET").arg("h").arg("f").arg("v"));
    let b = open(&server.url(), TIMEOUT);
    let (t1, t2) = (token(7), token(8));
    let (a, h, bk) = (KeySet::one("a"), KeySet::one("h"), KeySet::one("b"));
    let ops = [
        Op::acquire(&a, &t1, TTL),
        Op::acquire(&h, &t1, TTL),
        Op::extend(&h, &t1, TTL),
        Op::release(&h, &t1),
        Op::acquire(&a, &t2, TTL),
        Op::release(&a, &t2),
        Op::extend(&a, &t1, Duration::from_secs(60)),
        Op::acquire(&bk, &t2, TTL),
        Op::release(&a, &t1),
    ];
    let results = backend::run(&b, &ops).into_results();
    assert_eq!(results.len(), ops.len());
    assert_eq!(results[0].as_ref().ok(), Some(&Reply::Yes));
    assert_eq!(kind(&results[1]), BackendErrorKind::WrongType);
    assert_eq!(kind(&results[2]), BackendErrorKind::WrongType);
    assert_eq!(kind(&results[3]), BackendErrorKind::WrongType);
    assert_eq!(results[4].as_ref().ok(), Some(&Reply::No));
    assert_eq!(results[5].as_ref().ok(), Some(&Reply::No));
    assert_eq!(results[6].as_ref().ok(), Some(&Reply::Yes));
    assert_eq!(results[7].as_ref().ok(), Some(&Reply::Yes));
    assert_eq!(results[8].as_ref().ok(), Some(&Reply::Yes));
    assert_eq!(server.get(b"a"), None);
    assert_eq!(server.get(b"b"), Some(t2.clone()));
    let kept: String = server.cmd(redis::cmd("HGET").arg("h").arg("f"));
    assert_eq!(kept, "v", "the hash is left alone");
    assert!(backend::run(&b, &[]).into_results().is_empty());
}

#[test]
fn batch_is_one_round_trip() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let b = open(&proxy.url(), Duration::from_secs(5));
    assert!(backend::acquire(&b, b"warm", &token(9), TTL).unwrap()); // connect before timing
    proxy.delay(Duration::from_millis(100));
    let t = token(10);
    let keys: Vec<KeySet> = (0..20).map(|i| KeySet::one(format!("k{i}"))).collect();
    let ops: Vec<Op<'_>> = keys.iter().map(|k| Op::acquire(k, &t, TTL)).collect();
    let start = Instant::now();
    let results = backend::run(&b, &ops).into_results();
    let elapsed = start.elapsed();
    assert!(
        results.iter().all(|r| matches!(r, Ok(Reply::Yes))),
        "{results:?}"
    );
    // 20 sequential round trips would take at least 2 s through this proxy.
    assert!(elapsed < Duration::from_secs(1), "batch took {elapsed:?}");
    assert_eq!(server.keys().len(), 21);
}

#[test]
fn script_flush_then_release_and_extend_still_work() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let t = token(11);
    assert!(backend::acquire(&b, b"k", &t, TTL).unwrap());
    assert!(backend::extend(&b, b"k", &t, TTL).unwrap()); // scripts now cached
    let _: () = server.cmd(redis::cmd("SCRIPT").arg("FLUSH"));
    assert!(backend::extend(&b, b"k", &t, Duration::from_secs(60)).unwrap());
    assert!(server.pttl(b"k") > 10_000);
    let _: () = server.cmd(redis::cmd("SCRIPT").arg("FLUSH"));
    let other = token(12);
    let k = KeySet::one("k");
    let results = backend::run(
        &b,
        &[
            Op::release(&k, &other),
            Op::extend(&k, &t, TTL),
            Op::release(&k, &t),
            Op::release(&k, &t),
        ],
    )
    .into_results();
    let results: Vec<bool> = results.into_iter().map(|r| r.unwrap().is_yes()).collect();
    assert_eq!(results, [false, true, true, false]);
    assert!(server.keys().is_empty());
}

#[test]
fn wrongtype_for_all_three_ops() {
    let server = RedisServer::start();
    let _: () = server.cmd(redis::cmd("HSET").arg("h").arg("f").arg("v"));
    let _: () = server.cmd(redis::cmd("LPUSH").arg("l").arg("x"));
    let b = open(&server.url(), TIMEOUT);
    let t = token(13);
    for key in [&b"h"[..], b"l"] {
        assert_eq!(
            kind(&backend::acquire(&b, key, &t, TTL)),
            BackendErrorKind::WrongType
        );
        assert_eq!(
            kind(&backend::release(&b, key, &t)),
            BackendErrorKind::WrongType
        );
        assert_eq!(
            kind(&backend::extend(&b, key, &t, TTL)),
            BackendErrorKind::WrongType
        );
    }
    let err = backend::acquire(&b, b"h", &t, TTL).unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert_eq!(server.keys(), vec![b"h".to_vec(), b"l".to_vec()]);
}

#[test]
fn readonly_replica() {
    // The default 5 s diskless-sync delay would stall the first sync.
    let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let t = token(14);
    // Give the replica a key holding our token, through replication.
    primary.set(b"k", &t);
    assert!(
        wait_until(Duration::from_secs(5), || replica.get(b"k").is_some()),
        "replication did not catch up"
    );
    let b = open(&replica.url(), TIMEOUT);
    assert_eq!(
        kind(&backend::acquire(&b, b"new", &t, TTL)),
        BackendErrorKind::ReadOnly
    );
    assert_eq!(
        kind(&backend::extend(&b, b"k", &t, TTL)),
        BackendErrorKind::ReadOnly
    );
    assert_eq!(
        kind(&backend::release(&b, b"k", &t)),
        BackendErrorKind::ReadOnly
    );
    let (k, k2) = (KeySet::one("k"), KeySet::one("k2"));
    let results =
        backend::run(&b, &[Op::acquire(&k2, &t, TTL), Op::release(&k, &t)]).into_results();
    assert!(
        results
            .iter()
            .all(|r| kind(r) == BackendErrorKind::ReadOnly)
    );
    // Scripts without shebang flags (kept for Redis < 7) only hit READONLY
    // when they reach the write: a release of a key that is not ours is a
    // plain "no" even on a replica. The server's own release (DELIFEQ,
    // Valkey 9) is a write command: READONLY at once. Acquire always
    // reports READONLY.
    match backend::release(&b, b"absent", &t) {
        Ok(released) => assert!(!released),
        Err(e) => assert_eq!(e.kind(), BackendErrorKind::ReadOnly, "{e}"),
    }
    assert_eq!(replica.get(b"k"), Some(t));
}

const PASSWORD: &str = "Sup3r-Secret-Pw";
const WRONG: &str = "Wr0ng-Secret-Guess";

fn assert_no_secret(text: &str) {
    for secret in [PASSWORD, WRONG, "p@ss/w0rd", "p%40ss%2Fw0rd"] {
        assert!(!text.contains(secret), "secret leaked: {text}");
    }
}

#[test]
fn auth_errors_and_passwords_never_leak() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let port = server.port();
    let t = token(15);

    // No password: NOAUTH.
    let none = open(&format!("redis://127.0.0.1:{port}/0"), TIMEOUT);
    let r = backend::acquire(&none, b"k", &t, TTL);
    assert_eq!(kind(&r), BackendErrorKind::Auth);
    assert_no_secret(&format!("{} {:?}", r.as_ref().unwrap_err(), r));

    // Wrong password: WRONGPASS while connecting.
    let wrong = open(&format!("redis://:{WRONG}@127.0.0.1:{port}/0"), TIMEOUT);
    assert_eq!(wrong.describe(), format!("redis://:***@127.0.0.1:{port}/0"));
    for r in [
        backend::acquire(&wrong, b"k", &t, TTL),
        backend::release(&wrong, b"k", &t),
        backend::extend(&wrong, b"k", &t, TTL),
    ] {
        assert_eq!(kind(&r), BackendErrorKind::Auth);
        let e = r.unwrap_err();
        assert_no_secret(&format!("{e} {e:?} {:?}", std::error::Error::source(&e)));
    }
    assert_no_secret(&format!("{wrong:?} {}", wrong.describe()));
    assert_no_secret(&format!("{:?}", wrong.server_info()));

    // Right password, user given too: works, and is not shown either.
    let right = open(
        &format!("redis://default:{PASSWORD}@127.0.0.1:{port}/0"),
        TIMEOUT,
    );
    assert!(backend::acquire(&right, b"k", &t, TTL).unwrap());
    assert!(backend::release(&right, b"k", &t).unwrap());
    assert_eq!(
        right.describe(),
        format!("redis://default:***@127.0.0.1:{port}/0")
    );
    assert_no_secret(&format!("{right:?} {}", right.describe()));
    assert!(right.server_info().unwrap().run_id.is_some());
}

#[test]
fn percent_encoded_password_and_acl_noperm() {
    let server = RedisServer::start_with(&["--requirepass", "p@ss/w0rd"]);
    let port = server.port();
    let url = format!("redis://:p%40ss%2Fw0rd@127.0.0.1:{port}/0");
    let b = open(&url, TIMEOUT);
    assert_no_secret(&format!("{b:?} {}", b.describe()));
    let t = token(16);
    assert!(backend::acquire(&b, b"k", &t, TTL).unwrap());

    // An ACL user without the right to run SET: NOPERM.
    let mut admin = connect(&url);
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "reader",
            "on",
            ">reader-pw",
            "~*",
            "+get",
            "+info",
        ])
        .query(&mut admin)
        .unwrap();
    let reader = open(
        &format!("redis://reader:reader-pw@127.0.0.1:{port}/0"),
        TIMEOUT,
    );
    let r = backend::acquire(&reader, b"k2", &t, TTL);
    assert_eq!(kind(&r), BackendErrorKind::Denied, "{r:?}");
    assert!(!format!("{r:?}").contains("reader-pw"));
}

#[test]
fn malformed_url_is_a_config_error_without_the_password() {
    for url in [
        "redis://user:Sup3r-Secret-Pw@127.0.0.1:notaport/0",
        "http://:Sup3r-Secret-Pw@127.0.0.1:6379",
        "redis://:Sup3r-Secret-Pw@127.0.0.1:6379/db",
        "not a url",
    ] {
        let err = RedisBackend::open(url, TIMEOUT).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Config, "{url}");
        assert_no_secret(&format!("{err} {err:?}"));
    }
}

#[test]
fn open_is_lazy_and_refused_port_is_unreachable_fast() {
    let port = free_port(); // nothing listens there
    let b = open(
        &format!("redis://127.0.0.1:{port}/0"),
        Duration::from_secs(3),
    );
    let start = Instant::now();
    let r = backend::acquire(&b, b"k", &token(17), TTL);
    assert_eq!(kind(&r), BackendErrorKind::Unreachable, "{r:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(kind(&b.server_info()), BackendErrorKind::Unreachable);
    let (k, k2) = (KeySet::one("k"), KeySet::one("k2"));
    let results = backend::run(
        &b,
        &[Op::release(&k, &token(17)), Op::release(&k2, &token(17))],
    )
    .into_results();
    assert!(
        results
            .iter()
            .all(|r| kind(r) == BackendErrorKind::Unreachable)
    );
}

#[test]
fn dns_failure_is_unreachable() {
    let b = open("redis://no-such-host.invalid:6379/0", TIMEOUT);
    let r = backend::release(&b, b"k", &token(18));
    assert_eq!(kind(&r), BackendErrorKind::Unreachable, "{r:?}");
}

#[test]
fn paused_server_times_out_and_the_connection_is_not_reused() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let b = open(&server.url(), timeout);
    let (t, other) = (token(19), token(20));
    assert!(backend::acquire(&b, b"warm", &t, TTL).unwrap()); // a pooled connection now
    server.set(b"taken", &other);

    server.pause();
    let start = Instant::now();
    let r = backend::acquire(&b, b"late", &t, TTL);
    let elapsed = start.elapsed();
    assert_eq!(kind(&r), BackendErrorKind::Timeout, "{r:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    // A new connection to a frozen server times out as well.
    let fresh = open(&server.url(), timeout);
    assert_eq!(
        kind(&backend::release(&fresh, b"x", &t)),
        BackendErrorKind::Timeout
    );
    server.resume();

    // The frozen SET is applied when the server wakes up: "maybe applied".
    assert!(wait_until(Duration::from_secs(3), || server
        .get(b"late")
        .is_some()));
    // The late "+OK" to that SET must not be read as this answer.
    assert!(!backend::acquire(&b, b"taken", &t, TTL).unwrap());
    assert!(backend::release(&b, b"late", &t).unwrap());
    assert!(!backend::release(&b, b"late", &t).unwrap());
    assert_eq!(server.get(b"taken"), Some(other));
}

#[test]
fn blackholed_connection_times_out_then_recovers() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let b = open(&proxy.url(), Duration::from_millis(300));
    let t = token(21);
    assert!(backend::acquire(&b, b"k", &t, TTL).unwrap());
    proxy.blackhole();
    let (k, k2) = (KeySet::one("k"), KeySet::one("k2"));
    let r = backend::run(&b, &[Op::extend(&k, &t, TTL), Op::acquire(&k2, &t, TTL)]).into_results();
    assert!(
        r.iter().all(|r| kind(r) == BackendErrorKind::Timeout),
        "{r:?}"
    );
    proxy.pass();
    // Fresh connection, own answers: k is held by t (refused to another
    // token), k2 unset.
    assert!(!backend::acquire(&b, b"k", &token(28), TTL).unwrap());
    assert!(backend::acquire(&b, b"k2", &t, TTL).unwrap());
    assert!(backend::release(&b, b"k", &t).unwrap());
}

#[test]
fn client_pause_write_times_out_and_recovers() {
    let server = RedisServer::start();
    let b = open(&server.url(), Duration::from_millis(200));
    let t = token(22);
    assert!(backend::release(&b, b"warm", &t).is_ok());
    let paused_at = Instant::now();
    server.client_pause_write(700);
    let r = backend::acquire(&b, b"paused", &t, TTL);
    assert_eq!(kind(&r), BackendErrorKind::Timeout, "{r:?}");
    // Reads still work during a write pause; writes wait for it to end.
    thread::sleep(Duration::from_millis(800).saturating_sub(paused_at.elapsed()));
    // "Maybe applied": whether the timed-out SET ran (Redis drops a paused
    // command whose client disconnected, but a frozen server runs it), the
    // release cleans up and the next answers are the backend's own.
    assert!(backend::release(&b, b"paused", &t).is_ok());
    assert_eq!(server.get(b"paused"), None);
    assert!(backend::acquire(&b, b"paused", &t, TTL).unwrap());
}

#[test]
fn server_info_run_id_changes_across_kill9_and_restart() {
    let mut server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let before = b.server_info().unwrap();
    assert_eq!(before.run_id.as_deref(), Some(server.run_id().as_str()));
    assert!(before.uptime.unwrap() < Duration::from_secs(60));
    assert!(backend::acquire(&b, b"k", &token(23), TTL).unwrap());

    server.kill9();
    server.restart();
    // The pooled connection is dead; the backend retries on a fresh one
    // instead of failing, and that connection refreshes the cached info.
    assert!(
        backend::acquire(&b, b"k", &token(23), TTL).unwrap(),
        "no persistence: key gone"
    );
    let after = b.server_info().unwrap();
    assert_ne!(after.run_id, before.run_id);
    assert_eq!(after.run_id.as_deref(), Some(server.run_id().as_str()));
    assert_eq!(b.fetch_server_info().unwrap().run_id, after.run_id);
}

#[test]
fn persistent_restart_keeps_the_key() {
    let mut server = RedisServer::start_persistent();
    let b = open(&server.url(), TIMEOUT);
    let t = token(24);
    assert!(backend::acquire(&b, b"durable", &t, TTL).unwrap());
    server.kill9();
    assert_eq!(
        kind(&backend::release(&b, b"durable", &token(25))),
        BackendErrorKind::Unreachable
    );
    server.restart();
    assert_eq!(server.get(b"durable"), Some(t.clone()));
    let pttl = server.pttl(b"durable");
    assert!(pttl > 0 && pttl <= 10_000, "{pttl}");
    assert!(backend::release(&b, b"durable", &t).unwrap());
}

#[test]
fn shared_backend_from_several_threads() {
    let servers = RedisServers::start(1);
    let b = open(&servers.urls()[0], TIMEOUT);
    thread::scope(|s| {
        for n in 0..4u8 {
            let b = b.clone();
            s.spawn(move || {
                let t = token(100 + n);
                for i in 0..50 {
                    let key = format!("t{n}:{i}").into_bytes();
                    assert!(backend::acquire(&b, &key, &t, TTL).unwrap());
                    assert!(backend::release(&b, &key, &t).unwrap());
                }
            });
        }
    });
    assert!(servers[0].keys().is_empty());
}

#[cfg(feature = "tls")]
#[test]
fn tls_to_a_plain_port_fails_instead_of_hanging() {
    let server = RedisServer::start();
    for fragment in ["", "#insecure"] {
        let url = format!(
            "rediss://:{PASSWORD}@127.0.0.1:{}/0{fragment}",
            server.port()
        );
        let b = open(&url, Duration::from_millis(500));
        let start = Instant::now();
        let r = backend::acquire(&b, b"k", &token(26), TTL);
        let e = r.as_ref().unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        assert!(
            matches!(
                e.kind(),
                BackendErrorKind::Config
                    | BackendErrorKind::Timeout
                    | BackendErrorKind::Unreachable
            ),
            "{e}"
        );
        assert_no_secret(&format!("{e} {e:?}"));
        // Not a bare timeout: the message says TLS is what went wrong.
        assert!(e.to_string().contains("TLS"), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    assert!(server.keys().is_empty());
}

#[cfg(feature = "tls")]
#[test]
fn tls_end_to_end_against_a_tls_server() {
    let server = RedisServer::start_tls();
    let b = open(&server.tls_url(), TIMEOUT);
    assert!(
        b.describe().starts_with("rediss://127.0.0.1:"),
        "{}",
        b.describe()
    );
    let t = token(27);
    assert!(backend::acquire(&b, b"tls", &t, TTL).unwrap());
    assert_eq!(server.get(b"tls"), Some(t.clone()));
    assert!(backend::extend(&b, b"tls", &t, TTL).unwrap());
    assert!(b.server_info().unwrap().run_id.is_some());
    assert!(backend::release(&b, b"tls", &t).unwrap());
    // Without `#insecure` the self-signed certificate is refused.
    let strict = open(&server.tls_url().replace("#insecure", ""), TIMEOUT);
    let r = backend::acquire(&strict, b"tls", &t, TTL);
    assert_eq!(kind(&r), BackendErrorKind::Config, "{r:?}");
    assert!(server.keys().is_empty());
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_url_without_the_feature_is_a_config_error() {
    let err =
        RedisBackend::open(&format!("rediss://:{PASSWORD}@127.0.0.1:6379"), TIMEOUT).unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Config);
    assert!(err.to_string().contains("tls"), "{err}");
    assert_no_secret(&err.to_string());
}

/// `send` writes to a node and returns before any answer is read, so a
/// caller can write to every node first: the answers `finish` reads are
/// each node's own, the same as `backend::run` gives, identity included; a server killed between the halves fails the batch with a
/// connectivity error, not a hang or another batch's answer.
#[test]
fn batches_sent_to_every_node_before_any_is_read_get_their_own_answers() {
    let mut servers = RedisServers::start(3);
    let backends: Vec<RedisBackend> = servers
        .urls()
        .iter()
        .map(|u| open(u, Duration::from_secs(2)))
        .collect();
    let (mine, theirs) = (token(1), token(2));
    // Node 1 already holds the key for someone else.
    backend::acquire(&backends[1], b"k", &theirs, Duration::from_secs(30)).unwrap();
    let k = KeySet::one("k");
    let ops = [Op::acquire(&k, &mine, Duration::from_secs(30))];
    let flights: Vec<_> = backends.iter().map(|b| b.send(&ops)).collect();
    let answers: Vec<_> = flights.into_iter().map(|f| f.finish(&ops)).collect();
    let replies: Vec<_> = answers.iter().map(|a| a.results()[0].clone()).collect();
    let Reply::HeldBy { digest: held, .. } = Reply::held_by(&theirs) else {
        unreachable!()
    };
    // Refused with the digest of the value that holds it there, and the
    // time its key has left (its PTTL).
    assert!(
        matches!(
            replies.iter().map(|r| *r.as_ref().unwrap()).collect::<Vec<_>>()[..],
            [Reply::Yes, Reply::HeldBy { digest, expires_in: Some(left) }, Reply::Yes]
                if digest == held && left <= Duration::from_secs(30) && !left.is_zero()
        ),
        "{replies:?}"
    );
    for (answer, server) in answers.iter().zip(servers.iter()) {
        let info = answer
            .server()
            .expect("the identity of the connection that answered");
        assert_eq!(info.run_id.as_deref(), Some(server.run_id().as_str()));
    }
    // A server that dies between the two halves (frozen first, so it
    // cannot have answered before it dies).
    let release = [Op::release(&k, &mine)];
    servers[2].pause();
    let flight = backends[2].send(&release);
    servers[2].kill9();
    let answer = flight.finish(&release);
    let error = answer.results()[0].clone().unwrap_err();
    assert!(error.kind().is_connectivity(), "{error}");
}

/// A refused fenced acquire says who holds the key, by digest, as a
/// refused plain acquire does (the waiters tell a new holder by it).
#[test]
fn a_refused_fenced_acquire_names_the_holder_by_digest() {
    let server = RedisServer::start();
    let b = open(&server.url(), TIMEOUT);
    let (mine, theirs) = (token(1), token(2));
    assert!(backend::acquire(&b, b"f", &theirs, TTL).unwrap());
    let f = KeySet::one("f");
    let ops = [
        Op::acquire_fenced(&f, &mine, TTL, b"fences"),
        Op::acquire_fenced(&f, &theirs, TTL, b"fences"),
    ];
    let replies: Vec<Reply> = backend::run(&b, &ops)
        .into_results()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(replies, [Reply::held_by(&theirs), Reply::AlreadyOurs]);
}
