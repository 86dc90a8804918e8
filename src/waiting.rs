//! How one call waits for what it asked for: the one wait loop of the
//! crate. Every waiting call runs it: a lock (`LockManager::lock_with`,
//! `lock_all`), a permit (`Semaphore::acquire_with`), both sides of a
//! read-write lock, and through them the CLI. Each gives it a short
//! closure for "one attempt"; the rules live here, once:
//!
//! - the options' retry policy or else the manager's, `LockOptions::wait`
//!   as a cap on the whole wait, and, when neither sets a limit, the
//!   manager's default wait, which outlasts a restart quarantine (see
//!   [`LockManager::lock`](crate::LockManager::lock));
//! - a cancellation checked before every attempt, ending every pause;
//! - after the first failed attempt, listen for release notices and try
//!   once more at once (that catches a release made before the
//!   subscription); then pause between attempts until a notice, the
//!   retry delay or the cancellation, whichever comes first;
//! - **while no quorum can grant** (an attempt failed as
//!   [`Error::NoQuorum`]: nodes quarantined, down, unusable, evicting),
//!   notices do not end a pause: at most one attempt per retry delay.
//!   When every node that kept the quorum away is quarantined and said
//!   for how long, the next attempt is when enough of them vote again,
//!   plus the policy's jitter (never sooner than the retry delay). A
//!   quorum that cannot be back within the wait's budget ends the wait at
//!   once, with the report that says when it will be;
//! - a notice heard during an attempt that was granted on a quorum too
//!   slowly ([`Error::ValidityExpired`]) is forgotten: the grants showed
//!   the key free, and must not end the next pause at once;
//! - the error of the last attempt carries the number of attempts and
//!   the time waited.
//!
//! What is not here: the local line and the fairness rule of a lock
//! (`LockManager::take_as`, before the loop), and the notices of this
//! manager's own undos, which wake nobody (`engine/echoes.rs`).

use std::time::{Duration, Instant};

use crate::backend::KeySet;
use crate::cancel::Alarm;
use crate::error::{Error, Result};
use crate::options::{LockOptions, RetryPolicy};
use crate::redlock::{ReleaseWait, Rounds, Woken, after, with_attempts};
use crate::report::{NodeOutcome, Report};

/// One call's wait (see the module's text).
pub(crate) struct Waiting<'a> {
    retry: RetryPolicy,
    alarm: Alarm,
    started: Instant,
    /// Attempts made so far: the caller's counter, which the metrics read.
    attempts: &'a mut u32,
}

/// What one attempt came to, when it did not end the call.
pub(crate) enum Tried<T> {
    /// Got it: the call returns this.
    Done(T),
    /// A failure a later attempt may fix; the pause before it lasts at
    /// most the duration given, when one is.
    Again(Error, Option<Duration>),
}

impl<T> Tried<T> {
    /// An attempt's result: a failure that retrying cannot fix ends the
    /// call (`Err`), any other is tried again.
    pub(crate) fn of(result: Result<T>) -> Result<Self> {
        match result {
            Ok(done) => Ok(Self::Done(done)),
            Err(error) if error.is_retryable() => Ok(Self::Again(error, None)),
            Err(error) => Err(error),
        }
    }
}

