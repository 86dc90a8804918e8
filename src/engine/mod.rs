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
mod health;
mod hold;
mod identity;
mod inspect;
mod liveness;
mod node;
mod pending;
mod refusal;
mod retries;
mod rights;
mod settings_look;
mod waiters;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};

pub(crate) use self::action::{Action, Direct, Gather, Request};
pub(crate) use self::forgets::Forgets;
use self::health::Vitals;
pub(crate) use self::hold::{Hold, Pair};
#[cfg(not(test))]
use self::identity::Registry;
pub(crate) use self::pending::Pending;
pub(crate) use self::pending::majority;
use self::waiters::Waiters;
pub(crate) use self::waiters::{HolderNews, Watch};
// The protocol check (src/redlock/checks/protocol.rs) runs the engine's own
// vote count and identity judgement.
use self::drive::Driven;
#[cfg(test)]
pub(crate) use self::identity::{Identity, Registry, Standing};
use self::node::{Item, Shared, Vote};
#[cfg(test)]
pub(crate) use self::pending::Tally;
use self::worker::{Job, MAX_QUEUED, NodeExec, NotQueued, Peers, ReplyTo, Work};
use crate::backend::{Backend, BackendError, BackendErrorKind, KeySet, Probe};
use crate::clock::Clock;
use crate::error::Error;
use crate::health::NodeHealth;
use crate::report::NodeOutcome;
use crate::token::Token;

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
}

