//! Wake-ups across processes on in-memory nodes: two managers over the same
//! nodes stand for two processes (each has its own engine and node
//! threads). The real-server tests are in `tests/redis/wakeups.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};
use testkit::CountedNotices;
use testkit::memory_nodes;

/// A retry delay no wake-up test may wait out.
const RETRY_DELAY: Duration = Duration::from_secs(5);

fn manager(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap()
}

fn retries(delay: Duration) -> LockOptions {
    LockOptions::new().retry(
        RetryPolicy::new()
            .attempts(30)
            .delay(delay)
            .jitter(Duration::ZERO),
    )
}

/// Holds `job` in `holder` until `waiter`, waiting for it with `options`,
/// listens for its release; returns how long after the release the
/// waiter got it, and the waiter's failed attempts once the release was
/// done on every node.
fn wait_behind(
    holder: &LockManager,
    waiter: &LockManager,
    options: &LockOptions,
) -> (Duration, u64) {
    // Every node holds the key before the waiter tries.
    let guard = testkit::hold_settled(holder, "job");
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with("job", options).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        testkit::until_listening(waiter);
        let released = Instant::now();
        guard.release().unwrap();
        let failed = waiter.health().locks.contended;
        let after = waiting.join().unwrap().saturating_duration_since(released);
        (after, failed)
    })
}

/// A waiter for a set (`lock_all`) listens for each member: the release
/// of one that another manager held wakes it.
#[test]
fn a_set_waiter_wakes_at_the_release_of_a_member() {
    let nodes = memory_nodes(3);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let guard = testkit::hold_settled(&holder, "b");
    let after = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_all(["a", "b"], &retries(RETRY_DELAY)).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        testkit::until_listening(&waiter);
        let released = Instant::now();
        guard.release().unwrap();
        waiting.join().unwrap().saturating_duration_since(released)
    });
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
}

#[test]
fn a_waiter_in_another_manager_wakes_at_the_release() {
    let nodes = memory_nodes(3);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let (after, _) = wait_behind(&holder, &waiter, &retries(RETRY_DELAY));
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
    // Releases nobody hears make no one wait.
    assert_eq!(holder.health().locks.yielded, 0);
}

#[test]
fn with_notices_off_waiters_retry_on_their_timer() {
    let nodes = memory_nodes(3);
    nodes.iter().for_each(|n| n.set_release_notices(false));
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let delay = Duration::from_millis(50);
    let (_, failed_at_release) = wait_behind(&holder, &waiter, &retries(delay));
    let locks = waiter.health().locks;
    assert_eq!(
        (locks.woken, locks.acquired),
        (0, 1),
        "no notice can come: {locks:?}"
    );
    // Its timer brought it the lock: at most the attempt in flight while
    // the release ran failed after it, the next one succeeded.
    assert!(
        locks.contended <= failed_at_release + 1,
        "{failed_at_release} failed attempts at the release: {locks:?}"
    );
}

/// One node without notices: the others' notices still wake the waiter
/// (a quorum of the nodes that can send them).
#[test]
fn one_deaf_node_does_not_stop_the_wake_ups() {
    let nodes = memory_nodes(3);
    nodes[2].set_release_notices(false);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let (after, _) = wait_behind(&holder, &waiter, &retries(RETRY_DELAY));
    assert!(after < RETRY_DELAY / 2, "woken {after:?} after the release");
    // With one node deaf, a wake-up still takes notices from two nodes
    // (more than the one node an undo can delete the key on while a
    // holder holds a quorum): both live nodes' notices of this one
    // release, so exactly one wake-up, and the attempt it brings succeeds.
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
}

