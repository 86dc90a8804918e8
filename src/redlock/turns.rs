//! Waiting in line inside the process: threads of one manager that want the
//! same resource take turns locally, so only one of them contends with the
//! servers at a time, and the next one starts the moment the lock is let go.
//!
//! Without this, every waiting thread polls the servers with its own
//! retries: N threads cost N remote attempts per retry period, and the
//! thread that gets the lock next is whichever retry happens to land first,
//! after a sleep. With it, a release wakes exactly one local waiter, whose
//! acquire is queued right behind the release on every node (per-node FIFO),
//! so the hand-over costs about one round trip and no sleep.
//!
//! When a guard is dropped while a thread waits in line, the lock itself
//! may be handed over instead (see `Rounds::hand_over`): no round trip
//! at all. That is bounded, so other processes get their chance.
//!
//! The line is bounded by the holder's validity: the first waiter watches
//! the turn-holder's lease, and once its deadline has passed or it is lost,
//! that waiter takes the turn and contends with the servers; it does not
//! wait for a holder that may be stuck. The stale holder's [`Ticket`] then
//! no longer matches the line and passes nothing when it goes (and its
//! guard hands nothing over).
//!
//! A turn is a [`Ticket`]: passed when it is dropped, so every exit path of
//! a waiting call (an error, a panic, a cancellation) passes it by
//! construction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Select};
use parking_lot::Mutex;

use super::lease::Lease;
use super::line::{Given, Grant, Holder, Line, Waiter, Want};
pub(crate) use super::streak::Streak;
use crate::canary::{self, Canary};
use crate::cancel::Alarm;
use crate::clock::{Clock, wake_at};
use crate::engine::Hold;

