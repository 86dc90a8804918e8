//! How a call takes a lock: its TTL checked, a wait in the manager's
//! local line (a turn, or the lock handed over by the holder before), the
//! attempts through the one wait loop (`waiting.rs`), and the guard handed
//! to the caller (cancelled or not, auto-extended or not). `lock`,
//! `lock_all` and a read-write lock's writer all take a lock here.

use std::time::Duration;

use super::LockManager;
use crate::backend::KeySet;
use crate::engine::Hold;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::options::{DEFAULT_MAX_HOLD, LockOptions};
use crate::redlock::{RenewalPlan, Turn, Want, check_ttl};
use crate::trace::Call;
use crate::waiting::{Tried, Waiting};

impl LockManager {
    /// [`lock_with`](Self::lock_with), counting the acquire rounds it
    /// makes in `made` (for the metrics).
    pub(super) fn take(
        &self,
        resource: &[u8],
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        self.check_resource(resource)?;
        // A single lock is a set of one, built here once.
        let resources = KeySet::one(resource);
        self.take_keys(&resources, options, made)
    }

    /// [`take`](Self::take) of checked `resources` (one, or a set of them,
    /// see `lock_all.rs`).
    pub(crate) fn take_keys(
        &self,
        resources: &KeySet,
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        let lock = self.core.rounds().lock_on(resources);
        self.take_as(resources, &lock, options, made)
    }

