//! `run --min-hold`: after the command ended, the lock is kept until at
//! least `taken + min_hold`, so that a run on another machine a little
//! later (cron skew) finds it held and the job runs once per period.
//!
//! Never released early: extended while more than one TTL is left, then
//! extended once more with a TTL that ends it just after the hold, and left
//! to expire there (not a whole TTL later, where it could block the next
//! period). The tool stays in the foreground until the hold has passed,
//! as its manual says (a systemd oneshot unit, a CI step and whoever waits
//! for the tool count on it): it exits at `until`, not at that last
//! extend, up to one TTL earlier.

use std::time::{Duration, Instant};

use quorum_lock::LockManager;

use crate::signals::Signals;
use crate::supervise::Held;

/// Extends that end the lock at the hold may each fall short (a slow
/// round): a few are allowed, then the regular TTL.
const FINAL_ATTEMPTS: u32 = 3;

/// Why the hold ended before `until`.
pub(crate) enum Cut {
    /// The lock may be lost: why.
    Lost(String),
    /// A signal to the tool (it exits 128 + N).
    Signal(nix::sys::signal::Signal),
}

/// Keeps `held` until `until`, then leaves it to expire (the guard is
/// forgotten, not released), shortly after `until`: the last extend's TTL
/// is what is left of the hold plus its drift plus `slack` (the most an
/// extend round takes: the node timeout). Returns at `until`, not before
/// (the lock needs no more extends after the last one, but the tool stays
/// until the hold has passed), or early on a loss or a signal, with the
/// time the lock has left: it is then left to expire at its deadline.
pub(crate) fn hold(
    mut held: Held,
    until: Instant,
    slack: Duration,
    locks: &LockManager,
    signals: &Signals,
) -> Result<(), (Cut, Duration)> {
    let mut last_tries = 0;
    let result = loop {
        let now = Instant::now();
        let need = until.saturating_duration_since(now);
        let last = need + locks.drift_for(need) + slack;
        // Covered, and not much longer than that (or already shortened).
        if held.deadline >= until && (last_tries > 0 || held.deadline <= now + last) {
            break Ok(());
        }
        if let Some(signal) = signals.take().pop() {
            break Err(Cut::Signal(signal));
        }
        let extended = if last <= held.ttl && last_tries < FINAL_ATTEMPTS {
            last_tries += 1;
            held.extend(locks, last)
        } else if held.due() {
            held.extend(locks, held.ttl)
        } else {
            Ok(())
        };
        if let Err(why) = extended {
            break Err(Cut::Lost(why));
        }
        std::thread::sleep(crate::supervise::POLL);
    };
    let result = result.and_then(|()| stay(until, signals));
    let left = held.deadline.saturating_duration_since(Instant::now());
    held.guard.forget();
    result.map_err(|cut| (cut, left))
}

/// Stays until `until` (the hold is covered: no more extends), unless a
/// signal to the tool comes first.
fn stay(until: Instant, signals: &Signals) -> Result<(), Cut> {
    loop {
        if let Some(signal) = signals.take().pop() {
            return Err(Cut::Signal(signal));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(crate::supervise::POLL));
    }
}
