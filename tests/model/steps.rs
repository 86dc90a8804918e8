//! The steps of a walk: one random step (lock, extend, release, drop,
//! hand-over, clock advances, faults, restarts, late managers, wall-clock
//! steps, hidden identities, memory pressure, policy switches, permits,
//! sets; in mode `r` a third of them a read-write client's, `rw.rs`) and
//! the scheduled ones (a forced hand-over every [`HAND_OVER_EVERY`] steps,
//! a scan of the semaphore by every client halfway between two, in mode
//! `r` a writer waiting for readers and an acquisition of each kind in
//! turn), each logged in the world.

use std::time::Duration;

use quorum_lock::{Clock, LockOptions, RetryPolicy};

use crate::config::{CLIENTS, HAND_OVER_EVERY, RESOURCES, RW_TAKE_AT, RW_WAIT_AT, SEMAPHORE};
use crate::draws::Draws;
use crate::oracles::Ask;
use crate::world::World;

impl World {
    /// Options for a lock that waits in the manager's local line (so it can
    /// be handed over: one attempt alone would skip the line) and makes at
    /// most two remote attempts, without sleeping between them.
    fn in_line() -> LockOptions {
        LockOptions::new().retry(
            RetryPolicy::new()
                .attempts(2)
                .delay(Duration::ZERO)
                .jitter(Duration::ZERO)
                .max_wait(Duration::from_secs(5)),
        )
    }

    /// What a caller asks for: fenced or not (at random in a mixed world),
    /// and the TTL (the default, or a shorter one now and then).
    fn ask(&self, rng: &mut Draws) -> Ask {
        let fenced = if self.mixed {
            rng.below(2) == 0
        } else {
            self.fencing
        };
        let ttl = if rng.below(4) == 0 {
            self.shape.ttl / 2
        } else {
            self.shape.ttl
        };
        Ask { fenced, ttl }
    }

