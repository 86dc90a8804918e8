//! Model-based test: random sequences of lock / extend / release / drop /
//! hand-over / clock steps / faults over five in-memory nodes and three
//! clients, checked after every step against a simple oracle.
//!
//! Ingredients: faults (down, failures, lost replies, restarts that forget
//! every key), managers that join late (first contact after restarts),
//! nodes that report their uptime as Redis does (whole seconds of a wall
//! clock that may step forward within the drift allowance), nodes that hide
//! their identity, extends with a TTL shorter or longer than the lock's,
//! and hand-over to a second thread of the same manager. (Extends from two
//! sources on one guard, watchdog and holder, interleaved step by step, are
//! modelled beside the lease code: `src/manager.rs`, `lease_model`.)
//!
//! After every step: at most one client holds a valid guard on a resource,
//! and no valid guard's deadline is later than the moment its keys stop
//! being held on a quorum (a node that restarted counts as holding until
//! `max_ttl` after its restart: quarantine keeps it from voting for anyone
//! before then). At the end a free, healthy cluster always grants the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorum_lock::{
    Clock, LockGuard, LockManager, LockOptions, ManualClock, MemoryBackend, RetryPolicy,
    UptimeReport,
};

/// The cluster and timing a run uses.
#[derive(Debug, Clone, Copy)]
struct Shape {
    nodes: usize,
    ttl: Duration,
    max_ttl: Duration,
    /// Largest single clock advance, in ms.
    max_advance_ms: usize,
}

/// Five nodes, locks shorter than `max_ttl`, long clock steps.
const WIDE: Shape = Shape {
    nodes: 5,
    ttl: Duration::from_secs(1),
    max_ttl: Duration::from_secs(2),
    max_advance_ms: 600,
};

/// Three nodes, TTL = `max_ttl`, short clock steps: the quarantine and the
/// lock end close together, where off-by-a-second mistakes show.
const TIGHT: Shape = Shape {
    nodes: 3,
    ttl: Duration::from_secs(1),
    max_ttl: Duration::from_secs(1),
    max_advance_ms: 120,
};
const CLIENTS: usize = 3;
const RESOURCES: [&str; 2] = ["alpha", "beta"];
const STEPS: usize = 300;

const SEEDS: u64 = 12;

/// A small deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct World {
    shape: Shape,
    /// Every lock asks for a fencing token.
    fencing: bool,
    /// The highest fence handed out so far, per resource, and the tokens
    /// of the guards already checked.
    fences: Vec<u64>,
    checked: std::collections::HashSet<Vec<u8>>,
    clock: ManualClock,
    nodes: Vec<MemoryBackend>,
    quarantine: bool,
    clients: Vec<LockManager>,
    /// held[client][resource]
    held: Vec<Vec<Option<LockGuard>>>,
    /// When each node last restarted (on the clock), and its wall-clock
    /// steps since.
    restarted_at: Vec<Option<Instant>>,
    wall_steps: Vec<Duration>,
    log: Vec<String>,
}

impl World {
    fn new(shape: Shape, quarantine: bool, rng: &mut Rng) -> Self {
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
        let mut world = Self {
            shape,
            fencing: false,
            fences: vec![0; RESOURCES.len()],
            checked: std::collections::HashSet::new(),
            clock,
            nodes,
            quarantine,
            clients: Vec::new(),
            held: (0..CLIENTS)
                .map(|_| (0..RESOURCES.len()).map(|_| None).collect())
                .collect(),
            restarted_at: vec![None; shape.nodes],
            wall_steps: vec![Duration::ZERO; shape.nodes],
            log: Vec::new(),
        };
        world.clients = (0..CLIENTS).map(|_| world.manager()).collect();
        world
    }

    fn manager(&self) -> LockManager {
        LockManager::builder()
            .nodes(self.nodes.iter().cloned())
            .clock(Arc::new(self.clock.clone()))
            .ttl(self.shape.ttl)
            .max_ttl(self.shape.max_ttl)
            .restart_quarantine(self.quarantine)
            .fencing(self.fencing)
            .node_timeout(Duration::from_millis(200))
            .retry(RetryPolicy::none())
            .build()
            .unwrap()
    }

