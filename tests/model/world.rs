//! The modelled world: five (or three) in-memory nodes on one manual
//! clock, three clients' managers and an inspector's, and what each client
//! holds (locks, permits, sets), with the log of the steps so far. Here:
//! building it (uptime reports, evicting nodes, the run's mode), a node's
//! memory policy switched at run time, and the managers. The steps that
//! change it are in `steps.rs`, the checks that read it in `oracles.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorum_lock::backend::UptimeReport;
use quorum_lock::{LockGuard, LockManager, ManualClock, MemoryBackend, RetryPolicy};

use crate::config::{CLIENTS, EVICTING, PERMITS, RESOURCES, Shape};
use crate::draws::Draws;
use crate::walk::Mode;

pub(crate) struct World {
    pub(crate) shape: Shape,
    /// Every lock asks for a fencing token.
    pub(crate) fencing: bool,
    /// Locks and waiters ask for fencing at random (plain and fenced
    /// locks of one resource in one manager's local line).
    pub(crate) mixed: bool,
    /// The managers count grants of nodes that may evict (the protection
    /// removed, for the canary).
    pub(crate) accept_eviction: bool,
    /// Which nodes report an evicting memory policy (and evict).
    pub(crate) evicting: Vec<bool>,
    /// Hand-overs done, summed over the managers replaced so far.
    pub(crate) hand_overs: u64,
    /// The managers replaced so far (step 11): their guards may still be
    /// held, and a manager that holds a lock reads a node's settings within
    /// the documented bound too, so a policy switch probes them as well.
    pub(crate) retired: Vec<LockManager>,
    /// Of those, the ones `release()` did (its report said so).
    pub(crate) released_hand_overs: u64,
    /// The highest fence handed out so far, per resource, and the tokens
    /// of the guards already checked.
    pub(crate) fences: Vec<u64>,
    pub(crate) checked: std::collections::HashSet<Vec<u8>>,
    pub(crate) clock: ManualClock,
    pub(crate) nodes: Vec<MemoryBackend>,
    pub(crate) quarantine: bool,
    pub(crate) clients: Vec<LockManager>,
    /// A manager of its own for the inspection oracle: its jobs keep
    /// only its own node threads busy, so the clients' rounds run as they
    /// would without it (the walks stay reproducible).
    pub(crate) inspector: Option<LockManager>,
    /// held[client][resource]
    pub(crate) held: Vec<Vec<Option<LockGuard>>>,
    /// The semaphore's permits each client holds.
    pub(crate) permits: Vec<Vec<LockGuard>>,
    /// A set of every resource (`lock_all`) each client holds.
    pub(crate) sets: Vec<Option<LockGuard>>,
    /// Sets taken so far.
    pub(crate) sets_taken: u64,
    /// The permits each client asks for (`PERMITS` unless a canary says
    /// otherwise).
    pub(crate) asks_permits: Vec<u32>,
    /// Permits taken, and scans that found every slot held.
    pub(crate) permits_taken: u64,
    pub(crate) semaphore_full: u64,
    /// Inspections that saw a verified holder's lock held (the oracle
    /// checked its owner and time left).
    pub(crate) inspected_held: std::cell::Cell<u64>,
    /// When each node last restarted (on the clock), and its wall-clock
    /// steps since.
    pub(crate) restarted_at: Vec<Option<Instant>>,
    pub(crate) wall_steps: Vec<Duration>,
    pub(crate) log: Vec<String>,
    /// The read-write clients (mode `r`, see `rw.rs`).
    pub(crate) rw: Option<crate::rw::Rw>,
}

impl World {
    pub(crate) fn new(shape: Shape, quarantine: bool, rng: &mut Draws) -> Self {
        let clock = ManualClock::new();
        let nodes: Vec<MemoryBackend> = (0..shape.nodes)
            .map(|i| MemoryBackend::with_clock(format!("mem-{i}"), Arc::new(clock.clone())))
            .collect();
        // Most nodes report their uptime as Redis does, from a random
        // phase of their wall clock's second.
        for node in &nodes {
            if rng.below(4) != 0 {
                let phase = Duration::from_millis(rng.below(1000) as u64);
                node.set_uptime_report(UptimeReport::WholeSeconds { phase });
            }
        }
        // Up to one node fewer than would leave no quorum may evict (with
        // the protection on they never vote, and the cluster must stay
        // live): one in three worlds has none.
        let mut evicting = vec![false; shape.nodes];
        let spare = shape.nodes - (shape.nodes / 2 + 1);
        for slot in evicting.iter_mut().take(rng.below(spare + 2).min(spare)) {
            *slot = true;
        }
        for (node, _) in nodes.iter().zip(&evicting).filter(|(_, e)| **e) {
            node.set_maxmemory(4 << 20, EVICTING[rng.below(EVICTING.len())]);
        }
        let mut world = Self {
            shape,
            fencing: false,
            mixed: false,
            accept_eviction: false,
            evicting,
            hand_overs: 0,
            retired: Vec::new(),
            released_hand_overs: 0,
            fences: vec![0; RESOURCES.len()],
            checked: std::collections::HashSet::new(),
            clock,
            nodes,
            quarantine,
            clients: Vec::new(),
            inspector: None,
            held: (0..CLIENTS)
                .map(|_| (0..RESOURCES.len()).map(|_| None).collect())
                .collect(),
            permits: (0..CLIENTS).map(|_| Vec::new()).collect(),
            sets: (0..CLIENTS).map(|_| None).collect(),
            sets_taken: 0,
            asks_permits: vec![PERMITS; CLIENTS],
            permits_taken: 0,
            semaphore_full: 0,
            inspected_held: std::cell::Cell::new(0),
            restarted_at: vec![None; shape.nodes],
            wall_steps: vec![Duration::ZERO; shape.nodes],
            log: Vec::new(),
            rw: None,
        };
        world.clients = (0..CLIENTS).map(|c| world.manager(c)).collect();
        world.inspector = Some(world.manager(CLIENTS));
        world
    }