/// A node thread slow to subscribe (busy with the waiter's first attempt)
/// while the holder releases there: that node never announces the
/// release to this waiter, which listens only after it. Its late answer,
/// a grant, shows the key free there instead, and counts as hearing it;
/// with one node deaf, the waiter needs both live nodes to hear the
/// release, so without that it slept out its retry delay.
#[test]
fn a_release_a_node_applied_before_it_listened_still_wakes_the_waiter() {
    let nodes = memory_nodes(3);
    nodes[2].set_release_notices(false);
    // Nodes 0 and 2 must refuse within the node timeout on a loaded
    // machine, so that each attempt is decided without node 1 (a failure
    // seen with the default 100 ms: "the waiter never tried twice", its
    // attempts timing out as no quorum). Nothing here is about a slow
    // node's timeout.
    let patient = |nodes: &[MemoryBackend]| {
        LockManager::builder()
            .nodes(nodes.iter().cloned())
            .node_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (patient(&nodes), patient(&nodes));
    let guard = holder.try_lock("job").unwrap();
    // The holder's round was decided at two grants; its third acquire may
    // still be on its way. Settled first: otherwise the waiter's acquire
    // can reach that node before it, be granted there, and with node 1
    // held below, every attempt ends as "no quorum" (one grant, one
    // refusal, node 1 timing out) instead of "held elsewhere", and the
    // waiter never counts as having tried twice (seen once on a loaded
    // machine: "0 contended, 2 no quorum").
    assert!(holder.flush(Duration::from_secs(10)));
    // Node 1 holds the waiter's first acquire (the first acquire from now
    // on) until the holder has released there.
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let held = std::sync::atomic::AtomicBool::new(false);
    nodes[1].set_hook(Some(std::sync::Arc::new(
        move |op: &quorum_lock::backend::Op<'_>| {
            let acquire = matches!(op.kind, quorum_lock::backend::OpKind::Acquire { .. });
            if acquire && !held.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = gate.lock().unwrap().recv_timeout(Duration::from_secs(10));
            }
        },
    )));
    let after = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.lock_with("job", &retries(RETRY_DELAY)).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        // Refused by nodes 0 and 2 twice: before it listened, and after
        // (node 1 still busy with the first attempt, so not listening).
        testkit::until_listening(&waiter);
        let released = Instant::now();
        guard.release().unwrap();
        assert!(
            testkit::wait_until(Duration::from_secs(10), || nodes[1].key_count() == 0),
            "the holder's release never reached node 1"
        );
        open.send(()).unwrap();
        waiting.join().unwrap().saturating_duration_since(released)
    });
    nodes[1].set_hook(None);
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!(locks.acquired, 1, "{locks:?}");
}

/// One node deaf to notices while the holder holds a bare quorum. Each
/// waiter's failed attempt takes the free node and its undo announces a
/// release there; those undos must not wake the other waiter (they come
/// from fewer nodes than any holder's release), or the two waiters wake
/// each other in turn for as long as the lock is held. The same run with
/// every node hearing is the yardstick.
#[test]
fn a_deaf_node_does_not_let_the_waiters_undos_wake_each_other() {
    const ATTEMPTS: u32 = 12;
    let delay = Duration::from_millis(20);
    let mut figures = Vec::new();
    for deaf in [false, true] {
        let nodes = memory_nodes(3);
        if deaf {
            // A node the holder holds: the free node still hears.
            nodes[0].set_release_notices(false);
        }
        // A manager of nodes 0 and 1 only: it holds a bare quorum of the
        // three, and node 2 stays free.
        let holder = manager(&nodes[..2]);
        let guard = holder.try_lock("job").unwrap();
        let waiters = [manager(&nodes), manager(&nodes)];
        let options = LockOptions::new().retry(
            RetryPolicy::new()
                .attempts(ATTEMPTS)
                .delay(delay)
                .jitter(Duration::ZERO),
        );
        std::thread::scope(|s| {
            for waiter in &waiters {
                let options = &options;
                s.spawn(move || {
                    let e = waiter.lock_with("job", options).unwrap_err();
                    assert!(e.is_contended(), "{e}");
                });
            }
        });
        drop(guard);
        for waiter in &waiters {
            let locks = waiter.health().locks;
            assert_eq!(locks.contended, u64::from(ATTEMPTS), "{locks:?}");
            figures.push((deaf, locks.contended, locks.woken));
        }
    }
    // The lock was held throughout: every wake-up was an undo's notice,
    // and an undo deletes the key only on the nodes the holder does not
    // hold (one here), never on as many as a release needs to wake.
    for &(deaf, contended, woken) in &figures {
        assert_eq!(
            woken, 0,
            "deaf node: {deaf}: {woken} of {contended} failed attempts were brought \
             forward by another waiter's undo: {figures:?}"
        );
    }
}

/// The other side of bounding forged notices (`tests/redis/wakeups.rs`): notices
/// that lead to a change of holder are real, and a waiter that keeps losing
/// races to other waiters keeps its early wake-ups (it never sleeps out a
/// retry delay while releases come). Three managers take turns on one key
/// many times.
#[test]
fn waiters_that_lose_real_races_keep_their_early_wake_ups() {
    const ROUNDS: usize = 15;
    let nodes = memory_nodes(3);
    let managers = [manager(&nodes), manager(&nodes), manager(&nodes)];
    // A wait that went on to its retry delay is counted (`held_back`),
    // so the delay need not be long; a yield to a waiter that has just
    // got the lock (its subscription outlives its wait by a moment) also
    // ends by the timer, with no notice held back.
    let options = retries(Duration::from_secs(1)).wait(Duration::from_secs(120));
    std::thread::scope(|s| {
        for locks in &managers {
            let options = &options;
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = locks.lock_with("turns", options).unwrap();
                    // A critical section that others wait through.
                    std::thread::sleep(Duration::from_millis(2));
                    guard.release().unwrap();
                }
            });
        }
    });
    let counters: Vec<_> = managers.iter().map(|m| m.health().locks).collect();
    for locks in &counters {
        assert_eq!(locks.acquired, ROUNDS as u64, "{counters:?}");
        assert_eq!(
            locks.held_back, 0,
            "a wait went on to its retry delay while the lock changed hands: {counters:?}"
        );
    }
}