    /// Options for a lock that waits in the manager's local line (so it can
    /// be handed over) but makes one remote attempt only.
    fn in_line() -> LockOptions {
        LockOptions::new().retry(
            RetryPolicy::new()
                .attempts(1)
                .max_wait(Duration::from_secs(5)),
        )
    }

    fn step(&mut self, rng: &mut Rng) {
        let c = rng.below(CLIENTS);
        let r = rng.below(RESOURCES.len());
        let n = rng.below(self.shape.nodes);
        match rng.below(16) {
            0 | 1 => {
                let ms = rng.below(self.shape.max_advance_ms) as u64;
                self.clock.advance(Duration::from_millis(ms));
                self.log.push(format!("advance {ms}ms"));
            }
            2 | 3 => {
                if self.held[c][r].is_none() {
                    let queued = rng.below(2) == 0;
                    let got = if queued {
                        self.clients[c].lock_with(RESOURCES[r], &Self::in_line())
                    } else {
                        self.clients[c].try_lock(RESOURCES[r])
                    };
                    self.log.push(format!(
                        "client {c} lock {r} (in line: {queued}): {}",
                        got.is_ok()
                    ));
                    self.held[c][r] = got.ok();
                }
            }
            4 => {
                if let Some(guard) = self.held[c][r].as_mut() {
                    // Shorter, equal or longer than the lock's TTL.
                    let shape = self.shape;
                    let ttl = [Duration::from_millis(300), shape.ttl, shape.max_ttl][rng.below(3)];
                    let ok = guard.extend(ttl).is_ok();
                    self.log
                        .push(format!("client {c} extend {r} {ttl:?}: {ok}"));
                }
            }
            5 => {
                if let Some(guard) = self.held[c][r].take() {
                    let ok = guard.release().is_ok();
                    self.log.push(format!("client {c} release {r}: {ok}"));
                }
            }
            6 => {
                if self.held[c][r].take().is_some() {
                    self.log.push(format!("client {c} drop {r}"));
                }
            }
            7 => {
                let down = rng.below(2) == 0;
                self.nodes[n].set_down(down);
                self.log.push(format!("node {n} down={down}"));
            }
            8 => {
                self.nodes[n].fail_next(1);
                self.log.push(format!("node {n} fail next"));
            }
            9 => {
                self.nodes[n].lose_replies_next(1);
                self.log.push(format!("node {n} lose next reply"));
            }
            10 => {
                self.nodes[n].restart();
                self.restarted_at[n] = Some(self.clock.now());
                self.wall_steps[n] = Duration::ZERO;
                self.log.push(format!("node {n} restarted empty"));
            }
            11 => {
                // A manager that joins late: its first contact with every
                // node is now, after whatever restarts happened. Guards of
                // the old manager stay held (they keep it alive).
                self.clients[c] = self.manager();
                self.log.push(format!("client {c} new manager"));
            }
            12 => {
                let step = Duration::from_millis(rng.below(8) as u64);
                // Within the drift allowance of max_ttl (1 % + 2 ms), as
                // docs/safety.md assumes.
                if self.wall_steps[n] + step <= self.shape.max_ttl / 100 {
                    self.wall_steps[n] += step;
                    self.nodes[n].step_wall_clock(step);
                    self.log.push(format!("node {n} wall clock +{step:?}"));
                }
            }
            13 => {
                let hidden = rng.below(3) == 0;
                self.nodes[n].set_identity_hidden(hidden);
                self.log.push(format!("node {n} identity hidden={hidden}"));
            }
            _ => self.hand_over(c, r),
        }
    }

    /// Drops client `c`'s guard on `r` while a second thread of the same
    /// manager waits for it in `lock`: the lock is handed over (same token
    /// and deadline) or released, and the waiter then holds the result.
    fn hand_over(&mut self, c: usize, r: usize) {
        let Some(guard) = self.held[c][r].take() else {
            return;
        };
        let locks = self.clients[c].clone();
        let waiter = std::thread::spawn(move || locks.lock_with(RESOURCES[r], &Self::in_line()));
        let started = Instant::now();
        while self.clients[c].local_waiters(RESOURCES[r]) == 0
            && started.elapsed() < Duration::from_secs(2)
            && !waiter.is_finished()
        {
            std::thread::yield_now();
        }
        drop(guard);
        let got = waiter.join().unwrap();
        self.log
            .push(format!("client {c} hand over {r}: {}", got.is_ok()));
        self.held[c][r] = got.ok();
    }

