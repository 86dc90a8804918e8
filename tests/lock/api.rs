//! The public API's promises: thread-safety, and bad input rejected with a
//! typed error before any node is contacted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::{
    Error, LockGuard, LockManager, LockManagerBuilder, LockOptions, MemoryBackend, RetryPolicy,
};
use testkit::{memory_nodes, wait_until_with};

#[test]
fn public_types_are_thread_safe() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    send_sync::<LockManager>();
    send_sync::<Error>();
    send::<LockGuard>();
    send_sync::<LockGuard>();
    send_sync::<MemoryBackend>();
    error::<Error>();
    error::<quorum_lock::backend::BackendError>();
}

fn builder(nodes: &[MemoryBackend]) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .retry(RetryPolicy::none())
}

fn config_error(result: Result<LockManager, Error>) -> String {
    match result {
        Err(Error::Config { reason }) => reason,
        other => panic!("expected Error::Config, got {other:?}"),
    }
}

#[test]
fn bad_configuration_is_a_config_error() {
    let three = memory_nodes(3);
    assert!(config_error(LockManager::builder().build()).contains("no nodes"));
    let twice = config_error(builder(&three).node(three[1].clone()).build());
    assert!(
        twice.contains("mem-1") && twice.contains("twice"),
        "{twice}"
    );
    let low = config_error(builder(&three).quorum(1).build());
    assert!(
        low.contains("quorum 1") && low.contains("majority"),
        "{low}"
    );
    assert!(config_error(builder(&three).quorum(4).build()).contains("quorum 4"));
    assert!(config_error(builder(&three).drift_factor(-0.1).build()).contains("drift"));
    assert!(config_error(builder(&three).drift_factor(f64::NAN).build()).contains("drift"));
    assert!(config_error(builder(&three).ttl(Duration::ZERO).build()).contains("zero"));
    assert!(config_error(builder(&three).ttl(Duration::from_millis(2)).build()).contains("drift"));
    let slow = builder(&three)
        .ttl(Duration::from_secs(1))
        .node_timeout(Duration::from_secs(1));
    assert!(config_error(slow.build()).contains("node timeout"));
    assert!(config_error(builder(&three).max_ttl(Duration::MAX).build()).contains("max_ttl"));
    let above = builder(&three)
        .max_ttl(Duration::from_secs(5))
        .ttl(Duration::from_secs(6));
    assert!(config_error(above.build()).contains("max_ttl"));
    // Quorum may be raised up to N.
    assert_eq!(builder(&three).quorum(3).build().unwrap().quorum(), 3);
    assert_eq!(builder(&memory_nodes(4)).build().unwrap().quorum(), 3);
}

