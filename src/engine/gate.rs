//! The gate in front of one node's state: who may run an operation on the
//! node now, and who must queue it for the node's thread.
//!
//! Per-node FIFO is the engine's safety net (a release never overtakes the
//! acquire it undoes), and the cheap path is a caller running its own
//! operation on its thread when the node is idle. The gate makes those two
//! agree with one counter and one lock:
//!
//! - a job is **counted before it becomes visible** in the node's queue, and
//!   uncounted only **under the state lock, after it ran**;
//! - so a caller that holds the state lock and sees a count of zero knows
//!   that every job admitted before it (in happens-before order) has run,
//!   and every job admitted after it waits for the lock: running its own
//!   operation there keeps the order.
//!
//! That argument is checked by loom, over every interleaving of the gate's
//! own code (see the `loom_checks` module below and src/sync.rs), with
//! canaries (src/canary.rs) that break each half of the rule and must be
//! caught.

use crate::canary::{self, Canary};
use crate::sync::{AtomicUsize, Mutex, MutexGuard, Ordering};

/// One node's state behind its lock, and the count of jobs admitted to its
/// queue and not yet run.
#[derive(Debug)]
pub(crate) struct Gate<S> {
    state: Mutex<S>,
    queued: AtomicUsize,
}

impl<S> Gate<S> {
    pub(crate) fn new(state: S) -> Self {
        Self {
            state: Mutex::new(state),
            queued: AtomicUsize::new(0),
        }
    }

    /// Jobs admitted and not yet run (a snapshot, for the queue's bound).
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Admits one job: counts it, then `send` makes it visible to the
    /// node's thread. A failed send uncounts it and returns its error;
    /// a send that worked passes on what it returned.
    pub(crate) fn admit<T, E>(&self, send: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        if canary::on(Canary::GateCountsAfterSend) {
            let sent = send()?;
            self.queued.fetch_add(1, Ordering::SeqCst);
            return Ok(sent);
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
        send().inspect_err(|_| {
            self.queued.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// The state, if the node is idle: nobody holds it and every admitted
    /// job has run. Whoever holds it may run an operation at once: every
    /// job admitted before this call has run, and every job admitted after
    /// it waits for the lock.
    pub(crate) fn try_idle(&self) -> Option<MutexGuard<'_, S>> {
        let state = self.state.try_lock()?;
        if canary::on(Canary::GateIgnoresCount) {
            return Some(state);
        }
        (self.queued.load(Ordering::SeqCst) == 0).then_some(state)
    }

    /// The state, if nobody holds it, whether jobs are queued or not: for
    /// work that sends nothing to the node (taking release notices), which
    /// the queue's order does not concern.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, S>> {
        self.state.try_lock()
    }

    /// The state, waiting for it: the node's thread, to run what is queued
    /// or to look at its timers.
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock()
    }

    /// Marks `ran` admitted jobs as run. It takes the state's guard (of
    /// this gate) so that the count drops while the lock is still held: a
    /// caller that then sees zero also sees what those jobs did.
    pub(crate) fn finish(&self, state: MutexGuard<'_, S>, ran: usize) {
        self.queued.fetch_sub(ran, Ordering::SeqCst);
        drop(state);
    }
}

/// Every interleaving of the gate's code, by loom: a node thread that runs
/// what is queued in batches, a client that admits a job at any moment, and
/// a caller that admits a job and then runs its next operation directly if
/// the gate says the node is idle. The direct run must come after the job
/// the same caller admitted before it (per-node FIFO).
#[cfg(all(test, loom))]
mod loom_checks {
    use loom::sync::Arc;
    use loom::sync::mpsc::{Receiver, channel};
    use loom::thread;

    use super::Gate;
    use crate::canary::Canary;

    enum Msg {
        Job(u32),
        Stop,
    }

    /// The node's thread, as engine/node/worker.rs runs it: wait for a job,
    /// take the state, drain the queue into one batch, run it, then count
    /// it as run under the same lock.
    fn node_thread(gate: &Gate<Vec<u32>>, queue: &Receiver<Msg>) {
        loop {
            let Ok(first) = queue.recv() else { return };
            let mut state = gate.lock();
            let mut batch = vec![first];
            while let Ok(more) = queue.try_recv() {
                batch.push(more);
            }
            let mut stop = false;
            for msg in &batch {
                match msg {
                    Msg::Job(n) => state.push(*n),
                    Msg::Stop => stop = true,
                }
            }
            gate.finish(state, batch.len());
            if stop {
                return;
            }
        }
    }

    /// Explores every interleaving (with at most `preemptions`, if set;
    /// `sync::explore`): how many executions, and the first violation.
    fn explore(preemptions: Option<usize>) -> (usize, Option<String>) {
        crate::sync::explore(preemptions, || {
            let gate = Arc::new(Gate::new(Vec::new()));
            let (jobs, queue) = channel();
            let node = {
                let gate = Arc::clone(&gate);
                thread::spawn(move || node_thread(&gate, &queue))
            };
            let other = {
                let (gate, jobs) = (Arc::clone(&gate), jobs.clone());
                thread::spawn(move || gate.admit(|| jobs.send(Msg::Job(1))))
            };
            let _ = gate.admit(|| jobs.send(Msg::Job(2)));
            let mut violation = None;
            match gate.try_idle() {
                Some(mut ran) => {
                    if !ran.contains(&2) {
                        violation = Some(format!(
                            "the node had run {:?} when its caller ran 3 directly, \
                             before 2, which it had queued first",
                            *ran
                        ));
                    }
                    ran.push(3);
                }
                None => {
                    let _ = gate.admit(|| jobs.send(Msg::Job(3)));
                }
            }
            let _ = other.join();
            let _ = gate.admit(|| jobs.send(Msg::Stop));
            let _ = node.join();
            if gate.queued() != 0 {
                violation.get_or_insert(format!("{} jobs still counted at the end", gate.queued()));
            }
            violation
        })
    }

    #[test]
    fn a_direct_run_never_overtakes_a_job_queued_before_it() {
        // Unbounded: every interleaving.
        crate::sync::assert_clean("gate", explore(None));
    }

    /// Each canary breaks one half of the rule; loom must find the
    /// interleaving that breaks per-node FIFO. Two preemptions suffice to
    /// reach it, which keeps these runs short.
    #[test]
    fn canaries_breaking_either_half_of_the_rule_are_caught() {
        for broken in [Canary::GateCountsAfterSend, Canary::GateIgnoresCount] {
            crate::sync::assert_caught(broken, || explore(Some(2)));
        }
    }
}