    /// The fencing oracle: every guard acquired since the last check
    /// carries a fence above every fence handed out before it for its
    /// resource (at most one guard is new per step).
    fn check_fences(&mut self, seed: u64) {
        if !self.fencing {
            return;
        }
        for held in &self.held {
            for (r, guard) in held.iter().enumerate() {
                let Some(guard) = guard else { continue };
                if !self.checked.insert(guard.token().as_bytes().to_vec()) {
                    continue;
                }
                let fence = guard.fence().expect("a fenced lock has a fence");
                assert!(
                    fence > self.fences[r],
                    "seed {seed}: {} got fence {fence} after {}; last steps: {:?}",
                    RESOURCES[r],
                    self.fences[r],
                    &self.log[self.log.len().saturating_sub(12)..]
                );
                assert!(fence < 1 << 53);
                self.fences[r] = fence;
            }
        }
    }

    /// The stronger oracle: every valid guard's keys are held on a quorum
    /// for at least its remaining validity (or the node restarted recently
    /// enough that quarantine keeps it from voting until then).
    fn check_deadlines(&self, seed: u64) {
        let now = self.clock.now();
        for (c, held) in self.held.iter().enumerate() {
            for guard in held.iter().flatten() {
                let validity = guard.validity();
                if validity.is_zero() {
                    continue;
                }
                let deadline = now + validity;
                let holding = (0..self.shape.nodes)
                    .filter(|&n| {
                        let node = &self.nodes[n];
                        let ours = node.holder(guard.key()).as_deref()
                            == Some(guard.token().as_bytes())
                            && node.remaining_ttl(guard.key()) >= Some(validity);
                        let covered = self.quarantine
                            && self.restarted_at[n]
                                .is_some_and(|at| at + self.shape.max_ttl >= deadline);
                        ours || covered
                    })
                    .count();
                assert!(
                    holding > self.shape.nodes / 2,
                    "seed {seed}: client {c}'s guard claims {validity:?} but only {holding} nodes \
                     hold its key that long; last steps: {:?}",
                    &self.log[self.log.len().saturating_sub(12)..]
                );
            }
        }
    }

    /// The oracle: per resource, at most one valid holder.
    fn check_exclusive(&self, seed: u64) {
        for (r, name) in RESOURCES.iter().enumerate() {
            let holders: Vec<usize> = (0..CLIENTS)
                .filter(|&c| self.held[c][r].as_ref().is_some_and(LockGuard::is_valid))
                .collect();
            assert!(
                holders.len() <= 1,
                "seed {seed}: clients {holders:?} all hold {name}; last steps: {:?}",
                &self.log[self.log.len().saturating_sub(12)..]
            );
        }
    }

    /// Heals every fault, lets every lock expire, and checks that each
    /// client can then take each resource in turn (liveness).
    fn heal_and_check_liveness(&mut self, seed: u64) {
        for held in &mut self.held {
            held.iter_mut().for_each(|g| drop(g.take()));
        }
        for node in &self.nodes {
            node.set_down(false);
            node.fail_next(0);
            node.lose_replies_next(0);
            node.set_identity_hidden(false);
        }
        // Past every lock's TTL and every quarantine noticed so far.
        self.clock.advance(self.shape.max_ttl * 3);
        for (c, client) in self.clients.iter().enumerate() {
            for name in RESOURCES {
                // A node marked down is probed back within 2 s of real
                // time: bounded retries, 10 ms apart.
                let mut last = None;
                for _ in 0..400 {
                    match client.try_lock(name) {
                        Ok(guard) => {
                            guard.release().unwrap();
                            last = None;
                            break;
                        }
                        Err(e) => {
                            assert!(!e.is_contended(), "seed {seed}: {name} still held: {e}");
                            last = Some(e);
                            // A node marked down is probed back in real
                            // time; a restart it missed is then noticed and
                            // quarantined from that moment: wait both out.
                            std::thread::sleep(Duration::from_millis(10));
                            self.clock.advance(self.shape.max_ttl);
                        }
                    }
                }
                assert!(
                    last.is_none(),
                    "seed {seed}: client {c} cannot take {name}: {last:?}"
                );
            }
        }
    }
}

fn run(shape: Shape) {
    run_with(shape, false);
}

