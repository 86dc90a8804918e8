//! Bad input, table-driven: every builder setter and lock option at 0, 1,
//! MAX and nonsense. Each must give a typed error or work: never a panic,
//! never a hang, and never a key left behind on any node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use quorum_lock::backend::{self, Answers, Backend, InFlight, Op};
use quorum_lock::{
    Clock, LockManager, LockManagerBuilder, LockOptions, MAX_RESOURCE_LEN, ManualClock,
    MemoryBackend, RetryPolicy,
};
use testkit::memory_nodes;

const DURATIONS: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_millis(1),
    Duration::from_secs(3),
    Duration::MAX,
];

/// Builds with `configure`, then locks and releases once: either step may
/// fail with a typed error, neither may panic, and no key may remain.
fn try_config(what: &str, configure: impl FnOnce(LockManagerBuilder) -> LockManagerBuilder) {
    let nodes = memory_nodes(3);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let built = configure(LockManager::builder().nodes(nodes.iter().cloned())).build();
        let Ok(locks) = built else {
            let err = built.unwrap_err();
            assert!(err.is_invalid(), "{what}: {err}");
            return;
        };
        let options = LockOptions::new().retry(RetryPolicy::none());
        if let Ok(guard) = locks.lock_with("r", &options) {
            let _ = guard.release();
        }
        assert!(locks.flush(Duration::from_secs(5)), "{what}");
    }));
    assert!(outcome.is_ok(), "{what}: panicked");
    for node in &nodes {
        assert_eq!(node.key_count(), 0, "{what}: key left on {node:?}");
    }
}

#[test]
fn every_builder_setter_at_zero_one_max_and_nonsense() {
    for d in DURATIONS {
        try_config(&format!("ttl {d:?}"), |b| b.ttl(d));
        try_config(&format!("max_ttl {d:?}"), |b| b.max_ttl(d));
        try_config(&format!("node_timeout {d:?}"), |b| b.node_timeout(d));
        try_config(&format!("retry delay {d:?}"), |b| {
            b.retry(RetryPolicy::new().delay(d).attempts(2))
        });
    }
    for f in [0.0, 1e-9, 0.5, 0.999, 1.0, -1.0, f64::NAN, f64::INFINITY] {
        try_config(&format!("drift_factor {f}"), |b| b.drift_factor(f));
    }
    for q in [0, 1, 2, 3, 4, usize::MAX] {
        try_config(&format!("quorum {q}"), |b| b.quorum(q));
    }
    for prefix in [&b""[..], b"p:", &[0xff; 3][..], &[b'x'; 4096][..]] {
        try_config(&format!("prefix of {} bytes", prefix.len()), |b| {
            b.prefix(prefix)
        });
    }
    let err = LockManager::builder().build().unwrap_err();
    assert!(err.is_invalid(), "{err}");
}

/// "Wait forever" is a legitimate request, not a panic.
#[test]
fn every_lock_option_at_zero_one_max() {
    let nodes = memory_nodes(3);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap();
    for d in DURATIONS {
        let options = [
            LockOptions::new().wait(d),
            LockOptions::new().ttl(d),
            LockOptions::new().max_hold(d).auto_extend(true),
            LockOptions::new().retry(RetryPolicy::new().max_wait(d)),
            LockOptions::new().retry(RetryPolicy::new().jitter(d).attempts(1)),
            LockOptions::new().retry(RetryPolicy::new().delay(d).attempts(1)),
        ];
        for (i, opts) in options.iter().enumerate() {
            let outcome = catch_unwind(AssertUnwindSafe(|| locks.lock_with("r", opts)));
            match outcome {
                Ok(Ok(guard)) => drop(guard.release().unwrap()),
                Ok(Err(e)) => assert!(e.is_invalid(), "option {i} at {d:?}: {e}"),
                Err(_) => panic!("option {i} at {d:?} panicked"),
            }
        }
    }
    for resource in [&b""[..], &[0u8][..], &[0xff; 1 << 16][..]] {
        match locks.try_lock(resource) {
            Ok(guard) => drop(guard.release().unwrap()),
            Err(e) => assert!(e.is_invalid(), "{e}"),
        }
    }
    assert!(locks.flush(Duration::from_secs(5)));
    for node in &nodes {
        assert_eq!(node.key_count(), 0);
    }
    let clock = ManualClock::new();
    let before = clock.now();
    clock.advance(Duration::MAX);
    assert!(clock.now() > before);
}

