//! Read-write clients in the walk (mode `r`): [`RW_CLIENTS`] clients, each
//! with a manager of its own, on one `RwLock` over the world's nodes,
//! under the world's faults. A third of the drawn steps is theirs: `read`
//! and `write` (two attempts, the managers' policy; `read_with` /
//! `write_with` when the ask is not the default: a shorter TTL, a fence,
//! auto-extension), `try_read`, `try_write`, `extend`, `release`, drop,
//! a clock step, and a crash (every guard of the client forgotten, its
//! manager replaced); every [`HAND_OVER_EVERY`] steps one acquisition of
//! each kind in turn, and a writer that waits for readers to leave
//! (`rw_wait.rs`). The oracles are in `rw_oracles.rs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use quorum_lock::{Error, LockGuard, LockManager, LockOptions, RetryPolicy, RwLock};

use crate::config::{HAND_OVER_EVERY, RW_CLIENTS, RW_CRASHES, RW_LOCK};
use crate::draws::Draws;
use crate::rw_oracles::RwCounts;
use crate::world::World;

/// What [`World::rw_got`] says of a call that returned a guard.
pub(crate) const GRANTED: &str = "granted";

/// A guard a read-write client holds.
pub(crate) struct Held {
    pub(crate) guard: LockGuard,
    pub(crate) write: bool,
    pub(crate) auto: bool,
    /// Its extends when it was handed out, and the manual ones since (the
    /// rest, at its end, are the watchdog's).
    pub(crate) base: u32,
    pub(crate) manual: u32,
}

impl Held {
    fn new(guard: LockGuard, write: bool, auto: bool) -> Self {
        let base = guard.extensions();
        Self {
            guard,
            write,
            auto,
            base,
            manual: 0,
        }
    }
}

/// The read-write clients and what they hold.
pub(crate) struct Rw {
    pub(crate) managers: Vec<LockManager>,
    pub(crate) locks: Vec<RwLock>,
    /// Per client: its read guards (at most two) and its write guard.
    pub(crate) reads: Vec<Vec<Held>>,
    pub(crate) writes: Vec<Option<Held>>,
    /// The highest fence of a write guard so far, and the guards checked.
    pub(crate) fence: u64,
    pub(crate) checked: HashSet<Vec<u8>>,
    /// Managers built so far (each crash builds one).
    pub(crate) built: usize,
    pub(crate) counts: RwCounts,
}

/// What a read-write caller asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwAsk {
    pub(crate) ttl: Duration,
    pub(crate) fenced: bool,
    pub(crate) auto: bool,
}

impl RwAsk {
    pub(crate) fn options(self) -> LockOptions {
        LockOptions::new()
            .ttl(self.ttl)
            .fencing(self.fenced)
            .auto_extend(self.auto)
    }
}

impl World {
    /// A read-write client's manager: two attempts per call, without
    /// sleeping between them (so `read` and `write` wait, and stand
    /// back, where `try_read` and `try_write` do not).
    fn rw_manager(&self, label: String) -> LockManager {
        LockManager::builder()
            .nodes(self.nodes.iter().cloned())
            .owner(label)
            .clock(Arc::new(self.clock.clone()))
            .ttl(self.shape.ttl)
            .max_ttl(self.shape.max_ttl)
            .restart_quarantine(self.quarantine)
            .accept_eviction_risk(self.accept_eviction)
            .node_timeout(Duration::from_millis(200))
            .retry(
                RetryPolicy::new()
                    .attempts(2)
                    .delay(Duration::ZERO)
                    .jitter(Duration::ZERO)
                    .max_wait(Duration::from_secs(5)),
            )
            .build()
            .unwrap()
    }

    pub(crate) fn start_rw(&mut self) {
        let managers: Vec<LockManager> = (0..RW_CLIENTS)
            .map(|c| self.rw_manager(format!("rw-{c}")))
            .collect();
        self.rw = Some(Rw {
            locks: managers
                .iter()
                .map(|m| m.rw_lock(RW_LOCK).unwrap())
                .collect(),
            managers,
            reads: (0..RW_CLIENTS).map(|_| Vec::new()).collect(),
            writes: (0..RW_CLIENTS).map(|_| None).collect(),
            fence: 0,
            checked: HashSet::new(),
            built: RW_CLIENTS,
            counts: RwCounts::default(),
        });
    }

    /// Client `c` reads at once (for the canaries in `main.rs`).
    pub(crate) fn rw_read_now(&mut self, c: usize) {
        let got = self.rw().locks[c].try_read();
        assert_eq!(self.rw_got(c, false, self.plain(), false, got), GRANTED);
        assert!(self.rw().managers[c].flush(Duration::from_secs(10)));
    }

    /// Client `c` writes at once (for the canaries in `main.rs`).
    pub(crate) fn rw_write_now(&mut self, c: usize) {
        let got = self.rw().locks[c].try_write();
        assert_eq!(self.rw_got(c, true, self.plain(), false, got), GRANTED);
    }

