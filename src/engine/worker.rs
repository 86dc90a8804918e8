//! One long-lived worker thread per node: drains its queue into batches,
//! runs them on the backend in FIFO order, and tracks the node's health,
//! identity and unfinished releases.
//!
//! The node's state sits behind its gate (src/engine/gate.rs). The node's
//! thread takes it to run a batch; a caller may take it to run its own
//! operation directly when the node is idle (nothing queued, nothing
//! running), which saves two thread hand-offs and keeps the FIFO order: an
//! operation only runs directly when every operation queued before it has
//! finished (the gate's rule, checked by loom).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

use super::action::Action;
use super::announce::Announced;
use super::execute::{Begun, Item};
use super::forgets::Forgets;
use super::gate::Gate;
use super::health::Vitals;
use super::identity::{Identity, Registry};
use super::liveness::Liveness;
use super::notices::NodeNotices;
use super::retries::RetryList;
use super::settings_look::SettingsLook;
use super::waiters::Waiters;
use crate::backend::{Backend, BackendError, BackendErrorKind, Holding, KeySet};
use crate::clock::Clock;
use crate::report::NodeOutcome;
use crate::token::Token;

/// Most operations handed to the backend in one batch (one round trip).
const MAX_BATCH: usize = 512;

/// Most operations queued for one node and not yet run.
pub(crate) const MAX_QUEUED: usize = 100_000;

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The node's thread has stopped.
    Gone,
    /// [`MAX_QUEUED`] operations are already waiting.
    Full,
}

/// Where a worker sends the answer for one operation: the round's reply
/// channel and this node's slot in it.
pub(crate) type ReplyTo = (Sender<(usize, Vote)>, usize);

/// One node's answer in a round: its outcome, and for a fenced acquire
/// that it granted, the fence counter it read.
pub(crate) type Vote = (NodeOutcome, Option<u64>);

/// One unit of work for a node's worker.
pub(crate) enum Job {
    /// A lock operation. `reply` is `None` for fire-and-forget releases.
    Op {
        action: Action,
        keys: KeySet,
        token: Token,
        reply: Option<ReplyTo>,
    },
    /// Answered once every job queued before it has run.
    Barrier(Sender<()>),
    /// Does nothing but wake the thread, so it sees a probe or retry time
    /// that a caller's direct run has set.
    Wake,
    /// The watched keys changed: subscribe for them before running any
    /// job queued after this one, then answer (like a barrier).
    Listen(Sender<()>),
    /// Probe the node now if it is marked down (its backend reported a
    /// recovery): the operations queued after it then go to the node.
    ProbeNow,
    /// A batch a caller sent to the node and no longer waits for (its
    /// round was decided): read its answer and pass it on, before any job
    /// queued after it (per-node FIFO).
    Finish(Box<Handed>),
    /// Read what a key holds ([`Inspect::inspect`](crate::backend::Inspect::inspect)), after every job queued
    /// before this one, and answer on the channel with this node's slot.
    Inspect {
        key: Arc<[u8]>,
        reply: (Sender<Inspected>, usize),
    },
}

/// One node's answer to an inspection, with its slot.
pub(crate) type Inspected = (usize, Result<Option<Holding>, BackendError>);

/// A batch a caller sent and handed to the node's thread ([`Job::Finish`]).
pub(crate) struct Handed {
    pub(super) begun: Begun,
    pub(super) action: Action,
    pub(super) keys: KeySet,
    pub(super) token: Token,
    pub(super) reply: Option<ReplyTo>,
}

/// One node's executor: its state behind the gate that orders direct runs
/// after the jobs queued before them.
pub(crate) struct NodeExec {
    pub(super) gate: Gate<Worker>,
    /// The backend's bound on one call, if it has one.
    call_timeout: Option<Duration>,
}

impl NodeExec {
    /// Queues `job` for the node's thread. Returns `false` when the thread
    /// is gone.
    pub(crate) fn enqueue(&self, jobs: &Sender<Job>, job: Job) -> Result<(), Refused> {
        // Bounded: a node too slow for the load refuses new operations
        // that could take or prolong a key (their keys, if any, expire with
        // their TTL) instead of growing the queue without limit. Releases
        // are never refused: each undoes an acquire that was queued (the
        // rounds release only where the acquire went), so they are bounded
        // by the operations the queue accepted, and dropping one would
        // leave the key of an acquire that may still run.
        let bounded = matches!(job, Job::Op { action, .. } if action != Action::Release)
            || matches!(job, Job::Inspect { .. });
        if bounded && self.gate.queued() >= MAX_QUEUED {
            return Err(Refused::Full);
        }
        self.gate
            .admit(|| jobs.send(job))
            .map_err(|_| Refused::Gone)
    }

