//! Asking every node what a key holds ([`Engine::inspect`]), in line with
//! the operations queued before (for `LockManager::inspect`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Engine;
use super::node::worker::{Inspected, Job, NotQueued, Work};
use crate::backend::{BackendError, BackendErrorKind, Holding};

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
        let deadline = Instant::now().checked_add(wait);
        let n = self.nodes.len();
        let (reply, answers) = crossbeam_channel::bounded(n);
        let mut found: Vec<Option<Result<Option<Holding>, BackendError>>> = vec![None; n];
        let mut expected = 0;
        let key: Arc<[u8]> = Arc::from(key);
        for (slot, node) in self.nodes.iter().enumerate() {
            let job = Job::Work(Work::Inspect {
                key: Arc::clone(&key),
                reply: reply.clone(),
                slot,
            });
            match node.enqueue(job) {
                Ok(()) => expected += 1,
                Err(refused) => found[slot] = Some(Err(not_inspected(refused))),
            }
        }
        drop(reply);
        for _ in 0..expected {
            let got = match deadline {
                Some(deadline) => answers.recv_deadline(deadline).ok(),
                None => answers.recv().ok(),
            };
            let Some(Inspected { slot, holding }) = got else {
                break;
            };
            found[slot] = Some(holding);
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

/// Why a node was not asked to inspect.
fn not_inspected(refused: NotQueued) -> BackendError {
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
