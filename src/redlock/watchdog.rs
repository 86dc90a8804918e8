//! Auto-extension: one shared timer thread per manager renews every
//! auto-extended lock at about a third of its TTL.
//!
//! Renewal is bounded (a maximum hold time and, optionally, a maximum
//! number of extensions), stops for good at the first failed extend (the
//! lease is then marked lost and its holder notified), and never runs after
//! the guard released or forgot the lock: the release marks the lease
//! finished under the same lock the watchdog holds while it sends an extend.
//!
//! Its schedule is kept on the manager's clock, not real time, so a
//! [`ManualClock`](crate::ManualClock) drives it in tests: an `advance`
//! past an extend's due time makes the extend happen, and a loss fires the
//! guard's `lost_signal`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::lease::Lease;
use super::rounds::{ExtendInFlight, Rounds};
use crate::clock::{Clock, wake_at};
use crate::error::Error;
use crate::trace::Renewal;

/// How a lease is renewed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RenewalPlan {
    /// TTL set by each extend.
    pub(crate) ttl: Duration,
    /// Stop extending once the lock has been held this long.
    pub(crate) max_hold: Duration,
    /// Stop after this many automatic extends, if set.
    pub(crate) max_extensions: Option<u32>,
    /// When the lock was acquired, on the manager's clock.
    pub(crate) acquired_at: Instant,
}

impl RenewalPlan {
    /// Time between extends: a third of the TTL, so two more attempts fit
    /// before the validity would run out.
    fn interval(&self) -> Duration {
        self.ttl / 3
    }

    /// Why renewal must stop now, if it must.
    fn exhausted(&self, now: Instant, extensions: u32) -> Option<String> {
        if self.max_extensions.is_some_and(|max| extensions >= max) {
            return Some(format!("the bound of {extensions} extensions was reached"));
        }
        let held = now.saturating_duration_since(self.acquired_at);
        if held >= self.max_hold {
            return Some(format!(
                "the maximum hold time of {:?} was reached",
                self.max_hold
            ));
        }
        None
    }
}

/// The handle a manager keeps; dropping it (and its clones) stops the
/// timer thread.
#[derive(Debug, Clone)]
pub(crate) struct Watchdog {
    register: Sender<Message>,
}

/// What the manager tells the timer thread.
enum Message {
    /// Renew this lease.
    Watch(Entry),
    /// Renew every lease due at the clock's current time now, then answer
    /// (a test that moved a manual clock waits for what became due).
    Settle(Sender<()>),
}

struct Entry {
    lease: Weak<Lease>,
    plan: RenewalPlan,
    /// Automatic extends done so far.
    renewed: u32,
    /// Renewal has stopped; only the expiry remains to be reported.
    expiring: bool,
}

impl Watchdog {
    /// Starts the timer thread, on the manager's `clock`. It holds only a
    /// weak reference to the rounds, so it never keeps the node workers
    /// alive.
    pub(crate) fn start(rounds: Weak<Rounds>, clock: Arc<dyn Clock>) -> std::io::Result<Self> {
        let (register, registrations) = crossbeam_channel::unbounded();
        thread::Builder::new()
            .name("quorum-lock-watchdog".into())
            .spawn(move || Timer::default().run(&rounds, &*clock, &registrations))?;
        Ok(Self { register })
    }

    /// Starts renewing `lease` per `plan`.
    pub(crate) fn watch(&self, lease: &Arc<Lease>, plan: RenewalPlan) {
        // The thread outlives this handle, so the send cannot fail while we are here.
        let _ = self.register.send(Message::Watch(Entry {
            lease: Arc::downgrade(lease),
            plan,
            renewed: 0,
            expiring: false,
        }));
    }

    /// Waits (at most `wait`) until the timer thread has registered every
    /// lease watched before this call and renewed every one due at the
    /// clock's time when it got to this call. Whether it did in time.
    pub(crate) fn settle(&self, wait: Duration) -> bool {
        let (done, settled) = crossbeam_channel::bounded(1);
        if self.register.send(Message::Settle(done)).is_err() {
            return true; // the thread is gone: nothing left to run
        }
        match Instant::now().checked_add(wait) {
            Some(deadline) => settled.recv_deadline(deadline).is_ok(),
            None => settled.recv().is_ok(),
        }
    }
}

/// The timer thread's state: entries ordered by their next due time (on
/// the manager's clock).
#[derive(Default)]
struct Timer {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, Entry>,
    next_id: u64,
}