    /// Whether a caller that waits at most `wait` may run this node's
    /// operation itself: only when the backend bounds its calls within it.
    pub(crate) fn can_run_within(&self, wait: Duration) -> bool {
        self.call_timeout.is_some_and(|bound| bound <= wait)
    }
}

/// Spawns the worker thread for `backend`; it runs until every sender of
/// `jobs` is gone and the queue is empty, then drops `exited`.
pub(crate) fn spawn(
    index: usize,
    backend: Arc<dyn Backend>,
    jobs: Receiver<Job>,
    exited: Sender<()>,
    health: Arc<Vitals>,
    shared: Arc<Shared>,
) -> std::io::Result<Arc<NodeExec>> {
    let name = format!("quorum-lock-node{index}");
    let identity = Identity::new(index, shared.quarantine, shared.accept_eviction)
        .forgetting_for(shared.forget_window);
    if let Some(node) = shared.names.get(index) {
        crate::metrics::node_up(node, true);
    }
    let call_timeout = backend.call_timeout();
    let shared_window = shared.release_retry_window;
    let exec = Arc::new(NodeExec {
        call_timeout,
        gate: Gate::new(Worker {
            index,
            backend,
            health,
            retries: RetryList::new(shared.release_retry_window, Instant::now()),
            shared,
            identity,
            liveness: Liveness::default(),
            announced: Announced::default(),
            notices: NodeNotices::default(),
            settings_look: SettingsLook::new(shared_window),
        }),
    });
    let thread_exec = Arc::clone(&exec);
    // Read here, not by the new thread: a fresh node has nothing to wake
    // for (no retries, no subscriptions), so its thread waits for its
    // first job without taking the gate, and the first rounds find every
    // node idle whenever the thread happens to start.
    let first_wake = exec.gate.lock().next_wake();
    thread::Builder::new().name(name).spawn(move || {
        run(&thread_exec, &jobs, first_wake);
        // Dropped when the thread ends: the engine's drop waits for it.
        drop(exited);
    })?;
    Ok(exec)
}

/// The node's thread: waits for work (or a probe / retry time, `wake`),
/// then runs everything queued as one batch under the executor lock.
///
/// The next wake time is read before the lock is let go, and the thread
/// takes the lock only when it has something to do: a caller that changes
/// the wake time later, while driving the node, queues a [`Job::Wake`]
/// (see `drive.rs`), and an idle node stays free for callers to drive.
fn run(exec: &NodeExec, jobs: &Receiver<Job>, mut wake: Option<Instant>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    loop {
        let received = match wake {
            Some(at) => jobs.recv_deadline(at),
            None => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let first = match received {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Timeout) => None,
            // Every sender is gone and the queue is drained: pending
            // retries are abandoned, their keys expire with the TTL.
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut worker = exec.gate.lock();
        worker.housekeeping();
        let Some(first) = first else {
            wake = worker.next_wake();
            continue;
        };
        batch.push(first);
        batch.extend(jobs.try_iter().take(MAX_BATCH - 1));
        if batch.iter().any(|job| matches!(job, Job::Listen(_))) {
            // Before every op of the batch (earlier is harmless): the ops
            // queued after the change must find the subscription in place.
            worker.tend_notices();
        }
        let ran = batch.len();
        worker.run_batch(&mut batch);
        wake = worker.next_wake();
        // Still under the lock: a caller that sees zero sees the results.
        exec.gate.finish(worker, ran);
    }
}

/// What every worker of one engine shares.
pub(crate) struct Shared {
    /// The manager's clock, for quarantine times.
    pub(crate) clock: Arc<dyn Clock>,
    /// Restart quarantine (max TTL plus drift), or `None` when off.
    pub(crate) quarantine: Option<Duration>,
    /// How long a node that may have forgotten keys while it kept
    /// answering has its grants withheld (max TTL plus drift).
    pub(crate) forget_window: Duration,
    /// Run ids seen, for duplicate detection.
    pub(crate) registry: Registry,
    /// Node names, for reports.
    pub(crate) names: Vec<String>,
    /// How long a release that could not reach its node is retried: the
    /// longest a key can live (max TTL), after which it is gone anyway.
    pub(crate) release_retry_window: Duration,
    /// The key of the fence counters' hash on every node.
    pub(crate) fence_counters: Vec<u8>,
    /// What follows the token in every value stored: the owner label
    /// (src/owner.rs), or nothing.
    pub(crate) value_suffix: Box<[u8]>,
    /// Count grants of servers that may evict lock keys.
    pub(crate) accept_eviction: bool,
    /// Who waits for which lock's release (wake-ups).
    pub(crate) waiters: Arc<Waiters>,
    /// When each node was seen to have possibly forgotten keys.
    pub(crate) forgets: Arc<Forgets>,
    /// Every node thread's queue, so that one that got a release notice
    /// can ask the others to read theirs now rather than at their next
    /// poll. Emptied when the engine drops: otherwise the queues, which
    /// these senders keep open, would never close.
    pub(crate) peers: Mutex<Vec<(Sender<Job>, Arc<NodeExec>)>>,
}

pub(super) struct Worker {
    /// The node's place in the configuration (its name is
    /// `shared.names[index]`).
    pub(super) index: usize,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) health: Arc<Vitals>,
    pub(super) shared: Arc<Shared>,
    pub(super) identity: Identity,
    /// Releases to send again.
    pub(super) retries: RetryList,
    /// Up, or down and when to probe it.
    pub(super) liveness: Liveness,
    /// What was last published and logged of the identity's verdicts.
    pub(super) announced: Announced,
    /// The node's subscription to release notices.
    pub(super) notices: NodeNotices,
    /// When to read the server's settings while locks may be held on it
    /// and no batch brings them.
    pub(super) settings_look: SettingsLook,
}

