//! A channel whose receiver goes to sleep at once: for the waits between
//! the crate's own threads that are not a round's votes (those have
//! `engine/ballots.rs`): a barrier's answers, a subscriber connection's
//! replies.
//!
//! Why not `crossbeam_channel`: its blocking receive (and `Select`) first
//! spins, then gives the CPU away with `sched_yield` up to four times
//! before it sleeps. A wait here lasts a server's round trip or more, so
//! the spinning never catches the message, and on a machine with more
//! runnable threads than cores each yield is a switch to another thread:
//! with 4 processes taking turns on one key (the benchmark's
//! `--cross-process`), quorum-lock's callers and node threads made about
//! 4.4 and 3.3 `sched_yield` calls per lock, most of them in these two
//! waits (`perf record -e syscalls:sys_enter_sched_yield --call-graph
//! dwarf`; docs/benchmarks.md).
//!
//! The semantics are the channel's: messages in order, [`Sender`] cloned
//! per producer, and a receive that finds the queue empty with every
//! sender gone says so ([`Empty::Closed`]). Unbounded: each use bounds what it
//! sends (one answer per node's barrier job; one reply per request on a
//! subscriber connection, read as they come).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// What a receive got instead of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// Nothing arrived by the deadline (or, for `try_recv`, yet).
    Waiting,
    /// Nothing is queued and every sender is gone: nothing can arrive.
    Closed,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    arrived: Condvar,
}

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    /// Whether the receiver is still there.
    received: bool,
}

/// The producing side; cloned per producer.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

/// The consuming side (one).
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

/// A new channel, with one sender.
pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            senders: 1,
            received: true,
        }),
        arrived: Condvar::new(),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `message` and wakes the receiver if it sleeps; gives the
    /// message back when the receiver is gone.
    pub(crate) fn send(&self, message: T) -> Result<(), T> {
        let mut state = self.0.state.lock();
        if !state.received {
            return Err(message);
        }
        state.queue.push_back(message);
        drop(state);
        self.0.arrived.notify_one();
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.state.lock().senders += 1;
        Self(Arc::clone(&self.0))
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.senders -= 1;
        if state.senders == 0 {
            drop(state);
            self.0.arrived.notify_one();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.state.lock().received = false;
    }
}

impl<T> Receiver<T> {
    /// The next message, sleeping until one arrives, every sender is gone
    /// or `deadline` passes (`None`: no deadline).
    pub(crate) fn recv_until(&self, deadline: Option<Instant>) -> Result<T, Empty> {
        let mut state = self.0.state.lock();
        loop {
            if let Some(message) = state.queue.pop_front() {
                return Ok(message);
            }
            if state.senders == 0 {
                return Err(Empty::Closed);
            }
            let timed_out = match deadline {
                Some(deadline) => self.0.arrived.wait_until(&mut state, deadline).timed_out(),
                None => {
                    self.0.arrived.wait(&mut state);
                    false
                }
            };
            // At the deadline, one last look above (a message, or the end,
            // may have come with it) only if something did come.
            if timed_out && state.queue.is_empty() && state.senders > 0 {
                return Err(Empty::Waiting);
            }
        }
    }

    /// The next message if one is queued, without waiting.
    // Used by the Redis backend's subscriber (and the tests).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn try_recv(&self) -> Result<T, Empty> {
        let mut state = self.0.state.lock();
        match state.queue.pop_front() {
            Some(message) => Ok(message),
            None if state.senders == 0 => Err(Empty::Closed),
            None => Err(Empty::Waiting),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::Duration;

    use super::*;

    #[test]
    fn messages_arrive_in_order_then_the_end_is_told() {
        let (tx, rx) = channel();
        let other = tx.clone();
        tx.send(1).unwrap();
        other.send(2).unwrap();
        drop(tx);
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(rx.recv_until(None), Ok(2));
        assert_eq!(rx.try_recv(), Err(Empty::Waiting), "a sender is left");
        drop(other);
        assert_eq!(rx.try_recv(), Err(Empty::Closed));
        assert_eq!(rx.recv_until(None), Err(Empty::Closed));
    }

    #[test]
    fn a_send_without_a_receiver_gives_the_message_back() {
        let (tx, rx) = channel();
        drop(rx);
        assert_eq!(tx.send(3), Err(3));
    }

    #[test]
    fn a_sleeping_receiver_is_woken_by_a_message_or_the_last_sender_going() {
        let (tx, rx) = channel::<u32>();
        let sent = thread::spawn(move || {
            tx.send(7).unwrap();
            tx
        });
        assert_eq!(rx.recv_until(None), Ok(7));
        let tx = sent.join().unwrap();
        let gone = thread::spawn(move || drop(tx));
        assert_eq!(rx.recv_until(None), Err(Empty::Closed));
        gone.join().unwrap();
    }

    #[test]
    fn a_receive_ends_at_its_deadline() {
        let (tx, rx) = channel::<u32>();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert_eq!(rx.recv_until(Some(deadline)), Err(Empty::Waiting));
        assert!(Instant::now() >= deadline);
        drop(tx);
    }
}