    pub(crate) fn rw(&mut self) -> &mut Rw {
        self.rw.as_mut().expect("mode r")
    }

    pub(crate) fn rw_ask(&self, rng: &mut Draws, write: bool) -> RwAsk {
        let ttl = match rng.below(4) {
            0 => self.shape.ttl / 2,
            _ => self.shape.ttl,
        };
        RwAsk {
            ttl,
            fenced: write && rng.below(2) == 0,
            auto: rng.below(4) == 0,
        }
    }

    /// One drawn step of a read-write client.
    pub(crate) fn rw_step(&mut self, rng: &mut Draws) {
        let c = rng.below(RW_CLIENTS);
        match rng.below(12) {
            0 => self.rw_take(c, false, false, rng),
            1 => self.rw_take(c, false, true, rng),
            2 => self.rw_take(c, true, false, rng),
            3 => self.rw_take(c, true, true, rng),
            4 | 5 => self.rw_extend(c, rng),
            6 | 7 => {
                let by_release = rng.below(2) == 0;
                let which = rng.below(3);
                self.rw_let_go(c, which, by_release);
            }
            8 => self.rw_crash(c),
            _ => {
                let ms = rng.below(self.shape.max_advance_ms) as u64;
                self.clock.advance(Duration::from_millis(ms));
                self.log.push(format!("rw: advance {ms}ms"));
            }
        }
    }

    /// Client `c` takes a side: `once` for `try_read` / `try_write`.
    fn rw_take(&mut self, c: usize, write: bool, once: bool, rng: &mut Draws) {
        let ask = match once {
            true => self.plain(),
            false => self.rw_ask(rng, write),
        };
        self.rw_take_as(c, write, once, ask);
    }

    /// The default ask: the lock's TTL, no fence, no auto-extension.
    pub(crate) fn plain(&self) -> RwAsk {
        RwAsk {
            ttl: self.shape.ttl,
            fenced: false,
            auto: false,
        }
    }

    /// The scheduled acquisition: client `(step / HAND_OVER_EVERY) %
    /// RW_CLIENTS` lets go of its guards (the write guard of its waited
    /// write, often) and takes, round-robin, each kind in turn (`read`,
    /// `try_read`, `write`, `try_write`, an auto-extended read, an
    /// auto-extended fenced write), so that every path runs whenever the
    /// nodes can grant, whatever the draw.
    pub(crate) fn scheduled_rw_take(&mut self, step: usize) {
        let turn = step / HAND_OVER_EVERY;
        let c = turn % RW_CLIENTS;
        for which in [2, 1, 0] {
            self.rw_let_go(c, which, true);
        }
        let auto = RwAsk {
            auto: true,
            ..self.plain()
        };
        match (turn / RW_CLIENTS) % 6 {
            0 => self.rw_take_as(c, false, false, self.plain()),
            1 => self.rw_take_as(c, false, true, self.plain()),
            2 => self.rw_take_as(c, true, false, self.plain()),
            3 => self.rw_take_as(c, true, true, self.plain()),
            4 => self.rw_take_as(c, false, false, auto),
            _ => self.rw_take_as(
                c,
                true,
                false,
                RwAsk {
                    fenced: true,
                    ..auto
                },
            ),
        }
    }

    fn rw_take_as(&mut self, c: usize, write: bool, once: bool, ask: RwAsk) {
        let plain = ask.ttl == self.shape.ttl && !ask.fenced && !ask.auto;
        let rw = self.rw();
        if (write && rw.writes[c].is_some()) || (!write && rw.reads[c].len() >= 2) {
            return;
        }
        let holds = !rw.reads[c].is_empty() || rw.writes[c].is_some();
        let lock = &rw.locks[c];
        let got = match (write, once, plain) {
            (false, true, _) => lock.try_read(),
            (false, false, true) => lock.read(),
            (false, false, false) => lock.read_with(&ask.options()),
            (true, true, _) => lock.try_write(),
            (true, false, true) => lock.write(),
            (true, false, false) => lock.write_with(&ask.options()),
        };
        let what = format!(
            "rw client {c} {}{} ({ask:?})",
            if once { "try_" } else { "" },
            if write { "write" } else { "read" }
        );
        let outcome = self.rw_got(c, write, ask, holds, got);
        if outcome == GRANTED {
            let counts = &mut self.rw().counts;
            *match (write, once) {
                (false, false) => &mut counts.read,
                (false, true) => &mut counts.try_read,
                (true, false) => &mut counts.write,
                (true, true) => &mut counts.try_write,
            } += 1;
        }
        self.log.push(format!("{what}: {outcome}"));
    }

