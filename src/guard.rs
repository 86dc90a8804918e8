//! [`LockGuard`]: a held lock, released when dropped.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Report, Result};
use crate::manager::LockManager;
use crate::token::Token;

/// A lock held on a quorum of nodes, valid until its deadline.
///
/// The lock is safe to rely on only while [`is_valid`](Self::is_valid):
/// after that the nodes' keys may expire and someone else may take it. Long
/// work should check before each step that needs exclusivity, or
/// [`extend`](Self::extend) in time.
///
/// Dropping the guard queues a release on every node and returns at once;
/// [`release`](Self::release) does the same but waits and reports each
/// node's answer; [`forget`](Self::forget) lets the lock expire on its own.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    manager: LockManager,
    resource: Box<[u8]>,
    key: Arc<[u8]>,
    token: Token,
    ttl: Duration,
    state: Arc<Mutex<GuardState>>,
    /// Cleared by `release` and `forget`, so `Drop` does nothing more.
    armed: bool,
}

/// What may change while the guard is held.
#[derive(Debug)]
struct GuardState {
    /// The conservative end of validity, on the manager's clock.
    deadline: Instant,
    /// Why the lock is known to be lost, once it is.
    lost: Option<String>,
}

impl LockGuard {
    pub(crate) fn new(
        manager: LockManager,
        resource: &[u8],
        key: Arc<[u8]>,
        token: Token,
        ttl: Duration,
        deadline: Instant,
    ) -> Self {
        Self {
            manager,
            resource: resource.into(),
            key,
            token,
            ttl,
            state: Arc::new(Mutex::new(GuardState {
                deadline,
                lost: None,
            })),
            armed: true,
        }
    }

    /// The resource as given to `lock`.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The key on the nodes (prefix + resource).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// This acquisition's token.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The TTL last set on the nodes.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Safe time left: zero once the deadline has passed or the lock is
    /// known to be lost. Never longer than what a quorum confirmed.
    pub fn validity(&self) -> Duration {
        let state = self.state.lock();
        if state.lost.is_some() {
            return Duration::ZERO;
        }
        state.deadline.saturating_duration_since(self.manager.now())
    }

    /// Whether the lock is still safe to rely on.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// `Ok` while the lock is valid, otherwise [`Error::Lost`] saying why.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] once the validity has run out or an extend failed.
    pub fn check(&self) -> Result<()> {
        let state = self.state.lock();
        if let Some(reason) = &state.lost {
            return Err(Error::Lost {
                reason: reason.clone(),
                report: None,
            });
        }
        if state.deadline <= self.manager.now() {
            return Err(Error::Lost {
                reason: "the lock's validity ran out".into(),
                report: None,
            });
        }
        Ok(())
    }

    /// Pushes the expiry to `ttl` from now on every node that still holds
    /// our token. Succeeds only when a quorum confirms within the remaining
    /// validity; never re-creates a key that has expired. Returns the new
    /// validity.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when no quorum confirmed in time (the guard is then
    /// marked lost: stop the protected work); [`Error::InvalidArgument`]
    /// for an unusable TTL (the guard is unchanged).
    pub fn extend(&mut self, ttl: Duration) -> Result<Duration> {
        let deadline = {
            let state = self.state.lock();
            if let Some(reason) = &state.lost {
                return Err(Error::Lost {
                    reason: reason.clone(),
                    report: None,
                });
            }
            state.deadline
        };
        match self
            .manager
            .extend(&self.resource, &self.key, self.token, ttl, deadline)
        {
            Ok(new_deadline) => {
                self.ttl = ttl;
                self.state.lock().deadline = new_deadline;
                Ok(self.validity())
            }
            Err(e) => {
                if let Error::Lost { reason, .. } = &e {
                    self.state.lock().lost = Some(reason.clone());
                }
                Err(e)
            }
        }
    }

    /// Releases on every node and waits (at most the per-node timeout) for
    /// each node's answer.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the
    /// remaining keys expire with their TTL. A node that no longer held our
    /// token is not an error; it shows as refused in the report.
    pub fn release(mut self) -> Result<Report> {
        self.armed = false;
        self.manager.release(&self.resource, &self.key, self.token)
    }

    /// Gives up the guard without releasing: the lock expires on its own
    /// at its TTL.
    pub fn forget(mut self) {
        self.armed = false;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.armed {
            // Only queues the releases: never blocks, never panics.
            self.manager.release_detached(&self.key, self.token);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("token", &self.token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}
