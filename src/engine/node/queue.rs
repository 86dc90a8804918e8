//! A node thread's job queue: many senders, one receiver that sleeps at
//! once when the queue is empty, and a send that wakes it only when it
//! sleeps and no caller is driving the node.
//!
//! The channel crate's blocking receive first spins, then yields the CPU
//! (`sched_yield`) a few times before it sleeps. A node thread mostly
//! waits, and with more threads than cores each yield is a switch to
//! another thread: measured with 8 threads taking locks on N=3 nodes,
//! about one `sched_yield` per lock came from the node threads. Here the
//! receiver parks on a condition variable (no spin, no yield), and only a
//! job that finds it asleep, with no wake-up already on its way, wakes it.
//!
//! **Drivers.** A caller that drives the node (`../../drive.rs`) is
//! counted here ([`Sender::drive`]) while it holds the node's state.
//! A job queued meanwhile does not wake the node's thread: the driver
//! runs what is queued behind its own operation before it lets the node
//! go (combining, `worker.rs`), and its end ([`Driving`] dropped) wakes the
//! thread if anything is still queued then. One lock orders the two: a
//! sender that sees a driver counted queued its job before that driver's
//! end looks at the queue, so no job is left with nobody woken (checked
//! by loom, `unread.rs`).
//!
//! A batch parked with the reader (`../../reader.rs`) is counted as a
//! driver too, for as long as it is parked: the reader sends what is
//! queued behind it once it has read it. So a driver's end wakes the
//! receiver only when no other driver is counted, and the receiver, woken
//! for its timers, leaves the jobs to the driver counted (its end wakes
//! it if any are left), unless every sender is gone: it then runs them
//! itself, reading the parked batch first.
//!
//! **Wake times.** The node's thread sleeps until the state's next timer
//! (its poll timeout). A caller that moves that time earlier while it
//! holds the state (a batch parked unread, a probe, a release to retry)
//! tells the thread with [`Sender::wake_by`], not with a job: a queued job
//! would count at the gate, and the node would look busy to the next
//! caller until its thread had run it (`../gate.rs`), which then queues
//! its operation there instead of driving it. The thread is woken only
//! when it sleeps past the new time, and goes back to sleep until then
//! without taking the state. A time sent while the thread is awake is
//! kept until its next sleep: it reads the state's timers after it last
//! woke, and anything set before that read is in them (checked by loom,
//! `wire_order.rs`).
//!
//! Jobs are taken only by whoever holds the node's state (the node's
//! thread waits for a job with [`Receiver::wait_until`] and takes them
//! under the state's lock): so what two holders take one after the other
//! runs in queue order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::sync::{Condvar, Mutex};

use crate::canary::{self, Canary};

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when a job arrives or the last sender goes.
    ready: Condvar,
}

struct State<T> {
    jobs: VecDeque<T>,
    /// Live [`Sender`]s: at zero, a drained queue is closed.
    senders: usize,
    /// Whether the [`Receiver`] still exists: sends fail once it is gone.
    receiving: bool,
    /// Callers driving the node now: a job queued while one is counted
    /// is theirs to run or to hand on, and wakes nobody.
    drivers: usize,
    /// Whether the receiver sleeps and no wake-up is on its way to it:
    /// only then does a job need one.
    asleep: bool,
    /// The deadline the receiver sleeps with while `asleep` (`None`:
    /// until a job comes).
    sleeps_until: Option<Instant>,
    /// The earliest wake time sent ([`Sender::wake_by`]) since the
    /// receiver last returned: it sleeps no later than this.
    wake_by: Option<Instant>,
}

/// The sending side; cloned for every holder.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

/// The node thread's side.
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

/// Why [`Receiver::wait_until`] returned without a job queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// The deadline passed with the queue empty.
    Timeout,
    /// Every sender is gone and the queue is drained.
    Closed,
}