/// The lines, one per lock (by what it holds: one resource's key, a set's
/// keys, a read-write lock's writer) that some thread of this manager is
/// holding or contending for.
///
/// Lock order: the lines' lock before a lease's; never the other way
/// round (`Rounds::lose` lets go of the lease before it nudges the line).
///
/// The line's parts and steps are visible to the rest of `redlock`
/// (`pub(super)`) for the line explorer, `checks/line/`, which runs
/// them in every order.
#[derive(Debug)]
pub(crate) struct LocalQueue {
    pub(super) lines: Mutex<Lines>,
    /// The manager's clock: lease deadlines are on it.
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
pub(super) struct Lines {
    pub(super) by_key: HashMap<Hold, Line>,
    /// Ids of waiters and turns, unique for the queue's life: a stale
    /// ticket never matches the holder of a line made again later.
    next_id: u64,
}

/// The outcome of waiting in line.
#[derive(Debug)]
pub(crate) enum Turn {
    /// This thread may now contend with the servers.
    Mine(Ticket),
    /// The lock itself arrived (renamed for this thread: same token, same
    /// deadline); the turn comes with it.
    Handed(Arc<Lease>, Ticket),
    /// The deadline passed first; this thread is out of the line.
    TimedOut,
    /// The call's cancellation token was cancelled; out of the line.
    Cancelled,
}

/// The local turn for one key: passed to the next waiter when dropped (or
/// explicitly, with a hand-over, by [`pass_with`](Self::pass_with)). A
/// ticket whose turn the line has since given to another thread (its
/// holder's lease ran out) passes nothing.
#[derive(Debug)]
pub(crate) struct Ticket {
    queue: Arc<LocalQueue>,
    key: Hold,
    pub(super) id: u64,
    streak: Streak,
    /// Passed already (by `pass_with`): `Drop` does nothing more.
    passed: bool,
}

/// What the first waiter sees of the holder's lock.
enum Watch {
    /// No lock yet: the holder is contending; wait to be nudged.
    Busy,
    /// Valid until this instant on the manager's clock.
    Until(Instant),
    /// Expired or lost: the line no longer waits for it.
    Over,
}

/// What joining the line gave.
pub(super) enum Joined {
    /// Nobody held it: the turn is this thread's.
    Mine(Ticket),
    /// In line, as waiter `id`; the turn will come on `grant`.
    Waiting { id: u64, grant: Receiver<Grant> },
}

/// What a look at the line found.
pub(super) enum Look {
    /// The turn (or the lock) is this waiter's.
    Done(Given),
    /// Keep waiting, looking again at this real-time instant if set.
    Wait(Option<Instant>),
}

impl LocalQueue {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            lines: Mutex::new(Lines::default()),
            clock,
        }
    }

    /// Waits until it is this thread's turn for `key` (asking for `want`),
    /// or `deadline` (`None`: as long as it takes), or until `alarm`
    /// reports a cancellation.
    ///
    /// Every step that reads or changes the line is one critical section
    /// under the lines' lock ([`join`](Self::join), [`look`](Self::look),
    /// [`leave_line`](Self::leave_line)); between them this thread only
    /// blocks or takes a message from its own channel. The line explorer
    /// (`checks/line/`) runs these very steps in every order.
    pub(crate) fn wait_turn(
        self: &Arc<Self>,
        key: &Hold,
        want: Want,
        deadline: Option<Instant>,
        alarm: &Alarm,
    ) -> Turn {
        let (id, grant) = match self.join(key, want) {
            Joined::Mine(ticket) => return Turn::Mine(ticket),
            Joined::Waiting { id, grant } => (id, grant),
        };
        let mut select = Select::new();
        let on_grant = select.recv(&grant);
        select.recv(alarm.receiver());
        loop {
            let look_again = match self.look(key, id, &grant) {
                Look::Done(given) => return self.turn(key, id, given),
                Look::Wait(at) => at,
            };
            let wake = match (deadline, look_again) {
                (Some(d), Some(l)) => Some(d.min(l)),
                (d, l) => d.or(l),
            };
            let ready = match wake {
                Some(wake) => select.select_deadline(wake).ok(),
                None => Some(select.select()),
            };
            let Some(ready) = ready else {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return self.leave_line(key, id, &grant, Turn::TimedOut);
                }
                continue; // time to look at the holder's lease again
            };
            if ready.index() == on_grant {
                match ready.recv(&grant) {
                    Ok(Grant::Given(given)) => return self.turn(key, id, given),
                    Ok(Grant::Recheck) => continue,
                    // The line dropped our sender without a grant: cannot
                    // happen while we are in it; leave rather than hang.
                    Err(_) => return self.leave_line(key, id, &grant, Turn::TimedOut),
                }
            }
            let _ = ready.recv(alarm.receiver());
            if alarm.is_cancelled() {
                return self.leave_line(key, id, &grant, Turn::Cancelled);
            }
        }
    }

    /// The first step: the turn at once when nobody holds the line for
    /// `key`, else a place at the back of it (and the channel on which the
    /// turn, or a nudge to look again, will come).
    pub(super) fn join(self: &Arc<Self>, key: &Hold, want: Want) -> Joined {
        let mut lines = self.lines.lock();
        let id = lines.next_id;
        lines.next_id += 1;
        let Some(line) = lines.by_key.get_mut(key) else {
            lines
                .by_key
                .insert(key.clone(), Line::held_by(id, Streak::default()));
            return Joined::Mine(self.ticket(key, id, Streak::default()));
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        line.waiting.push_back(Waiter {
            id,
            want,
            grant: tx,
        });
        Joined::Waiting { id, grant: rx }
    }

    /// Under the lines' lock: the grant if it came; else, for the first
    /// waiter, the turn if the holder's lock is over, or when to look again.
    pub(super) fn look(&self, key: &Hold, id: u64, grant: &Receiver<Grant>) -> Look {
        let mut lines = self.lines.lock();
        while let Ok(message) = grant.try_recv() {
            if let Grant::Given(given) = message {
                return Look::Done(given);
            }
        }
        let Some(line) = lines.by_key.get_mut(key) else {
            // Not reachable while we are in the line (it is removed only
            // when nobody waits); should it happen, the turn is free.
            lines
                .by_key
                .insert(key.clone(), Line::held_by(id, Streak::default()));
            return Look::Done(Given::Turn(Streak::default()));
        };
        if line.waiting.front().is_none_or(|w| w.id != id) {
            return Look::Wait(None);
        }
        let watched = match self.watch(&line.holder) {
            Watch::Until(_) if canary::on(Canary::IgnoreValidity) => Watch::Over,
            watched => watched,
        };
        match watched {
            Watch::Busy => Look::Wait(None),
            Watch::Until(at) => Look::Wait(wake_at(&*self.clock, at)),
            Watch::Over => {
                // The holder may be stuck past its validity: the line stops
                // waiting for it, and its ticket no longer matches.
                line.waiting.pop_front();
                let streak = line.holder.streak.next();
                line.holder = Holder {
                    ticket: id,
                    streak,
                    lease: None,
                };
                line.nudge_first();
                Look::Done(Given::Turn(streak))
            }
        }
    }

    /// How long the holder's lock bounds the line.
    fn watch(&self, holder: &Holder) -> Watch {
        let Some(lease) = &holder.lease else {
            return Watch::Busy;
        };
        // A lease nobody holds any more cannot keep anyone waiting.
        let Some(lease) = lease.upgrade() else {
            return Watch::Over;
        };
        let state = lease.state();
        if state.lost().is_some() || self.clock.now() >= state.deadline() {
            Watch::Over
        } else {
            Watch::Until(state.deadline())
        }
    }

    pub(super) fn turn(self: &Arc<Self>, key: &Hold, id: u64, given: Given) -> Turn {
        match given {
            Given::Turn(streak) => Turn::Mine(self.ticket(key, id, streak)),
            Given::Lock(streak, lease) => Turn::Handed(lease, self.ticket(key, id, streak)),
        }
    }

    fn ticket(self: &Arc<Self>, key: &Hold, id: u64, streak: Streak) -> Ticket {
        Ticket {
            queue: Arc::clone(self),
            key: key.clone(),
            id,
            streak,
            passed: false,
        }
    }

    /// Leaves the line (returning `outcome`), unless the turn arrived
    /// meanwhile (checked under the same lock that hands turns out, so a
    /// turn, or a lock, is never lost).
    pub(super) fn leave_line(
        self: &Arc<Self>,
        key: &Hold,
        id: u64,
        grant: &Receiver<Grant>,
        outcome: Turn,
    ) -> Turn {
        let mut lines = self.lines.lock();
        let check = !canary::on(Canary::LeaveIgnoresTurns);
        while check && let Ok(message) = grant.try_recv() {
            if let Grant::Given(given) = message {
                drop(lines);
                return self.turn(key, id, given);
            }
        }
        if let Some(line) = lines.by_key.get_mut(key) {
            let was_first = line.waiting.front().is_some_and(|w| w.id == id);
            line.waiting.retain(|w| w.id != id);
            if was_first {
                line.nudge_first();
            }
        }
        outcome
    }

    /// Threads waiting in line for `key` (not counting the turn-holder).
    pub(crate) fn waiting(&self, key: &Hold) -> usize {
        self.lines
            .lock()
            .by_key
            .get(key)
            .map_or(0, |line| line.waiting.len())
    }

    /// Tells the first waiter for `key` to look at the holder again (its
    /// lock was lost). Call without holding any lease's lock.
    pub(crate) fn nudge(&self, key: &Hold) {
        if let Some(line) = self.lines.lock().by_key.get(key) {
            line.nudge_first();
        }
    }

    /// Hands the lock of ticket `id` (at `streak`) for `key` to the next
    /// waiter, if `offer` (called under the lines' lock with what that
    /// waiter wants) gives a lock for it. Otherwise nothing changes: the
    /// ticket keeps the turn (and passes it later, after its release was
    /// sent). Returns whether the lock was handed over.
    fn offer_lock(
        &self,
        key: &Hold,
        id: u64,
        streak: Streak,
        offer: impl FnOnce(&Want) -> Option<Arc<Lease>>,
    ) -> bool {
        let mut lines = self.lines.lock();
        let Some(line) = lines.by_key.get_mut(key).filter(|line| line.turn_is(id)) else {
            return false;
        };
        let Some(lease) = line.waiting.front().and_then(|w| offer(&w.want)) else {
            return false;
        };
        // Still there: waiters leave only under this lock.
        let Some(next) = line.waiting.pop_front() else {
            return false;
        };
        line.give(next, streak.next(), Some(lease))
    }

    /// Ends the turn of ticket `id` (at `streak`) for `key`. `offer` is
    /// called (under the lines' lock) with what the next waiter wants, or
    /// `None` when nobody waits or the ticket no longer holds the turn: it
    /// returns the lock to hand over, or `None` after sending the release
    /// itself, in which case the next waiter gets the turn. Returns whether
    /// the lock was handed over.
    fn pass_with(
        &self,
        key: &Hold,
        id: u64,
        streak: Streak,
        offer: impl FnOnce(Option<&Want>) -> Option<Arc<Lease>>,
    ) -> bool {
        let mut lines = self.lines.lock();
        let Some(line) = lines.by_key.get_mut(key) else {
            let _ = offer(None);
            return false;
        };
        if !line.turn_is(id) {
            let _ = offer(None);
            return false;
        }
        let Some(next) = line.waiting.pop_front() else {
            lines.by_key.remove(key);
            let _ = offer(None);
            return false;
        };
        let handed = offer(Some(&next.want));
        line.give(next, streak.next(), handed)
    }
}

impl Ticket {
    /// Its place in the streak of local turns.
    pub(crate) fn streak(&self) -> Streak {
        self.streak
    }

    /// Records the lock the turn-holder now holds: from here on, the
    /// line waits for it only while it is valid.
    pub(crate) fn hold(&self, lease: &Arc<Lease>) {
        let mut lines = self.queue.lines.lock();
        if let Some(line) = lines.by_key.get_mut(&self.key)
            && line.holder.ticket == self.id
        {
            line.holder.lease = Some(Arc::downgrade(lease));
            line.nudge_first();
        }
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

#[cfg(test)]
#[path = "turns_tests.rs"]
mod tests;
