//! The node's own thread, one of the two drivers of its state
//! ([`State`], `mod.rs`): it waits for jobs until the state's poll
//! timeout, tells the state the time ([`State::timer_fired`]), and
//! runs what is queued as batches, in FIFO order.
//!
//! The node's state sits behind its gate (src/engine/gate.rs). The node's
//! thread takes it to run a batch; a caller may take it to drive its own
//! operation when the node is idle (nothing queued, nothing running; the
//! other driver, `../drive.rs`), which saves two thread hand-offs and keeps
//! the FIFO order: an operation only runs directly when every operation
//! queued before it has finished (the gate's rule, checked by loom). Such
//! a caller then runs what other callers queued behind it
//! ([`NodeExec::leave_driven`]); jobs are taken from the queue only under
//! the state, by whichever driver holds it, so they run in queue order
//! (checked by loom with the real queue, `wire_order.rs`).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::jobs::{Inspected, Job, MAX_QUEUED, NotQueued, Proclaimed, ReplyTo, Work};
use super::queue::{self, Empty};
use super::vitals::Vitals;
use super::{Doorbell, Item, Sent, Shared, State, Vote};
use crate::backend::Backend;
use crate::engine::action::Action;
use crate::engine::gate::Gate;
use crate::sync::MutexGuard;

/// Most operations handed to the backend in one batch (one round trip).
const MAX_BATCH: usize = 512;

/// Every node thread's queue, so that one that got a release notice can
/// ask the others to read theirs now rather than at their next poll.
/// Emptied when the engine drops: otherwise the queues, which these
/// senders keep open, would never close.
pub(crate) type Peers = Arc<Mutex<Vec<(queue::Sender<Job>, Arc<NodeExec>)>>>;

/// One node's executor: its state behind the gate that orders direct runs
/// after the jobs queued before them.
pub(crate) struct NodeExec {
    pub(crate) gate: Gate<State>,
    /// The backend's bound on one call, if it has one.
    call_timeout: Option<Duration>,
    /// The bell of the node's release listener: whether it rings tells the
    /// other nodes' threads whether to wake this one for its notices.
    bell: Doorbell,
}

impl NodeExec {
    /// The executor of `state`, whose listener rings `bell`.
    fn new(state: State, call_timeout: Option<Duration>, bell: Doorbell) -> Self {
        Self {
            gate: Gate::new(state),
            call_timeout,
            bell,
        }
    }

    /// Queues `job` for the node's thread without waking it: whether it
    /// needs a wake-up ([`queue::Sender::send_quietly`]), which the caller
    /// then owes it. Only for jobs the queue's bound does not concern
    /// (releases, nudges).
    pub(crate) fn enqueue_quietly(
        &self,
        jobs: &queue::Sender<Job>,
        job: Job,
    ) -> Result<bool, NotQueued> {
        self.gate
            .admit(|| jobs.send_quietly(job))
            .map_err(|_| NotQueued::Gone)
    }

    /// Queues `job` for the node's thread. Returns `false` when the thread
    /// is gone.
    pub(crate) fn enqueue(&self, jobs: &queue::Sender<Job>, job: Job) -> Result<(), NotQueued> {
        // Bounded: a node too slow for the load refuses new operations
        // that could take or prolong a key (their keys, if any, expire with
        // their TTL) instead of growing the queue without limit. Releases
        // are never refused: each undoes an acquire that was queued (the
        // rounds release only where the acquire went), so they are bounded
        // by the operations the queue accepted, and dropping one would
        // leave the key of an acquire that may still run.
        let bounded = match &job {
            Job::Work(Work::Op { item, .. }) => item.action != Action::Release,
            Job::Work(Work::Inspect { .. } | Work::Proclaim { .. }) => true,
            Job::Barrier { .. } | Job::Wake { .. } | Job::Nudge => false,
        };
        if bounded && self.gate.queued() >= MAX_QUEUED {
            return Err(NotQueued::Full);
        }
        self.gate
            .admit(|| jobs.send(job))
            .map_err(|_| NotQueued::Gone)
    }

