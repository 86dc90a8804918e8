//! The quorum engine: one worker thread per node, scatter-gather rounds.
//!
//! A round sends one operation to every node's worker with a shared reply
//! channel and gathers the answers until the outcome is decided (a quorum
//! of grants, or too few nodes left to reach one) or the deadline passes.
//! Each worker runs its node's operations in FIFO order, so the release
//! that follows a failed round always runs after the acquire it undoes,
//! even when that acquire's answer came too late to count.

mod action;
mod ballots;
mod drive;
mod echoes;
mod forgets;
mod gate;
mod hold;
mod inspect;
mod node;
mod pending;
mod reader;
mod scatter;
mod waiters;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

pub(crate) use self::action::{Action, Direct, Gather, Request};
pub(crate) use self::forgets::{Epochs, Forgets};
pub(crate) use self::hold::{Hold, Pair};
#[cfg(not(test))]
use self::node::Registry;
pub(crate) use self::node::jobs::Record;
use self::node::jobs::{Job, NotQueued, ReplyTo, Work};
use self::node::worker::{self, NodeExec, Peers};
use self::node::{Item, Shared, Vitals};
use self::node::{io, queue};
pub(crate) use self::pending::majority;
pub(crate) use self::pending::{Gathered, Pending};
use self::waiters::Waiters;
pub(crate) use self::waiters::{HolderNews, Watch};
// The protocol check (src/redlock/checks/protocol.rs) runs the engine's own
// vote count and identity judgement.
#[cfg(test)]
pub(crate) use self::node::{Identity, Registry, Standing};
#[cfg(test)]
pub(crate) use self::pending::Tally;
use crate::backend::{Backend, KeySet};
use crate::clock::Clock;
use crate::error::Error;
use crate::health::NodeHealth;

/// The node workers. Dropping the engine closes their queues; each worker
/// finishes what is already queued (releases included) and exits, and the
/// drop waits for that, at most [`Engine::drain_wait`].
pub(crate) struct Engine {
    nodes: Vec<Node>,
    /// Disconnected once every worker thread has exited.
    exited: Receiver<()>,
    /// How long dropping the engine waits for the workers to send what is
    /// queued: a program that drops its last guard and returns from `main`
    /// must not leave the lock held for the whole TTL.
    drain_wait: Duration,
    /// Whether grants of servers that may evict lock keys count.
    accept_eviction: bool,
    /// What the node threads share (the waiters of the wake-ups among it).
    shared: Arc<Shared>,
    /// Every node thread's queue, for the threads to wake each other.
    peers: Peers,
    /// The nodes as the rounds' spans name them (nothing without the
    /// `tracing` feature).
    traced: crate::trace::Nodes,
}

struct Node {
    name: String,
    jobs: queue::Sender<Job>,
    health: Arc<Vitals>,
    exec: Arc<NodeExec>,
    /// The backend, for its recovery count only (read through
    /// `node/io.rs`; the node's state makes every other call to it).
    backend: Arc<dyn Backend>,
    /// The backend's recovery count last acted on.
    recoveries_seen: AtomicU64,
}

impl Node {
    /// Whether the node is marked down and stays skipped this round: a
    /// backend that reports a recovery since the last look gets a probe
    /// queued before this round's operation, which then goes to it.
    fn skipped_as_down(&self) -> bool {
        if !self.health.is_down() {
            return false;
        }
        let recoveries = io::recoveries(&*self.backend);
        let seen = self.recoveries_seen.swap(recoveries, Ordering::SeqCst);
        if recoveries == seen {
            return true;
        }
        self.enqueue(Job::Wake { probe: true }).is_err()
    }

    fn enqueue(&self, job: Job) -> Result<(), NotQueued> {
        self.exec.enqueue(&self.jobs, job)
    }

    /// Queues `req` for this node's thread without waking it (see
    /// [`NodeExec::enqueue_quietly`]): whether it owes the thread a
    /// [`nudge`](Self::nudge).
    fn send_quietly(&self, req: &Request<'_>, reply: Option<ReplyTo>) -> bool {
        let job = Job::Work(Work::Op {
            item: req.item(),
            reply,
        });
        self.exec.enqueue_quietly(&self.jobs, job) == Ok(true)
    }

    /// Wakes this node's thread if it sleeps with work queued.
    fn nudge(&self) {
        self.jobs.nudge();
    }

    /// Queues a [`Job::Nudge`] without waking the thread: whether the
    /// thread still sleeps, so that waking it will run the nudge.
    fn send_nudge_quietly(&self) -> bool {
        self.exec.enqueue_quietly(&self.jobs, Job::Nudge) == Ok(true)
    }

    /// Queues `req` for this node's thread.
    fn send(&self, req: &Request<'_>, reply: Option<ReplyTo>) -> Result<(), NotQueued> {
        self.enqueue(Job::Work(Work::Op {
            item: req.item(),
            reply,
        }))
    }

