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
