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
//! The lock itself is still released and acquired on the servers at every
//! turn: other processes compete on equal terms.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// The lines, one per resource key that some thread of this manager is
/// holding or contending for.
#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    lines: Mutex<HashMap<Arc<[u8]>, Line>>,
}

/// Threads waiting behind the current turn-holder, oldest first.
#[derive(Debug, Default)]
struct Line {
    waiting: VecDeque<(u64, Sender<()>)>,
    next_id: u64,
}

/// The outcome of waiting in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// This thread may now contend with the servers; it must call
    /// [`LocalQueue::pass`] when done (released, gave up, or forgot).
    Mine,
    /// The deadline passed first; this thread is out of the line.
    TimedOut,
}

impl LocalQueue {
    /// Waits until it is this thread's turn for `key`, or `deadline`.
    pub(crate) fn wait_turn(&self, key: &Arc<[u8]>, deadline: Instant) -> Turn {
        let (id, turn) = {
            let mut lines = self.lines.lock();
            let Some(line) = lines.get_mut(key) else {
                lines.insert(Arc::clone(key), Line::default());
                return Turn::Mine;
            };
            let (tx, rx) = crossbeam_channel::bounded(1);
            let id = line.next_id;
            line.next_id += 1;
            line.waiting.push_back((id, tx));
            (id, rx)
        };
        if turn.recv_deadline(deadline).is_ok() {
            return Turn::Mine;
        }
        self.leave_line(key, id, &turn)
    }

    /// Leaves the line after a timeout, unless the turn arrived meanwhile
    /// (checked under the same lock that hands turns out, so a turn is
    /// never lost).
    fn leave_line(&self, key: &[u8], id: u64, turn: &Receiver<()>) -> Turn {
        let mut lines = self.lines.lock();
        if turn.try_recv().is_ok() {
            return Turn::Mine;
        }
        if let Some(line) = lines.get_mut(key) {
            line.waiting.retain(|(waiter, _)| *waiter != id);
        }
        Turn::TimedOut
    }

    /// Ends this thread's turn for `key`: the next waiter (if any) gets it.
    /// Call after the release has been sent, so the next waiter's acquire
    /// queues behind it on every node.
    pub(crate) fn pass(&self, key: &[u8]) {
        let mut lines = self.lines.lock();
        let Some(line) = lines.get_mut(key) else {
            return;
        };
        while let Some((_, next)) = line.waiting.pop_front() {
            if next.try_send(()).is_ok() {
                return;
            }
        }
        lines.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(k: &str) -> Arc<[u8]> {
        k.as_bytes().into()
    }

    #[test]
    fn turns_are_handed_on_in_order() {
        let queue = Arc::new(LocalQueue::default());
        let k = key("r");
        let far = Instant::now() + Duration::from_secs(10);
        assert_eq!(queue.wait_turn(&k, far), Turn::Mine);
        let (order_tx, order) = crossbeam_channel::unbounded();
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (q, key, order_tx) = (Arc::clone(&queue), Arc::clone(&k), order_tx.clone());
                let handle = std::thread::spawn(move || {
                    assert_eq!(q.wait_turn(&key, far), Turn::Mine);
                    order_tx.send(i).unwrap();
                    q.pass(&key);
                });
                // Each waiter is in line before the next one starts.
                while queue.lines.lock()[&k].waiting.len() < i + 1 {
                    std::thread::yield_now();
                }
                handle
            })
            .collect();
        queue.pass(&k);
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
        assert_eq!(queue.wait_turn(&k, Instant::now()), Turn::Mine);
        assert_eq!(queue.wait_turn(&k, Instant::now()), Turn::TimedOut);
        assert!(queue.lines.lock()[&k].waiting.is_empty());
        queue.pass(&k);
        assert!(queue.lines.lock().is_empty());
        // Other keys are independent.
        assert_eq!(queue.wait_turn(&key("a"), Instant::now()), Turn::Mine);
        assert_eq!(queue.wait_turn(&key("b"), Instant::now()), Turn::Mine);
    }
}
