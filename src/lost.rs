//! [`LostSignal`]: the notice that a held lock may be lost.

use std::fmt;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::error::Error;

/// Delivers [`Error::Lost`] the moment a held lock is known (or feared) to
/// be lost: an extend found no quorum, with auto-extension the validity
/// ran out after renewal stopped, or nodes whose grants the lock counted
/// were seen to have possibly forgotten its keys (eviction, a replica, a
/// new replication history) until fewer than a quorum of them are left. From
/// [`LockGuard::lost_signal`](crate::LockGuard::lost_signal).
///
/// It fires at most once. Once the guard is released, forgotten or dropped
/// without a loss, it can no longer fire and every receive returns `None`.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
///
/// let node = MemoryBackend::new("mem");
/// let locks = LockManager::builder().node(node.clone()).build()?;
/// let mut guard = locks.lock_with("job", &LockOptions::new().auto_extend(true))?;
/// let lost = guard.lost_signal();
/// assert!(lost.try_recv().is_none(), "still held");
///
/// node.set_down(true); // the only node fails: the next extend cannot confirm
/// assert!(guard.extend(Duration::from_secs(5)).is_err());
/// let notice = lost.recv_timeout(Duration::from_secs(1)).expect("the loss is reported");
/// assert!(notice.is_lost());
/// # Ok::<(), quorum_lock::Error>(())
/// ```
pub struct LostSignal {
    rx: Receiver<Error>,
}

impl LostSignal {
    pub(crate) fn new(rx: Receiver<Error>) -> Self {
        Self { rx }
    }

    /// The loss notice if it has come; `None` otherwise (still held, or no
    /// longer able to be lost). Never blocks.
    pub fn try_recv(&self) -> Option<Error> {
        self.rx.try_recv().ok()
    }

    /// Waits at most `timeout` for the loss notice; `None` when it did not
    /// come in that time (or can no longer come).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Error> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Blocks until the lock is lost; `None` once it can no longer be (the
    /// guard was released, forgotten or dropped first).
    pub fn recv(&self) -> Option<Error> {
        self.rx.recv().ok()
    }

    /// The underlying channel, to wait on the notice together with other
    /// events in `crossbeam_channel::select!`. This is the one place where
    /// the crate's `crossbeam-channel` 0.5 dependency shows in its API; the
    /// other methods need nothing from it.
    pub fn into_receiver(self) -> Receiver<Error> {
        self.rx
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("fired", &!self.rx.is_empty())
            .finish()
    }
}
