//! The oracles, checked after every step ([`World::check`]): at most one
//! valid holder per resource (a set counts for each of its resources), at
//! most [`PERMITS`] valid permits and never two on one slot, no valid
//! guard claiming longer than a quorum holds its keys, fences that
//! increase, inspections that agree with the holders, and every guard the
//! lock its caller asked for ([`Ask`]). At the end of a walk, liveness: a
//! healed, free cluster grants every resource to every client. The tests
//! in `main.rs` check that each oracle can fail.

use std::time::Duration;

use quorum_lock::inspection::{KeyState, Verdict};
use quorum_lock::{Clock, LockGuard, LockOptions};

use crate::config::{CLIENTS, PERMITS, RESOURCES};
use crate::world::World;

impl World {
    /// Every oracle, after a step.
    pub(crate) fn check(&mut self, seed: u64) {
        self.check_exclusive(seed);
        self.check_permits(seed);
        self.check_deadlines(seed);
        self.check_fences(seed);
        self.check_inspection(seed);
        self.check_rw(seed);
    }

    /// The semaphore's oracle: at most `PERMITS` valid permits, and never
    /// two valid permits on one slot.
    pub(crate) fn check_permits(&self, seed: u64) {
        let valid: Vec<(usize, Vec<u8>)> = (0..CLIENTS)
            .flat_map(|c| {
                self.permits[c]
                    .iter()
                    .filter(|p| p.is_valid())
                    .map(move |p| (c, p.resource().to_vec()))
            })
            .collect();
        let mut slots: Vec<&[u8]> = valid.iter().map(|(_, slot)| &slot[..]).collect();
        slots.sort();
        slots.dedup();
        assert!(
            valid.len() <= PERMITS as usize && slots.len() == valid.len(),
            "seed {seed}: {} valid permits of a {PERMITS}-permit semaphore: {:?}; last steps: {:?}",
            valid.len(),
            valid
                .iter()
                .map(|(c, slot)| format!("client {c} on {}", String::from_utf8_lossy(slot)))
                .collect::<Vec<_>>(),
            &self.log[self.log.len().saturating_sub(12)..]
        );
    }