/// A new queue.
pub(crate) fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            jobs: VecDeque::new(),
            senders: 1,
            receiving: true,
            drivers: 0,
            asleep: false,
            sleeps_until: None,
            wake_by: None,
        }),
        ready: Condvar::default(),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `job`, waking the receiver if it sleeps and no caller
    /// drives the node. Gives the job back when the receiver is gone.
    pub(crate) fn send(&self, job: T) -> Result<(), T> {
        let mut state = self.0.state.lock();
        if !state.receiving {
            return Err(job);
        }
        state.jobs.push_back(job);
        let wake = state.drivers == 0 && state.wake_up();
        drop(state);
        if wake {
            self.0.ready.notify_one();
        }
        Ok(())
    }

    /// Queues `job` without waking the receiver, and says whether it
    /// needs a wake-up (it sleeps, none is on its way, and no caller
    /// drives the node): the caller then owes it a [`nudge`](Self::nudge),
    /// directly or through another node's thread (a wake chain, see
    /// `../../scatter.rs`). Gives the job back when the receiver is gone.
    pub(crate) fn send_quietly(&self, job: T) -> Result<bool, T> {
        let mut state = self.0.state.lock();
        if !state.receiving {
            return Err(job);
        }
        state.jobs.push_back(job);
        Ok(state.drivers == 0 && state.asleep)
    }

    /// Wakes the receiver if jobs are queued while it sleeps with no
    /// wake-up on its way and no caller driving the node: what a quiet
    /// send left owed.
    pub(crate) fn nudge(&self) {
        let mut state = self.0.state.lock();
        let wake = !state.jobs.is_empty()
            && state.drivers == 0
            && !canary::on(Canary::NudgeWakesNobody)
            && state.wake_up();
        drop(state);
        if wake {
            self.0.ready.notify_one();
        }
    }

    /// Tells the receiver to wake by `at` (the state's next timer came
    /// earlier), without a job: it is woken now only if it sleeps past
    /// `at`, and then sleeps again until `at`; awake, it sleeps no later
    /// than `at` next time. Whether a wake-up was sent.
    pub(crate) fn wake_by(&self, at: Instant) -> bool {
        self.0.wake_by(at)
    }

    /// Counts a caller that drives the node until the returned guard is
    /// dropped.
    pub(crate) fn drive(&self) -> Driving<T> {
        Driving::counted(self.handle())
    }

    /// A handle on the queue that does not keep it open.
    pub(crate) fn handle(&self) -> Handle<T> {
        Handle(Arc::clone(&self.0))
    }
}

/// A handle on the queue that is not a sender (the queue closes when the
/// last sender goes, whatever handles are left): for the reader of the
/// batches parked with it (`../../reader.rs`), which drives the node
/// while one is and tells the node's thread its wake times.
pub(crate) struct Handle<T>(Arc<Shared<T>>);

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Handle<T> {
    /// Counts a driver until the returned guard is dropped.
    pub(crate) fn drive(&self) -> Driving<T> {
        Driving::counted(self.clone())
    }

    /// As [`Sender::wake_by`].
    pub(crate) fn wake_by(&self, at: Instant) -> bool {
        self.0.wake_by(at)
    }
}

/// A driver of the node, counted (see the module's text): a caller that
/// holds the node's state, or a batch parked with the reader. Dropping it
/// uncounts the driver and, when it was the last one counted, wakes the
/// receiver if jobs are still queued: those queued while it drove woke
/// nobody. (While another driver is counted, what is queued is that
/// one's to run.)
pub(crate) struct Driving<T>(Handle<T>);

impl<T> Driving<T> {
    /// A driver counted on `queue` until it is dropped.
    fn counted(queue: Handle<T>) -> Self {
        (queue.0).state.lock().drivers += 1;
        Self(queue)
    }

    /// The queue it counts on.
    pub(crate) fn queue(&self) -> &Handle<T> {
        &self.0
    }

    /// Moves the jobs at the head of the queue that `take` accepts, at most
    /// `most`, into `into`: the driver's share of the queue. Among them,
    /// the jobs `skip` accepts are removed instead, and counted: jobs
    /// whose whole work the driver does in their place. Stops at the first
    /// job neither accepts. Returns how many were skipped. The driver must
    /// hold the node's state (see the module's text).
    pub(crate) fn take_front(
        &self,
        most: usize,
        take: impl Fn(&T) -> bool,
        skip: impl Fn(&T) -> bool,
        into: &mut Vec<T>,
    ) -> usize {
        let mut state = (self.0).0.state.lock();
        let mut skipped = 0;
        loop {
            match state.jobs.front() {
                Some(job) if skip(job) => {
                    state.jobs.pop_front();
                    skipped += 1;
                }
                Some(job) if into.len() < most && take(job) => {
                    into.extend(state.jobs.pop_front());
                }
                _ => break skipped,
            }
        }
    }
}

