//! Named regression tests: one per safety hole found by review, each a
//! deterministic schedule that gave two valid holders (or a wrong answer)
//! before its fix. In-memory nodes on an injected clock; the extend-order
//! holes are unit tests beside the lease code (`src/redlock/tests.rs`)
//! because they need the watchdog's two-step extend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::time::Duration;

use quorum_lock::backend::{self, UptimeReport};
use quorum_lock::{LockManager, LockOptions, ManualClock, MemoryBackend, RetryPolicy};
use testkit::faces::Face;
use testkit::{builder_on, memory_nodes, memory_nodes_on};

const MS: Duration = Duration::from_millis(1);

fn manager(nodes: &[MemoryBackend], clock: &ManualClock, ttl: Duration) -> LockManager {
    builder_on(nodes, clock)
        .ttl(ttl)
        .max_ttl(ttl)
        .restart_quarantine(true)
        // Below the schedules' TTLs of 1 s.
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// Redis reports `uptime_in_seconds` as floor(wall now) - floor(wall
/// start): 60 ms after a start at wall time x.95 it already reads 1 s. A
/// manager that first meets such a server must not credit it with a second
/// it has not been up. Schedule: TTL = max_ttl = 1 s; A locks 3/3; two
/// nodes restart empty at wall time x.95; B makes first contact 60 ms
/// later. Before the fix B was quarantined for only 12 ms and won 15 ms
/// later, while A still had ~900 ms of validity.
#[test]
fn first_contact_does_not_trust_a_whole_second_of_uptime() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    for node in &nodes {
        node.set_uptime_report(UptimeReport::WholeSeconds { phase: 950 * MS });
    }
    let ttl = Duration::from_secs(1);
    let a = manager(&nodes, &clock, ttl);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)), "A holds all three");
    nodes[0].restart();
    nodes[1].restart();
    clock.advance(60 * MS); // wall x+1.01: uptime reads 1 s
    let b = manager(&nodes, &clock, ttl);
    let first = b.try_lock("r");
    assert!(first.is_err(), "quarantined at first contact");
    drop(first);
    clock.advance(15 * MS);
    assert!(b.flush(Duration::from_secs(5)));
    let second = b.try_lock("r");
    assert!(
        !(guard_a.is_valid() && second.as_ref().is_ok_and(|g| g.is_valid())),
        "two valid holders: A ({:?} left) and B",
        guard_a.validity()
    );
}

/// A node that reports no identity (a Redis-compatible proxy whose `INFO`
/// lacks `run_id`) cannot be checked for restarts, so under quarantine its
/// grants must not count. Before the fix they counted, and two nodes
/// restarted empty under A's lock let B in.
#[test]
fn a_node_without_identity_does_not_vote_under_quarantine() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let ttl = Duration::from_secs(1);
    let a = manager(&nodes, &clock, ttl);
    let guard_a = a.try_lock("r").unwrap();
    assert!(a.flush(Duration::from_secs(5)));
    for node in &nodes {
        node.set_identity_hidden(true);
    }
    nodes[0].restart();
    nodes[1].restart();
    let b = manager(&nodes, &clock, ttl);
    let got = b.try_lock("r");
    assert!(
        !(guard_a.is_valid() && got.as_ref().is_ok_and(|g| g.is_valid())),
        "two valid holders"
    );
    let err = got.unwrap_err();
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().contains("identity"), "{err}");
}

/// The same server under two names: the duplicate's `SET` may land first,
/// its vote is discarded, and the owning name then found "our own key" and
/// refused. With only the two names a free lock was reported as contended
/// in about a third of the attempts. A key that already holds our token is
/// a grant, so a free lock is never contended.
#[test]
fn a_duplicate_node_never_makes_a_free_lock_look_contended() {
    let server = MemoryBackend::new("mem-a");
    for attempt in 0..30 {
        let locks = LockManager::builder()
            .node(Face::alias(&server, "alias-1"))
            .node(Face::alias(&server, "alias-2"))
            .restart_quarantine(false)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        let err = locks
            .try_lock(format!("r{attempt}"))
            .map(drop)
            .expect_err("one server cannot make a quorum of two");
        assert!(!err.is_contended(), "attempt {attempt}: {err}");
        assert!(locks.flush(Duration::from_secs(5)));
        assert_eq!(server.key_count(), 0, "the failed attempt left a key");
    }
}