    /// Lets go of the node a caller drove (`state`, with the caller
    /// counted as its driver by `driving`) and returns the node's next
    /// wake time. First, with `serve`, it runs the operations queued
    /// behind the caller's own (which woke nobody) as one batch on this
    /// thread and answers each: combining, one write and one read for
    /// them all and no thread hand-off. Then `driving` ends, which wakes
    /// the node's thread if jobs are still queued.
    ///
    /// Only a prefix of plain operations is run, in queue order; a job of
    /// another kind and what follows it are left to the node's thread.
    /// `serve` must be false while the state has a batch unread (every
    /// send reads that first: a caller that left its own batch unread, or
    /// handed its operation over, does not wait for the late answer).
    pub(crate) fn leave_driven(
        &self,
        mut state: MutexGuard<'_, State>,
        driving: queue::Driving<Job>,
        serve: bool,
    ) -> Option<Instant> {
        let ran = if serve {
            serve_queue(&mut state, &driving)
        } else {
            0
        };
        let wake = state.poll_timeout();
        self.finish(state, ran);
        drop(driving);
        wake
    }

    /// Lets go of the node's state, uncounting at the gate the `ran` jobs
    /// its holder ran and the operations read in a batch parked with the
    /// reader meanwhile (`State::take_read_counted`).
    fn finish(&self, mut state: MutexGuard<'_, State>, ran: usize) {
        let read = state.take_read_counted();
        self.gate.finish(state, ran + read);
    }

    /// The reader's turn (`../reader.rs`): reads the batch parked with it
    /// under `token` (`None`: whichever is), if it is still parked, then
    /// sends the operations queued behind it as the next batch, parked
    /// with the reader again; with none, or with another job first, the
    /// batch's driver count ends (which wakes the node's thread if jobs
    /// are queued). Tells the node's thread its next wake time.
    pub(crate) fn read_watched(
        &self,
        token: Option<u64>,
        queue: &queue::Handle<Job>,
        follow: bool,
    ) {
        let mut state = self.gate.lock();
        let Some(driving) = state.read_watched(token) else {
            return;
        };
        // It leaves the node as a caller that drove it does.
        if let Some(at) = self.leave_driven(state, driving, follow) {
            queue.wake_by(at);
        }
    }

    /// Whether a caller that waits at most `wait` may run this node's
    /// operation itself: only when the backend bounds its calls within it.
    pub(crate) fn can_run_within(&self, wait: Duration) -> bool {
        self.call_timeout.is_some_and(|bound| bound <= wait)
    }
}

/// Spawns the thread of node `index` for `backend`; it runs until every
/// sender of `jobs` is gone and the queue is empty, then drops `exited`.
pub(crate) fn spawn(
    index: usize,
    backend: Arc<dyn Backend>,
    jobs: queue::Receiver<Job>,
    exited: Sender<()>,
    health: Arc<Vitals>,
    shared: Arc<Shared>,
    peers: Peers,
) -> std::io::Result<Arc<NodeExec>> {
    let name = format!("quorum-lock-node{index}");
    let call_timeout = super::io::call_timeout(&*backend);
    let bell = doorbell(index, &peers);
    let state = State::new(index, backend, health, shared, Instant::now()).ringing(bell.clone());
    // Read here, not by the new thread: a fresh node has nothing to wake
    // for (no retries, no subscriptions), so its thread waits for its
    // first job without taking the gate, and the first rounds find every
    // node idle whenever the thread happens to start.
    let first_wake = state.poll_timeout();
    let exec = Arc::new(NodeExec::new(state, call_timeout, bell));
    let thread_exec = Arc::clone(&exec);
    thread::Builder::new().name(name).spawn(move || {
        let thread = NodeThread {
            index,
            exec: &thread_exec,
            jobs: &jobs,
            queue: jobs.handle(),
            peers: &peers,
        };
        thread.run(first_wake);
        // Dropped when the thread ends: the engine's drop waits for it.
        drop(exited);
    })?;
    Ok(exec)
}