impl<T> Drop for Driving<T> {
    fn drop(&mut self) {
        let shared = &(self.0).0;
        let mut state = shared.state.lock();
        state.drivers -= 1;
        let wake = state.drivers == 0
            && !state.jobs.is_empty()
            && !canary::on(Canary::DriverEndLooksAway)
            && state.wake_up();
        drop(state);
        if wake {
            shared.ready.notify_one();
        }
    }
}

impl<T> Shared<T> {
    /// [`Sender::wake_by`]'s work, for a sender or a handle.
    fn wake_by(&self, at: Instant) -> bool {
        let mut state = self.state.lock();
        state.wake_by = Some(state.wake_by.map_or(at, |by| by.min(at)));
        let wake = state.asleep
            && state.sleeps_until.is_none_or(|until| at < until)
            && !canary::on(Canary::WakeByWakesNobody)
            && state.wake_up();
        drop(state);
        if wake {
            self.ready.notify_one();
        }
        wake
    }
}

impl<T> State<T> {
    /// Whether a wake-up must be sent now: the receiver sleeps and none
    /// is on its way (then one is, from the caller).
    fn wake_up(&mut self) -> bool {
        std::mem::replace(&mut self.asleep, false)
    }
}

#[cfg(all(test, loom))]
impl<T> Sender<T> {
    /// Whether jobs are queued while the receiver sleeps with no wake-up
    /// on its way and no driver counted: a job nobody will run (for the
    /// loom model).
    pub(crate) fn left_asleep(&self) -> bool {
        let state = self.0.state.lock();
        state.asleep && !state.jobs.is_empty() && state.drivers == 0
    }

    /// Whether the receiver sleeps past `due`, with no wake-up on its way
    /// (for the loom model).
    pub(crate) fn sleeps_past(&self, due: Instant) -> bool {
        let state = self.0.state.lock();
        state.asleep && state.sleeps_until.is_none_or(|until| until > due)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.state.lock().senders += 1;
        Self(Arc::clone(&self.0))
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.senders -= 1;
        let wake = state.senders == 0 && state.wake_up();
        drop(state);
        if wake {
            self.0.ready.notify_one();
        }
    }
}

impl<T> Receiver<T> {
    /// A handle on the queue (see [`Handle`]).
    pub(crate) fn handle(&self) -> Handle<T> {
        Handle(Arc::clone(&self.0))
    }

    /// Returns once a job is queued (without taking it: the caller takes
    /// it under the node's state, [`take_queued`](Self::take_queued)),
    /// sleeping until one arrives or `deadline` passes (`None`: until every
    /// sender is gone).
    /// The deadline is moved earlier by any wake time sent
    /// ([`Sender::wake_by`]) since this last returned: the caller reads the
    /// state's timers after this returns, which include whatever was set
    /// before.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> Result<(), Empty> {
        let mut state = self.0.state.lock();
        let woke = loop {
            // Jobs queued while a driver is counted are the driver's to
            // run (its end wakes this thread if any are left); once every
            // sender is gone the thread runs them (the driver left then
            // is a batch parked with the reader, which the thread reads
            // first).
            let closing = state.senders == 0 && !canary::on(Canary::ClosedLeavesDrivenJobs);
            if !state.jobs.is_empty() && (state.drivers == 0 || closing) {
                break Ok(());
            }
            if state.senders == 0 {
                break Err(Empty::Closed);
            }
            let until = match state.wake_by {
                _ if canary::on(Canary::SleepIgnoresWakeBy) => deadline,
                Some(by) => Some(deadline.map_or(by, |d| d.min(by))),
                None => deadline,
            };
            state.asleep = true;
            state.sleeps_until = until;
            let mut timed_out = false;
            match until {
                None => state = self.0.ready.wait(state),
                Some(until) => (state, timed_out) = self.0.ready.wait_until(state, until),
            }
            state.asleep = false;
            if timed_out && (state.jobs.is_empty() || state.drivers > 0) {
                break Err(Empty::Timeout);
            }
        };
        state.wake_by = None;
        woke
    }

    /// Moves up to `most` jobs that are already queued into `into`,
    /// without waiting.
    pub(crate) fn take_queued(&self, most: usize, into: &mut Vec<T>) {
        let mut state = self.0.state.lock();
        let n = most.min(state.jobs.len());
        into.extend(state.jobs.drain(..n));
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.receiving = false;
        // Dropped outside the lock: a job's drop may send elsewhere.
        let jobs = std::mem::take(&mut state.jobs);
        drop(state);
        drop(jobs);
    }
}

#[cfg(all(test, not(loom)))]
#[path = "queue_tests.rs"]
mod tests;