/// One server under two names that cannot be identified (quarantine off, as
/// docs/safety.md tells such deployments to run): "a key that already holds
/// our token counts as a grant" let the second name's answer count too, so
/// one server cast two votes. Schedule: nodes [A, A (alias), B], B held by
/// someone else; before the fix the lock was granted 2 of 3 while only one
/// of the two servers held it.
#[test]
fn one_server_under_two_names_never_casts_two_votes_without_an_identity() {
    let clock = ManualClock::new();
    let server = MemoryBackend::with_clock("mem-a", Arc::new(clock.clone()));
    server.set_identity_hidden(true);
    let other = MemoryBackend::with_clock("mem-b", Arc::new(clock.clone()));
    assert!(backend::acquire(&other, b"r", b"someone-else", Duration::from_secs(10)).unwrap());
    let locks = LockManager::builder()
        .node(Face::alias(&server, "alias-1"))
        .node(Face::alias(&server, "alias-2"))
        .node(other.clone())
        .clock(Arc::new(clock.clone()))
        .restart_quarantine(false)
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let got = locks.try_lock("r");
    assert!(
        got.is_err(),
        "granted by one server under two names: {:?}",
        got.map(|g| g.validity())
    );
    assert!(locks.flush(Duration::from_secs(5)));
    assert_eq!(server.holder(b"r"), None, "the failed attempt left a key");
}

/// Only connectivity errors kept a release for retry: a release that failed
/// otherwise (a connection reset mid-request, `LOADING`, `BUSY`, a script
/// error) was dropped, though the acquire it undoes had landed, and the key
/// stayed for its whole TTL. A release whose outcome is unknown is now
/// retried until the key must have expired.
#[test]
fn a_release_that_failed_for_any_reason_is_retried() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let locks = manager(&nodes, &clock, Duration::from_secs(30));
    let guard = locks.try_lock("r").unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    nodes[0].fail_next(1); // an error that is not about connectivity
    drop(guard);
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(
        testkit::wait_until(Duration::from_secs(3), || nodes[0].holder(b"r").is_none()),
        "the release that failed once was dropped: the key stays for its TTL ({:?} left)",
        nodes[0].remaining_ttl(b"r")
    );
}

/// A set travelled through the engine as one composite key, and a release
/// kept for retry was sent again as the release of that composite key,
/// which no server holds: the set's members stayed on the node for their
/// whole TTL. The lock's keys are one type now, and the retry releases
/// every member, as the first release would have.
#[test]
fn a_failed_release_of_a_set_is_retried_for_every_member() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let locks = manager(&nodes, &clock, Duration::from_secs(30));
    let set = locks.lock_all(["a", "b"], &LockOptions::new()).unwrap();
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(nodes[0].holder(b"a").is_some() && nodes[0].holder(b"b").is_some());
    nodes[0].fail_next(1);
    drop(set);
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(
        testkit::wait_until(Duration::from_secs(3), || nodes[0].key_count() == 0),
        "the set's release that failed once was not retried: a {:?} left, b {:?} left",
        nodes[0].remaining_ttl(b"a"),
        nodes[0].remaining_ttl(b"b")
    );
}

/// The local line knew only a waiter's TTL, so a thread that asked for
/// `fencing(true)` and waited behind a plain holder was handed that
/// holder's lease on drop: same token, `fence() == None`. A hand-over must
/// give a waiter the lock it asked for, or none.
#[test]
fn a_fenced_waiter_is_never_handed_a_plain_lock() {
    let nodes = memory_nodes(3);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .unwrap();
    for (holder_fenced, waiter_fenced) in [(false, true), (true, false), (true, true)] {
        let holder_opts = LockOptions::new().fencing(holder_fenced);
        let held = locks.lock_with("r", &holder_opts).unwrap();
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                let opts = LockOptions::new()
                    .fencing(waiter_fenced)
                    .wait(Duration::from_secs(30));
                let guard = locks.lock_with("r", &opts).unwrap();
                (guard.fence(), *guard.token())
            })
        };
        assert!(
            testkit::wait_until(Duration::from_secs(30), || locks.local_waiters("r") == 1),
            "the waiter never queued"
        );
        let held_token = *held.token();
        drop(held); // the hand-over point
        let (fence, token) = waiter.join().unwrap();
        assert_eq!(
            fence.is_some(),
            waiter_fenced,
            "holder fenced: {holder_fenced}, waiter fenced: {waiter_fenced}, got fence {fence:?}"
        );
        if holder_fenced || waiter_fenced {
            assert_ne!(token, held_token, "the holder's lease was handed over");
        }
    }
    assert!(locks.flush(Duration::from_secs(10)));
}