    pub(crate) fn step(&mut self, rng: &mut Draws, step: usize) {
        if step % HAND_OVER_EVERY == HAND_OVER_EVERY - 1 {
            return self.forced_hand_over(rng);
        }
        if step % HAND_OVER_EVERY == HAND_OVER_EVERY / 2 {
            // Scheduled: every client scans the semaphore's slots, so that
            // it fills up (three clients, two permits) whenever a quorum
            // of nodes can grant.
            for c in 0..CLIENTS {
                self.take_permit(c, rng);
            }
            return;
        }
        if self.rw.is_some() {
            if step % HAND_OVER_EVERY == RW_WAIT_AT {
                return self.scheduled_waited_write(rng, step);
            }
            if step % HAND_OVER_EVERY == RW_TAKE_AT {
                return self.scheduled_rw_take(step);
            }
            if rng.below(3) == 0 {
                return self.rw_step(rng);
            }
        }
        let c = rng.below(CLIENTS);
        let r = rng.below(RESOURCES.len());
        let n = rng.below(self.shape.nodes);
        match rng.below(20) {
            19 => self.switch_policy(n, rng),
            18 => self.take_or_let_go_set(c, rng),
            16 => self.take_permit(c, rng),
            17 => {
                // Release or drop (at random) one of the client's permits.
                if !self.permits[c].is_empty() {
                    let which = rng.below(self.permits[c].len());
                    let permit = self.permits[c].remove(which);
                    let released = rng.below(2) == 0 && permit.release().is_ok();
                    self.log.push(format!(
                        "client {c} lets a permit go (released: {released})"
                    ));
                }
            }
            0 | 1 => {
                let ms = rng.below(self.shape.max_advance_ms) as u64;
                self.clock.advance(Duration::from_millis(ms));
                self.log.push(format!("advance {ms}ms"));
            }
            2 | 3 => {
                if self.held[c][r].is_none() {
                    let queued = rng.below(2) == 0;
                    let ask = self.ask(rng);
                    let got = if queued {
                        self.clients[c].lock_with(RESOURCES[r], &ask.options(Self::in_line()))
                    } else {
                        let once = LockOptions::new().retry(RetryPolicy::none());
                        self.clients[c].lock_with(RESOURCES[r], &ask.options(once))
                    };
                    self.log.push(format!(
                        "client {c} lock {r} (in line: {queued}, {ask:?}): {}",
                        got.is_ok()
                    ));
                    self.held[c][r] = got.ok().inspect(|g| ask.check(g, &self.log));
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
                self.hand_overs += self.clients[c].health().locks.hand_overs;
                let fresh = self.manager(c);
                let old = std::mem::replace(&mut self.clients[c], fresh);
                self.retired.push(old);
                self.log.push(format!("client {c} new manager"));
            }
            12 => {
                let step = Duration::from_millis(rng.below(8) as u64);
                // Assumption 1 of docs/safety.md: over a lock's life, a
                // node's clock runs ahead of the client's by less than that
                // lock's drift allowance (1 % of its TTL + 2 ms). So a
                // node's steps, in all, stay within the allowance of the
                // shortest lock the walk asks for (half the shape's TTL).
                // (Bounded by max_ttl's allowance instead, 20 ms in the
                // wide shape, the steps within one 1 s lock's life could
                // exceed its 12 ms: a guard on a bare quorum then claimed
                // more than one of its nodes held, a world outside the
                // assumptions.)
                let allowance = self.shape.ttl / 2 / 100 + Duration::from_millis(2);
                if self.wall_steps[n] + step <= allowance {
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
            14 if self.evicting.contains(&true) => {
                // Memory pressure (cache writes reach every server): each
                // node whose policy evicts drops its idle lock keys.
                let evicted: Vec<usize> = (0..self.shape.nodes)
                    .filter(|&i| self.evicting[i])
                    .map(|i| self.nodes[i].evict_volatile())
                    .collect();
                self.log
                    .push(format!("memory pressure: lock keys evicted {evicted:?}"));
            }
            _ => {
                let ask = self.ask(rng);
                let by_release = rng.below(2) == 0;
                self.hand_over(c, r, ask, by_release);
            }
        }
    }

    /// Client `c` takes every resource as one set (`lock_all`), in line or
    /// in one attempt, unless it holds one of them or the set already;
    /// else lets the set go (release or drop).
    fn take_or_let_go_set(&mut self, c: usize, rng: &mut Draws) {
        if let Some(set) = self.sets[c].take() {
            let released = rng.below(2) == 0 && set.release().is_ok();
            self.log
                .push(format!("client {c} lets its set go (released: {released})"));
            return;
        }
        if self.held[c].iter().any(Option::is_some) {
            return;
        }
        let queued = rng.below(2) == 0;
        let options = if queued {
            Self::in_line()
        } else {
            LockOptions::new().retry(RetryPolicy::none())
        };
        let ask = self.ask(rng);
        let got = self.clients[c].lock_all(RESOURCES, &ask.options(options));
        self.log.push(format!(
            "client {c} lock_all {RESOURCES:?} (in line: {queued}, {ask:?}): {}",
            got.is_ok()
        ));
        self.sets_taken += u64::from(got.is_ok());
        self.sets[c] = got.ok().inspect(|g| ask.check(g, &self.log));
    }

    /// One scan of the semaphore's slots by client `c` (plain or fenced,
    /// as a lock would be), unless it holds two permits already.
    pub(crate) fn take_permit(&mut self, c: usize, rng: &mut Draws) {
        if self.permits[c].len() >= 2 {
            return;
        }
        let ask = self.ask(rng);
        let once = ask.options(LockOptions::new().retry(RetryPolicy::none()));
        let semaphore = self.clients[c]
            .semaphore(SEMAPHORE, self.asks_permits[c])
            .unwrap();
        let got = semaphore.acquire_with(&once);
        self.log.push(format!(
            "client {c} permit ({ask:?}): {:?}",
            got.as_ref()
                .map(|g| String::from_utf8_lossy(g.resource()).into_owned())
        ));
        match got {
            Ok(permit) => {
                ask.check(&permit, &self.log);
                self.permits_taken += 1;
                self.permits[c].push(permit);
            }
            Err(e) if e.is_contended() => self.semaphore_full += 1,
            Err(_) => {}
        }
    }

    /// The scheduled hand-over: the first held guard (or, if none is held,
    /// a fresh plain lock of client 0) is dropped while another thread of
    /// its manager waits for it.
    fn forced_hand_over(&mut self, rng: &mut Draws) {
        // A set holds every resource: let it go first, or nothing could be
        // taken to hand over.
        for c in 0..CLIENTS {
            if let Some(set) = self.sets[c].take() {
                let released = set.release().is_ok();
                self.log.push(format!(
                    "client {c} releases its set (released: {released})"
                ));
            }
        }
        let held = (0..CLIENTS)
            .flat_map(|c| (0..RESOURCES.len()).map(move |r| (c, r)))
            .find(|&(c, r)| self.held[c][r].is_some());
        let (c, r) = match held {
            Some(slot) => slot,
            None => {
                let r = rng.below(RESOURCES.len());
                // In line, so that the guard holds the line's turn (a lock
                // taken in one attempt skips the line: nobody queues
                // behind it, and nothing can be handed over).
                let plain = Self::in_line().fencing(false);
                let got = self.clients[0].lock_with(RESOURCES[r], &plain);
                self.log.push(format!(
                    "client 0 lock {r} (for a hand-over): {}",
                    got.is_ok()
                ));
                self.held[0][r] = got.ok();
                (0, r)
            }
        };
        let ask = self.ask(rng);
        let by_release = rng.below(2) == 0;
        self.hand_over(c, r, ask, by_release);
    }

    /// Ends client `c`'s guard on `r` (by drop, or by `release()` when
    /// `by_release`) while a second thread of the same manager waits for it
    /// in `lock` asking for `ask`: the lock is handed over (same token and
    /// deadline) only when it is what the waiter asked for, else released;
    /// the waiter then holds the result.
    fn hand_over(&mut self, c: usize, r: usize, ask: Ask, by_release: bool) {
        let Some(guard) = self.held[c][r].take() else {
            return;
        };
        let locks = self.clients[c].clone();
        let options = ask.options(Self::in_line());
        let waiter = std::thread::spawn(move || locks.lock_with(RESOURCES[r], &options));
        // Until the waiter is in line (or its call is over), for at most 2 s.
        testkit::wait_until_with(
            Duration::from_secs(2),
            Duration::from_micros(100),
            || waiter.is_finished(),
            || self.clients[c].local_waiters(RESOURCES[r]) > 0,
        );
        let how = if by_release {
            match guard.release() {
                Ok(report) if report.handed_over() => {
                    self.released_hand_overs += 1;
                    "release() handed over"
                }
                Ok(_) => "release() released",
                Err(_) => "release() failed",
            }
        } else {
            drop(guard);
            "drop"
        };
        let got = waiter.join().unwrap();
        self.log.push(format!(
            "client {c} hand over {r} to {ask:?} by {how}: {}",
            got.is_ok()
        ));
        self.held[c][r] = got.ok().inspect(|g| ask.check(g, &self.log));
    }
}