/// A permit waiter listens for the release of every slot, as a lock
/// waiter does: a permit freed in another manager wakes it, instead of
/// it sleeping out its retry delay between scans.
#[test]
fn a_permit_waiter_wakes_at_the_release_of_a_slot() {
    let nodes = memory_nodes(3);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let held = holder.semaphore("uploads", 2).unwrap();
    let (first, second) = (held.try_acquire().unwrap(), held.try_acquire().unwrap());
    let after = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let permits = waiter.semaphore("uploads", 2).unwrap();
            let got = permits.acquire_with(&retries(RETRY_DELAY)).unwrap();
            let at = Instant::now();
            got.release().unwrap();
            at
        });
        // Two scans of two slots: the second one runs after the waiter
        // listens.
        let scanned_twice = || waiter.health().locks.contended >= 4;
        assert!(
            testkit::wait_until(Duration::from_secs(10), scanned_twice),
            "the waiter never scanned twice: {}",
            waiter.health()
        );
        let released = Instant::now();
        second.release().unwrap();
        waiting.join().unwrap().saturating_duration_since(released)
    });
    assert!(
        after < RETRY_DELAY / 2,
        "woken {after:?} after the release: it slept out its retry delay"
    );
    let locks = waiter.health().locks;
    assert_eq!((locks.woken, locks.acquired), (1, 1), "{locks:?}");
    drop(first);
}

/// A waiter behind a lock held for long makes about one timed attempt a
/// second, not one per retry delay: while every node can send release
/// notices, its timer waits until the holder's keys expire on a quorum
/// (at most a second, within its budget). Counted in attempts: a loaded
/// machine can only make fewer.
#[test]
fn a_waiter_behind_a_long_held_lock_tries_about_once_a_second() {
    let nodes = memory_nodes(3);
    let (holder, waiter) = (manager(&nodes), manager(&nodes));
    let _held = testkit::hold_settled(&holder, "job");
    // The default retry policy: 100 ms plus up to 100 ms between attempts.
    let wait = LockOptions::new().wait(Duration::from_millis(2_500));
    let err = waiter.lock_with("job", &wait).unwrap_err();
    let attempts = waiter.health().locks.contended;
    // The first attempt, the one right after listening, one a second,
    // and the last at the end of the budget.
    assert!(
        attempts <= 6,
        "{attempts} attempts in a wait of 2.5 s behind a lock held for 30 s: {err}"
    );
}

/// A thread waiting for a held lock costs next to nothing: the node
/// threads sleep until a notice arrives (or the waiter's own timer
/// attempts), instead of looking for notices every millisecond. Counted
/// in calls, not time: each of the waiter's attempts may look once or
/// twice per node, and a poll would look about once a millisecond.
#[test]
fn a_waiting_manager_does_not_poll_for_notices() {
    let nodes = memory_nodes(3);
    let receives = Arc::new(AtomicU64::new(0));
    let holder = manager(&nodes);
    let waiter = LockManager::builder()
        .nodes(
            nodes
                .iter()
                .map(|node| CountedNotices::new(node.clone(), &receives)),
        )
        .build()
        .unwrap();
    let _held = testkit::hold_settled(&holder, "job");
    let delay = Duration::from_millis(100);
    let wait = LockOptions::new()
        .wait(Duration::from_millis(800))
        .retry(RetryPolicy::new().delay(delay).jitter(Duration::ZERO));
    let err = waiter.lock_with("job", &wait).unwrap_err();
    assert!(err.to_string().contains("job"), "{err}");
    let attempts = waiter.health().locks.contended;
    let looked = receives.load(Ordering::Relaxed);
    // Per node: the subscription, each attempt's batch (and its timer),
    // the unsubscription; 3 nodes.
    let bound = 3 * (2 * attempts + 4);
    assert!(
        looked <= bound,
        "the node threads looked for notices {looked} times during a wait of 800 ms \
         with {attempts} attempts (at most {bound} without polling)"
    );
}

