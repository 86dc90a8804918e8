//! Release notices: how a server tells the processes waiting for a lock
//! that it was released, so they try again at once instead of sleeping
//! out their retry delay.
//!
//! A notice is a **hint**. It never grants anything (the grant is always
//! the quorum acquire), it may be lost (a dropped connection, a server
//! that refuses to publish), it may come late, and it may come for a
//! release that another process has already followed by a new acquire.
//! An expiry sends no notice at all. So waiters always keep their retry
//! timer as the fallback: with notices they only wait less.

use std::time::Instant;

use super::BackendError;

/// The channel (Redis: pub/sub channel) a release of `key` is announced
/// on: this prefix followed by the key bytes as stored on the server (the
/// manager's prefix included).
#[cfg(feature = "redis")]
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "quorum-lock:released:";

/// One subscriber to a server's release notices, owned by one node thread
/// of one manager: see [`Backend::release_listener`](super::Backend::release_listener).
///
/// Each manager gets its own listener, also when managers share a backend
/// handle (clones of one [`MemoryBackend`](crate::MemoryBackend) or
/// [`RedisBackend`](crate::RedisBackend)), so one manager's watched keys
/// and notices never mix with another's.
///
/// Notices are events: [`receive`](Self::receive) hands over what has
/// arrived, and may wait for the next one, so that a thread can sleep on
/// the listener until a release (a listener that cannot wait returns at
/// once, and its caller polls).
///
/// # Contract
///
/// * **Best effort**: a notice may be lost, late, or spurious; callers
///   must keep a timer as the fallback and must never take a notice as
///   a grant.
/// * **Time**: [`listen`](Self::listen) returns within the backend's
///   timeout; [`receive`](Self::receive) never blocks past its `until`
///   plus that timeout.
/// * **Order**: once [`listen`](Self::listen) has returned `Ok`, every
///   release of a listed key that the server applies *after* it reaches
///   this listener, unless the connection is lost (which
///   [`receive`](Self::receive) then reports).
pub trait ReleaseListener: Send + 'static {
    /// Listens for the releases of exactly `keys` from now on, replacing
    /// the previous set (an empty `keys` stops listening). Returns once
    /// the server has confirmed the new subscriptions, so a release it
    /// applies afterwards is announced to this listener.
    ///
    /// # Errors
    ///
    /// The server could not be reached or did not confirm in time (worth
    /// trying again later), or it refused (e.g. an ACL without the
    /// pub/sub commands or channels: [`BackendErrorKind::Denied`](super::BackendErrorKind::Denied);
    /// trying again cannot help). After an error the listener listens for
    /// nothing until a later `listen` succeeds.
    fn listen(&mut self, keys: &[&[u8]]) -> Result<(), BackendError>;

    /// The keys whose release notices arrived since the last call (a key
    /// may appear more than once, one entry per release). When none has
    /// arrived, it may wait for one until `until` and return as soon as
    /// one does; a listener that cannot wait returns at once with none.
    /// Never blocks past `until` plus the backend's timeout; with `until`
    /// already past (the engine passes `Instant::now()`), it reads only
    /// what is there.
    ///
    /// # Errors
    ///
    /// The connection that carried the notices was lost: notices may have
    /// been missed, and the listener listens for nothing until the next
    /// successful [`listen`](Self::listen).
    fn receive(&mut self, until: Instant) -> Result<Vec<Vec<u8>>, BackendError>;
}
