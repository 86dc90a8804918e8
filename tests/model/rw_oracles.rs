//! The read-write clients' oracles, after every step (mode `r`), on the
//! manager's clock as the lock oracles are (`LockGuard::is_valid` and
//! `validity`):
//!
//! - exclusion: at most one valid write guard, and none while a read
//!   guard is valid (readers share); a crashed client's forgotten guards
//!   are no holders (nothing relies on them), only what their entries do
//!   to the others;
//! - deadlines: every valid guard's entry (a reader's in the readers'
//!   set, a writer's key) is held on a quorum of nodes for at least its
//!   validity, or quarantine covers the node (as `check_deadlines`): so
//!   no path that sets or moves a guard's deadline (acquire, extend by
//!   hand or by the watchdog, admission after the intent) claims more
//!   than the nodes hold;
//! - fences: every new write guard's fence is above every earlier one's.
//!
//! Besides, in `rw.rs`: every guard is the lock its caller asked for, and
//! `Deadlock` comes only to a client that holds a side of the lock; in
//! `rw_wait.rs`: no reader gets in while a writer's intent is on a quorum.
//! At the end of a walk, liveness: once healed, every client writes, then
//! reads. [`RwCounts`] says how often each path ran.

use std::time::Duration;

use quorum_lock::{Clock, LockGuard};

use crate::config::RW_CLIENTS;
use crate::rw::Held;
use crate::world::World;

/// What the read-write clients did, over the walks.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RwCounts {
    /// Guards granted by `read` (or `read_with`), `try_read`, `write`
    /// (or `write_with`), `try_write`; of the write guards, the fenced.
    pub(crate) read: u64,
    pub(crate) try_read: u64,
    pub(crate) write: u64,
    pub(crate) try_write: u64,
    pub(crate) fenced_writes: u64,
    pub(crate) refused: u64,
    pub(crate) deadlocks: u64,
    /// Extends by hand that a quorum confirmed, of each side; failed ones.
    pub(crate) read_extends: u64,
    pub(crate) write_extends: u64,
    pub(crate) extends_failed: u64,
    /// Extends by the watchdog, of each side.
    pub(crate) read_auto_extends: u64,
    pub(crate) write_auto_extends: u64,
    /// Writers admitted after waiting for readers while the clock moved,
    /// and of those, the ones whose intent was extended meanwhile.
    pub(crate) waited_admissions: u64,
    pub(crate) intent_extends: u64,
    /// Readers refused while a writer's intent was on a quorum.
    pub(crate) refused_behind_intent: u64,
    /// Scheduled waits that found other entries on the nodes.
    pub(crate) waits_skipped: u64,
    pub(crate) releases: u64,
    pub(crate) drops: u64,
    pub(crate) crashes: u64,
    /// Valid guards checked against the nodes.
    pub(crate) deadlines_checked: u64,
}

impl RwCounts {
    /// A guard ends (let go, crashed, or at the end of a walk): its
    /// watchdog's extends are counted.
    pub(crate) fn ended(&mut self, held: &Held) {
        if !held.auto {
            return;
        }
        let by_watchdog = held
            .guard
            .extensions()
            .saturating_sub(held.base + held.manual);
        match held.write {
            true => self.write_auto_extends += u64::from(by_watchdog),
            false => self.read_auto_extends += u64::from(by_watchdog),
        }
    }

    /// Adds `o`'s counts (every field: the pattern names them all).
    pub(crate) fn add(&mut self, o: &Self) {
        let Self {
            read,
            try_read,
            write,
            try_write,
            fenced_writes,
            refused,
            deadlocks,
            read_extends,
            write_extends,
            extends_failed,
            read_auto_extends,
            write_auto_extends,
            waited_admissions,
            intent_extends,
            refused_behind_intent,
            waits_skipped,
            releases,
            drops,
            crashes,
            deadlines_checked,
        } = *o;
        self.read += read;
        self.try_read += try_read;
        self.write += write;
        self.try_write += try_write;
        self.fenced_writes += fenced_writes;
        self.refused += refused;
        self.deadlocks += deadlocks;
        self.read_extends += read_extends;
        self.write_extends += write_extends;
        self.extends_failed += extends_failed;
        self.read_auto_extends += read_auto_extends;
        self.write_auto_extends += write_auto_extends;
        self.waited_admissions += waited_admissions;
        self.intent_extends += intent_extends;
        self.refused_behind_intent += refused_behind_intent;
        self.waits_skipped += waits_skipped;
        self.releases += releases;
        self.drops += drops;
        self.crashes += crashes;
        self.deadlines_checked += deadlines_checked;
    }

