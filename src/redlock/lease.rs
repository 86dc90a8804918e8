//! The [`Lease`]: what a held lock is on the servers (key, token) and its
//! state (deadline, TTL, lost, finished), shared by the guard, the rounds
//! that extend and release it, and the watchdog.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Mutex, MutexGuard};

use crate::error::Error;
use crate::token::Token;

/// The part of a held lock that the watchdog shares with the guard.
pub(crate) struct Lease {
    pub(crate) resource: Box<[u8]>,
    pub(crate) key: Arc<[u8]>,
    pub(crate) token: Token,
    /// The fencing token, when the lock was acquired with fencing.
    pub(crate) fence: Option<u64>,
    state: Mutex<LeaseState>,
}

/// What may change while the lock is held. The mutex is never held across
/// a network wait: only across non-blocking sends.
pub(crate) struct LeaseState {
    /// The conservative end of validity, on the manager's clock.
    pub(crate) deadline: Instant,
    /// The TTL last set on the nodes.
    pub(crate) ttl: Duration,
    /// Set once the lock is known (or feared) to be lost; never cleared.
    pub(crate) lost: Option<Error>,
    /// Set when the guard releases or forgets the lock: nothing may extend
    /// it afterwards.
    pub(crate) finished: bool,
    /// Successful extends so far (manual and automatic).
    pub(crate) extensions: u32,
    /// Extends begun so far: the sequence number of the latest one. The
    /// nodes apply extends in the order they were begun (per-node FIFO),
    /// so only the latest one begun may set the deadline when it finishes.
    pub(crate) extends_begun: u64,
    /// Why auto-extension stopped, once it has.
    pub(crate) renewal_stopped: Option<String>,
    /// Waiting for the loss notification.
    pub(crate) subscribers: Vec<Sender<Error>>,
}

impl Lease {
    pub(crate) fn new(
        resource: &[u8],
        key: Arc<[u8]>,
        token: Token,
        ttl: Duration,
        deadline: Instant,
        fence: Option<u64>,
    ) -> Self {
        Self {
            resource: resource.into(),
            key,
            token,
            fence,
            state: Mutex::new(LeaseState {
                deadline,
                ttl,
                lost: None,
                finished: false,
                extensions: 0,
                extends_begun: 0,
                renewal_stopped: None,
                subscribers: Vec::new(),
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl LeaseState {
    /// Marks the lock lost (the first reason wins) and notifies every
    /// subscriber.
    /// Sends `notice` to every subscriber (each gets at most one), without
    /// marking the lock lost: renewal stopped, the lock ends at its deadline.
    pub(crate) fn notify(&mut self, notice: &Error) {
        for subscriber in self.subscribers.drain(..) {
            let _ = subscriber.try_send(notice.clone());
        }
    }

    pub(crate) fn mark_lost(&mut self, error: &Error) {
        if self.lost.is_none() {
            self.lost = Some(error.clone());
        }
        for subscriber in self.subscribers.drain(..) {
            // A subscriber that stopped listening needs no notice.
            let _ = subscriber.try_send(error.clone());
        }
    }
}