/// A manager on `clock` whose `lock` waits in the local line (the default
/// retry policy), with a short node timeout so short TTLs are allowed.
fn waiting_manager(nodes: &[MemoryBackend], clock: &ManualClock, ttl: Duration) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .ttl(ttl)
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
}

/// A thread kept its guard past the validity (stuck, no auto-extension);
/// another thread of the same manager waited in the local line for its
/// whole budget (8 s of `wait(8s)`) while a thread of another process got
/// the lock after 0.69 s. The line is bounded by the holder's validity. And
/// when the stuck guard drops later, it passes no turn it no longer owns
/// and hands over nothing: the line stays FIFO.
#[test]
fn the_local_line_does_not_wait_behind_an_expired_lease() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let ttl = Duration::from_millis(600);
    let locks = waiting_manager(&nodes, &clock, ttl);
    let stuck = locks.lock("r").unwrap();
    let spawn_waiter = |locks: &LockManager| {
        let (tx, rx) = std::sync::mpsc::channel();
        let locks = locks.clone();
        let handle = std::thread::spawn(move || {
            let opts = LockOptions::new().wait(Duration::from_secs(10));
            let guard = locks.lock_with("r", &opts).unwrap();
            tx.send(*guard.token()).unwrap();
            guard
        });
        (handle, rx)
    };
    let (b, b_got) = spawn_waiter(&locks);
    let in_line = || locks.local_waiters("r") == 1;
    assert!(testkit::wait_until(Duration::from_secs(30), in_line));
    clock.advance(ttl + 100 * MS); // the stuck holder's lease is over
    assert!(!stuck.is_valid());
    let b_token = b_got
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter was still in line 5 s after the holder's lease expired");
    assert_ne!(&b_token, stuck.token());
    let b_guard = b.join().unwrap();
    assert!(b_guard.is_valid());
    // The stuck guard goes now: a turn it no longer owns.
    drop(stuck);
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(b_guard.is_valid(), "B's lock survives the stale drop");
    let (c, c_got) = spawn_waiter(&locks);
    assert!(
        testkit::wait_until(Duration::from_secs(30), in_line),
        "C waits in line behind B"
    );
    assert!(c_got.try_recv().is_err(), "C got the lock while B holds it");
    drop(b_guard);
    c_got
        .recv_timeout(Duration::from_secs(10))
        .expect("C gets its turn when B lets go");
    drop(c.join().unwrap());
    assert!(locks.flush(Duration::from_secs(10)));
    assert_eq!(locks.local_waiters("r"), 0);
}

/// The same, loss variant: a holder whose extend failed (the lock may be
/// gone) does not hold the line either; the next thread contends with the
/// servers at once.
#[test]
fn the_local_line_does_not_wait_behind_a_lost_lease() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let ttl = Duration::from_secs(1);
    let locks = waiting_manager(&nodes, &clock, ttl);
    let mut holder = locks.lock("r").unwrap();
    // The lock may be decided at a quorum: let every node run its acquire,
    // so the failures armed below hit the extend.
    assert!(locks.flush(Duration::from_secs(10)));
    let (tx, got) = std::sync::mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let opts = LockOptions::new()
                .wait(Duration::from_secs(10))
                .retry(RetryPolicy::new().delay(MS).jitter(MS));
            let guard = locks.lock_with("r", &opts);
            tx.send(()).unwrap();
            guard.map(drop)
        })
    };
    assert!(testkit::wait_until(Duration::from_secs(30), || {
        locks.local_waiters("r") == 1
    }));
    nodes[0].fail_next(1);
    nodes[1].fail_next(1);
    assert!(holder.extend(ttl).unwrap_err().is_lost());
    assert!(
        testkit::wait_until(Duration::from_secs(5), || locks.local_waiters("r") == 0),
        "the waiter was still in line 5 s after the holder's lease was lost"
    );
    // The keys are still there (a lost lock may be held): the waiter gets
    // it once they expire.
    clock.advance(ttl);
    got.recv_timeout(Duration::from_secs(10))
        .expect("the waiter got the lock");
    waiter.join().unwrap().unwrap();
    drop(holder);
}

