//! Unit tests of the local line: order, time-outs, streaks, and the
//! line bounded by the holder's validity.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use crate::backend::KeySet;
use crate::clock::ManualClock;
use crate::redlock::streak::MAX_STREAK;
use crate::redlock::support::Support;
use crate::redlock::turns::*;
use crate::token::Token;

const WANT: Want = Want {
    ttl: Duration::from_secs(1),
    fenced: false,
};

fn key(k: &str) -> Hold {
    Hold::Lock(KeySet::one(k))
}

fn queue(clock: &ManualClock) -> Arc<LocalQueue> {
    Arc::new(LocalQueue::new(Arc::new(clock.clone())))
}

fn wait(queue: &Arc<LocalQueue>, k: &Hold, deadline: Option<Instant>) -> Turn {
    queue.wait_turn(k, WANT, deadline, &Alarm::new(None))
}

fn mine(turn: Turn) -> Ticket {
    match turn {
        Turn::Mine(ticket) => ticket,
        other => panic!("expected the turn, got {other:?}"),
    }
}

/// Waits (bounded) until `n` threads wait in line for `k`.
fn until_waiting(queue: &LocalQueue, k: &Hold, n: usize) {
    let end = Instant::now() + Duration::from_secs(30);
    while queue.waiting(k) != n {
        assert!(Instant::now() < end, "never {n} in line");
        std::thread::yield_now();
    }
}

fn lease(k: &Hold, deadline: Instant) -> Arc<Lease> {
    let token = Token::random().unwrap();
    Arc::new(Lease::new(
        KeySet::one("r"),
        k.clone(),
        token,
        WANT.ttl,
        deadline,
        Support::default(),
        None,
    ))
}

#[test]
fn turns_are_handed_on_in_order() {
    let queue = queue(&ManualClock::new());
    let k = key("r");
    let far = Instant::now() + Duration::from_secs(10);
    let first = mine(wait(&queue, &k, Some(far)));
    let (order_tx, order) = crossbeam_channel::unbounded();
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let (q, key, order_tx) = (Arc::clone(&queue), k.clone(), order_tx.clone());
            let handle = std::thread::spawn(move || {
                let ticket = mine(wait(&q, &key, Some(far)));
                assert_eq!(ticket.streak().count, i as u32 + 1);
                order_tx.send(i).unwrap();
                drop(ticket);
            });
            // Each waiter is in line before the next one starts.
            until_waiting(&queue, &k, i + 1);
            handle
        })
        .collect();
    drop(first);
    waiters.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(order.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
    assert!(
        queue.lines.lock().by_key.is_empty(),
        "the last pass removes the line"
    );
}

#[test]
fn a_waiter_that_times_out_leaves_the_line() {
    let queue = queue(&ManualClock::new());
    let k = key("r");
    let now = Instant::now();
    let first = mine(wait(&queue, &k, Some(now)));
    assert!(matches!(wait(&queue, &k, Some(now)), Turn::TimedOut));
    assert_eq!(queue.waiting(&k), 0);
    drop(first);
    assert!(queue.lines.lock().by_key.is_empty());
    // Other keys are independent.
    let _a = mine(wait(&queue, &key("a"), Some(now)));
    let _b = mine(wait(&queue, &key("b"), Some(now)));
}

/// A holder stuck past its validity, at the level of the line: the first
/// waiter takes the turn once the holder's lease is over, the stale
/// holder's ticket passes nothing, and the line stays FIFO behind the new
/// holder.
#[test]
fn the_line_stops_waiting_for_an_expired_holder() {
    let clock = ManualClock::new();
    let queue = queue(&clock);
    let k = key("r");
    let stuck = mine(wait(&queue, &k, None));
    let held = lease(&k, clock.now() + WANT.ttl);
    stuck.hold(&held);
    let spawn = |queue: &Arc<LocalQueue>| {
        let (q, key) = (Arc::clone(queue), k.clone());
        std::thread::spawn(move || mine(wait(&q, &key, None)))
    };
    let b = spawn(&queue);
    until_waiting(&queue, &k, 1);
    clock.advance(WANT.ttl);
    let b = b.join().unwrap();
    assert_eq!(queue.waiting(&k), 0);
    let c = spawn(&queue);
    until_waiting(&queue, &k, 1);
    drop(stuck); // stale: passes nothing
    assert_eq!(queue.waiting(&k), 1, "C still waits behind B");
    drop(held);
    drop(b);
    let c = c.join().unwrap();
    drop(c);
    assert!(queue.lines.lock().by_key.is_empty());
}

#[test]
fn a_long_streak_yields_to_other_processes() {
    let mut streak = Streak::default();
    for _ in 1..MAX_STREAK {
        streak = streak.next();
        assert!(!streak.yield_first);
    }
    streak = streak.next();
    assert_eq!(
        streak,
        Streak {
            count: 0,
            yield_first: true
        }
    );
}