/// The bell node `index`'s release listener rings when notices arrive.
/// With `here` (the listener allows it), the ringing thread takes the
/// notices itself when nobody holds the node's state, and tells the node's
/// thread its wake time, which wakes it only if that came earlier (a
/// subscription lost while taking them is to be tried again). Otherwise
/// it queues a wake-up for the node's thread, which takes them; or, when
/// the state's holder is a caller or the reader driving the node, that
/// holder takes them as it lets go and drops the wake-up
/// ([`serve_queue`]), and the node's thread is not woken. The node
/// is found among the `peers` (filled once every node has started, before
/// anyone can wait; a weak reference, so that a listener's thread never
/// keeps the engine's queues open).
///
/// The state is only tried (`try_lock`), never waited for: the ringing
/// thread may hold another node's state (a release on a memory node rings
/// from inside the round that made it), and whoever holds this one takes
/// the notices through the queued wake-up.
pub(super) fn doorbell(index: usize, peers: &Peers) -> Doorbell {
    let peers = Arc::downgrade(peers);
    Doorbell::new(move |here| {
        let Some(peers) = peers.upgrade() else {
            return;
        };
        let exec = peers.lock().get(index).map(|(_, exec)| Arc::clone(exec));
        let Some(exec) = exec else {
            return;
        };
        if here && let Some(mut state) = exec.gate.try_lock() {
            let short = state.take_rung_notices(Instant::now());
            let wake = state.poll_timeout();
            drop(state);
            wake_polling_peers(&peers, index, short);
            if let (Some(at), Some((jobs, _))) = (wake, peers.lock().get(index)) {
                jobs.wake_by(at);
            }
            return;
        }
        if let Some((jobs, exec)) = peers.lock().get(index) {
            let _ = exec.enqueue(jobs, Job::Wake { probe: false });
        }
    })
}

/// A release reaches every node at about the same time: when a waiter
/// heard from too few nodes yet (`short`), asks the threads of the nodes
/// other than `index` to read their notices now, so the waiters need not
/// wait for their next poll to hear from a quorum. Only the threads that
/// poll: the notices of a node whose listener rings are taken at their
/// ring, and a wake-up more would only put one more thread in the way of
/// the waiters' attempts (counted with 4 processes on one key: 8.8 such
/// wake-ups per lock).
fn wake_polling_peers(peers: &Peers, index: usize, short: bool) {
    if !short {
        return;
    }
    for (i, (jobs, exec)) in peers.lock().iter().enumerate() {
        if i != index && !exec.bell.is_wired() {
            let _ = exec.enqueue(jobs, Job::Wake { probe: false });
        }
    }
}

/// The node's thread: what it drives and whom it may wake.
struct NodeThread<'a> {
    index: usize,
    exec: &'a NodeExec,
    jobs: &'a queue::Receiver<Job>,
    /// The queue's handle, for the batches it parks with the reader.
    queue: queue::Handle<Job>,
    peers: &'a Peers,
}

