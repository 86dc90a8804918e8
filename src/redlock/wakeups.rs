//! Waiting for a lock held by another process with wake-ups: between
//! attempts the caller waits for a release notice from any node (a hint
//! that the lock was let go) or for its retry delay, whichever comes
//! first. The grant is always the next quorum acquire; an expiry sends no
//! notice and notices can be lost, so the delay stays as the fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use super::counters::Event;
use super::rounds::Rounds;
use crate::engine::Watch;

/// Why [`Rounds::wait_for_release`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release notice arrived: try again now.
    Notice,
    /// The time given ran out (the retry delay: the timer fallback).
    Timer,
    /// The interrupt channel fired (or was closed).
    Interrupted,
}

/// Far enough to mean "no deadline" (about a year), without overflow.
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// `now + delay`, saturating at a deadline a year away.
pub(crate) fn after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay.min(FOREVER)).unwrap_or(now)
}

impl Rounds {
    /// Registers a waiter for the release of `key` on every node, and
    /// returns once they listen (at most one per-node timeout). Every
    /// attempt made after this call runs after the subscriptions on every
    /// node, so a release that such an attempt did not see is announced.
    pub(crate) fn watch(&self, key: &Arc<[u8]>) -> Watch {
        self.engine().watch(key, self.config().node_timeout)
    }

    /// Waits until a release notice for `watch`'s key arrives from any
    /// node, `until` passes, or `interrupt` fires, whichever is first;
    /// then forgets the notices that arrived meanwhile (the attempt that
    /// follows sees those releases anyway).
    pub(crate) fn wait_for_release<T>(
        &self,
        watch: &Watch,
        until: Instant,
        interrupt: Option<&Receiver<T>>,
    ) -> Woken {
        let mut select = Select::new();
        let notices = select.recv(watch.notices());
        let interrupted = interrupt.map(|rx| select.recv(rx));
        let woken = match select.select_deadline(until) {
            Err(_) => Woken::Timer,
            Ok(op) if op.index() == notices => {
                let _ = op.recv(watch.notices());
                Woken::Notice
            }
            Ok(op) => {
                // The only other operation: the interrupt (a message, or
                // its sender gone).
                if let (Some(rx), Some(_)) = (interrupt, interrupted) {
                    let _ = op.recv(rx);
                }
                Woken::Interrupted
            }
        };
        watch.clear();
        if woken == Woken::Notice {
            self.counters().note(Event::Woken);
        }
        woken
    }

    /// The fairness rule: when this manager's last release of `key`, a
    /// moment ago, was heard by other processes waiting for it, let them
    /// go first: listen, and wait for a notice (the next holder's release)
    /// or `delay`, before the first attempt. Returns the watch when it
    /// waited, for the attempts that follow.
    pub(crate) fn yield_to_waiters<T>(
        &self,
        key: &Arc<[u8]>,
        delay: Duration,
        interrupt: Option<&Receiver<T>>,
    ) -> Option<Watch> {
        if !self.engine().others_waited(key) {
            return None;
        }
        let watch = self.watch(key);
        self.counters().note(Event::Yielded);
        self.wait_for_release(&watch, after(delay), interrupt);
        Some(watch)
    }
}
