//! The scheduled wait of the read-write walks (mode `r`): a writer on a
//! thread of its own waits for readers to leave while the clock moves, so
//! that its admission comes later than its intent (and, past half its
//! TTL, its intent is extended meanwhile); once its intent is taken, a new
//! reader must be refused.

use std::time::Duration;

use quorum_lock::{CancellationToken, LockGuard, RetryPolicy};

use crate::config::{HAND_OVER_EVERY, RW_CLIENTS};
use crate::draws::Draws;
use crate::rw::{GRANTED, Rw};
use crate::world::World;

impl World {
    /// The scheduled wait: client `(step / HAND_OVER_EVERY) % RW_CLIENTS`
    /// lets go of its guards, another client reads if nobody else does,
    /// and the first one writes, waiting for the readers.
    pub(crate) fn scheduled_waited_write(&mut self, rng: &mut Draws, step: usize) {
        let c = (step / HAND_OVER_EVERY) % RW_CLIENTS;
        for which in [2, 1, 0] {
            self.rw_let_go(c, which, true);
        }
        let reading = |rw: &Rw, r: usize| rw.reads[r].iter().any(|h| h.guard.is_valid());
        let rw = self.rw.as_ref().expect("mode r");
        if !(0..RW_CLIENTS).any(|r| r != c && reading(rw, r)) {
            let r = (c + 1) % RW_CLIENTS;
            let rw = self.rw();
            let got = if rw.reads[r].len() < 2 {
                rw.locks[r].try_read()
            } else {
                return;
            };
            let outcome = self.rw_got(r, false, self.plain(), true, got);
            self.log
                .push(format!("rw client {r} try_read (for a wait): {outcome}"));
        }
        self.rw_waited_write(c, rng);
    }

    /// Client `c` writes on a thread while other clients read; once its
    /// intent is taken, a new reader must be refused; the clock moves
    /// (past half the TTL at times: the intent is extended while it
    /// waits), the readers let go, and the writer is admitted. Only when
    /// the readers' entries on the nodes are all theirs and no writer's
    /// key is anywhere (else nobody could tell when it would get in).
    fn rw_waited_write(&mut self, c: usize, rng: &mut Draws) {
        let ask = self.rw_ask(rng, true);
        let delta =
            Duration::from_millis(rng.below(self.shape.ttl.as_millis() as usize * 3 / 4) as u64);
        let r = (c + 1 + rng.below(RW_CLIENTS - 1)) % RW_CLIENTS;
        let releases: Vec<bool> = (0..RW_CLIENTS * 2).map(|_| rng.below(2) == 0).collect();
        let rw = self.rw.as_ref().expect("mode r");
        let (readers_key, writer_key) = rw.locks[c].keys();
        let live: Vec<&LockGuard> = rw.reads.iter().flatten().map(|h| &h.guard).collect();
        let theirs = |entry: &[u8]| live.iter().any(|g| g.token().matches_stored(entry));
        let ready = rw.reads[c].is_empty()
            && rw.writes.iter().all(Option::is_none)
            && live.iter().any(|g| g.is_valid())
            && self.nodes.iter().all(|n| {
                n.holder(writer_key).is_none()
                    && n.readers(readers_key).iter().all(|(e, _)| theirs(e))
            });
        if !ready {
            self.rw().counts.waits_skipped += 1;
            self.log
                .push(format!("rw client {c} waited write: skipped"));
            return;
        }
        // Faults that a round consumes would go to whichever thread comes
        // first: none during the wait.
        for node in &self.nodes {
            node.fail_next(0);
            node.lose_replies_next(0);
        }
        let manager = rw.managers[c].clone();
        let before = manager.health().locks.acquired;
        let token = CancellationToken::new();
        let options = ask.options().cancellation(&token).retry(
            RetryPolicy::new()
                .attempts(u32::MAX)
                .delay(Duration::from_millis(2))
                .jitter(Duration::ZERO)
                .max_wait(Duration::from_secs(10)),
        );
        let lock = rw.locks[c].clone();
        let writer = std::thread::spawn(move || lock.write_with(&options));
        // Until the intent is taken (a lock acquired by the writer's
        // manager) or the call is over.
        let taken = || manager.health().locks.acquired > before;
        testkit::wait_until_with(
            Duration::from_millis(500),
            Duration::from_millis(1),
            || writer.is_finished(),
            taken,
        );
        if !taken() {
            // No intent (this manager sees too few nodes that may grant):
            // nothing to wait for.
            token.cancel();
        }
        let (waiting, mut writer) = (taken() && !writer.is_finished(), Some(writer));
        let early = match waiting {
            true => None,
            false => writer.take().map(|w| w.join().unwrap()),
        };
        // The intent (or the writer itself) is on a quorum: a reader that
        // comes now is refused.
        let intent = taken() && early.as_ref().is_none_or(Result::is_ok);
        if intent {
            let got = self.rw().locks[r].try_read();
            assert!(
                got.is_err(),
                "rw client {r} read while client {c}'s intent (or write) was on a quorum; last \
                 steps: {:?}",
                &self.log[self.log.len().saturating_sub(12)..]
            );
            self.rw().counts.refused_behind_intent += 1;
        }
        self.clock.advance(delta);
        for (r, by_release) in (0..RW_CLIENTS).zip(releases.chunks(2)) {
            for which in [1, 0] {
                self.rw_let_go(r, which, by_release[which]);
            }
        }
        let result = match writer {
            None => early.expect("joined early"),
            Some(writer) => {
                testkit::wait_until_with(
                    Duration::from_secs(1),
                    Duration::from_millis(1),
                    || false,
                    || writer.is_finished(),
                );
                token.cancel();
                writer.join().unwrap()
            }
        };
        let outcome = self.rw_got(c, true, ask, false, result);
        let rw = self.rw();
        if let Some(held) = rw.writes[c]
            .as_ref()
            .filter(|_| waiting && outcome == GRANTED)
        {
            rw.counts.waited_admissions += 1;
            // The admission counts as an extend; more is the intent's.
            rw.counts.intent_extends += u64::from(held.base >= 2);
        }
        self.log.push(format!(
            "rw client {c} waited write ({ask:?}, intent taken: {intent}, clock +{delta:?}): \
             {outcome}"
        ));
    }
}
