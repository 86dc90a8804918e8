//! The optional abilities of a [`Backend`](super::Backend), each a small
//! trait of its own that the backend hands out when it has it: the
//! server's identity on request ([`Probe`]) and reading a key without
//! changing it ([`Inspect`]).

use super::{BackendError, Holding, ServerInfo};

/// The identity (and settings) of a backend's server, read now: see
/// [`Backend::probe`](super::Backend::probe).
///
/// A backend that has a probe reports the identity with every batch's
/// [`Answers`](super::Answers) too; the probe is what the engine asks when
/// no batch brings it: to see whether a node it marked down answers
/// again, and to read the settings (eviction, replication) of a node while
/// a lock may be held on it and no batch has brought them lately.
pub trait Probe: Send + Sync {
    /// The server's identity, uptime and settings, as it answers now
    /// (bounded by the backend's timeout, like every call). `Ok` with no
    /// `run_id` when the server answers but will not say who it is.
    ///
    /// # Errors
    ///
    /// Any failure to reach the server, or its refusal of everything (an
    /// authentication failure): the engine keeps a node marked down while
    /// its probe fails.
    fn server_info(&self) -> Result<ServerInfo, BackendError>;

    /// A hint for a backend that learns *out of band* that its server is
    /// back after being unreachable: how many times it has learnt so (a
    /// count that only grows), or 0 when it cannot tell (the default, and
    /// Redis).
    ///
    /// The engine skips a node it marked down and probes it in the
    /// background (after 50 ms, then backing off to 2 s). When this count
    /// has changed since the last round, the next round probes the node
    /// first instead and, if it answers, uses it at once. A fault-injection
    /// handle that brings its node up
    /// ([`MemoryBackend::set_down(false)`](crate::MemoryBackend::set_down))
    /// counts one, so tests take effect on the next round without
    /// sleeping. Cheap: the engine reads it at every round while the node
    /// is down, from the caller's thread.
    fn recoveries(&self) -> u64 {
        0
    }
}

/// Reading what a key holds, changing nothing: see
/// [`Backend::inspector`](super::Backend::inspector).
pub trait Inspect: Send + Sync {
    /// Reads `key`'s value and time left, in one atomic step (Redis: `GET`
    /// and `PTTL` in one script). For
    /// [`LockManager::inspect`](crate::LockManager::inspect).
    ///
    /// `Ok(None)`: the key does not exist. A key of another type is a
    /// [`BackendErrorKind::WrongType`](super::BackendErrorKind::WrongType)
    /// error.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer from the server.
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError>;
}