impl<'a> Waiting<'a> {
    /// The wait `options` ask for, with `default` as the retry policy when
    /// they set none and `default_wait` as the time limit when neither
    /// sets one, counting attempts in `attempts`. Begins now.
    pub(crate) fn new(
        options: &LockOptions,
        default: &RetryPolicy,
        default_wait: Duration,
        attempts: &'a mut u32,
    ) -> Self {
        let retry = options.retry.clone().unwrap_or_else(|| default.clone());
        let retry = match options.wait {
            Some(wait) => retry.max_wait(wait),
            None => retry.or_default_wait(default_wait),
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

    /// The pause after a failed attempt whose error was `error`: the
    /// retry delay, or until a quorum can vote again when the error says
    /// when (see the module's text). `None` when the policy or the budget
    /// allows no more.
    fn pause_after(&self, error: &Error) -> Option<Duration> {
        let not_before = quorum_back_in(error).unwrap_or(Duration::ZERO);
        self.retry
            .next_delay_after((*self.attempts).max(1), self.started.elapsed(), not_before)
    }

    /// The wait loop (see the module's text): `attempt` until it is done,
    /// fails for good, or the wait ends. Release notices of the keys that
    /// `listen` gives (asked once, after the first failed attempt; `None`:
    /// pauses run to their end) end a pause early; `watch` is a
    /// registration the caller already made.
    pub(crate) fn until_done<T>(
        &mut self,
        rounds: &Rounds,
        listen: impl FnOnce() -> Option<KeySet>,
        mut watch: Option<ReleaseWait>,
        mut attempt: impl FnMut(&Waiting<'a>) -> Result<Tried<T>>,
    ) -> Result<T> {
        let mut listen = Some(listen);
        loop {
            self.check_cancelled()?;
            let tries = self.attempt();
            let (error, at_most) = match attempt(self)? {
                Tried::Done(done) => return Ok(done),
                Tried::Again(error, at_most) => (error, at_most),
            };
            let Some(delay) = self.pause_after(&error) else {
                return Err(with_attempts(error, tries, self.started.elapsed()));
            };
            let delay = at_most.map_or(delay, |most| delay.min(most));
            let no_quorum = matches!(error, Error::NoQuorum { .. });
            if watch.is_none()
                && let Some(keys) = listen.take().and_then(|keys| keys())
            {
                watch = Some(rounds.watch(&keys));
                // Try again at once, for a release made before the nodes
                // listened; not while no quorum can grant.
                if !no_quorum {
                    continue;
                }
            }
            let alarm = self.alarm.receiver();
            let pause = crate::trace::pause(delay);
            let woken = match &mut watch {
                // No quorum: notices would only bring forward an attempt
                // that fails the same way. Those heard meanwhile are
                // forgotten: the next attempt sees those releases anyway.
                Some(wait) if no_quorum => {
                    let slept = self.alarm.sleep(delay);
                    wait.forget_heard();
                    slept_or_cancelled(slept)
                }
                Some(wait) => {
                    if matches!(error, Error::ValidityExpired { .. }) {
                        wait.forget_heard();
                    }
                    let until = after(delay);
                    let latest = match at_most {
                        Some(_) => Some(until),
                        None => self.deadline(),
                    };
                    match rounds.wait_for_release_or_expiry(wait, until, latest, Some(alarm)) {
                        Woken::Notice => "release_notice",
                        Woken::Timer => "timer",
                        Woken::Interrupted => "cancelled",
                    }
                }
                None => slept_or_cancelled(self.alarm.sleep(delay)),
            };
            pause.ended(woken);
        }
    }
}

/// Why a pause on the timer alone ended, for its span.
fn slept_or_cancelled(slept: bool) -> &'static str {
    match slept {
        true => "timer",
        false => "cancelled",
    }
}

/// How long until a quorum can grant again, when the failed attempt's
/// report says: every node that neither voted nor may yet vote is
/// quarantined, and enough of them vote again after the returned time.
/// `None` for any other failure (a node down, failing or timed out says
/// nothing of when it is back).
fn quorum_back_in(error: &Error) -> Option<Duration> {
    let Error::NoQuorum { report } = error else {
        return None;
    };
    back_in(report)
}

fn back_in(report: &Report) -> Option<Duration> {
    let mut voting = 0;
    let mut quarantined = Vec::new();
    for node in &report.nodes {
        match &node.outcome {
            NodeOutcome::Granted
            | NodeOutcome::Refused
            | NodeOutcome::NotAwaited
            | NodeOutcome::HandedOver => voting += 1,
            NodeOutcome::Quarantined { remaining } => quarantined.push(*remaining),
            NodeOutcome::Failed(_) | NodeOutcome::TimedOut | NodeOutcome::Down => return None,
        }
    }
    let missing = report.quorum.checked_sub(voting).filter(|n| *n > 0)?;
    quarantined.sort_unstable();
    quarantined.get(missing - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, BackendErrorKind};
    use crate::report::{NodeReport, Round};

    fn report(outcomes: Vec<NodeOutcome>) -> Report {
        Report {
            round: Round::Acquire,
            resource: "r".into(),
            quorum: outcomes.len() / 2 + 1,
            nodes: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, outcome)| NodeReport {
                    node: format!("n{i}").into(),
                    outcome,
                })
                .collect(),
            elapsed: Duration::ZERO,
            attempts: 1,
            waited: Duration::ZERO,
            held_here: false,
            writer_here: false,
        }
    }

    fn quarantined(ms: u64) -> NodeOutcome {
        NodeOutcome::Quarantined {
            remaining: Duration::from_millis(ms),
        }
    }

    /// The quorum is back when enough quarantined nodes vote again: the
    /// soonest ones, as many as the quorum lacks; never when a node that
    /// failed says nothing of its return.
    #[test]
    fn a_quorum_is_back_when_enough_quarantines_end() {
        let ms = Duration::from_millis;
        let cases = [
            (
                vec![quarantined(900), quarantined(300), quarantined(600)],
                Some(ms(600)),
            ),
            (
                vec![NodeOutcome::Granted, quarantined(800), quarantined(200)],
                Some(ms(200)),
            ),
            (
                vec![
                    NodeOutcome::Refused,
                    quarantined(800),
                    NodeOutcome::NotAwaited,
                ],
                None,
            ),
            (
                vec![NodeOutcome::TimedOut, quarantined(800), quarantined(100)],
                None,
            ),
            (
                vec![NodeOutcome::Down, quarantined(800), quarantined(100)],
                None,
            ),
            (
                vec![
                    NodeOutcome::Failed(BackendError::new(BackendErrorKind::Unreachable, "reset")),
                    quarantined(1),
                    quarantined(1),
                ],
                None,
            ),
        ];
        for (outcomes, expected) in cases {
            let shown = format!("{outcomes:?}");
            assert_eq!(back_in(&report(outcomes)), expected, "{shown}");
        }
    }
}