impl NodeThread<'_> {
    /// Waits for work (or the state's poll timeout, `wake`), then runs
    /// everything queued as one batch under the gate.
    ///
    /// The next wake time is read before the gate is let go, and the
    /// thread takes the gate only when it has something to do: a caller
    /// that changes the wake time later, while driving the node, tells it
    /// the new time without a job ([`queue::Sender::wake_by`], see
    /// `../drive.rs`), and an idle node stays free for callers to drive.
    fn run(&self, mut wake: Option<Instant>) {
        let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
        loop {
            let queued = match self.jobs.wait_until(wake) {
                Ok(()) => true,
                Err(Empty::Timeout) => false,
                // Every sender is gone and the queue is drained: pending
                // retries are abandoned, their keys expire with the TTL;
                // a batch still parked is read (every batch is read once).
                Err(Empty::Closed) => {
                    let mut state = self.exec.gate.lock();
                    state.read_unread();
                    self.exec.finish(state, 0);
                    return;
                }
            };
            let mut state = self.exec.gate.lock();
            if queued {
                // Taken under the state: a caller that drove the node
                // meanwhile may have run them already (`leave_driven`).
                self.jobs.take_queued(MAX_BATCH, &mut batch);
            }
            if batch.iter().any(|job| matches!(job, Job::Nudge)) {
                // Before this node's round trip: the others' work waits
                // for nothing but their wake-up.
                self.nudge_peers();
            }
            if !batch.is_empty() {
                // The jobs were queued after the parked batch was sent:
                // it is read before any of them reaches the node.
                state.read_unread();
            }
            let short = state.timer_fired(Instant::now());
            self.wake_peers_if(short);
            if batch.is_empty() {
                wake = state.poll_timeout();
                self.exec.finish(state, 0);
                continue;
            }
            if batch
                .iter()
                .any(|job| matches!(job, Job::Barrier { listen: true, .. }))
            {
                // Before every op of the batch (earlier is harmless): the
                // ops queued after the change must find the subscription
                // in place.
                let short = state.listen(Instant::now());
                self.wake_peers_if(short);
            }
            let ran = batch.len() - run_jobs(&mut state, &mut batch, &self.queue);
            wake = state.poll_timeout();
            // Still under the gate: a caller that sees zero sees the
            // results.
            self.exec.finish(state, ran);
        }
    }

    /// See [`wake_polling_peers`].
    fn wake_peers_if(&self, short: bool) {
        wake_polling_peers(self.peers, self.index, short);
    }

    /// Wakes every other node's thread that sleeps with work queued.
    fn nudge_peers(&self) {
        for (i, (jobs, _)) in self.peers.lock().iter().enumerate() {
            if i != self.index {
                jobs.nudge();
            }
        }
    }
}

fn is_op(job: &Job) -> bool {
    matches!(job, Job::Work(Work::Op { .. }))
}

/// A driver's share of the queue (`driving`: a caller that drove the
/// node, or the reader after a batch parked with it): the plain
/// operations at its head, sent as one batch as the node's thread would
/// ([`send_ops`]), unless the node is down; and the wake-ups that rings
/// queued among them, whose notices it takes itself. How many ran and
/// may be uncounted (those parked with the reader stay counted); a job
/// of another kind and what follows it are left to the node's thread.
fn serve_queue(state: &mut State, driving: &queue::Driving<Job>) -> usize {
    if state.is_down() {
        return 0;
    }
    // The list is the state's, kept between batches (`room.rs`): the
    // reader serves a queue after every batch it reads, and a list made
    // for each was one more allocation per batch.
    let mut taken = state.room.served();
    let rung = driving.take_front(MAX_BATCH, is_op, is_ring, &mut taken);
    let ran = taken.len();
    let parked = if ran == 0 {
        0
    } else {
        send_ops(state, &mut taken, driving.queue())
    };
    // `send_ops` emptied it; one that grew for a long queue is not kept.
    state.room.keep_served(taken);
    if rung > 0 {
        // What those wake-ups asked of the node's thread: the notices
        // that rang while the state was held, taken here, as the ring
        // takes them when the state is free (`doorbell`). A polled peer
        // that a short count would have woken reads its own at its next
        // poll (`NOTICE_POLL`).
        let _ = state.take_rung_notices(Instant::now());
    }
    ran - parked + rung
}

/// A wake-up a ring queued (`doorbell`, `wake_polling_peers`): its only
/// work is to take the notices that have arrived.
fn is_ring(job: &Job) -> bool {
    matches!(job, Job::Wake { probe: false })
}