fn run_with(shape: Shape, fencing: bool) {
    for seed in 1..=SEEDS {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut world = World::new(shape, true, &mut rng);
        if fencing {
            world.fencing = true;
            world.clients = (0..CLIENTS).map(|_| world.manager()).collect();
        }
        for _ in 0..STEPS {
            world.step(&mut rng);
            world.check_exclusive(seed);
            world.check_deadlines(seed);
            world.check_fences(seed);
        }
        world.heal_and_check_liveness(seed);
    }
}

/// Fencing (issue 12): with restarts, late managers, hand-over attempts,
/// extends and faults in the schedule, each new holder of a resource gets
/// a larger fence than every holder before it. Checked to fail when the
/// write-back (phase 2) is skipped and when the wall-clock floor is
/// removed (docs/safety.md).
#[test]
fn fences_strictly_increase_from_one_holder_to_the_next() {
    run_with(WIDE, true);
    run_with(TIGHT, true);
}

#[test]
fn no_two_clients_ever_hold_the_same_resource() {
    run(WIDE);
}

#[test]
fn no_two_clients_ever_hold_the_same_resource_with_ttl_equal_to_max_ttl() {
    run(TIGHT);
}

/// The oracle can fail: with nodes that forget their keys (restart without
/// quarantine), two clients do end up holding valid guards.
#[test]
fn the_oracle_catches_a_forgetful_majority() {
    let mut world = World::new(WIDE, false, &mut Rng(1));
    world.held[0][0] = Some(world.clients[0].try_lock(RESOURCES[0]).unwrap());
    assert!(world.clients[0].flush(Duration::from_secs(10)));
    for node in &world.nodes[..3] {
        node.restart();
    }
    world.held[1][0] = Some(world.clients[1].try_lock(RESOURCES[0]).unwrap());
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.check_exclusive(0)));
    assert!(caught.is_err(), "the oracle missed two holders");
}

/// The deadline oracle can fail: a guard whose keys vanished from a
/// majority (as if their clocks had jumped) claims more than is held.
#[test]
fn the_deadline_oracle_catches_keys_gone_from_a_majority() {
    let mut world = World::new(WIDE, true, &mut Rng(1));
    let guard = world.clients[0].try_lock(RESOURCES[0]).unwrap();
    assert!(world.clients[0].flush(Duration::from_secs(10)));
    for node in &world.nodes[..3] {
        node.expire_now(guard.key());
    }
    world.held[0][0] = Some(guard);
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.check_deadlines(0)));
    assert!(caught.is_err(), "the deadline oracle missed it");
}

/// The first-contact family of schedules, searched directly (a random walk
/// rarely lines them up): A holds the lock on every node; a majority
/// restarts empty at a random point of its wall clock's second, their wall
/// clocks may step forward within the drift allowance; a manager that has
/// never seen them makes first contact a random time later and keeps trying
/// every few milliseconds until A's lock has expired. It must never hold
/// the lock while A's guard is valid.
#[test]
fn a_late_first_contact_never_lets_a_second_holder_in() {
    let mut rng = Rng(0x5EED_F1E5_7C0A_7AC7);
    for round in 0..200 {
        let shape = TIGHT;
        let world = World::new(shape, true, &mut rng);
        let phase = Duration::from_millis(rng.below(1000) as u64);
        for node in &world.nodes {
            node.set_uptime_report(UptimeReport::WholeSeconds { phase });
        }
        let a = world.clients[0].try_lock(RESOURCES[0]).unwrap();
        assert!(world.clients[0].flush(Duration::from_secs(10)));
        world
            .clock
            .advance(Duration::from_millis(rng.below(500) as u64));
        for node in &world.nodes[..2] {
            node.restart();
            node.step_wall_clock(Duration::from_millis(rng.below(11) as u64));
        }
        world
            .clock
            .advance(Duration::from_millis(rng.below(1000) as u64));
        let late = world.manager();
        while a.is_valid() {
            if let Ok(b) = late.try_lock(RESOURCES[0]) {
                assert!(
                    !(a.is_valid() && b.is_valid()),
                    "round {round}: phase {phase:?}: the late manager won while A had {:?} left",
                    a.validity()
                );
                break;
            }
            assert!(late.flush(Duration::from_secs(10)));
            world.clock.advance(Duration::from_millis(3));
        }
    }
}