impl Worker {
    /// When the thread must wake up without work: for a probe while down,
    /// or for pending release retries while up.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        // While down only the probe is due; the releases wait for it.
        let work = match self.liveness.probe_at() {
            Some(at) => Some(at),
            None => self.retries.next_wake(),
        };
        [
            work,
            self.notices.next_wake(),
            self.settings_look.next_wake(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Probes a down node and retries releases, when due; looks after the
    /// release notices.
    fn housekeeping(&mut self) {
        if self.liveness.probe_due(Instant::now()) {
            self.probe();
        }
        if !self.liveness.is_down() && self.retries.due(Instant::now()) {
            self.retry_releases();
        }
        if !self.liveness.is_down() && self.settings_look.due(Instant::now()) {
            self.look_at_settings();
        }
        self.tend_notices();
    }

    /// Runs the jobs in order; a barrier waits for the ops before it.
    fn run_batch(&mut self, batch: &mut Vec<Job>) {
        let mut start = 0;
        for i in 0..batch.len() {
            if let Job::Barrier(_)
            | Job::Listen(_)
            | Job::ProbeNow
            | Job::Finish { .. }
            | Job::Inspect { .. } = batch[i]
            {
                self.run_ops(&batch[start..i]);
                start = i + 1;
                if matches!(batch[i], Job::ProbeNow) && self.liveness.is_down() {
                    self.probe();
                }
                if let Job::Inspect { key, reply } = &batch[i] {
                    let _ = reply.0.send((reply.1, self.inspect(key)));
                }
                if let Job::Finish(_) = batch[i]
                    && let Job::Finish(handed) = std::mem::replace(&mut batch[i], Job::Wake)
                {
                    self.finish_handed(*handed);
                }
            }
        }
        self.run_ops(&batch[start..]);
        for job in batch.drain(..) {
            if let Job::Barrier(ack) | Job::Listen(ack) = job {
                let _ = ack.send(());
            }
        }
    }

    /// What `key` holds on this node (a node marked down is not asked; a
    /// panic in the backend is contained).
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        if self.liveness.is_down() {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is marked down (being probed in the background)",
            ));
        }
        let backend = &self.backend;
        catch_unwind(AssertUnwindSafe(|| match backend.inspector() {
            Some(inspector) => inspector.inspect(key),
            None => Err(BackendError::new(
                BackendErrorKind::Config,
                format!(
                    "{}: this backend does not support inspection (Backend::inspector)",
                    backend.describe()
                ),
            )),
        }))
        .unwrap_or_else(|_| {
            Err(BackendError::new(
                BackendErrorKind::Panicked,
                "the backend panicked",
            ))
        })
    }

    /// Reads the answer of a batch a caller handed over, and passes it on.
    fn finish_handed(&mut self, handed: Handed) {
        let Handed {
            begun,
            action,
            keys,
            token,
            reply,
        } = handed;
        let item = Item {
            action,
            keys: &keys,
            token,
        };
        for vote in self.complete(begun, std::slice::from_ref(&item)) {
            reply_to(reply.as_ref(), vote);
        }
    }

    fn run_ops(&mut self, jobs: &[Job]) {
        let mut items = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        for job in jobs {
            if let Job::Op {
                action,
                keys,
                token,
                reply,
            } = job
            {
                items.push(Item {
                    action: *action,
                    keys,
                    token: *token,
                });
                replies.push(reply);
            }
        }
        for (outcome, reply) in self.execute(&items).into_iter().zip(replies) {
            reply_to(reply.as_ref(), outcome);
        }
    }
}

pub(super) fn reply_to(reply: Option<&ReplyTo>, vote: Vote) {
    if let Some((tx, slot)) = reply {
        // The round may have been decided and its receiver dropped: a late
        // answer is simply not needed any more.
        let _ = tx.send((*slot, vote));
    }
}