impl Timer {
    fn run(mut self, rounds: &Weak<Rounds>, clock: &dyn Clock, registrations: &Receiver<Message>) {
        loop {
            // Due times are on the manager's clock: wait in real time for
            // as long as that clock needs to get there (or look again soon,
            // for a clock that jumps).
            let next = self
                .due
                .peek()
                .and_then(|Reverse((at, _))| wake_at(clock, *at));
            let received = match next {
                Some(at) => registrations.recv_deadline(at),
                None => registrations
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            let settled = match received {
                Ok(Message::Watch(entry)) => {
                    // From when it was registered, not from when this
                    // thread got to it: the clock may have moved since.
                    let at = entry.plan.acquired_at + entry.plan.interval();
                    self.schedule(entry, at);
                    None
                }
                Ok(Message::Settle(done)) => Some(done),
                Err(RecvTimeoutError::Timeout) => None,
                // The manager is gone: nothing left to renew.
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let due = self.take_due(clock.now());
            if !due.is_empty() {
                let Some(rounds) = rounds.upgrade() else {
                    return;
                };
                self.renew(&rounds, due);
            }
            if let Some(done) = settled {
                let _ = done.send(());
            }
        }
    }

    fn schedule(&mut self, entry: Entry, at: Instant) {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(id, entry);
        self.due.push(Reverse((at, id)));
    }

    fn take_due(&mut self, now: Instant) -> Vec<Entry> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            if let Some(entry) = self.entries.remove(&id) {
                due.push(entry);
            }
        }
        due
    }

    /// Sends every due extend first and only then gathers the answers, so
    /// many leases due together cost one wait, not one each (the node
    /// workers batch them into one round trip per node).
    fn renew(&mut self, rounds: &Rounds, due: Vec<Entry>) {
        let mut in_flight: Vec<(Entry, Arc<Lease>, ExtendInFlight, Renewal)> = Vec::new();
        for mut entry in due {
            let Some(lease) = entry.lease.upgrade() else {
                continue; // the guard is gone
            };
            if entry.expiring {
                self.watch_expiry(rounds, entry, &lease);
                continue;
            }
            let stop = {
                let state = lease.state();
                if state.is_over() {
                    continue;
                }
                entry.plan.exhausted(rounds.now(), entry.renewed)
            };
            if let Some(why) = stop {
                // Tell the holder now, not a TTL later when the validity
                // runs out: from here on the lock ends at its deadline.
                let mut state = lease.state();
                let left = state.deadline().saturating_duration_since(rounds.now());
                state.notify(&Error::Lost {
                    reason: format!(
                        "auto-extension stopped ({why}); the lock ends at its deadline, \
                         in {}",
                        crate::words::human(left)
                    ),
                    report: None,
                });
                log::info!(
                    "quorum-lock: auto-extension of {} stopped ({why}); it ends at its \
                     deadline in {left:?}",
                    crate::words::Shortened(&lease.resources.to_string())
                );
                state.stop_renewal(why);
                drop(state);
                entry.expiring = true;
                self.watch_expiry(rounds, entry, &lease);
                continue;
            }
            // Each extend on a span of its own, following from the lock's.
            let renewal = Renewal::begin(&lease.trace, &lease.resources);
            match renewal.run(|| rounds.begin_renewal(&lease, entry.plan.ttl)) {
                Ok(sent) => in_flight.push((entry, lease, sent, renewal)),
                Err(e) => {
                    renewal.ended(Some(&e));
                    stop_renewal(&lease, &e);
                }
            }
        }
        for (mut entry, lease, sent, renewal) in in_flight {
            let extended = renewal.run(|| rounds.finish_extend(&lease, sent));
            renewal.ended(extended.as_ref().err());
            match extended {
                Ok(()) => {
                    entry.renewed += 1;
                    let at = rounds.now() + entry.plan.interval();
                    self.schedule(entry, at);
                }
                Err(e) => stop_renewal(&lease, &e),
            }
        }
    }

    /// After renewal stopped: reports the loss once the validity runs out,
    /// so the holder's notification fires even if it is not polling.
    fn watch_expiry(&mut self, rounds: &Rounds, entry: Entry, lease: &Arc<Lease>) {
        let now = rounds.now();
        let state = lease.state();
        if state.is_over() {
            return;
        }
        let left = state.deadline().saturating_duration_since(now);
        if left.is_zero() {
            let why = state.renewal_stopped().unwrap_or_default().to_owned();
            rounds.lose(
                lease,
                state,
                &Error::Lost {
                    reason: format!(
                        "the lock's validity ran out after auto-extension stopped: {why}"
                    ),
                    report: None,
                },
            );
            return;
        }
        drop(state);
        self.schedule(entry, now + left);
    }
}

fn stop_renewal(lease: &Lease, error: &Error) {
    let mut state = lease.state();
    if !state.is_finished() {
        state.stop_renewal(format!("an extend failed: {error}"));
    }
    // A failed extend already marked the lease lost; anything else (the
    // guard finished meanwhile) needs no notice.
}
