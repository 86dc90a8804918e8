//! Releases a node could not take yet, kept and sent again: a small state
//! machine that takes the time as an argument, so its tests need no
//! sleeping.
//!
//! A release that failed (a timeout, a reset, `LOADING`, an ACL refusal an
//! operator may fix) or that was due while the node was down may still be
//! needed: the acquire it undoes may sit in the node's socket and run when
//! a frozen server wakes up. So it is kept and sent again every
//! [`RETRY_EVERY`] while the node is up, until the key must have expired
//! (the retry window, `max_ttl`); the list is bounded, the oldest going
//! first.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::engine::hold::Hold;
use crate::token::Token;

/// How often releases that could not reach the node are sent again.
pub(super) const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Most releases kept per node (and parked while it is down); beyond that
/// the oldest are left to expire with their TTL.
const MAX_KEPT: usize = 10_000;

/// One release kept for another try.
#[derive(Debug)]
pub(super) struct RetryRelease {
    /// What the release gives up (its op: `Action::Release` on it).
    pub(super) hold: Hold,
    pub(super) token: Token,
    /// When it was first due: it is dropped once the window has passed.
    since: Instant,
}

/// Appends a release to `list`, dropping the oldest beyond the bound.
/// Whether one was dropped.
pub(super) fn push_bounded(
    list: &mut VecDeque<RetryRelease>,
    hold: &Hold,
    token: Token,
    now: Instant,
) -> bool {
    let full = list.len() >= MAX_KEPT;
    if full {
        list.pop_front();
    }
    list.push_back(RetryRelease {
        hold: hold.clone(),
        token,
        since: now,
    });
    full
}

/// A node's releases to send again.
#[derive(Debug)]
pub(super) struct RetryList {
    list: VecDeque<RetryRelease>,
    /// When to send them next.
    next_at: Instant,
    /// How long a release is kept: after that its key has expired anyway.
    window: Duration,
}

impl RetryList {
    pub(super) fn new(window: Duration, now: Instant) -> Self {
        Self {
            list: VecDeque::new(),
            next_at: now,
            window,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Keeps a release. Whether the oldest was dropped for it.
    pub(super) fn keep(&mut self, hold: &Hold, token: Token, now: Instant) -> bool {
        push_bounded(&mut self.list, hold, token, now)
    }

    /// Takes the releases parked while the node was down; they go with the
    /// next retry, one period from `now` (after what is queued already).
    pub(super) fn take_parked(&mut self, parked: VecDeque<RetryRelease>, now: Instant) {
        self.list.extend(parked);
        self.next_at = now + RETRY_EVERY;
    }

    /// When the worker must wake for them (nothing kept: never).
    pub(super) fn next_wake(&self) -> Option<Instant> {
        (!self.list.is_empty()).then_some(self.next_at)
    }

    /// Whether a retry is due at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.next_wake().is_some_and(|at| now >= at)
    }

    /// Drops the releases whose window has passed at `now`; how many.
    pub(super) fn expire(&mut self, now: Instant) -> usize {
        let before = self.list.len();
        let window = self.window;
        self.list.retain(|r| r.since + window > now);
        before - self.list.len()
    }

    /// The releases to send now, in the order they were kept.
    pub(super) fn pending(&self) -> impl Iterator<Item = &RetryRelease> {
        self.list.iter()
    }

    /// After an attempt at every pending release: keeps those whose
    /// outcome is still unknown (`unknown`, one per release in order; a
    /// missing one counts as done) and schedules the next try.
    pub(super) fn after_attempt(&mut self, unknown: impl IntoIterator<Item = bool>, now: Instant) {
        let mut unknown = unknown.into_iter();
        self.list.retain(|_| unknown.next().unwrap_or(false));
        self.next_at = now + RETRY_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KeySet;

    fn token() -> Token {
        Token::random().unwrap_or_else(|e| panic!("random: {e}"))
    }

    #[test]
    fn releases_are_retried_until_done_or_the_window_has_passed() {
        let t0 = Instant::now();
        let window = Duration::from_secs(10);
        let mut list = RetryList::new(window, t0);
        assert_eq!(list.next_wake(), None, "nothing kept: nothing to wake for");
        let key = Hold::Lock(KeySet::one("k"));
        list.keep(&key, token(), t0);
        list.keep(&key, token(), t0 + Duration::from_secs(5));
        assert!(list.due(t0));
        // The first is done, the second still unknown.
        list.after_attempt([false, true], t0);
        assert_eq!(list.len(), 1);
        assert_eq!(list.next_wake(), Some(t0 + RETRY_EVERY));
        assert!(!list.due(t0));
        assert_eq!(
            list.expire(t0 + window),
            0,
            "kept at 5 s: within its window"
        );
        assert_eq!(list.expire(t0 + Duration::from_secs(15)), 1);
        assert!(list.is_empty() && list.next_wake().is_none());
    }

    #[test]
    fn the_list_is_bounded_and_parked_releases_go_one_period_later() {
        let t0 = Instant::now();
        let mut list = RetryList::new(Duration::from_secs(60), t0);
        let key = Hold::Lock(KeySet::one("k"));
        let dropped = (0..=MAX_KEPT)
            .filter(|_| list.keep(&key, token(), t0))
            .count();
        assert_eq!((dropped, list.len()), (1, MAX_KEPT), "the oldest went");
        let mut parked = VecDeque::new();
        push_bounded(&mut parked, &key, token(), t0);
        let later = t0 + Duration::from_secs(1);
        list.take_parked(parked, later);
        assert_eq!(list.len(), MAX_KEPT + 1);
        assert_eq!(list.next_wake(), Some(later + RETRY_EVERY));
    }
}
