//! In-memory nodes seen through a changed face, for engine tests that need
//! a backend the [`MemoryBackend`] alone cannot play: another name for the
//! same server, a server that will not say who it is, or one that promises
//! to answer within a bound.

use std::time::Duration;

use quorum_lock::MemoryBackend;
use quorum_lock::backend::{
    self, Answers, Backend, BackendError, BackendErrorKind, InFlight, Op, Probe, ServerInfo,
};

/// A [`MemoryBackend`] with some of its answers changed; every lock
/// operation goes to the node itself.
#[derive(Debug, Clone)]
pub struct Face {
    /// The node every lock operation goes to.
    pub node: MemoryBackend,
    /// Reported by `describe` instead of the node's own name.
    pub name: Option<String>,
    /// `server_info` fails (like an ACL user without `INFO`).
    pub hide_identity: bool,
    /// Reported by `call_timeout` (the memory node itself reports none).
    pub call_timeout: Option<Duration>,
}

impl Face {
    /// The node with its own face (nothing changed yet).
    pub fn of(node: MemoryBackend) -> Self {
        Self {
            node,
            name: None,
            hide_identity: false,
            call_timeout: None,
        }
    }

    /// The same server under another name (as `localhost` and `127.0.0.1`).
    pub fn alias(node: &MemoryBackend, name: &str) -> Self {
        Self {
            name: Some(name.to_owned()),
            ..Self::of(node.clone())
        }
    }

    /// A node that answers lock operations but not who it is.
    pub fn without_identity(node: MemoryBackend) -> Self {
        Self {
            hide_identity: true,
            ..Self::of(node)
        }
    }

    /// A node that promises to answer within `bound` (like Redis with its
    /// timeouts), so the engine may run its operations on the caller's
    /// thread.
    pub fn bounded(node: MemoryBackend, bound: Duration) -> Self {
        Self {
            call_timeout: Some(bound),
            ..Self::of(node)
        }
    }
}

impl Backend for Face {
    fn describe(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.node.describe())
    }
    /// The node's answers, with this face's identity (none when hidden).
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        let results = backend::run(&self.node, ops).into_results();
        Box::new(Answers::new(results, self.server_info().ok()))
    }
    fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }
    /// The node can report (even when this face hides it at run time).
    fn probe(&self) -> Option<&dyn Probe> {
        Some(self)
    }
}

impl Probe for Face {
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        if self.hide_identity {
            return Err(BackendError::new(
                BackendErrorKind::Denied,
                "NOPERM no INFO for this user",
            ));
        }
        self.node.server_info()
    }
}