/// Attempts without a delay are still attempts.
#[test]
fn attempts_without_a_delay_are_all_made() {
    let node = MemoryBackend::new("mem");
    let locks = LockManager::builder().node(node.clone()).build().unwrap();
    // Held elsewhere (this thread asking again would be a deadlock).
    let holder = LockManager::builder().node(node.clone()).build().unwrap();
    let held = holder.try_lock("r").unwrap();
    let before = node.operations();
    let policy = RetryPolicy::new()
        .attempts(5)
        .delay(Duration::ZERO)
        .jitter(Duration::ZERO);
    let err = locks
        .lock_with("r", &LockOptions::new().retry(policy))
        .unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert_eq!(err.report().unwrap().attempts(), 5, "{err}");
    // Five acquires; each refused ("held by another token"), so no
    // cleanup release follows any of them.
    assert!(locks.flush(Duration::from_secs(5)));
    assert_eq!(node.operations() - before, 5);
    held.release().unwrap();
}

/// A wait budget means "retry until it is spent", not "10 attempts at
/// most". (Without release notices: with them, the timer would wait for
/// the holder's expiry instead of retrying every millisecond.)
#[test]
fn a_wait_budget_retries_until_it_is_spent() {
    let node = MemoryBackend::new("mem");
    node.set_release_notices(false);
    let locks = LockManager::builder()
        .node(node.clone())
        .retry(
            RetryPolicy::new()
                .delay(Duration::from_millis(1))
                .jitter(Duration::ZERO),
        )
        .build()
        .unwrap();
    // Held elsewhere (this thread asking again would be a deadlock).
    let holder = LockManager::builder().node(node).build().unwrap();
    let held = holder.try_lock("r").unwrap();
    let started = Instant::now();
    let err = locks
        .lock_with("r", &LockOptions::new().wait(Duration::from_millis(300)))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_contended(), "{err}");
    assert!(
        err.report().unwrap().attempts() > 10,
        "gave up after {} attempts in {waited:?}",
        err.report().unwrap().attempts()
    );
    assert!(
        waited >= Duration::from_millis(250),
        "gave up after {waited:?}"
    );
    held.release().unwrap();
}

/// A backend of a user's own: a name and one way to send a batch (here
/// over a memory node), nothing about the server behind it.
struct OwnBackend(MemoryBackend);

impl Backend for OwnBackend {
    fn describe(&self) -> String {
        format!("own:{}", self.0.describe())
    }
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        let results = backend::run(&self.0, ops).into_results();
        Box::new(Answers::new(results, None))
    }
}

/// Such a backend cannot have its grants counted under restart quarantine
/// (on by default): `build()` says so at once, naming the nodes and both
/// fixes, instead of every lock failing later with "no identity".
#[test]
fn a_backend_without_identity_is_refused_at_build_with_quarantine_on() {
    let own = || memory_nodes(3).into_iter().map(OwnBackend);
    let error = LockManager::builder()
        .nodes(own())
        .build()
        .expect_err("quarantine on needs identities");
    let text = error.to_string();
    assert!(error.is_invalid(), "{error:?}");
    assert!(
        text.contains("own:mem-0, own:mem-1, own:mem-2")
            && text.contains("Backend::probe")
            && text.contains("restart_quarantine(false)"),
        "{text}"
    );
    assert!(!text.contains('\n'), "one line: {text}");
    // With the quarantine off (restarts made safe another way), it locks.
    let locks = LockManager::builder()
        .nodes(own())
        .restart_quarantine(false)
        .build()
        .unwrap();
    locks.try_lock("job").unwrap().release().unwrap();
}

