//! The answers to a batch of ops: the results with the server that gave
//! each ([`Answers`]), and a batch sent whose answers are still to be
//! read ([`InFlight`]).

use std::sync::Arc;
use std::time::Instant;

use super::{BackendError, Op, Reply, ServerInfo};

/// A batch sent by [`Backend::send`](super::Backend::send) whose answers
/// have not been read.
///
/// [`Answers`] are one too: a backend that knows its answers when the
/// batch is sent returns them as they are (`finish` gives them back).
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

    /// The descriptor the answers arrive on, when the engine may wait for
    /// them there alongside other nodes' (one thread, one `epoll` set for
    /// every node: the engine's reader) instead of in
    /// [`wait`](Self::wait) or [`finish`](Self::finish): only when the
    /// batch waits for the server on one connection, and every byte the
    /// backend reads comes from that descriptor when it is read (no TLS
    /// session, say, that may hold bytes it read ahead). The engine arms
    /// it right after the send (no answer is read yet) and calls
    /// `finish` once the descriptor is readable, or earlier, from another
    /// thread, if it needs the answers first; it must stay the same for
    /// the batch's life. The default, `None`: the engine waits through
    /// `wait` and `finish` (a thread per node, as before; a backend with
    /// several connections per batch, such as a cluster, keeps it).
    #[cfg(unix)]
    fn readable_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Reads the answers, within the backend's bound on one call. `ops`
    /// must be the ops the batch was sent with (a backend may need them to
    /// read the answers, or to run some again).
    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers;
}

/// Answers known when the batch was sent: `finish` gives them back.
impl InFlight for Answers {
    fn finish(self: Box<Self>, _ops: &[Op<'_>]) -> Answers {
        *self
    }
}

/// The answers to one batch sent by [`Backend::send`](super::Backend::send):
/// one result per op, in order, and the server that gave each.
///
/// A grant counts only as the vote of the server that gave it, so the
/// identity travels with the answers: one server for the whole batch
/// ([`new`](Self::new): a Redis master, an in-memory node), or one per
/// answer ([`per_answer`](Self::per_answer): a node that answers from
/// several servers, as a Redis cluster answers each key from its shard).
///
/// The engine judges a batch by [`server`](Self::server), the one server
/// every answer came from: answers from several servers (or from unknown
/// ones) have none, and with restart quarantine on their grants do not
/// count. A cluster backend reports each answer's shard with
/// `per_answer`, so that the engine can judge each grant by the shard that
/// gave it ([`server_of`](Self::server_of)) once it counts a cluster as one
/// node.
///
/// ```
/// use std::sync::Arc;
/// use quorum_lock::backend::{Answers, Reply, ServerInfo};
///
/// let one = Answers::new(vec![Ok(Reply::Yes), Ok(Reply::No)], Some(ServerInfo::new("r1", None)));
/// assert_eq!(one.server().and_then(|s| s.run_id.as_deref()), Some("r1"));
/// assert_eq!(one.server_of(1), one.server());
///
/// let (a, b) = (Arc::new(ServerInfo::new("shard-a", None)), Arc::new(ServerInfo::new("shard-b", None)));
/// let two = Answers::per_answer(vec![(Ok(Reply::Yes), Some(a)), (Ok(Reply::Yes), Some(b))]);
/// assert_eq!(two.server(), None); // not one server
/// assert_eq!(two.server_of(1).and_then(|s| s.run_id.as_deref()), Some("shard-b"));
/// ```
#[derive(Debug, Clone)]
pub struct Answers {
    results: Vec<Result<Reply, BackendError>>,
    servers: Servers,
}

/// Who gave a batch's answers ([`Answers::into_sources`]).
#[derive(Debug)]
pub(crate) enum Sources {
    /// One server for every answer (`None`: unknown).
    One(Option<ServerInfo>),
    /// One server per answer, in order (`None`: unknown).
    Each(Vec<Option<Arc<ServerInfo>>>),
}

/// Who gave the answers.
#[derive(Debug, Clone)]
enum Servers {
    /// One server for every answer (`None`: unknown). Kept by value: the
    /// answers move to the engine whole, and an `Arc` here was one more
    /// allocation per batch.
    All(Option<ServerInfo>),
    /// One server per answer, in order (`None`: unknown).
    Each(Vec<Option<Arc<ServerInfo>>>),
}

impl Answers {
    /// `results` (one per op, in order), every one from the server
    /// `server` (`None`: unknown).
    pub fn new(results: Vec<Result<Reply, BackendError>>, server: Option<ServerInfo>) -> Self {
        Self {
            results,
            servers: Servers::All(server),
        }
    }

    /// One result per op, in order, each with the server that gave it
    /// (`None`: unknown, as for an op that never reached a server).
    pub fn per_answer(
        answers: impl IntoIterator<Item = (Result<Reply, BackendError>, Option<Arc<ServerInfo>>)>,
    ) -> Self {
        let (results, servers) = answers.into_iter().unzip();
        Self {
            results,
            servers: Servers::Each(servers),
        }
    }

    /// One result per op, in order.
    pub fn results(&self) -> &[Result<Reply, BackendError>] {
        &self.results
    }

    /// The one server every answer came from, when known: `None` when the
    /// answers came from several servers, or from one not known for some
    /// of them.
    pub fn server(&self) -> Option<&ServerInfo> {
        match &self.servers {
            Servers::All(server) => server.as_ref(),
            Servers::Each(servers) => {
                let (first, rest) = servers.split_first()?;
                let first = first.as_deref()?;
                rest.iter()
                    .all(|s| s.as_deref() == Some(first))
                    .then_some(first)
            }
        }
    }

    /// The server that gave the `i`-th answer, when known (`None` too when
    /// there is no such answer).
    pub fn server_of(&self, i: usize) -> Option<&ServerInfo> {
        if i >= self.results.len() {
            return None;
        }
        match &self.servers {
            Servers::All(server) => server.as_ref(),
            Servers::Each(servers) => servers.get(i)?.as_deref(),
        }
    }

    /// The results and who gave them, by value, for the engine: one
    /// server for the whole batch, or (from [`per_answer`](Self::per_answer))
    /// one per answer, kept apart even when they are all the same (a
    /// cluster node's shards are judged one by one, never as one server).
    pub(crate) fn into_sources(self) -> (Vec<Result<Reply, BackendError>>, Sources) {
        match self.servers {
            Servers::All(one) => (self.results, Sources::One(one)),
            Servers::Each(each) => (self.results, Sources::Each(each)),
        }
    }

    /// The results, by value.
    pub fn into_results(self) -> Vec<Result<Reply, BackendError>> {
        self.results
    }

    /// The results and the one server they came from
    /// ([`server`](Self::server)), by value.
    pub fn into_parts(self) -> (Vec<Result<Reply, BackendError>>, Option<ServerInfo>) {
        let server = match &self.servers {
            Servers::All(_) => None,
            Servers::Each(_) => self.server().cloned(),
        };
        match self.servers {
            Servers::All(one) => (self.results, one),
            Servers::Each(_) => (self.results, server),
        }
    }
}