struct Node {
    name: String,
    jobs: Sender<Job>,
    health: Arc<Vitals>,
    exec: Arc<NodeExec>,
    /// The backend, for its recovery count and an election's proclaim
    /// (the node's thread owns every other call to it).
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
        let recoveries = recoveries(&*self.backend);
        let seen = self.recoveries_seen.swap(recoveries, Ordering::SeqCst);
        if recoveries == seen {
            return true;
        }
        self.enqueue(Job::Wake { probe: true }).is_err()
    }

    fn enqueue(&self, job: Job) -> Result<(), NotQueued> {
        self.exec.enqueue(&self.jobs, job)
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

/// How many recoveries `backend` knows of ([`Probe::recoveries`]); 0
/// for a backend without a probe.
fn recoveries(backend: &dyn Backend) -> u64 {
    backend.probe().map_or(0, Probe::recoveries)
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
        let waiters = Arc::new(Waiters::new(backends.len(), quorum));
        let shared = Arc::new(Shared {
            forgets: Arc::new(Forgets::new(backends.len())),
            waiters,
            clock,
            quarantine,
            forget_window,
            release_retry_window: max_ttl,
            registry: Registry::default(),
            names: backends.iter().map(|b| b.describe()).collect(),
            fence_counters: Arc::from(fence_counters),
            rights_key: Arc::from(rights_key),
            accept_eviction,
            value_suffix,
        });
        let peers = Peers::default();
        let mut nodes = Vec::with_capacity(backends.len());
        for (index, backend) in backends.into_iter().enumerate() {
            let name = backend.describe();
            let recoveries_seen = AtomicU64::new(recoveries(&*backend));
            let handle = Arc::clone(&backend);
            let (jobs, queue) = unbounded();
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
        Ok(Self {
            nodes,
            exited,
            drain_wait,
            accept_eviction,
            shared,
            peers,
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

    /// The nodes' backends, in configuration order: an election's
    /// proclaim calls them from the caller's threads (`election/proclaim.rs`).
    pub(crate) fn backends(&self) -> impl Iterator<Item = &Arc<dyn Backend>> {
        self.nodes.iter().map(|n| &n.backend)
    }

    /// The nodes' names, in configuration order.
    pub(crate) fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.name.as_str())
    }

    /// Scatters `req` to every node and gathers per `gather` for at most
    /// `wait` (real time). Returns one outcome per node, in node order.
    pub(crate) fn round(
        &self,
        req: &Request<'_>,
        gather: Gather,
        wait: Duration,
        direct: Direct,
    ) -> Vec<NodeOutcome> {
        self.scatter(req, wait, direct, gather).gather(gather)
    }

    /// Sends `req` to every node; the answers are collected by
    /// [`Pending::gather`] until `wait` from now (real time), so many rounds
    /// scattered together share one wait.
    ///
    /// With [`Direct::Never`] it only queues, never blocks, and may be called
    /// under a short lock (the watchdog does, to order an extend against a
    /// concurrent release). With [`Direct::IdleNodes`] the caller drives
    /// the round itself on every idle node whose backend bounds its calls
    /// within `wait` (see `drive.rs`): it sends there first, queues to the
    /// other nodes, then reads the answers it drives until the round is
    /// decided per `gather`, and hands what it has not read to the node
    /// threads. It never waits longer than the round would.
    pub(crate) fn scatter(
        &self,
        req: &Request<'_>,
        wait: Duration,
        direct: Direct,
        gather: Gather,
    ) -> Pending {
        let n = self.nodes.len();
        let deadline = Instant::now().checked_add(wait);
        let (reply, answers) = ballots::new_round();
        let mut outcomes: Vec<Option<Vote>> = vec![None; n];
        // Per node: whether the operation went there (queued, or sent by
        // this caller, whatever its outcome: a timed-out run may have been
        // applied). Only a node skipped as down or refusing the job never
        // got it.
        let mut queued = vec![true; n];
        let item = req.item();
        // The caller drives the round only when every node is idle (and
        // bounds its calls): then no thread hand-off is left. With a node
        // busy, the others' threads batch the contending callers' work
        // better than callers holding several nodes each would.
        let idle: Vec<_> = match direct {
            Direct::IdleNodes => self
                .nodes
                .iter()
                .map_while(|node| {
                    node.exec
                        .can_run_within(wait)
                        .then(|| node.exec.idle())
                        .flatten()
                })
                .collect(),
            Direct::Never => Vec::new(),
        };
        let mut driven = Vec::new();
        if idle.len() == n {
            for (slot, worker) in idle.into_iter().enumerate() {
                driven.push(Driven::begin(slot, worker, &item));
            }
        } else {
            // Let go of the idle nodes at once: their threads run what
            // this round queues for them.
            drop(idle);
        }
        let queue_all = driven.is_empty();
        for (slot, node) in self.nodes.iter().enumerate().filter(|_| queue_all) {
            let down = node.skipped_as_down();
            // A down node is skipped at no cost, but still gets the release
            // (an earlier acquire may have landed), parked until it is
            // back; nobody waits for its answer.
            if down && (req.action != Action::Release || node.park_release(req)) {
                outcomes[slot] = Some((NodeOutcome::Down, None));
                queued[slot] = false;
                continue;
            }
            outcomes[slot] = match node.send(req, (!down).then(|| (reply.clone(), slot))) {
                Err(refused) => {
                    queued[slot] = false;
                    Some((not_queued(refused), None))
                }
                Ok(()) if down => Some((NodeOutcome::Down, None)),
                Ok(()) => None,
            };
        }
        let mut round = Pending {
            outcomes,
            answers,
            deadline,
            queued,
        };
        if !driven.is_empty() {
            self.drive(driven, gather, &reply, &mut round);
        }
        round
    }

    /// Queues a release of `hold` on every node (down or not) and returns
    /// at once. Each release runs after whatever was queued before it.
    pub(crate) fn release_detached(&self, hold: &Hold, token: Token) {
        self.release_detached_where(hold, token, &vec![true; self.nodes.len()]);
    }

    /// [`release_detached`](Self::release_detached) on the nodes where
    /// `reached` is true: those that an attempt's acquire may have reached
    /// ([`Pending::reached`]). A node that never got the acquire needs no
    /// release.
    pub(crate) fn release_detached_where(&self, hold: &Hold, token: Token, reached: &[bool]) {
        let req = Request {
            action: Action::Release,
            hold,
            token,
        };
        for (node, _) in self.nodes.iter().zip(reached).filter(|(_, r)| **r) {
            // A release is never refused for a full queue (the bound is
            // for what can take or prolong a key), so it always follows
            // the acquire it undoes; a failed send means the worker is
            // gone, and nothing is left to release through it.
            let _ = node.park_release(&req) || node.send(&req, None).is_ok();
        }
    }

    /// The undo of a failed attempt: [`release_detached_where`](Self::release_detached_where),
    /// registered first as this manager's own (see `echoes.rs`), so that
    /// its release notice wakes none of this manager's waiters.
    pub(crate) fn undo_where(&self, hold: &Hold, token: Token, reached: &[bool]) {
        let echoes = self.shared.waiters.echoes();
        let now = Instant::now();
        for (index, _) in reached.iter().enumerate().filter(|(_, r)| **r) {
            echoes.expect(index, hold, token, now);
        }
        self.release_detached_where(hold, token, reached);
    }

    /// Waits until every node has run everything queued before this call,
    /// for at most `wait`. Returns whether all nodes got there.
    pub(crate) fn flush(&self, wait: Duration) -> bool {
        self.barrier(false, wait)
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
        self.barrier(true, wait);
        watch
    }

    /// Whether the last release of `hold` here, a moment ago, was heard
    /// by another process waiting for it (forgotten once asked).
    pub(crate) fn others_waited(&self, hold: &Hold) -> bool {
        self.shared.waiters.take_heard(hold)
    }

    /// Queues a barrier (that first subscribes, with `listen`) to every
    /// node and waits (at most `wait`) for each to answer it. Whether all
    /// nodes did.
    fn barrier(&self, listen: bool, wait: Duration) -> bool {
        let deadline = Instant::now().checked_add(wait);
        let (ack, acks) = crossbeam_channel::bounded(self.nodes.len());
        let mut expected = 0;
        for node in &self.nodes {
            let done = ack.clone();
            if node.enqueue(Job::Barrier { listen, done }).is_ok() {
                expected += 1;
            }
        }
        drop(ack);
        for _ in 0..expected {
            let got = match deadline {
                Some(deadline) => acks.recv_deadline(deadline).is_ok(),
                None => acks.recv().is_ok(),
            };
            if !got {
                return false;
            }
        }
        expected == self.nodes.len()
    }
}

fn not_queued(refused: NotQueued) -> NodeOutcome {
    NodeOutcome::Failed(match refused {
        NotQueued::Gone => BackendError::new(
            BackendErrorKind::Panicked,
            "the node's worker thread has stopped",
        ),
        NotQueued::Full => BackendError::new(
            BackendErrorKind::Other,
            format!(
                "{MAX_QUEUED} operations are already waiting for this node: it is too slow for the load"
            ),
        ),
    })
}

impl Drop for Engine {
    /// Closes every node's queue and waits (at most `drain_wait`) for the
    /// workers to run what is queued: the releases of dropped guards and
    /// of failed attempts leave before the last handle is gone, so a
    /// program may return from `main` right after. A worker still busy
    /// then (a node that stopped answering) is left to finish on its own.
    fn drop(&mut self) {
        let deadline = Instant::now().checked_add(self.drain_wait);
        // First: these keep every queue open.
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