#[test]
fn bad_arguments_are_rejected_before_any_node_is_contacted() {
    let nodes = memory_nodes(3);
    let locks = builder(&nodes).build().unwrap();
    let cases: Vec<(&str, Result<LockGuard, Error>)> = vec![
        ("empty", locks.try_lock("")),
        ("empty bytes", locks.lock(b"")),
        (
            "zero ttl",
            locks.lock_with("r", &LockOptions::new().ttl(Duration::ZERO)),
        ),
        (
            "1 ms ttl",
            locks.lock_with("r", &LockOptions::new().ttl(Duration::from_millis(1))),
        ),
        (
            "huge ttl",
            locks.lock_with(
                "r",
                &LockOptions::new().ttl(Duration::from_millis(u64::MAX)),
            ),
        ),
        (
            "max ttl",
            locks.lock_with("r", &LockOptions::new().ttl(Duration::MAX)),
        ),
    ];
    for (what, result) in cases {
        match result {
            Err(Error::InvalidArgument { reason }) => assert!(!reason.is_empty(), "{what}"),
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        nodes.iter().all(|n| n.operations() == 0),
        "a node was contacted"
    );
}

#[test]
fn extend_with_a_bad_ttl_leaves_the_guard_unchanged() {
    let nodes = memory_nodes(3);
    let locks = builder(&nodes).build().unwrap();
    let mut guard = locks.try_lock("r").unwrap();
    let err = guard.extend(Duration::from_secs(3600)).unwrap_err();
    assert!(err.is_invalid(), "{err}");
    assert!(guard.is_valid());
}

#[test]
fn keys_are_the_prefix_and_the_resource_bytes() {
    let nodes = memory_nodes(1);
    let locks = builder(&nodes).prefix("app:").build().unwrap();
    let resource = [0xff, 0x00, b'x', 0xfe]; // not UTF-8
    let guard = locks.try_lock(resource).unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    assert_eq!(guard.resource(), resource);
    assert_eq!(guard.key(), b"app:\xff\x00x\xfe");
    assert!(nodes[0].holder(b"app:\xff\x00x\xfe").is_some());
    let bare = LockManager::builder()
        .node(MemoryBackend::new("m"))
        .build()
        .unwrap();
    assert_eq!(
        &*bare.key_for("orders:42"),
        b"orders:42",
        "no prefix by default"
    );
}

#[test]
fn lock_retries_until_the_holder_lets_go() {
    let nodes = memory_nodes(3);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .retry(
            RetryPolicy::new()
                .attempts(200)
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(5)),
        )
        .build()
        .unwrap();
    let held = locks.try_lock("r").unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    let seen = nodes[0].operations();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || locks.lock("r").map(|g| g.release().is_ok()))
    };
    // Release only once the waiter has been refused at least once, so the
    // retry path is what gets it the lock (bounded: 10 s, polled every ms).
    let refused_once = wait_until_with(
        Duration::from_secs(10),
        Duration::from_millis(1),
        || false,
        || nodes[0].operations() > seen,
    );
    assert!(refused_once, "the waiter never tried");
    held.release().unwrap();
    assert!(waiter.join().unwrap().unwrap());
}

#[test]
fn retries_are_bounded_and_counted() {
    let nodes = memory_nodes(3);
    let locks = builder(&nodes).build().unwrap();
    // Held elsewhere (this thread asking again would be a deadlock).
    let holder = builder(&nodes).build().unwrap();
    let _held = holder.try_lock("r").unwrap();
    let policy = RetryPolicy::new()
        .attempts(3)
        .delay(Duration::ZERO)
        .jitter(Duration::from_millis(1));
    let err = locks
        .lock_with("r", &LockOptions::new().retry(policy))
        .unwrap_err();
    assert!(err.is_contended());
    assert_eq!(err.report().unwrap().attempts(), 3);
    let err = locks
        .lock_with("r", &LockOptions::new().wait(Duration::ZERO))
        .unwrap_err();
    assert_eq!(
        err.report().unwrap().attempts(),
        1,
        "a zero wait budget allows one attempt"
    );
}

/// In this crate `try_` means one attempt (`try_lock`, `try_read`,
/// `try_write`, `try_acquire`): `try_with_lock` on a held lock fails after
/// one attempt with the default options (which wait up to 60 s) and
/// with options that ask for retries, and its work never runs. Counted
/// by the error's report, not by time.
#[test]
fn try_with_lock_makes_one_attempt() {
    let nodes = memory_nodes(3);
    // The manager's default retry policy: wait up to 60 s.
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap();
    let holder = builder(&nodes).build().unwrap();
    let held = holder.try_lock("r").unwrap();
    let retrying = LockOptions::new().retry(RetryPolicy::new().attempts(5).delay(Duration::ZERO));
    for options in [LockOptions::new(), retrying] {
        let mut ran = false;
        let result: Result<u32, Error> = locks.try_with_lock("r", &options, |_| {
            ran = true;
            Ok(1)
        });
        let err = match result {
            Ok(v) => panic!(
                "try_with_lock ({options:?}) waited for the lock held elsewhere (until its TTL \
                 ran out) and ran the work: Ok({v})"
            ),
            Err(e) => e,
        };
        assert!(err.is_contended(), "{err}");
        assert_eq!(
            err.report().unwrap().attempts(),
            1,
            "try_with_lock made more than one attempt ({options:?}): {err}"
        );
        assert!(!ran, "the work ran without the lock");
    }
    held.release().unwrap();
}
