//! Waiting in line inside the process: threads of one manager that want the
//! same resource take turns locally, so only one of them contends with the
//! servers at a time, and the next one starts the moment the lock is let go.
//!
//! Without this, every waiting thread polls the servers with its own
//! retries: N threads cost N remote attempts per retry period, and the
//! thread that gets the lock next is whichever retry happens to land first,
//! after a sleep. With it, a release wakes exactly one local waiter, whose
//! acquire is queued right behind the release on every node (per-node FIFO),
//! so the hand-over costs about one round trip and no sleep.
//!
//! When a guard is dropped while a thread waits in line, the lock itself
//! may be handed over instead (see `Rounds::hand_over`): no round trip
//! at all. That is bounded, so other processes get their chance.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use parking_lot::Mutex;

use super::lease::Lease;
use crate::cancel::Alarm;

/// The lines, one per resource key that some thread of this manager is
/// holding or contending for.
#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    lines: Mutex<HashMap<Arc<[u8]>, Line>>,
}

/// Threads waiting behind the current turn-holder, oldest first.
#[derive(Debug, Default)]
struct Line {
    waiting: VecDeque<Waiter>,
    next_id: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    /// The lock the waiter asked for: a handed-over lock must match it.
    want: Want,
    grant: Sender<Grant>,
}

/// What a waiting thread asked for: everything a handed-over lock must
/// match (issue 17, hole 2: a fenced waiter was handed a plain lock when
/// the line knew only the TTL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Want {
    /// The TTL of the lock.
    pub(crate) ttl: Duration,
    /// A fencing token: such a waiter needs a fence of its own, larger
    /// than the holder's, so it is never handed a lock.
    pub(crate) fenced: bool,
}

/// What a waiter receives when its turn comes.
#[derive(Debug)]
enum Grant {
    /// Contend with the servers now.
    Turn(Streak),
    /// The lock itself, handed over by the previous holder.
    Lock(Handoff),
}

/// Local turns taken in a row for one key. After [`MAX_STREAK`] the next
/// turn starts with a pause, so other processes get a window to win the
/// lock: a waiter's acquire is otherwise queued right behind the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Streak {
    /// Turns (or hand-overs) in a row before this one.
    pub(crate) count: u32,
    /// Pause one retry delay before contending.
    pub(crate) yield_first: bool,
}

/// Most local turns (or hand-overs) in a row before one yields to others.
pub(crate) const MAX_STREAK: u32 = 64;

impl Streak {
    /// The streak of the turn after this one.
    pub(crate) fn next(self) -> Self {
        if self.count + 1 >= MAX_STREAK {
            Self {
                count: 0,
                yield_first: true,
            }
        } else {
            Self {
                count: self.count + 1,
                yield_first: false,
            }
        }
    }
}

/// A held lock passed from one thread to the next without a round trip.
#[derive(Debug)]
pub(crate) struct Handoff {
    /// The lock, renamed for its new holder (same token, same deadline).
    pub(crate) lease: Arc<Lease>,
    /// The new holder's place in the streak of local turns.
    pub(crate) streak: Streak,
}

/// The outcome of waiting in line.
#[derive(Debug)]
pub(crate) enum Turn {
    /// This thread may now contend with the servers; it must call
    /// [`LocalQueue::pass`] when done (released, gave up, or forgot).
    Mine(Streak),
    /// The lock itself arrived; the turn comes with it.
    Handed(Handoff),
    /// The deadline passed first; this thread is out of the line.
    TimedOut,
    /// The call's cancellation token was cancelled; out of the line.
    Cancelled,
}

impl LocalQueue {
    /// Waits until it is this thread's turn for `key` (asking for `want`),
    /// or `deadline` (`None`: as long as it takes), or until `alarm`
    /// reports a cancellation.
    pub(crate) fn wait_turn(
        &self,
        key: &Arc<[u8]>,
        want: Want,
        deadline: Option<Instant>,
        alarm: &Alarm,
    ) -> Turn {
        let (id, grant) = {
            let mut lines = self.lines.lock();
            let Some(line) = lines.get_mut(key) else {
                lines.insert(Arc::clone(key), Line::default());
                return Turn::Mine(Streak::default());
            };
            let (tx, rx) = crossbeam_channel::bounded(1);
            let id = line.next_id;
            line.next_id += 1;
            line.waiting.push_back(Waiter {
                id,
                want,
                grant: tx,
            });
            (id, rx)
        };
        let mut select = Select::new();
        let on_grant = select.recv(&grant);
        select.recv(alarm.receiver());
        loop {
            let ready = match deadline {
                Some(deadline) => select.select_deadline(deadline).ok(),
                None => Some(select.select()),
            };
            let Some(ready) = ready else {
                return self.leave_line(key, id, &grant, Turn::TimedOut);
            };
            if ready.index() == on_grant {
                return match ready.recv(&grant) {
                    Ok(grant) => grant.into(),
                    // The line dropped our sender without a grant: cannot
                    // happen while we are in it; leave rather than hang.
                    Err(_) => self.leave_line(key, id, &grant, Turn::TimedOut),
                };
            }
            let _ = ready.recv(alarm.receiver());
            if alarm.is_cancelled() {
                return self.leave_line(key, id, &grant, Turn::Cancelled);
            }
        }
    }