    /// A release for a node marked down is parked (no wake-up, no
    /// connection attempt) until it is back. Whether it was parked.
    fn park_release(&self, req: &Request<'_>) -> bool {
        let parked = self.health.is_down() && self.health.park(req.hold, req.token);
        if parked {
            log::debug!(
                "quorum-lock: node {} is down: release parked until it is back",
                self.name
            );
        }
        parked
    }
}

impl Request<'_> {
    /// One node's operation, owning its hold.
    fn item(&self) -> Item {
        Item {
            action: self.action,
            hold: self.hold.clone(),
            token: self.token,
        }
    }
}

/// What the engine needs besides its backends.
pub(crate) struct Settings {
    /// Votes a lock needs (release notices from this many nodes wake a
    /// waiter).
    pub(crate) quorum: usize,
    /// Restart quarantine (max TTL plus drift), `None` when off.
    pub(crate) quarantine: Option<Duration>,
    /// The longest a key can live: a release that could not be confirmed
    /// is retried that long.
    pub(crate) max_ttl: Duration,
    /// How long a node that may have forgotten keys while it kept
    /// answering (eviction, a new replication history) has its grants
    /// withheld: max TTL plus drift, whatever the restart quarantine.
    pub(crate) forget_window: Duration,
    /// How long dropping the engine waits for the queued releases.
    pub(crate) drain_wait: Duration,
    /// The manager's clock.
    pub(crate) clock: Arc<dyn Clock>,
    /// The key of every node's fence counters (in the crate's reserved
    /// namespace: `<prefix>{quorum-lock}:fences`).
    pub(crate) fence_counters: Vec<u8>,
    /// What the keys of a try of a node's rights start with (in the
    /// crate's reserved namespace: `<prefix>{quorum-lock}:probe`).
    pub(crate) rights_key: Vec<u8>,
    /// Count grants of servers that may evict lock keys.
    pub(crate) accept_eviction: bool,
    /// What follows the token in every stored value (the owner label).
    pub(crate) value_suffix: Box<[u8]>,
}

impl Engine {
    /// Starts one worker per backend.
    pub(crate) fn start(
        backends: Vec<Arc<dyn Backend>>,
        settings: Settings,
    ) -> Result<Self, Error> {
        let (exited_tx, exited) = crossbeam_channel::bounded(0);
        let Settings {
            quorum,
            quarantine,
            max_ttl,
            forget_window,
            drain_wait,
            clock,
            fence_counters,
            rights_key,
            accept_eviction,
            value_suffix,
        } = settings;
        let names: Vec<String> = backends
            .iter()
            .enumerate()
            .map(|(index, backend)| io::describe(&**backend, index))
            .collect();
        let waiters = Arc::new(Waiters::new(backends.len(), quorum));
        let watcher = reader::Watcher::new();
        let shared = Arc::new(Shared {
            forgets: Arc::new(Forgets::new(backends.len())),
            waiters,
            clock,
            quarantine,
            forget_window,
            release_retry_window: max_ttl,
            registry: Registry::default(),
            names: names.clone(),
            fence_counters: Arc::from(fence_counters),
            rights_key: Arc::from(rights_key),
            accept_eviction,
            value_suffix,
            watcher: watcher.clone(),
        });
        let peers = Peers::default();
        let mut nodes = Vec::with_capacity(backends.len());
        for ((index, backend), name) in backends.into_iter().enumerate().zip(names) {
            let recoveries_seen = AtomicU64::new(io::recoveries(&*backend));
            let handle = Arc::clone(&backend);
            let (jobs, queue) = queue::queue();
            let health = Arc::new(Vitals::default());
            let exec = worker::spawn(
                index,
                backend,
                queue,
                exited_tx.clone(),
                Arc::clone(&health),
                Arc::clone(&shared),
                Arc::clone(&peers),
            )
            .map_err(|e| Error::Runtime {
                reason: format!("cannot start the worker thread for node {name}: {e}"),
            })?;
            nodes.push(Node {
                name,
                jobs,
                health,
                exec,
                backend: handle,
                recoveries_seen,
            });
        }
        *peers.lock() = nodes
            .iter()
            .map(|n| (n.jobs.clone(), Arc::clone(&n.exec)))
            .collect();
        let traced = crate::trace::Nodes::new(&shared.names, quorum);
        if let Some(watcher) = &watcher {
            watcher.set_nodes(
                nodes
                    .iter()
                    .map(|n| (Arc::downgrade(&n.exec), n.jobs.handle()))
                    .collect(),
            );
        }
        Ok(Self {
            nodes,
            exited,
            drain_wait,
            accept_eviction,
            shared,
            peers,
            traced,
        })
    }

