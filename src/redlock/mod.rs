//! The lock's life, between the public types and the engine: the rounds
//! that acquire, extend and release a lock with their validity arithmetic,
//! the lease those rounds share, the local turns and hand-over between
//! threads of one manager, waiting with wake-ups for a lock held in another
//! process, the auto-extension watchdog, and the forget watch that loses a
//! lock whose quorum a node's forget (eviction, failover) took away.
//!
//! Arrows point down only: `manager` / `builder` / `guard` use [`Core`];
//! the watchdog holds a weak handle to the [`Rounds`], never to the
//! manager; the rounds use the engine.

mod counters;
mod fencing;
mod forget_watch;
mod intents;
mod lease;
mod line;
mod owners;
mod rounds;
mod streak;
mod support;
mod turns;
mod validity;
mod verdict;
mod wakeups;
mod watchdog;

#[cfg(test)]
mod checks;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub(crate) use self::lease::Lease;
pub(crate) use self::line::Want;
pub(crate) use self::owners::Owned;
pub(crate) use self::rounds::{Admission, Config, Rounds, with_attempts};
pub(crate) use self::turns::{Ticket, Turn};
pub(crate) use self::validity::{check_ttl, drift};
pub(crate) use self::wakeups::{ReleaseWait, Woken, after};
pub(crate) use self::watchdog::RenewalPlan;
use self::watchdog::Watchdog;
use crate::error::{Error, Result};

/// What the manager's handles and the guards share: the rounds, and the
/// auto-extension timer (started by the first auto-extended lock). The
/// last handle or guard to go stops the timer and the node workers.
#[derive(Debug)]
pub(crate) struct Core {
    rounds: Arc<Rounds>,
    watchdog: Mutex<Option<Watchdog>>,
}

impl Core {
    pub(crate) fn new(rounds: Rounds) -> Self {
        Self {
            rounds: Arc::new(rounds),
            watchdog: Mutex::new(None),
        }
    }

    pub(crate) fn rounds(&self) -> &Rounds {
        &self.rounds
    }

    /// Waits (at most `wait`) until the auto-extension thread, if started,
    /// has renewed every lease due at the clock's current time. Whether
    /// it did in time.
    pub(crate) fn settle_renewals(&self, wait: Duration) -> bool {
        // Not under the lock while waiting: a lease may be watched meanwhile.
        let watchdog = self.watchdog.lock().clone();
        watchdog.is_none_or(|watchdog| watchdog.settle(wait))
    }

    /// Starts renewing `lease` per `plan`; starts the timer thread on
    /// first use.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the timer thread cannot be started.
    pub(crate) fn auto_extend(&self, lease: &Arc<Lease>, plan: RenewalPlan) -> Result<()> {
        let mut watchdog = self.watchdog.lock();
        if watchdog.is_none() {
            let clock = Arc::clone(&self.rounds.config().clock);
            let started = Watchdog::start(Arc::downgrade(&self.rounds), clock).map_err(|e| {
                Error::Runtime {
                    reason: format!("cannot start the auto-extension thread: {e}"),
                }
            })?;
            *watchdog = Some(started);
        }
        if let Some(watchdog) = watchdog.as_ref() {
            watchdog.watch(lease, plan);
        }
        Ok(())
    }
}