    /// Leaves the line (returning `outcome`), unless the turn arrived
    /// meanwhile (checked under the same lock that hands turns out, so a
    /// turn, or a lock, is never lost).
    fn leave_line(&self, key: &[u8], id: u64, grant: &Receiver<Grant>, outcome: Turn) -> Turn {
        let mut lines = self.lines.lock();
        if let Ok(grant) = grant.try_recv() {
            return grant.into();
        }
        if let Some(line) = lines.get_mut(key) {
            line.waiting.retain(|w| w.id != id);
        }
        outcome
    }

    /// Threads waiting in line for `key` (not counting the turn-holder).
    pub(crate) fn waiting(&self, key: &[u8]) -> usize {
        self.lines
            .lock()
            .get(key)
            .map_or(0, |line| line.waiting.len())
    }

    /// Ends this thread's turn for `key`: the next waiter (if any) gets it.
    /// Call after the release has been sent, so the next waiter's acquire
    /// queues behind it on every node.
    pub(crate) fn pass(&self, key: &[u8], streak: Streak) {
        self.pass_with(key, streak, |_| None);
    }

    /// Ends this thread's turn (at `streak`) for `key`. `offer` is called
    /// (under the line's lock) with what the next waiter wants, or `None` when
    /// nobody waits: it returns the lock to hand over, or `None` after
    /// sending the release itself, in which case the next waiter gets the
    /// turn. Returns whether the lock was handed over.
    pub(crate) fn pass_with(
        &self,
        key: &[u8],
        streak: Streak,
        offer: impl FnOnce(Option<&Want>) -> Option<Handoff>,
    ) -> bool {
        let mut lines = self.lines.lock();
        let Some(line) = lines.get_mut(key) else {
            let _ = offer(None);
            return false;
        };
        let Some(next) = line.waiting.pop_front() else {
            lines.remove(key);
            let _ = offer(None);
            return false;
        };
        match offer(Some(&next.want)) {
            // The waiter is still in line (a waiter leaves only under this
            // lock), so its receiver is alive and the slot is free.
            Some(handoff) => {
                let _ = next.grant.try_send(Grant::Lock(handoff));
                true
            }
            None => {
                let _ = next.grant.try_send(Grant::Turn(streak.next()));
                false
            }
        }
    }
}

impl From<Grant> for Turn {
    fn from(grant: Grant) -> Self {
        match grant {
            Grant::Turn(streak) => Turn::Mine(streak),
            Grant::Lock(handoff) => Turn::Handed(handoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::redlock::turns::*;

    const TTL: Want = Want {
        ttl: Duration::from_secs(1),
        fenced: false,
    };

    fn key(k: &str) -> Arc<[u8]> {
        k.as_bytes().into()
    }

    #[test]
    fn turns_are_handed_on_in_order() {
        let queue = Arc::new(LocalQueue::default());
        let k = key("r");
        let far = Instant::now() + Duration::from_secs(10);
        assert!(matches!(
            queue.wait_turn(&k, TTL, Some(far), &Alarm::new(None)),
            Turn::Mine(_)
        ));
        let (order_tx, order) = crossbeam_channel::unbounded();
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (q, key, order_tx) = (Arc::clone(&queue), Arc::clone(&k), order_tx.clone());
                let handle = std::thread::spawn(move || {
                    let Turn::Mine(streak) = q.wait_turn(&key, TTL, Some(far), &Alarm::new(None))
                    else {
                        panic!("expected the turn");
                    };
                    assert_eq!(streak.count, i as u32 + 1);
                    order_tx.send(i).unwrap();
                    q.pass(&key, streak);
                });
                // Each waiter is in line before the next one starts.
                while queue.lines.lock()[&k].waiting.len() < i + 1 {
                    std::thread::yield_now();
                }
                handle
            })
            .collect();
        queue.pass(&k, Streak::default());
        waiters.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(order.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(
            queue.lines.lock().is_empty(),
            "the last pass removes the line"
        );
    }

    #[test]
    fn a_waiter_that_times_out_leaves_the_line() {
        let queue = LocalQueue::default();
        let k = key("r");
        let now = Instant::now();
        assert!(matches!(
            queue.wait_turn(&k, TTL, Some(now), &Alarm::new(None)),
            Turn::Mine(_)
        ));
        assert!(matches!(
            queue.wait_turn(&k, TTL, Some(now), &Alarm::new(None)),
            Turn::TimedOut
        ));
        assert!(queue.lines.lock()[&k].waiting.is_empty());
        queue.pass(&k, Streak::default());
        assert!(queue.lines.lock().is_empty());
        // Other keys are independent.
        assert!(matches!(
            queue.wait_turn(&key("a"), TTL, Some(now), &Alarm::new(None)),
            Turn::Mine(_)
        ));
        assert!(matches!(
            queue.wait_turn(&key("b"), TTL, Some(now), &Alarm::new(None)),
            Turn::Mine(_)
        ));
    }

    #[test]
    fn a_long_streak_yields_to_other_processes() {
        let mut streak = Streak::default();
        for _ in 1..MAX_STREAK {
            streak = streak.next();
            assert!(!streak.yield_first);
        }
        streak = streak.next();
        assert_eq!(
            streak,
            Streak {
                count: 0,
                yield_first: true
            }
        );
    }
}
