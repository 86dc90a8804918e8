//! A node thread's job queue: many senders, one receiver that sleeps at
//! once when the queue is empty, and a send that wakes it only when it
//! sleeps.
//!
//! The channel crate's blocking receive first spins, then yields the CPU
//! (`sched_yield`) a few times before it sleeps. A node thread mostly
//! waits, and with more threads than cores each yield is a switch to
//! another thread: measured with 8 threads taking locks on N=3 nodes,
//! about one `sched_yield` per lock came from the node threads. Here the
//! receiver parks on a condition variable (no spin, no yield), and a
//! sender whose job finds nobody asleep pays no system call (parking_lot's
//! `notify_one` with no waiter is one atomic load).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when a job arrives or the last sender goes.
    ready: Condvar,
}

struct State<T> {
    jobs: VecDeque<T>,
    /// Live [`Sender`]s: at zero, a drained queue is closed.
    senders: usize,
    /// Whether the [`Receiver`] still exists: sends fail once it is gone.
    receiving: bool,
}

/// The sending side; cloned for every holder.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

/// The node thread's side.
pub(crate) struct Receiver<T>(Arc<Shared<T>>);

/// Why [`Receiver::recv_until`] returned no job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// The deadline passed with the queue empty.
    Timeout,
    /// Every sender is gone and the queue is drained.
    Closed,
}

/// A new queue.
pub(crate) fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            jobs: VecDeque::new(),
            senders: 1,
            receiving: true,
        }),
        ready: Condvar::new(),
    });
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `job`, waking the receiver if it sleeps. Gives the job back
    /// when the receiver is gone.
    pub(crate) fn send(&self, job: T) -> Result<(), T> {
        let mut state = self.0.state.lock();
        if !state.receiving {
            return Err(job);
        }
        state.jobs.push_back(job);
        drop(state);
        self.0.ready.notify_one();
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
        let last = state.senders == 0;
        drop(state);
        if last {
            self.0.ready.notify_one();
        }
    }
}

impl<T> Receiver<T> {
    /// The next job, sleeping until one arrives or `deadline` passes
    /// (`None`: until every sender is gone).
    pub(crate) fn recv_until(&self, deadline: Option<Instant>) -> Result<T, Empty> {
        let mut state = self.0.state.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Ok(job);
            }
            if state.senders == 0 {
                return Err(Empty::Closed);
            }
            match deadline {
                None => self.0.ready.wait(&mut state),
                Some(deadline) => {
                    if self.0.ready.wait_until(&mut state, deadline).timed_out()
                        && state.jobs.is_empty()
                    {
                        return Err(Empty::Timeout);
                    }
                }
            }
        }
    }

    /// Moves up to `most` jobs that are already queued into `into`,
    /// without waiting.
    pub(crate) fn take_queued(&self, most: usize, into: &mut Vec<T>) {
        let mut state = self.0.state.lock();
        let n = most.min(state.jobs.len());
        into.extend(state.jobs.drain(..n));
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.receiving = false;
        // Dropped outside the lock: a job's drop may send elsewhere.
        let jobs = std::mem::take(&mut state.jobs);
        drop(state);
        drop(jobs);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::thread;
    use std::time::Duration;

    use super::*;

    #[test]
    fn jobs_come_in_order_and_the_last_sender_closes_a_drained_queue() {
        let (jobs, queue) = queue();
        let other = jobs.clone();
        jobs.send(1).unwrap();
        other.send(2).unwrap();
        let mut more = Vec::new();
        assert_eq!(queue.recv_until(None), Ok(1));
        queue.take_queued(10, &mut more);
        assert_eq!(more, [2]);
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(queue.recv_until(Some(soon)), Err(Empty::Timeout));
        jobs.send(3).unwrap();
        drop((jobs, other));
        assert_eq!(queue.recv_until(None), Ok(3), "queued before the close");
        assert_eq!(queue.recv_until(None), Err(Empty::Closed));
    }

    #[test]
    fn a_sleeping_receiver_is_woken_by_a_send_and_by_the_last_drop() {
        let (jobs, queue) = queue::<u32>();
        let far = Some(Instant::now() + Duration::from_secs(30));
        let receiver = thread::spawn(move || (queue.recv_until(far), queue.recv_until(far)));
        thread::sleep(Duration::from_millis(20));
        jobs.send(7).unwrap();
        thread::sleep(Duration::from_millis(20));
        drop(jobs);
        assert_eq!(receiver.join().unwrap(), (Ok(7), Err(Empty::Closed)));
    }

    #[test]
    fn a_send_to_a_gone_receiver_gives_the_job_back() {
        let (jobs, queue) = queue();
        drop(queue);
        assert_eq!(jobs.send(5), Err(5));
    }
}
