//! The connection pool of one [`RedisBackend`](super::RedisBackend): the
//! idle list, checkout and checkin, and the stale-connection retry.
//!
//! Identity lives on each connection (see [`Conn`]), never in the pool: a
//! connection dropped for its age, or after a failure, takes its identity
//! with it, and two threads sharing the pool each report the server of the
//! connection that carried their own request.

use std::time::{Duration, Instant};

use crate::backend::BackendError;

use super::Inner;
use super::bounded::remaining;
use super::conn::Conn;
use super::fault::Fault;

/// Idle connections kept per node. The engine calls a node from one worker
/// thread; the spare ones serve probes and other callers.
const MAX_IDLE_CONNECTIONS: usize = 4;

/// An idle connection older than this is closed instead of reused: it may
/// have been dropped silently by a firewall or NAT in between.
const MAX_IDLE_AGE: Duration = Duration::from_secs(30);

/// A connection on the idle list, and when it was put back.
pub(super) struct IdleConn {
    conn: Box<Conn>,
    since: Instant,
}

/// A checked-out connection. Dropped (closed) on any failure.
///
/// Boxed once, when it is opened: a connection is some hundreds of bytes
/// (its buffers' handles, its parser, the server's identity) and moves
/// from the idle list to a batch in flight and back at every round trip
/// (three `memcpy` of it per batch were 5% of a lock's instructions).
pub(super) struct Checkout {
    pub(super) conn: Box<Conn>,
    /// Taken from the idle list (as opposed to freshly connected).
    pub(super) reused: bool,
    /// When it was checked out: the clock read once per batch for what
    /// only needs a coarse time, the idle age, the settings' age
    /// ([`Conn::ask`]) and the stamp it goes back to the idle list with
    /// (older by the batch's round trip: closed at most that much sooner).
    pub(super) at: Instant,
}

/// Why a round trip failed; the connection is dropped in every case.
pub(super) struct Failure {
    pub(super) error: BackendError,
    /// No reply at all was read and the peer had closed the connection:
    /// a stale pooled connection, worth one retry on a fresh one.
    pub(super) stale: bool,
}

impl Inner {
    /// Runs `f` on a connection: an idle one if any, else a new one. On
    /// failure the connection is dropped; if it was a stale idle connection
    /// that the server had closed (nothing was read), `f` runs once more on
    /// a fresh connection, within the same deadline.
    pub(super) fn with_conn<T>(
        &self,
        deadline: Instant,
        f: impl FnMut(&mut Checkout) -> Result<T, Failure>,
    ) -> Result<T, BackendError> {
        self.with_conn_from(deadline, false, f)
    }

    /// [`with_conn`](Self::with_conn) on a freshly opened connection only
    /// (a pooled one just turned out stale).
    pub(super) fn with_fresh_conn<T>(
        &self,
        deadline: Instant,
        f: impl FnMut(&mut Checkout) -> Result<T, Failure>,
    ) -> Result<T, BackendError> {
        self.idle.lock().clear();
        self.with_conn_from(deadline, true, f)
    }

    fn with_conn_from<T>(
        &self,
        deadline: Instant,
        mut fresh_only: bool,
        mut f: impl FnMut(&mut Checkout) -> Result<T, Failure>,
    ) -> Result<T, BackendError> {
        loop {
            let mut c = self.checkout(Instant::now(), deadline, fresh_only)?;
            match f(&mut c) {
                Ok(value) => {
                    self.checkin(c);
                    return Ok(value);
                }
                Err(failure) => {
                    // Poisoned: `c` is dropped here, closing the socket (and
                    // forgetting its identity), never back on the idle list.
                    let reused = c.reused;
                    drop(c);
                    if failure.stale {
                        // The server closed it: the other idle connections
                        // are most likely dead too (restart).
                        self.idle.lock().clear();
                    }
                    let retry = failure.stale && reused && !fresh_only;
                    if retry && Instant::now() < deadline {
                        fresh_only = true;
                        continue;
                    }
                    return Err(failure.error);
                }
            }
        }
    }

    /// A connection for a call made at `at` (the caller's clock read,
    /// which the connection carries: [`Checkout::at`]), bounded by
    /// `deadline`: an idle one if any is young enough, else a new one.
    pub(super) fn checkout(
        &self,
        at: Instant,
        deadline: Instant,
        fresh_only: bool,
    ) -> Result<Checkout, BackendError> {
        if !fresh_only {
            let mut idle = self.idle.lock();
            while let Some(c) = idle.pop() {
                if at.saturating_duration_since(c.since) <= MAX_IDLE_AGE {
                    return Ok(Checkout {
                        conn: c.conn,
                        reused: true,
                        at,
                    });
                }
            }
        }
        if remaining(deadline).is_none() {
            return Err(self.timeout_error());
        }
        let opened = Conn::open(&self.target, &self.setup, deadline).and_then(|mut conn| {
            conn.read_identity(deadline)?;
            Ok(conn)
        });
        match opened {
            Ok(conn) => Ok(Checkout {
                conn: Box::new(conn),
                reused: false,
                at,
            }),
            Err(fault) => Err(self.fault_error(&fault)),
        }
    }

    pub(super) fn checkin(&self, c: Checkout) {
        if c.conn.has_unread_bytes() {
            // More than was asked for: never read it as a later answer.
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(IdleConn {
                conn: c.conn,
                since: c.at,
            });
        }
    }

    /// The failure of an exchange that read `replies_read` replies.
    pub(super) fn failure(&self, fault: &Fault, replies_read: usize) -> Failure {
        Failure {
            error: self.fault_error(fault),
            stale: replies_read == 0 && matches!(fault, Fault::Closed { .. }),
        }
    }

    /// The failure of a round trip after a batch's first (its follow-ups,
    /// a second `WAIT`): never stale, the first having reached the server
    /// (its ops may have run: not to be sent again on a fresh connection).
    pub(super) fn failure_after_first(&self, fault: &Fault) -> Failure {
        Failure {
            error: self.fault_error(fault),
            stale: false,
        }
    }
}