    /// The TTL a call with `options` asks for, checked: not zero, not over
    /// `max_ttl`, above the drift and above the node timeout.
    pub(crate) fn checked_ttl(&self, options: &LockOptions) -> Result<Duration> {
        let config = &self.core.rounds().config();
        let ttl = options.ttl.unwrap_or(config.ttl);
        check_ttl(ttl, config.max_ttl, config.drift_factor)
            .map_err(|reason| Error::InvalidArgument { reason })?;
        if ttl <= config.node_timeout {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "the TTL {ttl:?} is not above the node timeout {:?}: one slow node \
                     would use up the whole validity",
                    config.node_timeout
                ),
            });
        }
        Ok(ttl)
    }

    /// [`take_keys`](Self::take_keys) of `hold` (a lock on its keys, or a
    /// read-write lock's writer, which takes its writer's key as a lock),
    /// named `resources` in its reports and guard (the writer: under the
    /// read-write lock's name).
    pub(crate) fn take_as(
        &self,
        resources: &KeySet,
        hold: &Hold,
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        crate::trace::resources(resources);
        let config = &self.core.rounds().config();
        let ttl = self.checked_ttl(options)?;
        let mut waiting = Waiting::new(options, &self.retry, self.default_wait(), made);
        let rounds = self.core.rounds();
        let fenced = options.fencing.unwrap_or(config.fencing);
        waiting.check_cancelled()?;
        if waiting.single_attempt() {
            waiting.attempt();
            let lease = match rounds.acquire_once(resources, hold, ttl, fenced) {
                // As `Mutex::try_lock` on a mutex this thread holds: the
                // answer stays `Contended`, but it says who holds it.
                Err(Error::Contended { mut report })
                    if rounds.owners().held_by_me(hold, rounds.now()) =>
                {
                    report.held_here = true;
                    return Err(Error::Contended { report });
                }
                taken => taken?,
            };
            let guard = self.guard(lease);
            return self.deliver(guard, ttl, options, &waiting);
        }
        // A call that would wait for a lock this thread holds would wait
        // for itself. (One attempt cannot deadlock: it reports what the
        // servers say, as `Mutex::try_lock` does on a mutex its thread holds.)
        if rounds.owners().held_by_me(hold, rounds.now()) {
            return Err(Error::Deadlock {
                resource: resources.to_string(),
            });
        }
        // Threads of this manager that want the same key take turns: only
        // the turn-holder contends with the servers. (`None`: no deadline
        // can be expressed, the caller waits as long as it takes.)
        let want = Want { ttl, fenced };
        // The turn is a ticket: every return below that does not move it
        // into a guard drops it, which passes the turn to the next waiter.
        let in_line = crate::trace::local_line();
        let line = rounds
            .local()
            .wait_turn(hold, want, waiting.deadline(), waiting.alarm());
        in_line.ended(match &line {
            Turn::Mine(_) => "turn",
            Turn::Handed(..) => "handed_over",
            Turn::TimedOut => "timed_out",
            Turn::Cancelled => "cancelled",
        });
        let turn = match line {
            Turn::Mine(turn) => turn,
            Turn::Handed(lease, turn) => {
                let guard = self.guard(lease).with_turn(turn);
                return self.deliver(guard, ttl, options, &waiting);
            }
            Turn::TimedOut => {
                // One honest attempt, so the error carries a real report.
                waiting.attempt();
                let guard = self.guard(rounds.acquire_once(resources, hold, ttl, fenced)?);
                return self.deliver(guard, ttl, options, &waiting);
            }
            Turn::Cancelled => return Err(waiting.cancelled()),
        };
        if turn.streak().yield_first {
            // This process has had the lock many times in a row: leave the
            // others a window before contending again.
            if let Some(pause) = waiting.next_delay() {
                waiting.alarm().sleep(pause);
            }
        }
        // Wake-ups: when this manager's last release of the key was heard
        // by waiting processes, they go first.
        let alarm = waiting.alarm().receiver();
        let watch = waiting
            .next_delay()
            .and_then(|pause| rounds.yield_to_waiters(hold, pause, Some(alarm)));
        let mut turn = Some(turn);
        // Wake-ups: the release of what it waits for.
        let listen = || Some(hold.announced_on().clone());
        waiting.until_done(rounds, listen, watch, |waiting| {
            let lease = match Tried::of(rounds.acquire_once(resources, hold, ttl, fenced))? {
                Tried::Done(lease) => lease,
                Tried::Again(error, at_most) => return Ok(Tried::Again(error, at_most)),
            };
            let guard = match turn.take() {
                Some(turn) => self.guard(lease).with_turn(turn),
                None => self.guard(lease),
            };
            self.deliver(guard, ttl, options, waiting).map(Tried::Done)
        })
    }

    /// Hands a fresh guard to the caller, unless the call was cancelled
    /// meanwhile (a round in flight is not cut off): the guard is then
    /// dropped, which releases the lock (or hands it to the next local
    /// waiter), and the call fails as cancelled.
    pub(crate) fn deliver(
        &self,
        guard: LockGuard,
        ttl: Duration,
        options: &LockOptions,
        waiting: &Waiting<'_>,
    ) -> Result<LockGuard> {
        if let Err(cancelled) = waiting.check_cancelled() {
            drop(guard);
            return Err(cancelled);
        }
        self.start_auto_extend(guard, ttl, options)
    }
    /// Registers a fresh guard with the watchdog when asked to.
    pub(crate) fn start_auto_extend(
        &self,
        guard: LockGuard,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        if !options.auto_extend {
            return Ok(guard);
        }
        let plan = RenewalPlan {
            ttl,
            max_hold: options.max_hold.unwrap_or(DEFAULT_MAX_HOLD),
            max_extensions: options.max_extensions,
            acquired_at: self.core.rounds().now(),
        };
        // On failure the guard is dropped here, which releases the lock.
        self.core.auto_extend(guard.lease(), plan)?;
        Ok(guard)
    }
}

/// A call that takes a lock, `call`: `body` (which counts the rounds it
/// makes) in the call's span, then the call's metric: how it ended, how
/// long it took and its rounds. Every call that takes a lock goes
/// through here.
pub(crate) fn measured(
    call: Call,
    quorum: usize,
    body: impl FnOnce(&mut u32) -> Result<LockGuard>,
) -> Result<LockGuard> {
    let started = crate::metrics::Stopwatch::start();
    let mut rounds = 0;
    let taken = crate::trace::take(call, quorum, &mut rounds, body);
    crate::metrics::acquire(outcome(&taken), started, rounds);
    taken
}

/// The outcome label of a call that takes a lock, for the metrics.
fn outcome(taken: &Result<LockGuard>) -> &'static str {
    match taken {
        Ok(_) => "acquired",
        Err(Error::Contended { .. }) => "contended",
        Err(Error::NoQuorum { .. }) => "no_quorum",
        Err(Error::ValidityExpired { .. }) => "validity_expired",
        Err(Error::Cancelled { .. }) => "cancelled",
        Err(Error::Deadlock { .. }) => "deadlock",
        Err(Error::InvalidArgument { .. }) => "invalid",
        Err(_) => "error",
    }
}