/// A resource name is at most `MAX_RESOURCE_LEN` bytes, checked before any
/// node is contacted, on every call that names a lock: a 64 MiB name used
/// to be sent to every node.
#[test]
fn resource_names_are_bounded_before_any_node_is_asked() {
    let nodes = memory_nodes(3);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .retry(RetryPolicy::none())
        .restart_quarantine(false)
        .build()
        .unwrap();
    let longest = vec![b'r'; MAX_RESOURCE_LEN];
    locks.try_lock(&longest).unwrap().release().unwrap();
    locks.flush(Duration::from_secs(5));
    let before: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    let huge = vec![b'r'; MAX_RESOURCE_LEN + 1];
    let results = [
        ("lock", locks.lock(&huge).map(drop)),
        ("try_lock", locks.try_lock(&huge).map(drop)),
        (
            "lock_all",
            locks
                .lock_all([&b"a"[..], &huge], &LockOptions::new())
                .map(drop),
        ),
        ("inspect", locks.inspect(&huge).map(drop)),
        ("semaphore", locks.semaphore(&longest, 2).map(drop)),
    ];
    for (call, result) in results {
        let err = result.unwrap_err();
        assert!(err.is_invalid(), "{call}: {err}");
        assert!(err.to_string().contains("4096"), "{call}: {err}");
    }
    let after: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    assert_eq!(before, after, "no node was asked");
    let long_prefix = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .prefix(&huge)
        .build()
        .unwrap_err();
    assert!(long_prefix.is_invalid(), "{long_prefix}");
}

/// The crate's own keys on the nodes (the fence counters today) live under
/// `{quorum-lock}` after the prefix, and no resource may contain it:
/// every call that names a lock refuses such a name with a one-line reason,
/// before any node is asked, and leaves no key anywhere. Names that only
/// look like the old set mark are plain resources now.
#[test]
fn the_reserved_namespace_is_refused_everywhere_and_no_key_is_left() {
    let nodes = memory_nodes(3);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .prefix("app:")
        .build()
        .unwrap();
    let before: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    let once = LockOptions::new().retry(RetryPolicy::none());
    for name in [
        "{quorum-lock}:fences",
        "{quorum-lock}",
        "{quorum-lock}:anything-later",
        "{quorum-lock}x",
        // On a cluster node, the fence counters of the lock `orders`.
        "{orders}{quorum-lock}:fences",
        "x{quorum-lock}",
    ] {
        let errors = [
            locks.lock(name).map(drop),
            locks.try_lock(name).map(drop),
            locks.lock_with(name, &once).map(drop),
            locks.with_lock(name, &once, |_| ()),
            locks.lock_all(["fine", name], &once).map(drop),
            locks.semaphore(name, 2).map(drop),
            locks.inspect(name).map(drop),
        ];
        for (call, result) in errors.into_iter().enumerate() {
            let err = result.unwrap_err();
            assert!(err.is_invalid(), "{name}, call {call}: {err}");
            let text = err.to_string();
            assert!(
                text.contains("{quorum-lock}") && text.contains("crate's own keys"),
                "{name}, call {call}: {text}"
            );
            assert!(!text.contains('\n'), "{name}, call {call}: {text}");
        }
    }
    let after: u64 = nodes.iter().map(MemoryBackend::round_trips).sum();
    assert_eq!(before, after, "no node was asked");
    for node in &nodes {
        assert_eq!(node.key_count(), 0, "key left on {node:?}");
    }
    // The old set mark is no longer reserved: a plain resource.
    let marked: &[u8] = b"\xffquorum-lock:set\xffx";
    let guard = locks.try_lock(marked).unwrap();
    assert_eq!(guard.resources(), [marked]);
    assert_eq!(guard.key(), [&b"app:"[..], marked].concat());
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(nodes.iter().all(|n| n.holder(guard.key()).is_some()));
    guard.release().unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    for node in &nodes {
        assert_eq!(node.key_count(), 0, "key left on {node:?}");
    }
}