    /// The world set up for `mode`, with managers built for it.
    pub(crate) fn with_mode(mut self, mode: Mode) -> Self {
        self.fencing = mode.fencing;
        self.mixed = mode.mixed;
        self.accept_eviction = mode.accept_eviction;
        if mode.accept_eviction {
            self.evicting.fill(false);
            let majority = self.shape.nodes / 2 + 1;
            for (node, evicting) in self.nodes.iter().zip(&mut self.evicting).take(majority) {
                node.set_maxmemory(4 << 20, "volatile-lru");
                *evicting = true;
            }
        }
        self.clients = (0..CLIENTS).map(|c| self.manager(c)).collect();
        if mode.rw {
            self.start_rw();
        }
        self
    }

    /// An operator switches node `n`'s memory policy at run time: to an
    /// evicting one (then memory pressure, step 14, evicts its lock keys),
    /// or back to `noeviction`. Every manager reads a node's settings
    /// within the crate's documented bound (at most 500 ms old at a grant,
    /// about 1 s while it holds a lock): modelled by one round of each
    /// manager right after the switch on, until its `health()` shows the
    /// setting. Not with the eviction risk accepted (that mode has its own
    /// evicting majority), and never more evicting nodes than leave a
    /// quorum.
    pub(crate) fn switch_policy(&mut self, n: usize, rng: &mut Draws) {
        if self.accept_eviction {
            return;
        }
        if self.evicting[n] {
            self.nodes[n].set_maxmemory(0, "noeviction");
            self.evicting[n] = false;
            self.log.push(format!("node {n} policy back to noeviction"));
            return;
        }
        let spare = self.shape.nodes - (self.shape.nodes / 2 + 1);
        if self.evicting.iter().filter(|e| **e).count() >= spare {
            return;
        }
        // The operator's switch reaches a node that answers with its
        // identity: a node that hides it is taken not to evict (a
        // documented limit), and one that is down reads nothing.
        self.nodes[n].set_down(false);
        self.nodes[n].set_identity_hidden(false);
        self.nodes[n].fail_next(0);
        self.nodes[n].lose_replies_next(0);
        let policy = EVICTING[rng.below(EVICTING.len())];
        self.nodes[n].set_maxmemory(4 << 20, policy);
        self.evicting[n] = true;
        self.log
            .push(format!("node {n} policy switched to {policy}"));
        let rw = self.rw.iter().flat_map(|rw| &rw.managers);
        for (c, client) in self
            .clients
            .iter()
            .chain(&self.retired)
            .chain(rw)
            .enumerate()
        {
            // (c >= CLIENTS: a replaced manager, or a read-write client's.)
            let probe = format!("policy-probe-{c}");
            // A node marked down by this manager is probed back within
            // 2 s of real time: rounds 10 ms apart, for at most 10 s.
            let seen = testkit::wait_until(Duration::from_secs(10), || {
                if let Ok(guard) = client.try_lock(&probe) {
                    let _ = guard.release();
                }
                client.flush(Duration::from_secs(5));
                client.health().nodes[n].eviction.is_some()
            });
            assert!(
                seen,
                "client {c} never read node {n}'s policy: {}",
                client.health()
            );
        }
    }

    /// The same world with no evicting node (for the directed canaries).
    pub(crate) fn without_eviction(mut self) -> Self {
        for node in &self.nodes {
            node.set_maxmemory(0, "noeviction");
        }
        self.evicting.fill(false);
        self.clients = (0..CLIENTS).map(|c| self.manager(c)).collect();
        self
    }

    /// A manager for client `c`, whose locks carry the owner label
    /// `client-<c>` (the inspection oracle tells holders apart by it).
    pub(crate) fn manager(&self, c: usize) -> LockManager {
        LockManager::builder()
            .nodes(self.nodes.iter().cloned())
            .owner(format!("client-{c}"))
            .clock(Arc::new(self.clock.clone()))
            .ttl(self.shape.ttl)
            .max_ttl(self.shape.max_ttl)
            .restart_quarantine(self.quarantine)
            .fencing(self.fencing)
            .accept_eviction_risk(self.accept_eviction)
            .node_timeout(Duration::from_millis(200))
            .retry(RetryPolicy::none())
            .build()
            .unwrap()
    }

    /// Hand-overs so far, by every manager of this world.
    pub(crate) fn hand_overs(&self) -> u64 {
        self.hand_overs
            + self
                .clients
                .iter()
                .map(|c| c.health().locks.hand_overs)
                .sum::<u64>()
    }
}