    /// Files what a call returned; the line for the log.
    pub(crate) fn rw_got(
        &mut self,
        c: usize,
        write: bool,
        ask: RwAsk,
        holds: bool,
        got: Result<LockGuard, Error>,
    ) -> String {
        let log = self.log[self.log.len().saturating_sub(12)..].to_vec();
        match got {
            Ok(guard) => {
                let fence = guard.fence();
                // The guard is the lock its caller asked for.
                assert!(
                    fence.is_some() == (write && ask.fenced) && guard.validity() <= ask.ttl,
                    "rw client {c} asked for {ask:?} (write: {write}), got fence {fence:?}, \
                     {:?} of validity; last steps: {log:?}",
                    guard.validity()
                );
                let held = Held::new(guard, write, ask.auto);
                let rw = self.rw();
                rw.counts.fenced_writes += u64::from(fence.is_some());
                match write {
                    true => rw.writes[c] = Some(held),
                    false => rw.reads[c].push(held),
                }
                GRANTED.into()
            }
            Err(e) if e.is_deadlock() => {
                // No upgrade, no wait for oneself: only for a client that
                // holds a side of the lock in its manager.
                assert!(
                    holds,
                    "rw client {c}: {e} while it holds nothing; last steps: {log:?}"
                );
                self.rw().counts.deadlocks += 1;
                "deadlock (no upgrade)".into()
            }
            Err(e) => {
                assert!(
                    e.is_contended()
                        || e.is_no_quorum()
                        || e.is_retryable()
                        || e.is_lost()
                        || e.is_cancelled(),
                    "rw client {c}: unexpected {e}; last steps: {log:?}"
                );
                self.rw().counts.refused += 1;
                format!("refused ({e})")
            }
        }
    }

    /// Client `c` extends one of its guards: shorter, equal or longer than
    /// the lock's TTL.
    fn rw_extend(&mut self, c: usize, rng: &mut Draws) {
        let which = rng.below(3);
        let ttl = [
            Duration::from_millis(300),
            self.shape.ttl,
            self.shape.max_ttl,
        ][rng.below(3)];
        let rw = self.rw();
        let (write, held) = match rw.writes[c].as_mut() {
            Some(held) if which == 2 || rw.reads[c].is_empty() => (true, held),
            _ => match rw.reads[c].get_mut(which % 2) {
                Some(held) => (false, held),
                None => return,
            },
        };
        let result = held.guard.extend(ttl);
        let counts = &mut rw.counts;
        match &result {
            Ok(_) if write => counts.write_extends += 1,
            Ok(_) => counts.read_extends += 1,
            Err(e) => {
                assert!(e.is_lost(), "rw client {c}: extend({ttl:?}): {e}");
                counts.extends_failed += 1;
            }
        }
        held.manual += u32::from(result.is_ok());
        self.log.push(format!(
            "rw client {c} extend (write: {write}) {ttl:?}: {}",
            result.is_ok()
        ));
    }

    /// Client `c` lets go of one of its guards (`which`: 2 the write
    /// guard, else a read guard), by `release()` or by drop.
    pub(crate) fn rw_let_go(&mut self, c: usize, which: usize, by_release: bool) {
        let rw = self.rw();
        let held = match which {
            2 => rw.writes[c].take(),
            _ if rw.reads[c].len() > which => Some(rw.reads[c].remove(which)),
            _ => rw.reads[c].pop(),
        };
        let Some(held) = held else { return };
        rw.counts.ended(&held);
        let released = match by_release {
            true => {
                rw.counts.releases += 1;
                Some(held.guard.release().is_ok())
            }
            false => {
                rw.counts.drops += 1;
                None
            }
        };
        self.log
            .push(format!("rw client {c} lets go (released: {released:?})"));
    }

    /// Client `c` crashes: every guard it holds is forgotten (nothing of it
    /// runs, as in a killed process: `mem::forget`; an auto-extended one
    /// through `LockGuard::forget`, which stops its renewal, as the kill
    /// would), and it comes back with a new manager.
    fn rw_crash(&mut self, c: usize) {
        let rw = self.rw();
        let holds = !rw.reads[c].is_empty() || rw.writes[c].is_some();
        if !holds || rw.counts.crashes >= RW_CRASHES as u64 {
            return;
        }
        rw.built += 1;
        let label = format!("rw-{c}-{}", rw.built);
        let fresh = self.rw_manager(label);
        let rw = self.rw();
        let held: Vec<Held> = rw.reads[c].drain(..).chain(rw.writes[c].take()).collect();
        for held in held {
            rw.counts.ended(&held);
            match held.auto {
                true => held.guard.forget(),
                false => std::mem::forget(held.guard),
            }
        }
        rw.counts.crashes += 1;
        rw.locks[c] = fresh.rw_lock(RW_LOCK).unwrap();
        rw.managers[c] = fresh;
        self.log.push(format!("rw client {c} crashed"));
    }
}
