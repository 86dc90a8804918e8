//! A local turn ([`Ticket`]): what a thread of the manager holds while it
//! is the one of its line that contends with the servers (see `turns.rs`).
//! Passed when dropped, so every exit path of a waiting call (an error, a
//! panic, a cancellation) passes it by construction.

use std::sync::Arc;

use super::lease::Lease;
use super::streak::Streak;
use super::turns::{LocalQueue, Want};
use crate::backend::KeySet;

/// The local turn for one key: passed to the next waiter when dropped (or
/// explicitly, with a hand-over, by [`pass_with`](Self::pass_with)). A
/// ticket whose turn the line has since given to another thread (its
/// holder's lease ran out) passes nothing.
#[derive(Debug)]
pub(crate) struct Ticket {
    queue: Arc<LocalQueue>,
    key: KeySet,
    pub(super) id: u64,
    streak: Streak,
    /// Passed already (by `pass_with`): `Drop` does nothing more.
    passed: bool,
}

impl Ticket {
    /// Turn `id` of the line for `key` in `queue`, at `streak`.
    pub(super) fn new(queue: Arc<LocalQueue>, key: KeySet, id: u64, streak: Streak) -> Self {
        Self {
            queue,
            key,
            id,
            streak,
            passed: false,
        }
    }

    /// Its place in the streak of local turns.
    pub(crate) fn streak(&self) -> Streak {
        self.streak
    }

    /// Records the lock the turn-holder now holds: from here on, the
    /// line waits for it only while it is valid.
    pub(crate) fn hold(&self, lease: &Arc<Lease>) {
        self.queue.hold(&self.key, self.id, lease);
    }

    /// Hands the lock to the next waiter when `offer` gives one for what it
    /// wants (see [`LocalQueue::offer_lock`]): `None`, the turn has passed
    /// with the lock. Otherwise the ticket comes back, still holding the
    /// turn: the caller releases on the servers, then drops it.
    pub(crate) fn offer_lock(
        mut self,
        offer: impl FnOnce(&Want) -> Option<Arc<Lease>>,
    ) -> Option<Self> {
        if self
            .queue
            .offer_lock(&self.key, self.id, self.streak, offer)
        {
            self.passed = true;
            None
        } else {
            Some(self)
        }
    }

    /// Passes the turn now; see [`LocalQueue::pass_with`] for `offer`.
    /// Returns whether the lock was handed over.
    pub(crate) fn pass_with(
        mut self,
        offer: impl FnOnce(Option<&Want>) -> Option<Arc<Lease>>,
    ) -> bool {
        self.passed = true;
        self.queue.pass_with(&self.key, self.id, self.streak, offer)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.passed {
            self.queue
                .pass_with(&self.key, self.id, self.streak, |_| None);
        }
    }
}