/// Issue 43: a waiter is never woken by the undo of its own manager's
/// failed attempts, also when the undo's notice comes before its answer.
/// Every attempt here is granted on every node, but too slowly (each
/// acquire moves the manager's clock past the TTL): `ValidityExpired`,
/// and an undo on every node. Every other undo's answer is lost (the
/// release was applied and announced, its reply did not come: as a reply
/// that comes after the notice): those echoes were taken for releases
/// and woke the waiter at once, again and again. With undos registered
/// before they are sent, it makes about one attempt per retry delay.
#[test]
fn a_waiter_is_not_woken_by_its_own_attempts_undo() {
    use std::sync::atomic::AtomicBool;

    let nodes = memory_nodes(3);
    let clock = Arc::new(quorum_lock::ManualClock::new());
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(clock.clone())
        .restart_quarantine(false)
        .build()
        .unwrap();
    const TTL: Duration = Duration::from_secs(1);
    for node in &nodes {
        let (slow, this, flip) = (
            clock.clone(),
            node.clone(),
            Arc::new(AtomicBool::new(false)),
        );
        let hook: quorum_lock::backend::CallHook = Arc::new(move |op| {
            if op.kind.is_release() {
                if !flip.fetch_xor(true, Ordering::Relaxed) {
                    this.lose_replies_next(1);
                }
            } else {
                slow.advance(TTL);
            }
        });
        node.set_hook(Some(hook));
    }
    let delay = Duration::from_millis(200);
    let wait = Duration::from_secs(2);
    let options = LockOptions::new()
        .ttl(TTL)
        .wait(wait)
        .retry(RetryPolicy::new().delay(delay).jitter(Duration::ZERO));
    let error = locks.lock_with("job", &options).unwrap_err();
    assert!(
        matches!(error, quorum_lock::Error::ValidityExpired { .. }),
        "{error}"
    );
    let counters = locks.health().locks;
    // At most one attempt per delay, and one more at once after the
    // first (to catch a release made before the subscription).
    let most = (wait.as_millis() / delay.as_millis()) as u64 + 2;
    assert!(
        counters.validity_expired <= most,
        "{} attempts in {wait:?} with a retry delay of {delay:?} (at most {most}); \
         woken {} times",
        counters.validity_expired,
        counters.woken
    );
    assert_eq!(counters.woken, 0, "woken by its own undos");
}

/// Issue 43: only undos are echoes. A release by another thread of the
/// same manager wakes that manager's waiters: here a set waiter, whose
/// member a plain lock of the same manager held (the two wait in
/// different local lines, so only the notice can wake it). Before, every
/// release of a single key this manager made was skipped as an echo.
#[test]
fn another_threads_release_in_the_same_manager_wakes_a_waiter() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let guard = testkit::hold_settled(&locks, "b");
    let woken = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = locks.lock_all(["a", "b"], &retries(RETRY_DELAY)).unwrap();
            got.release().unwrap();
        });
        testkit::until_listening(&locks);
        guard.release().unwrap();
        waiting.join().unwrap();
        locks.health().locks.woken
    });
    assert!(
        woken >= 1,
        "the release of a member did not wake the set waiter"
    );
}

/// The fairness rule's wait ends soon when no waiter takes the lock. A
/// releaser whose release a waiter heard lets the waiters go first: its
/// next lock of the key waits for the next holder's release. Here the
/// one listener (a set waiter, whose other member stays held) cannot take
/// it, so no release ever comes: the releaser waited out a whole retry
/// delay for a free lock. The same wait stalled two processes taking
/// turns when each had released with the other listening and neither
/// held the lock: each let the other go first (docs/benchmarks.md, "One
/// holder and one waiter").
#[test]
fn a_releaser_does_not_wait_its_retry_delay_for_a_waiter_that_cannot_take_the_lock() {
    let nodes = memory_nodes(3);
    let (releaser, listener, other) = (manager(&nodes), manager(&nodes), manager(&nodes));
    let other_member = testkit::hold_settled(&other, "z");
    std::thread::scope(|s| {
        let listening = s.spawn(|| {
            let got = listener
                .lock_all(["job", "z"], &retries(RETRY_DELAY))
                .unwrap();
            got.release().unwrap();
        });
        testkit::until_listening(&listener);
        testkit::hold_settled(&releaser, "job").release().unwrap();
        let asked = Instant::now();
        let again = releaser.lock_with("job", &retries(RETRY_DELAY)).unwrap();
        let took = asked.elapsed();
        again.release().unwrap();
        other_member.release().unwrap();
        listening.join().unwrap();
        assert!(
            took < RETRY_DELAY / 2,
            "the lock took {took:?} to get: the releaser waited out its retry delay"
        );
    });
    // It did let the listener go first.
    let locks = releaser.health().locks;
    assert_eq!((locks.yielded, locks.acquired), (1, 2), "{locks:?}");
}