    /// Every public path that sets or moves an RW guard's deadline, and
    /// the other steps, with how often each ran: each must have run.
    pub(crate) fn paths(&self) -> [(&'static str, u64); 15] {
        [
            ("read / read_with (acquire)", self.read),
            ("try_read (acquire)", self.try_read),
            ("write / write_with (intent + admission)", self.write),
            ("try_write (intent + admission)", self.try_write),
            ("fenced write", self.fenced_writes),
            ("extend of a read guard", self.read_extends),
            ("extend of a write guard", self.write_extends),
            ("auto-extend of a read guard", self.read_auto_extends),
            ("auto-extend of a write guard", self.write_auto_extends),
            ("admission after waiting", self.waited_admissions),
            ("intent extended while waiting", self.intent_extends),
            (
                "reader refused behind an intent",
                self.refused_behind_intent,
            ),
            ("release", self.releases),
            ("drop", self.drops),
            ("crash", self.crashes),
        ]
    }
}

impl World {
    /// Every read-write oracle, after a step (nothing outside mode `r`).
    pub(crate) fn check_rw(&mut self, seed: u64) {
        let Some(rw) = &self.rw else { return };
        // Extends of the watchdog due at the clock's time run first, so
        // every check sees the same state whatever the threads' timing.
        for locks in &rw.managers {
            locks.flush(Duration::from_secs(10));
        }
        let last = &self.log[self.log.len().saturating_sub(12)..];
        let writers: Vec<usize> = (0..RW_CLIENTS)
            .filter(|&c| rw.writes[c].as_ref().is_some_and(|h| h.guard.is_valid()))
            .collect();
        let readers: Vec<usize> = (0..RW_CLIENTS)
            .filter(|&c| rw.reads[c].iter().any(|h| h.guard.is_valid()))
            .collect();
        assert!(
            writers.len() <= 1 && (writers.is_empty() || readers.is_empty()),
            "seed {seed}: valid write guards of clients {writers:?}, read guards of {readers:?}; \
             last steps: {last:?}"
        );
        let (readers_key, writer_key) = rw.locks[0].keys();
        let mut checked = 0;
        for c in 0..RW_CLIENTS {
            let held = rw.reads[c].iter().map(|h| (false, &h.guard));
            for (write, guard) in held.chain(rw.writes[c].iter().map(|h| (true, &h.guard))) {
                let key = if write { writer_key } else { readers_key };
                checked += u64::from(self.check_rw_deadline(seed, (c, write), guard, key));
            }
        }
        let rw = self.rw.as_mut().expect("mode r");
        rw.counts.deadlines_checked += checked;
        for held in rw.writes.iter().flatten() {
            let Some(fence) = held.guard.fence() else {
                continue;
            };
            if rw.checked.insert(held.guard.token().as_bytes().to_vec()) {
                assert!(
                    fence > rw.fence && fence < 1 << 53,
                    "seed {seed}: a write guard got fence {fence} after {}; last steps: {:?}",
                    rw.fence,
                    &self.log[self.log.len().saturating_sub(12)..]
                );
                rw.fence = fence;
            }
        }
    }

    /// A valid guard's entry is on a quorum for at least its validity (or
    /// quarantine covers the node until then). Whether it was valid.
    fn check_rw_deadline(
        &self,
        seed: u64,
        (c, write): (usize, bool),
        guard: &LockGuard,
        key: &[u8],
    ) -> bool {
        let validity = guard.validity();
        if validity.is_zero() {
            return false;
        }
        let deadline = self.clock.now() + validity;
        let token = guard.token();
        let left_on = |n: usize| -> Option<Duration> {
            let node = &self.nodes[n];
            match write {
                true => node
                    .holder(key)
                    .filter(|v| token.matches_stored(v))
                    .and(node.remaining_ttl(key)),
                false => node
                    .readers(key)
                    .into_iter()
                    .find(|(v, _)| token.matches_stored(v))
                    .map(|(_, left)| left),
            }
        };
        let holding = (0..self.shape.nodes)
            .filter(|&n| {
                let covered = self.quarantine
                    && self.restarted_at[n].is_some_and(|at| at + self.shape.max_ttl >= deadline);
                left_on(n).is_some_and(|left| left >= validity) || covered
            })
            .count();
        let per_node: Vec<(Option<Duration>, bool)> = (0..self.shape.nodes)
            .map(|n| (left_on(n), self.evicting[n]))
            .collect();
        assert!(
            holding > self.shape.nodes / 2,
            "seed {seed}: rw client {c}'s {} guard claims {validity:?} but only {holding} nodes \
             hold it that long; per node (time left, evicting): {per_node:?}; every step: {:?}",
            if write { "write" } else { "read" },
            &self.log
        );
        true
    }

    /// At the end of a walk (after `heal_and_check_liveness`): the read-write
    /// clients let go of everything, every lock expires, and each client
    /// then writes and reads in turn. The walk's counts (`None` outside
    /// mode `r`).
    pub(crate) fn rw_heal_and_check(&mut self, seed: u64) -> Option<RwCounts> {
        let rw = self.rw.as_mut()?;
        let held: Vec<Held> = rw.reads.iter_mut().flat_map(|r| r.drain(..)).collect();
        for held in held
            .into_iter()
            .chain(rw.writes.iter_mut().filter_map(Option::take))
        {
            rw.counts.ended(&held);
        }
        let rw = self.rw.as_ref()?;
        for locks in &rw.managers {
            locks.flush(Duration::from_secs(10));
        }
        self.clock.advance(self.shape.max_ttl * 3);
        // Every client writes, then reads: all of them in each round (a
        // node marked down is probed back in real time, within 2 s; a
        // restart it missed is then quarantined), rounds 10 ms apart for
        // at most 10 s.
        let mut left: Vec<(usize, bool)> = (0..RW_CLIENTS)
            .flat_map(|c| [(c, true), (c, false)])
            .collect();
        let mut last = None;
        testkit::wait_until(Duration::from_secs(10), || {
            if last.is_some() {
                self.clock.advance(self.shape.max_ttl);
            }
            left.retain(|&(c, write)| {
                let lock = &rw.locks[c];
                let got = if write {
                    lock.try_write()
                } else {
                    lock.try_read()
                };
                match got {
                    Ok(guard) => {
                        guard.release().unwrap();
                        false
                    }
                    Err(e) => {
                        assert!(!e.is_contended(), "seed {seed}: rw client {c}: {e}");
                        last = Some(e);
                        // The failed attempt's keys are taken back in the
                        // background: gone before the next client tries.
                        rw.managers[c].flush(Duration::from_secs(10));
                        true
                    }
                }
            });
            left.is_empty()
        });
        assert!(
            left.is_empty(),
            "seed {seed}: rw clients cannot take the lock (client, write): {left:?}: {last:?}"
        );
        Some(rw.counts)
    }
}
