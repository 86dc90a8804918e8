//! How one call waits for what it asked for: its retry policy, bounded by
//! its wait budget, its cancellation, when it began and how many attempts
//! it has made. A lock (`LockManager::lock_with`, `lock_all`) and a
//! permit (`Semaphore::acquire_with`) wait by the same rules: the options'
//! retry policy or else the manager's, `LockOptions::wait` as a cap on the
//! whole wait, a cancellation checked before every attempt and ending
//! every pause early.
//!
//! What an attempt is and what happens between two of them (the local
//! line, wake-ups) stays with the caller: a lock's attempt is one quorum
//! round, a permit's one scan of the slots.

use std::time::{Duration, Instant};

use crate::cancel::Alarm;
use crate::error::{Error, Result};
use crate::options::{LockOptions, RetryPolicy};

/// One call's wait (see the module's text).
pub(crate) struct Waiting<'a> {
    retry: RetryPolicy,
    alarm: Alarm,
    started: Instant,
    /// Attempts made so far: the caller's counter, which the metrics read.
    attempts: &'a mut u32,
}

impl<'a> Waiting<'a> {
    /// The wait `options` ask for, with `default` as the retry policy when
    /// they set none, counting attempts in `attempts`. Begins now.
    pub(crate) fn new(options: &LockOptions, default: &RetryPolicy, attempts: &'a mut u32) -> Self {
        let retry = options.retry.clone().unwrap_or_else(|| default.clone());
        let retry = match options.wait {
            Some(wait) => retry.max_wait(wait),
            None => retry,
        };
        Self {
            retry,
            alarm: Alarm::new(options.cancellation.as_ref()),
            started: Instant::now(),
            attempts,
        }
    }

    /// The call makes one attempt and does not wait.
    pub(crate) fn single_attempt(&self) -> bool {
        self.retry.single_attempt()
    }

    /// When the wait budget runs out (`None`: too far to express, the
    /// call waits as long as it takes).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.started.checked_add(self.retry.budget())
    }

    /// When the call began.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The call's cancellation.
    pub(crate) fn alarm(&self) -> &Alarm {
        &self.alarm
    }

    /// `Err(Cancelled)` once the call's token is cancelled: checked before
    /// every attempt.
    pub(crate) fn check_cancelled(&self) -> Result<()> {
        match self.alarm.is_cancelled() {
            true => Err(self.cancelled()),
            false => Ok(()),
        }
    }

    /// The error of this call, cancelled now.
    pub(crate) fn cancelled(&self) -> Error {
        Error::Cancelled {
            waited: self.started.elapsed(),
        }
    }

    /// Counts an attempt about to be made; returns how many there are.
    pub(crate) fn attempt(&mut self) -> u32 {
        *self.attempts = self.attempts.saturating_add(1);
        *self.attempts
    }

    /// The pause after the attempts made so far, or `None` when the policy
    /// or the budget allows no more.
    pub(crate) fn next_delay(&self) -> Option<Duration> {
        self.retry
            .next_delay((*self.attempts).max(1), self.started.elapsed())
    }
}