/// Runs the jobs in order, the ops between two other jobs as one backend
/// batch; answers the barriers once all have run. Returns how many ops
/// were left parked with the reader (still counted at the gate): a batch
/// of ops only is parked there when the reader takes it
/// ([`send_ops`]).
fn run_jobs(state: &mut State, batch: &mut Vec<Job>, queue: &queue::Handle<Job>) -> usize {
    if batch.iter().all(is_op) {
        return send_ops(state, batch, queue);
    }
    let mut items = Vec::new();
    let mut replies = Vec::new();
    let mut acks = Vec::new();
    for job in batch.drain(..) {
        match job {
            Job::Work(Work::Op { item, reply }) => {
                items.push(item);
                replies.push(reply);
            }
            Job::Work(Work::Inspect { key, reply, slot }) => {
                run_ops(state, &mut items, &mut replies);
                let holding = state.inspect(&key);
                let _ = reply.send(Inspected { slot, holding });
            }
            Job::Work(Work::Proclaim {
                record,
                reply,
                slot,
            }) => {
                run_ops(state, &mut items, &mut replies);
                let answer = state.proclaim(&record);
                let _ = reply.send(Proclaimed {
                    slot,
                    reply: answer,
                });
            }
            // Answered after the whole batch, which includes every job
            // queued before it; its listening was done before the batch.
            Job::Barrier { done, .. } => acks.push(done),
            Job::Wake { probe: true } => {
                run_ops(state, &mut items, &mut replies);
                state.probe_now(Instant::now());
            }
            // Its work is the timer's, done before the batch; a nudge's
            // was done when the batch was taken.
            Job::Wake { probe: false } | Job::Nudge => {}
        }
    }
    run_ops(state, &mut items, &mut replies);
    if !acks.is_empty() {
        // A refusal among the answers just read asked for a try of the
        // node's rights: made before the barrier is answered, so `flush`
        // returns with its verdict in `health()`.
        state.try_rights_if_due(Instant::now());
    }
    for ack in acks {
        // The caller may have stopped waiting: nothing to tell then.
        let _ = ack.send(());
    }
    0
}

/// Sends `batch`, ops only, as one backend batch and parks it with the
/// reader (`State::arm`, `State::park_watched`; the node's `queue`
/// counts it as a driver meanwhile): how many ops it holds, still
/// counted at the gate. Only a batch that a caller waits on: one of
/// detached releases alone is read at once where it was sent, as is one
/// the reader does not take; each op answered: 0. (The reader saves a
/// waiting caller's hop; with nobody waiting it only adds one more
/// thread to the batch's way, and one for every node: counted in
/// docs/benchmarks.md, 8 threads that drop their guards lost about a
/// tenth of their throughput when every batch went to it.)
fn send_ops(state: &mut State, batch: &mut Vec<Job>, queue: &queue::Handle<Job>) -> usize {
    // Lists with the room of the node's last batch (`room.rs`), given
    // back once this one is read.
    let mut items = state.room.items();
    let mut replies = state.room.replies();
    items.reserve(batch.len());
    replies.reserve(batch.len());
    for job in batch.drain(..) {
        if let Job::Work(Work::Op { item, reply }) = job {
            items.push(item);
            replies.push(reply);
        }
    }
    let counted = items.len();
    let sent = state.begin(items, Instant::now());
    let awaited = replies.iter().any(Option::is_some);
    if awaited && let Some(token) = state.arm(&sent) {
        state.park_watched(sent, replies, counted, token, queue);
        return counted;
    }
    read_now(state, sent, replies);
    0
}

/// Runs the ops collected so far as one round trip and answers each.
fn run_ops(state: &mut State, items: &mut Vec<Item>, replies: &mut Vec<Option<ReplyTo>>) {
    if items.is_empty() {
        return;
    }
    let sent = state.begin(std::mem::take(items), Instant::now());
    read_now(state, sent, replies.drain(..));
}

/// Reads `sent` (waiting for its answers within the backend's bound on
/// one call) and answers each op on its reply, in order.
fn read_now(state: &mut State, sent: Sent, replies: impl IntoIterator<Item = Option<ReplyTo>>) {
    let arrived = sent.read();
    let mut replies = replies.into_iter();
    state.answers_arrived(arrived, Instant::now(), |vote| {
        reply_to(replies.next().flatten().as_ref(), vote);
    });
}

pub(super) fn reply_to(reply: Option<&ReplyTo>, vote: Vote) {
    if let Some(reply) = reply {
        // The round may have been decided and its caller gone: a late
        // answer is simply not read.
        reply.ballot.post(reply.slot, vote);
    }
}

#[cfg(test)]
#[path = "doorbell_tests.rs"]
mod tests;
