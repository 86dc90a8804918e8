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
//!
//! The timer fallback is there for what sends no notice: an expiry, and
//! a notice lost on the way. A lock's wait knows when the first comes: a
//! refusal says how long the holder's key has left there
//! (`Reply::HeldBy`'s `expires_in`). So while every node can send
//! notices, the wait for the next timed attempt lasts until a quorum of
//! the holder's keys have expired, at least the retry delay and at most
//! [`LONGEST_QUIET`]: a waiter behind a long-held lock makes about one
//! attempt a second instead of one per retry delay (each one round trip
//! or two per node), and a lost notice costs at most that second. A wait
//! whose early wake-ups ran out (forged or useless notices) goes back to
//! the retry delay.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use super::counters::Event;
use super::rounds::Rounds;
use crate::backend::KeySet;
use crate::engine::Hold;
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

/// The longest a lock's waiter that hears release notices goes without a
/// timed attempt while the holder's keys live on (see the module docs):
/// what a lost notice can cost. One second: a process with one thread
/// waiting then spends 1.8 ms of CPU per second, 1.0 of it idle, against
/// 5.0 with the default retry delay's five to ten attempts a second
/// (docs/benchmarks.md, "waiting" and "Two builds compared").
pub(crate) const LONGEST_QUIET: Duration = Duration::from_secs(1);

/// The shortest time a releaser that lets the waiting processes go first
/// ([`Rounds::yield_to_waiters`]) waits for one of them to take the lock:
/// what a woken waiter needs on a busy host (the notices of a quorum, its
/// thread's wake-up, one acquire round), with room for the node threads'
/// delays of a few milliseconds counted on a loaded 2-core VM
/// (docs/benchmarks.md, "One holder and one waiter").
pub(crate) const YIELD_WINDOW: Duration = Duration::from_millis(20);

/// The window of a yield, in round trips of the slowest node: the notice
/// reaches the waiter within about one, its attempt takes one more; four
/// leave room for a split and a slow wake-up on far nodes.
const YIELD_ROUND_TRIPS: u32 = 4;

/// How long a releaser lets the waiters go first, given the slowest
/// node's round trip and its `pause` (the retry delay): [`YIELD_WINDOW`]
/// or [`YIELD_ROUND_TRIPS`] round trips, whichever is longer, never past
/// the pause.
fn yield_window(slowest_round_trip: Duration, pause: Duration) -> Duration {
    slowest_round_trip
        .saturating_mul(YIELD_ROUND_TRIPS)
        .max(YIELD_WINDOW)
        .min(pause)
}

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

    /// When the timer fallback of a wait whose retry delay ends at
    /// `until` may end instead, within the call's budget `latest`: when a
    /// quorum of the holder's keys have expired, if that is later, but
    /// at most [`LONGEST_QUIET`] from now (see the module docs).
    fn quiet_until(&self, until: Instant, latest: Option<Instant>) -> Instant {
        quiet_until(self.watch.quorum_free_at(), until, latest, Instant::now())
    }
}

/// [`ReleaseWait::quiet_until`] at `now`, for a quorum free at `free_at`
/// (`None`: maybe now, or unknown).
fn quiet_until(
    free_at: Option<Instant>,
    until: Instant,
    latest: Option<Instant>,
    now: Instant,
) -> Instant {
    let Some(free_at) = free_at else {
        return until;
    };
    let longest = now.checked_add(LONGEST_QUIET).unwrap_or(now);
    let quiet = free_at.min(longest).max(until);
    latest.map_or(quiet, |latest| quiet.min(latest).max(until))
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
        self.wait_for_release_or_expiry(wait, until, Some(until), interrupt)
    }

    /// [`wait_for_release`](Self::wait_for_release) for a lock's waiter,
    /// whose timer fallback may last past `until` until the holder's keys
    /// expire on a quorum (see the module docs), within the call's budget
    /// `latest` (`None`: none).
    pub(crate) fn wait_for_release_or_expiry<T>(
        &self,
        wait: &mut ReleaseWait,
        until: Instant,
        latest: Option<Instant>,
        interrupt: Option<&Receiver<T>>,
    ) -> Woken {
        wait.weigh_attempts();
        let quiet = wait.quiet_until(until, latest);
        let bell = wait.watch.notices().clone();
        let mut held_back = false;
        let woken = loop {
            let mut select = Select::new();
            let notices = select.recv(&bell);
            let interrupted = interrupt.map(|rx| select.recv(rx));
            // Notices shown useless: back to the retry delay.
            let deadline = if held_back { until } else { quiet };
            match select.select_deadline(deadline) {
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

    /// The fairness rule: when this manager's last release of `hold`, a
    /// moment ago, was heard by other processes waiting for it, let them
    /// go first: listen (on the keys its release announces on), and wait
    /// for a notice (the next holder's release) or the time a woken
    /// waiter needs to take the lock ([`yield_window`], at most `delay`),
    /// before the first attempt. Returns the wait when it waited, for the
    /// attempts that follow.
    ///
    /// Not `delay` itself: a waiter that heard the release may not take
    /// the lock (its attempt failed, it waits for a set whose other
    /// member is held, it gave up, or it is itself a releaser letting
    /// this one go first), and then no release comes and the lock stays
    /// free for the whole retry delay. Two processes taking turns
    /// stalled so for 100-200 ms (docs/benchmarks.md, "One holder and
    /// one waiter"). After the window the first attempt finds the new
    /// holder if a waiter took the lock, and the wait goes on as any
    /// waiter's.
    pub(crate) fn yield_to_waiters<T>(
        &self,
        hold: &Hold,
        delay: Duration,
        interrupt: Option<&Receiver<T>>,
    ) -> Option<ReleaseWait> {
        if !self.engine().others_waited(hold) {
            return None;
        }
        let mut wait = self.watch(hold.announced_on());
        self.counters().note(Event::Yielded);
        let window = yield_window(self.engine().slowest_round_trip(), delay);
        self.wait_for_release(&mut wait, after(window), interrupt);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A yield lasts [`YIELD_WINDOW`] on near nodes, four round trips of
    /// the slowest node on far ones, and never past the retry delay.
    #[test]
    fn a_yield_lasts_a_few_round_trips_within_the_retry_delay() {
        let ms = Duration::from_millis;
        let pause = ms(150);
        assert_eq!(yield_window(Duration::ZERO, pause), YIELD_WINDOW);
        assert_eq!(yield_window(ms(1), pause), YIELD_WINDOW);
        assert_eq!(yield_window(ms(30), pause), ms(120));
        assert_eq!(yield_window(ms(60), pause), pause);
        assert_eq!(yield_window(ms(1), ms(5)), ms(5));
        assert_eq!(yield_window(Duration::MAX, pause), pause);
    }

    /// The timer fallback of a lock's wait ends when a quorum of the
    /// holder's keys expire, never before the retry delay, never more
    /// than [`LONGEST_QUIET`] from now, never past the call's budget.
    #[test]
    fn a_quiet_wait_lasts_until_the_holders_keys_expire_within_its_bounds() {
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let until = at(150);
        // (free at, budget's end, the wait's end)
        let cases = [
            (None, None, until),
            (Some(at(600)), None, at(600)),
            (Some(at(50)), None, until),
            (Some(at(5_000)), None, at(1_000)),
            (Some(at(600)), Some(at(400)), at(400)),
            (Some(at(600)), Some(at(100)), until),
        ];
        for (free_at, latest, end) in cases {
            assert_eq!(
                quiet_until(free_at, until, latest, now),
                end,
                "{free_at:?} {latest:?}"
            );
        }
    }
}
