//! The answers to a batch of ops: the results with the server that gave
//! them ([`Answers`]), and a batch sent whose answers are still to be
//! read ([`InFlight`]).

use std::time::Instant;

use super::{BackendError, Op, Reply, ServerInfo};

/// A batch sent by [`Backend::send_batch`](super::Backend::send_batch) whose answers have not been read.
pub trait InFlight: Send {
    /// Waits until the answers have begun to arrive, or `until` passes,
    /// and says whether they have (or the batch failed: `finish` then says
    /// how), so that `finish` would not wait long. The engine uses it to
    /// read first the node that answered first. The default says yes: the
    /// answers were known when the batch was sent.
    fn wait(&mut self, until: Instant) -> bool {
        let _ = until;
        true
    }

    /// Reads the answers, within the backend's bound on one call. `ops`
    /// must be the ops the batch was sent with (a backend may need them to
    /// read the answers, or to run some again).
    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers;
}

/// Answers already known when the batch was sent (the default
/// [`Backend::send_batch`](super::Backend::send_batch)).
pub(super) struct Answered(pub(super) Answers);

impl InFlight for Answered {
    fn finish(self: Box<Self>, _ops: &[Op<'_>]) -> Answers {
        self.0
    }
}

/// The answers to one [`Backend::identified_batch`](super::Backend::identified_batch): one result per op, and
/// the server that gave them.
#[derive(Debug, Clone)]
pub struct Answers {
    results: Vec<Result<Reply, BackendError>>,
    server: Option<ServerInfo>,
}

impl Answers {
    /// `results` (one per op, in order) from the server `server` (`None`:
    /// unknown).
    pub fn new(results: Vec<Result<Reply, BackendError>>, server: Option<ServerInfo>) -> Self {
        Self { results, server }
    }

    /// One result per op, in order.
    pub fn results(&self) -> &[Result<Reply, BackendError>] {
        &self.results
    }

    /// The server that answered, when known.
    pub fn server(&self) -> Option<&ServerInfo> {
        self.server.as_ref()
    }

    /// The results and the server, by value.
    pub fn into_parts(self) -> (Vec<Result<Reply, BackendError>>, Option<ServerInfo>) {
        (self.results, self.server)
    }
}
