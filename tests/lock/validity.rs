//! Validity = TTL - elapsed - drift, measured on an injected clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::time::Duration;

use quorum_lock::backend::{Op, OpKind};
use quorum_lock::{Clock, LockManager, ManualClock, MemoryBackend, RetryPolicy};
use testkit::memory_nodes_on;

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(1);
/// 1% of 1 s plus 2 ms.
const DRIFT: Duration = Duration::from_millis(12);

/// `n` nodes on `clock`, each of which makes every acquire take `slow` of
/// clock time. The quorum is all of them, so the round's elapsed time is
/// exactly `n * slow` whatever order the answers arrive in.
fn slow_cluster(
    n: usize,
    clock: &ManualClock,
    slow: Duration,
) -> (Vec<MemoryBackend>, LockManager) {
    let nodes = memory_nodes_on(n, clock);
    for node in &nodes {
        let clock = clock.clone();
        node.set_hook(Some(Arc::new(move |op: &Op<'_>| {
            if matches!(op.kind, OpKind::Acquire { .. }) {
                clock.advance(slow);
            }
        })));
    }
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .quorum(n)
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    (nodes, locks)
}

#[test]
fn validity_is_ttl_minus_elapsed_minus_drift() {
    for (n, slow) in [
        (1, Duration::ZERO),
        (1, 300 * MS),
        (3, 100 * MS),
        (3, 328 * MS),
    ] {
        let clock = ManualClock::new();
        let (_nodes, locks) = slow_cluster(n, &clock, slow);
        assert_eq!(locks.drift_for(TTL), DRIFT);
        let guard = locks.try_lock("v").unwrap();
        let elapsed = slow * n as u32;
        assert_eq!(
            guard.validity(),
            TTL - elapsed - DRIFT,
            "n={n} slow={slow:?}"
        );
        clock.advance(guard.validity() - MS);
        assert!(guard.is_valid());
        clock.advance(MS);
        assert!(!guard.is_valid(), "deadline is start + ttl - drift");
        assert_eq!(guard.validity(), Duration::ZERO, "saturates at zero");
        assert!(guard.check().unwrap_err().is_lost());
    }
}

/// A round that takes the whole TTL minus drift (or longer) yields no
/// validity: it fails and releases on every node.
#[test]
fn slow_round_fails_and_releases_everywhere() {
    for (n, slow) in [(1, TTL - DRIFT), (1, TTL * 3), (3, 330 * MS), (3, TTL)] {
        let clock = ManualClock::new();
        let (nodes, locks) = slow_cluster(n, &clock, slow);
        let start = clock.now();
        let err = locks.try_lock("v").unwrap_err();
        assert!(
            matches!(err, quorum_lock::Error::ValidityExpired { .. }),
            "{err}"
        );
        assert_eq!(err.report().unwrap().granted(), n, "every node granted");
        assert!(clock.now() - start >= TTL - DRIFT);
        assert!(locks.flush(Duration::from_secs(10)));
        for node in &nodes {
            assert_eq!(node.key_count(), 0, "{node:?} kept the key");
        }
    }
}

/// One nanosecond less than the limit still gives a (tiny) positive validity.
#[test]
fn boundary_is_exclusive() {
    let clock = ManualClock::new();
    let almost = TTL - DRIFT - Duration::from_nanos(1);
    let (_nodes, locks) = slow_cluster(1, &clock, almost);
    let guard = locks.try_lock("v").unwrap();
    assert_eq!(guard.validity(), Duration::from_nanos(1));
}

/// The deadline after an extend is measured from the extend's own start.
#[test]
fn extend_validity_is_measured_from_its_own_start() {
    let clock = ManualClock::new();
    let (nodes, locks) = slow_cluster(3, &clock, Duration::ZERO);
    let mut guard = locks.try_lock("v").unwrap();
    clock.advance(500 * MS);
    let ttl = Duration::from_secs(2);
    let validity = guard.extend(ttl).unwrap();
    assert_eq!(validity, ttl - locks.drift_for(ttl));
    // The extend is decided at a quorum: let the last node run it too.
    assert!(locks.flush(Duration::from_secs(10)));
    for node in &nodes {
        assert_eq!(node.remaining_ttl(b"v"), Some(ttl));
    }
}

/// A round granted on every node but too slowly fails; the grants showed
/// the key free, yet they must not end the wait before the next attempt
/// at once (they count as release notices for a waiter, see
/// `Waiters::note_free`): a lock whose rounds are always too slow would
/// retry in a loop instead of every retry delay.
#[test]
fn a_slow_round_waits_its_retry_delay_before_the_next() {
    let clock = ManualClock::new();
    let (_nodes, locks) = slow_cluster(3, &clock, TTL);
    let options = quorum_lock::LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(3)
            .delay(Duration::from_millis(20))
            .jitter(Duration::ZERO),
    );
    let err = locks.lock_with("v", &options).unwrap_err();
    assert!(
        matches!(err, quorum_lock::Error::ValidityExpired { .. }),
        "{err}"
    );
    let counters = locks.health().locks;
    assert_eq!(
        counters.woken, 0,
        "a slow round's grants woke it: {counters:?}"
    );
}

/// Issue 44: a host that sleeps. The manager's clock jumps past the
/// lock's validity, as the default clock does across a suspend (it reads
/// `CLOCK_BOOTTIME`, see `MonotonicClock`); the servers' keys expired
/// meanwhile and another process took the lock. The guard must say it
/// is no longer valid, and auto-extension must stop and report a loss,
/// never extend (revive) a lock whose validity ran out.
#[test]
fn a_jump_past_the_validity_makes_the_guard_invalid_and_stops_renewal_as_a_loss() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let manager = || {
        LockManager::builder()
            .nodes(nodes.iter().cloned())
            .clock(Arc::new(clock.clone()))
            .ttl(Duration::from_secs(3))
            .restart_quarantine(false)
            .retry(RetryPolicy::none())
            .build()
            .unwrap()
    };
    let (sleeper, other) = (manager(), manager());
    let options = quorum_lock::LockOptions::new().auto_extend(true);
    let guard = sleeper.lock_with("job", &options).unwrap();
    let lost = guard.lost_signal();
    assert!(guard.is_valid());
    // The host sleeps for 10 s: past the 3 s TTL.
    clock.advance(Duration::from_secs(10));
    let taken = other
        .try_lock("job")
        .expect("the keys expired during the sleep");
    assert!(sleeper.flush(Duration::from_secs(10)));
    assert!(!guard.is_valid(), "valid after a sleep past its validity");
    assert_eq!(guard.validity(), Duration::ZERO);
    assert!(guard.check().is_err());
    let notice = lost.recv_timeout(Duration::from_secs(10));
    assert!(
        matches!(notice, Some(quorum_lock::Error::Lost { .. })),
        "auto-extension did not report the loss: {notice:?}"
    );
    // Renewal stopped: later extends never come, and the other holder
    // keeps the keys.
    let extensions = guard.extensions();
    clock.advance(Duration::from_secs(2));
    assert!(sleeper.flush(Duration::from_secs(10)));
    assert_eq!(guard.extensions(), extensions);
    assert!(taken.is_valid());
    taken.release().unwrap();
}