/// The local turn was passed by hand on each exit path of `lock_with`; a
/// path that unwinds (here a clock that panics in the caller's thread
/// during the attempt) kept the turn for ever, and the next thread waited
/// in line for its whole budget.
#[test]
fn the_local_turn_passes_when_lock_with_unwinds() {
    #[derive(Debug)]
    struct Trap {
        clock: ManualClock,
        armed: std::sync::Mutex<Option<std::thread::ThreadId>>,
    }
    impl quorum_lock::Clock for Trap {
        fn now(&self) -> std::time::Instant {
            let mut armed = self.armed.lock().unwrap();
            if *armed == Some(std::thread::current().id()) {
                *armed = None;
                drop(armed);
                panic!("the clock trap went off");
            }
            self.clock.now()
        }
    }
    let clock = ManualClock::new();
    let trap = Arc::new(Trap {
        clock: clock.clone(),
        armed: std::sync::Mutex::new(None),
    });
    let nodes = memory_nodes_on(3, &clock);
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(trap.clone())
        .build()
        .unwrap();
    let a = {
        let (locks, trap) = (locks.clone(), Arc::clone(&trap));
        std::thread::spawn(move || {
            *trap.armed.lock().unwrap() = Some(std::thread::current().id());
            locks.lock("r").map(drop)
        })
    };
    assert!(a.join().is_err(), "the trap went off in lock()");
    let started = std::time::Instant::now();
    let guard = locks
        .lock_with("r", &LockOptions::new().wait(Duration::from_secs(10)))
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "waited {:?} for a turn nobody held",
        started.elapsed()
    );
    guard.release().unwrap();
}

/// `with_lock` returned `Ok` after the lock was lost while `work` ran, when
/// `work` never checked: the caller could not tell that exclusivity was
/// lost.
#[test]
fn with_lock_does_not_return_ok_after_the_lock_was_lost() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    let ttl = Duration::from_secs(1);
    let locks = waiting_manager(&nodes, &clock, ttl);
    let opts = LockOptions::new();
    let result = locks.with_lock("r", &opts, |_| {
        // A pause past the validity, faster than any renewal could run.
        clock.advance(2 * ttl);
        42
    });
    let err = result.expect_err("with_lock returned Ok after the lock was lost");
    assert!(err.is_lost(), "{err}");
    let result: Result<u32, quorum_lock::Error> = locks.try_with_lock("r", &opts, |_| {
        clock.advance(2 * ttl);
        Ok(42)
    });
    assert!(result.expect_err("try_with_lock too").is_lost());
    // Work that ends within the validity still returns its value.
    assert_eq!(locks.with_lock("r", &opts, |_| 7).unwrap(), 7);
}

/// Auto-extension ran on real time whatever the manager's clock: a
/// `ManualClock` advance past an extend's due time extended nothing, and a
/// loss never fired `lost_signal`, so users' tests on the in-memory test
/// doubles could not drive it.
#[test]
fn auto_extension_follows_the_injected_clock() {
    let clock = ManualClock::new();
    let nodes = memory_nodes_on(3, &clock);
    // Extends due every 10 s: in real time, far beyond the waits below.
    let ttl = Duration::from_secs(30);
    let locks = waiting_manager(&nodes, &clock, ttl);
    let guard = locks
        .lock_with("r", &LockOptions::new().auto_extend(true))
        .unwrap();
    let lost = guard.lost_signal();
    clock.advance(Duration::from_secs(11));
    assert!(
        testkit::wait_until(Duration::from_secs(5), || guard.extensions() >= 1),
        "no extend 5 s after the clock passed the first one's due time"
    );
    assert!(guard.is_valid());
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    clock.advance(Duration::from_secs(11));
    let notice = lost
        .recv_timeout(Duration::from_secs(5))
        .expect("lost_signal fired after the clock passed a failing extend");
    assert!(notice.is_lost(), "{notice}");
    assert!(!guard.is_valid());
}