    /// The fencing oracle: every guard acquired since the last check
    /// carries a fence above every fence handed out before it for its
    /// resource (at most one guard is new per step).
    pub(crate) fn check_fences(&mut self, seed: u64) {
        if !self.fencing && !self.mixed {
            return;
        }
        for held in &self.held {
            for (r, guard) in held.iter().enumerate() {
                let Some(guard) = guard else { continue };
                let Some(fence) = guard.fence() else { continue };
                if !self.checked.insert(guard.token().as_bytes().to_vec()) {
                    continue;
                }
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
        // A set's one fence serves every resource: it must exceed each
        // one's fences so far.
        for set in self.sets.iter().flatten() {
            let Some(fence) = set.fence() else { continue };
            if !self.checked.insert(set.token().as_bytes().to_vec()) {
                continue;
            }
            for (r, name) in RESOURCES.iter().enumerate() {
                assert!(
                    fence > self.fences[r],
                    "seed {seed}: a set got fence {fence} after {} of {name}; last steps: {:?}",
                    self.fences[r],
                    &self.log[self.log.len().saturating_sub(12)..]
                );
                self.fences[r] = fence;
            }
        }
    }

    /// The stronger oracle: every valid guard's keys are held on a quorum
    /// for at least its remaining validity (or the node restarted recently
    /// enough that quarantine keeps it from voting until then).
    pub(crate) fn check_deadlines(&self, seed: u64) {
        let now = self.clock.now();
        for (c, held) in self.held.iter().enumerate() {
            let guards = held
                .iter()
                .flatten()
                .chain(&self.permits[c])
                .chain(&self.sets[c]);
            for guard in guards {
                let validity = guard.validity();
                if validity.is_zero() {
                    continue;
                }
                let deadline = now + validity;
                // A guard holds each of its keys (one, or a set's).
                for key in guard.keys() {
                    let holding = (0..self.shape.nodes)
                        .filter(|&n| {
                            let node = &self.nodes[n];
                            let ours = node
                                .holder(key)
                                .is_some_and(|v| guard.token().matches_stored(&v))
                                && node.remaining_ttl(key) >= Some(validity);
                            let covered = self.quarantine
                                && self.restarted_at[n]
                                    .is_some_and(|at| at + self.shape.max_ttl >= deadline);
                            ours || covered
                        })
                        .count();
                    if holding <= self.shape.nodes / 2 {
                        // Per node: ours, time left, clock steps so far,
                        // evicting.
                        let nodes: Vec<_> = (0..self.shape.nodes)
                            .map(|n| {
                                let node = &self.nodes[n];
                                let ours = node
                                    .holder(key)
                                    .is_some_and(|v| guard.token().matches_stored(&v));
                                (
                                    ours,
                                    node.remaining_ttl(key),
                                    self.wall_steps[n],
                                    self.evicting[n],
                                )
                            })
                            .collect();
                        panic!(
                            "seed {seed}: client {c}'s guard claims {validity:?} but only \
                             {holding} nodes hold its key {} that long; per node (ours, time \
                             left, clock steps, evicting): {nodes:?}; every step: {:?}",
                            String::from_utf8_lossy(key),
                            &self.log
                        );
                    }
                }
            }
        }
    }

    /// The inspection oracle. When a client holds a resource validly and
    /// a quorum of nodes holds its key at least as long as its guard
    /// claims (not only quarantine covering for restarted nodes), an
    /// inspection never sees the resource free, nor held by another owner;
    /// and when every such node answered, the time left it reports falls
    /// short of the guard's validity by no more than the drift and the time
    /// the inspection took.
    pub(crate) fn check_inspection(&self, seed: u64) {
        let quorum = self.shape.nodes / 2 + 1;
        for (r, name) in RESOURCES.iter().enumerate() {
            let inspector = self.inspector.as_ref().expect("built with the world");
            let holder = (0..CLIENTS).find_map(|c| self.holder_of(c, r).map(|g| (c, g)));
            // The resource's key (no prefix here), also for a set.
            let key = name.as_bytes();
            // The nodes that hold the holder's key at least as long as its
            // guard claims, read before the inspection: a round decided at
            // a quorum leaves the other nodes' part to their threads, so a
            // node may apply the acquire while the inspection runs, or
            // after it; only the nodes that held it from the start (and
            // still do at the end: no step runs in between) must be seen.
            let ours_now = |guard: &LockGuard, validity: Duration| -> Vec<usize> {
                (0..self.shape.nodes)
                    .filter(|&n| {
                        let node = &self.nodes[n];
                        node.holder(key)
                            .is_some_and(|v| guard.token().matches_stored(&v))
                            && node.remaining_ttl(key) >= Some(validity)
                    })
                    .collect()
            };
            let before = holder.map(|(_, guard)| ours_now(guard, guard.validity()));
            let seen = inspector.inspect(name).unwrap();
            let (Some((c, guard)), Some(before)) = (holder, before) else {
                continue;
            };
            let validity = guard.validity();
            let after = ours_now(guard, validity);
            let ours: Vec<usize> = before.into_iter().filter(|n| after.contains(n)).collect();
            if ours.len() < quorum {
                continue;
            }
            let label = format!("client-{c}");
            let context = || {
                format!(
                    "seed {seed}: client {c} holds {name} ({validity:?} left) on nodes \
                     {ours:?} throughout, but the inspection says: {seen}; per node: {:?}; \
                     last steps: {:?}",
                    seen.nodes()
                        .iter()
                        .map(|n| format!("{:?}", n.state()))
                        .collect::<Vec<_>>(),
                    &self.log[self.log.len().saturating_sub(12)..]
                )
            };
            assert!(!matches!(seen.verdict(), Verdict::Free), "{}", context());
            if !seen.is_held() {
                continue; // split or unknown: nodes that did not answer
            }
            assert_eq!(seen.owner(), Some(label.as_str()), "{}", context());
            self.inspected_held.set(self.inspected_held.get() + 1);
            let all_answered = ours
                .iter()
                .all(|&n| !matches!(seen.nodes()[n].state(), KeyState::Failed(_)));
            let slack = inspector.drift_for(self.shape.max_ttl) + seen.took();
            assert!(
                !all_answered || seen.time_left() + slack >= validity,
                "{}",
                context()
            );
        }
    }

    /// Client `c`'s valid guard on resource `r`: a lock of it alone, or
    /// the set of every resource.
    fn holder_of(&self, c: usize, r: usize) -> Option<&LockGuard> {
        self.held[c][r]
            .as_ref()
            .or(self.sets[c].as_ref())
            .filter(|g| g.is_valid())
    }

    /// The oracle: per resource, at most one valid holder.
    pub(crate) fn check_exclusive(&self, seed: u64) {
        for (r, name) in RESOURCES.iter().enumerate() {
            let holders: Vec<usize> = (0..CLIENTS)
                .filter(|&c| self.holder_of(c, r).is_some())
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
    pub(crate) fn heal_and_check_liveness(&mut self, seed: u64) {
        for held in &mut self.held {
            held.iter_mut().for_each(|g| drop(g.take()));
        }
        for permits in &mut self.permits {
            permits.clear();
        }
        self.sets.iter_mut().for_each(|s| drop(s.take()));
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
                // time: bounded retries (10 s), 10 ms apart.
                let mut last = None;
                let taken = testkit::wait_until(Duration::from_secs(10), || {
                    if last.is_some() {
                        // A node marked down is probed back in real time
                        // (the 10 ms just waited); a restart it missed is
                        // then noticed and quarantined from that moment:
                        // wait both out.
                        self.clock.advance(self.shape.max_ttl);
                    }
                    match client.try_lock(name) {
                        Ok(guard) => {
                            guard.release().unwrap();
                            true
                        }
                        Err(e) => {
                            assert!(!e.is_contended(), "seed {seed}: {name} still held: {e}");
                            last = Some(e);
                            false
                        }
                    }
                });
                assert!(
                    taken,
                    "seed {seed}: client {c} cannot take {name}: {last:?}"
                );
            }
        }
    }
}

/// What a caller asked for, checked against the guard it got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) fenced: bool,
    pub(crate) ttl: Duration,
}

impl Ask {
    pub(crate) fn options(self, base: LockOptions) -> LockOptions {
        base.fencing(self.fenced).ttl(self.ttl)
    }

    /// The oracle of the local line: a guard is the lock its caller asked
    /// for, never another holder's lease of another kind.
    pub(crate) fn check(self, guard: &LockGuard, log: &[String]) {
        assert_eq!(
            guard.fence().is_some(),
            self.fenced,
            "asked for {self:?}, got a lock with fence {:?}; last steps: {:?}",
            guard.fence(),
            &log[log.len().saturating_sub(12)..]
        );
        assert!(
            guard.validity() <= self.ttl,
            "asked for {self:?}, got {:?} of validity; last steps: {:?}",
            guard.validity(),
            &log[log.len().saturating_sub(12)..]
        );
    }
}
