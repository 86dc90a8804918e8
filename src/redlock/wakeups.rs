//! Waiting for a lock held by another process with wake-ups: between
//! attempts the caller waits for a release notice (a hint that the lock
//! was let go) or for its retry delay, whichever comes first. The grant
//! is always the next quorum acquire; an expiry sends no notice and
//! notices can be lost, so the delay stays as the fallback.
//!
//! Notices can also be forged: any client allowed to `PUBLISH` on the
//! channel can announce releases that never happened, and without a
//! bound it would end every retry delay at once (one failed round per
//! forged notice, on every node). So a wait has a budget of early
//! wake-ups, [`EARLY_WAKEUPS`]: a notice ends a wait only while the
//! budget lasts, and a wait that runs to its retry delay refills it.
//!
//! What spends the budget is an early wake-up shown useless: the attempt
//! it brought forward was refused, on a quorum of nodes, by the same
//! holder as the attempt before. A forger cannot change the holder, so
//! each forged wake-up spends one, and with forged notices alone a waiter
//! makes at most `EARLY_WAKEUPS + 1` attempts per retry delay. A waiter
//! that loses a real race to another waiter is not held back: its attempt
//! is refused by a new holder, which refills the budget; an attempt that
//! shows no holder on a quorum (a split vote) or the first holder seen
//! spends nothing. (Holders are told apart by a digest of the value a
//! refused acquire found: `Reply::HeldBy`, `Waiters::note_holder`.)

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use super::counters::Event;
use super::rounds::Rounds;
use crate::backend::KeySet;
use crate::engine::{HolderNews, Watch};

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

/// Early wake-ups shown useless (see the module docs) that a wait may
/// have before it sleeps out a retry delay. Three: forged notices get at
/// most four attempts per retry delay instead of one, and spurious
/// wake-ups under real contention (the late notice of a release meeting
/// another waiter's undo) do not run out. With two, 4 processes on one
/// key (docs/benchmarks.md) had about one wait in 500 go on to its retry
/// delay: a longest wait of 200 ms instead of 40-60 ms in that run.
pub(crate) const EARLY_WAKEUPS: u32 = 3;

/// A caller's wait for the release of one key, across its attempts: the
/// registration for its notices and what is left of its early wake-ups.
#[derive(Debug)]
pub(crate) struct ReleaseWait {
    watch: Watch,
    /// Early wake-ups left (see [`EARLY_WAKEUPS`]).
    early: u32,
    /// The last wait ended by a notice: the attempt since was brought
    /// forward.
    brought_forward: bool,
}

impl ReleaseWait {
    /// Takes in what the last attempt's refusals say of the holder, once
    /// they show one (late answers included).
    fn weigh_attempts(&mut self) {
        match self.watch.take_holder_news() {
            HolderNews::Moved => {
                self.early = EARLY_WAKEUPS;
                self.brought_forward = false;
            }
            HolderNews::Stayed => {
                if std::mem::take(&mut self.brought_forward) {
                    self.early = self.early.saturating_sub(1);
                }
            }
            HolderNews::First => self.brought_forward = false,
            HolderNews::Unknown => {}
        }
    }

    /// Forgets the notices (and grants, see `Waiters::note_free`) heard
    /// since the last wait: only what comes next may end the next wait.
    pub(crate) fn forget_heard(&mut self) {
        self.watch.clear();
    }
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
    pub(crate) fn watch(&self, keys: &KeySet) -> ReleaseWait {
        ReleaseWait {
            watch: self.engine().watch(keys, self.config().node_timeout),
            early: EARLY_WAKEUPS,
            brought_forward: false,
        }
    }

    /// Waits until a release notice for `wait`'s key ends the wait (while
    /// its early wake-ups last), `until` passes, or `interrupt` fires,
    /// whichever is first; then forgets the notices that arrived
    /// meanwhile (the attempt that follows sees those releases anyway).
    pub(crate) fn wait_for_release<T>(
        &self,
        wait: &mut ReleaseWait,
        until: Instant,
        interrupt: Option<&Receiver<T>>,
    ) -> Woken {
        wait.weigh_attempts();
        let bell = wait.watch.notices().clone();
        let mut held_back = false;
        let woken = loop {
            let mut select = Select::new();
            let notices = select.recv(&bell);
            let interrupted = interrupt.map(|rx| select.recv(rx));
            match select.select_deadline(until) {
                Err(_) => break Woken::Timer,
                Ok(op) if op.index() == notices => {
                    let _ = op.recv(&bell);
                    // Looked at again: a refusal that shows the new holder
                    // may come from a node whose answer the last attempt
                    // did not wait for.
                    wait.weigh_attempts();
                    if wait.early > 0 {
                        break Woken::Notice;
                    }
                    // Spent, and the holder stayed: wait for the delay.
                    held_back = true;
                }
                Ok(op) => {
                    // The only other operation: the interrupt (a message,
                    // or its sender gone).
                    if let (Some(rx), Some(_)) = (interrupt, interrupted) {
                        let _ = op.recv(rx);
                    }
                    break Woken::Interrupted;
                }
            }
        };
        wait.watch.clear();
        wait.brought_forward = woken == Woken::Notice;
        match woken {
            Woken::Notice => self.counters().note(Event::Woken),
            Woken::Timer => {
                if held_back {
                    self.counters().note(Event::HeldBack);
                }
                wait.early = EARLY_WAKEUPS;
            }
            Woken::Interrupted => {}
        }
        woken
    }

    /// The fairness rule: when this manager's last release of `key`, a
    /// moment ago, was heard by other processes waiting for it, let them
    /// go first: listen, and wait for a notice (the next holder's release)
    /// or `delay`, before the first attempt. Returns the wait when it
    /// waited, for the attempts that follow.
    pub(crate) fn yield_to_waiters<T>(
        &self,
        keys: &KeySet,
        delay: Duration,
        interrupt: Option<&Receiver<T>>,
    ) -> Option<ReleaseWait> {
        if !self.engine().others_waited(keys) {
            return None;
        }
        let mut wait = self.watch(keys);
        self.counters().note(Event::Yielded);
        self.wait_for_release(&mut wait, after(delay), interrupt);
        Some(wait)
    }
}
