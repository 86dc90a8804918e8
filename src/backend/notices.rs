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

use std::fmt;
use std::sync::Arc;

use super::BackendError;

/// The channel (Redis: pub/sub channel) a release of `key` is announced
/// on: this prefix followed by the key bytes as stored on the server (the
/// manager's prefix included).
#[cfg(feature = "redis")]
pub(crate) const RELEASE_CHANNEL_PREFIX: &str = "quorum-lock:released:";

/// How a [`ReleaseListener`] tells its owner that notices have arrived:
/// a cheap, thread-safe signal (the engine's wakes the node thread, which
/// then calls [`receive`](ReleaseListener::receive)).
///
/// A listener may call [`wake`](Self::wake) from any thread, with its own
/// locks held, as often as it likes: the owner coalesces the calls, and
/// `wake` never blocks or calls back into the listener, unless the
/// listener allows it
/// ([`may_receive_in_wake`](ReleaseListener::may_receive_in_wake)).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use quorum_lock::backend::NoticeWaker;
///
/// let woken = Arc::new(AtomicU32::new(0));
/// let count = Arc::clone(&woken);
/// let waker = NoticeWaker::new(move || {
///     count.fetch_add(1, Ordering::Relaxed);
/// });
/// waker.wake();
/// assert_eq!(woken.load(Ordering::Relaxed), 1);
/// ```
#[derive(Clone)]
pub struct NoticeWaker(Arc<dyn Fn() + Send + Sync>);

impl NoticeWaker {
    /// A waker that runs `signal` on each [`wake`](Self::wake). `signal`
    /// must only signal (set a flag, send on a channel): it may run on a
    /// listener's thread, with the listener's locks held.
    pub fn new(signal: impl Fn() + Send + Sync + 'static) -> Self {
        Self(Arc::new(signal))
    }

    /// Tells the owner that notices have arrived.
    pub fn wake(&self) {
        (self.0)();
    }
}

impl fmt::Debug for NoticeWaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NoticeWaker")
    }
}

/// One subscriber to a server's release notices, owned by one node thread
/// of one manager: see [`Backend::release_listener`](super::Backend::release_listener).
///
/// Each manager gets its own listener, also when managers share a backend
/// handle (clones of one [`MemoryBackend`](crate::MemoryBackend) or
/// [`RedisBackend`](crate::RedisBackend)), so one manager's watched keys
/// and notices never mix with another's.
///
/// Notices are events: a listener that can
/// ([`wake_on_arrival`](Self::wake_on_arrival)) signals each arrival, and
/// its owner sleeps until then; one that cannot is asked
/// ([`receive`](Self::receive)) about once a millisecond while someone
/// waits, which costs a waiting process a few percent of a core.
///
/// # Contract
///
/// * **Best effort**: a notice may be lost, late, or spurious; callers
///   must keep a timer as the fallback and must never take a notice as
///   a grant.
/// * **Time**: [`listen`](Self::listen) returns within the backend's
///   timeout; [`receive`](Self::receive) never waits.
/// * **Order**: once [`listen`](Self::listen) has returned `Ok`, every
///   release of a listed key that the server applies *after* it reaches
///   this listener, unless the connection is lost (which
///   [`receive`](Self::receive) then reports).
/// * **Wake-ups**: after [`wake_on_arrival`](Self::wake_on_arrival)
///   returned `true`, every notice, and the loss of the connection, is
///   followed by a [`NoticeWaker::wake`] (after it can be received).
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
    /// may appear more than once, one entry per release), without
    /// waiting for more.
    ///
    /// # Errors
    ///
    /// The connection that carried the notices was lost: notices may have
    /// been missed, and the listener listens for nothing until the next
    /// successful [`listen`](Self::listen).
    fn receive(&mut self) -> Result<Vec<Vec<u8>>, BackendError>;

    /// Asks the listener to call `waker` whenever a notice arrives or the
    /// connection that carries them is lost, from then on. Returns whether
    /// it will; the default, `false`, leaves its owner to poll
    /// [`receive`](Self::receive). Called once, before the first
    /// [`listen`](Self::listen).
    fn wake_on_arrival(&mut self, waker: NoticeWaker) -> bool {
        let _ = waker;
        false
    }

    /// Whether its owner may call [`receive`](Self::receive) from inside
    /// the [`NoticeWaker::wake`] this listener calls: yes only when the
    /// listener calls `wake` holding none of its own locks (and none that
    /// `receive` takes). The engine then takes the notices on the thread
    /// that rang, when the node is free (it may briefly take locks of its
    /// own there), instead of waking the node's thread to take them: one
    /// thread hand-off less between a release and its waiters. The
    /// default, `false`, keeps `wake` a bare signal.
    fn may_receive_in_wake(&self) -> bool {
        false
    }
}