    /// Each node's snapshot, in configuration order: no call to any node,
    /// no wait on a busy worker. `clock_now` is the manager's clock.
    pub(crate) fn health(&self, clock_now: Instant) -> Vec<NodeHealth> {
        let now = Instant::now();
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        self.nodes
            .iter()
            .map(|n| {
                n.health
                    .snapshot(&n.name, &names, now, clock_now, self.accept_eviction)
            })
            .collect()
    }

    /// The nodes' forget epochs, and the hook that hears each forget.
    pub(crate) fn forgets(&self) -> &Arc<Forgets> {
        &self.shared.forgets
    }

    /// The nodes' names, in configuration order.
    pub(crate) fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.name.as_str())
    }

    /// Waits until every node has run everything queued before this call,
    /// for at most `wait`. Returns whether all nodes got there.
    pub(crate) fn flush(&self, wait: Duration) -> bool {
        self.barrier(None, wait)
    }

    /// Registers a waiter for the release of `keys` (of any member, for a
    /// set) and waits (at most `wait`) until every node listens for it: a
    /// release that a node
    /// applies after that wakes the waiter (a hint, see
    /// [`ReleaseListener`](crate::backend::ReleaseListener)). Every operation
    /// queued after this call runs after the node subscribed (per-node
    /// FIFO), also if the wait ends first. Dropping the [`Watch`]
    /// unregisters it; a node stops listening once nobody waits.
    pub(crate) fn watch(&self, keys: &KeySet, wait: Duration) -> Watch {
        let watch = self.shared.waiters.register(keys);
        self.barrier(Some(keys), wait);
        watch
    }

    /// Whether the last release of `hold` here, a moment ago, was heard
    /// by another process waiting for it (forgotten once asked).
    pub(crate) fn others_waited(&self, hold: &Hold) -> bool {
        self.shared.waiters.take_heard(hold)
    }

    /// The smoothed round trip of the slowest node that is not down (zero
    /// before any round trip).
    pub(crate) fn slowest_round_trip(&self) -> Duration {
        let slowest = self
            .nodes
            .iter()
            .filter(|node| !node.health.is_down())
            .map(|node| node.health.latency())
            .max()
            .unwrap_or(0);
        Duration::from_nanos(slowest)
    }

    /// Queues a barrier (that first subscribes for the watched keys, with
    /// `listen`, the keys just watched) to every node and waits (at most
    /// `wait`) for each to answer it. Whether all nodes did.
    ///
    /// A node that is idle (every job queued before this call has run)
    /// and already listens for `listen` is there already, and is not
    /// asked: with 4 processes taking turns on one key, a waiter most
    /// often watches a key its node still listens for (docs/benchmarks.md,
    /// "Processes contending for one key"), and the barrier cost a node
    /// thread's wake-up, and the caller's, per node.
    fn barrier(&self, listen: Option<&KeySet>, wait: Duration) -> bool {
        let deadline = Instant::now().checked_add(wait);
        // Not a `crossbeam_channel`: its receive yields the CPU before it
        // sleeps (`mailbox.rs`).
        let (ack, acks) = crate::mailbox::channel();
        let mut there = 0;
        let mut expected = 0;
        for node in &self.nodes {
            if let Some(keys) = listen
                && node
                    .exec
                    .gate
                    .try_idle()
                    .is_some_and(|state| state.listens_for(keys))
            {
                there += 1;
                continue;
            }
            let done = ack.clone();
            let job = Job::Barrier {
                listen: listen.is_some(),
                done,
            };
            if node.enqueue(job).is_ok() {
                expected += 1;
            }
        }
        drop(ack);
        for _ in 0..expected {
            if acks.recv_until(deadline).is_err() {
                return false;
            }
        }
        there + expected == self.nodes.len()
    }
}

impl Drop for Engine {
    /// Closes every node's queue and waits (at most `drain_wait`) for the
    /// workers to run what is queued: the releases of dropped guards and
    /// of failed attempts leave before the last handle is gone, so a
    /// program may return from `main` right after. A worker still busy
    /// then (a node that stopped answering) is left to finish on its own.
    fn drop(&mut self) {
        let deadline = Instant::now().checked_add(self.drain_wait);
        // The reader first: it reads what is parked with it, and nothing
        // is parked with it after that.
        if let Some(watcher) = &self.shared.watcher {
            watcher.stop();
        }
        // Then: these keep every queue open.
        self.peers.lock().clear();
        self.nodes.clear();
        while let Some(deadline) = deadline {
            match self.exited.recv_deadline(deadline) {
                Ok(()) => {}
                // Disconnected: every worker has exited; Timeout: give up.
                Err(_) => break,
            }
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.node_names()).finish()
    }
}

#[cfg(test)]
mod tests;
