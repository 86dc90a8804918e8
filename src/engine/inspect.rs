//! Asking every node what a key holds ([`Engine::inspect`]), in line with
//! the operations queued before (for `LockManager::inspect`); and an
//! election leader's record written the same way ([`Engine::proclaim`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Engine;
use super::node::jobs::{Inspected, Job, NotQueued, Proclaimed, Record, Work};
use crate::backend::{BackendError, BackendErrorKind, Holding, Reply};

impl Engine {
    /// Asks every node what `key` holds ([`Inspect::inspect`](crate::backend::Inspect::inspect)), after
    /// whatever is queued there before, and waits for the answers until
    /// `wait` from now. One answer per node, in node order; a node that did
    /// not answer in time (or whose thread is gone) gets an error that
    /// says so.
    pub(crate) fn inspect(
        &self,
        key: &[u8],
        wait: Duration,
    ) -> Vec<Result<Option<Holding>, BackendError>> {
        let key: Arc<[u8]> = Arc::from(key);
        self.ask_every_node(
            wait,
            |reply, slot| {
                Job::Work(Work::Inspect {
                    key: Arc::clone(&key),
                    reply,
                    slot,
                })
            },
            |Inspected { slot, holding }| (slot, holding),
        )
    }

    /// Writes an election leader's `record` on every node where its lock
    /// key holds its token, after whatever is queued there before, and
    /// waits for the answers until `wait` from now; one per node, in node
    /// order (an error for a node that did not answer in time).
    pub(crate) fn proclaim(
        &self,
        record: Record,
        wait: Duration,
    ) -> Vec<Result<Reply, BackendError>> {
        let record = Arc::new(record);
        self.ask_every_node(
            wait,
            |reply, slot| {
                Job::Work(Work::Proclaim {
                    record: Arc::clone(&record),
                    reply,
                    slot,
                })
            },
            |Proclaimed { slot, reply }| (slot, reply),
        )
    }

    /// Queues `job(reply, slot)` on every node and gathers one answer per
    /// node (`answer` splits it into its slot and result) until `wait`
    /// from now.
    fn ask_every_node<A, T>(
        &self,
        wait: Duration,
        job: impl Fn(crossbeam_channel::Sender<A>, usize) -> Job,
        answer: impl Fn(A) -> (usize, Result<T, BackendError>),
    ) -> Vec<Result<T, BackendError>> {
        let deadline = Instant::now().checked_add(wait);
        let n = self.nodes.len();
        let (reply, answers) = crossbeam_channel::bounded(n);
        let mut found: Vec<Option<Result<T, BackendError>>> = (0..n).map(|_| None).collect();
        let mut expected = 0;
        for (slot, node) in self.nodes.iter().enumerate() {
            match node.enqueue(job(reply.clone(), slot)) {
                Ok(()) => expected += 1,
                Err(refused) => found[slot] = Some(Err(not_asked(refused))),
            }
        }
        drop(reply);
        for _ in 0..expected {
            let got = match deadline {
                Some(deadline) => answers.recv_deadline(deadline).ok(),
                None => answers.recv().ok(),
            };
            let Some(got) = got else {
                break;
            };
            let (slot, result) = answer(got);
            found[slot] = Some(result);
        }
        found
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(BackendError::new(
                        BackendErrorKind::Timeout,
                        format!("no answer within {wait:?}"),
                    ))
                })
            })
            .collect()
    }
}

/// Why a node was not asked.
fn not_asked(refused: NotQueued) -> BackendError {
    match refused {
        NotQueued::Gone => BackendError::new(
            BackendErrorKind::Other,
            "the node's worker thread has stopped",
        ),
        NotQueued::Full => BackendError::new(
            BackendErrorKind::Other,
            "the node's queue is full (the node is too slow for the load)",
        ),
    }
}
