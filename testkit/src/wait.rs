//! Bounded waiting.

use std::time::{Duration, Instant};

/// How often [`wait_until`] polls.
const POLL: Duration = Duration::from_millis(10);

/// Polls `f` every 10 ms until it holds or `limit` has passed; whether it
/// held. Bounded waiting for something the test cannot be told about.
pub fn wait_until(limit: Duration, f: impl FnMut() -> bool) -> bool {
    wait_until_with(limit, POLL, || false, f)
}

/// Polls `done` every `every` until it holds (true), or until `limit` has
/// passed or `give_up` says so (false). `done` is asked first, so a
/// condition that already holds is seen even with a zero limit.
pub fn wait_until_with(
    limit: Duration,
    every: Duration,
    mut give_up: impl FnMut() -> bool,
    mut done: impl FnMut() -> bool,
) -> bool {
    let end = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= end || give_up() {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Waits (at most 10 s, then panics) until `waiter`, blocked in a `lock`
/// call that retries, has failed twice: once before it listened for
/// release notices, and once right after (the attempt that catches a
/// release made before its subscription). A release made after this
/// returns is one that only a notice (or the retry timer) can bring to
/// the waiter, whatever the load; released earlier, that second attempt
/// may simply find the lock free.
pub fn until_listening(waiter: &quorum_lock::LockManager) {
    let tried_twice = || waiter.health().locks.contended >= 2;
    assert!(
        wait_until(Duration::from_secs(10), tried_twice),
        "the waiter never tried twice: {}",
        waiter.health()
    );
}

/// `holder`'s lock of `key` (one attempt, which must succeed), once every
/// node has applied it: the attempt was decided at a quorum and the last
/// acquire may still be on its way, so a waiter that tries before that
/// could be granted there (and see "no quorum" instead of "held
/// elsewhere").
pub fn hold_settled(holder: &quorum_lock::LockManager, key: &str) -> quorum_lock::LockGuard {
    let guard = holder
        .try_lock(key)
        .unwrap_or_else(|e| panic!("the holder cannot lock {key}: {e}"));
    assert!(
        holder.flush(Duration::from_secs(10)),
        "the holder's rounds never settled"
    );
    guard
}

/// What `election` observes once the nodes can tell who leads: it reads
/// again every 50 ms while `observe` fails with `NoQuorum` (a quorum in
/// restart quarantine, a campaign between its acquire and its proclaim),
/// for at most 10 s, then panics with the last error (as on any other
/// error).
pub fn observed(election: &quorum_lock::Election) -> Option<quorum_lock::Leader> {
    let mut seen = None;
    let mut last = None;
    let told = wait_until_with(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || false,
        || match election.observe() {
            Ok(leader) => {
                seen = Some(leader);
                true
            }
            Err(e) if e.is_no_quorum() => {
                last = Some(e);
                false
            }
            Err(e) => panic!("observe: {e}"),
        },
    );
    match (told, seen) {
        (true, Some(leader)) => leader,
        _ => panic!("observe never told who leads in 10 s: {last:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_once_or_times_out_or_gives_up() {
        assert!(wait_until(Duration::ZERO, || true));
        assert!(!wait_until(Duration::from_millis(20), || false));
        let mut polls = 0;
        let given_up = wait_until_with(
            Duration::from_secs(30),
            Duration::ZERO,
            || true,
            || {
                polls += 1;
                false
            },
        );
        assert!(!given_up);
        assert_eq!(polls, 1);
    }
}
