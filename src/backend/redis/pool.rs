//! The connection pool of one [`RedisBackend`](super::RedisBackend): the
//! idle list, checkout and checkin, the stale-connection retry, and the
//! `INFO server` cache filled by every new connection.

use std::time::{Duration, Instant};

use redis::Connection;

use crate::backend::{BackendError, ServerInfo};

use super::errors::{io_error, is_dropped};
use super::{Inner, remaining};

/// Idle connections kept per node. The engine calls a node from one worker
/// thread; the spare ones serve probes and other callers.
const MAX_IDLE_CONNECTIONS: usize = 4;

/// An idle connection older than this is closed instead of reused: it may
/// have been dropped silently by a firewall or NAT in between.
const MAX_IDLE_AGE: Duration = Duration::from_secs(30);

/// A connection on the idle list, and when it was put back.
pub(super) struct IdleConn {
    conn: Connection,
    since: Instant,
}

/// A checked-out connection. Dropped (closed) on any failure.
pub(super) struct Checkout {
    pub(super) conn: Connection,
    /// Taken from the idle list (as opposed to freshly connected).
    reused: bool,
    /// Freshly connected and its `INFO server` not read yet.
    pub(super) needs_info: bool,
}

/// The last `INFO server` answer, and when it was read.
#[derive(Clone)]
pub(super) struct CachedInfo {
    run_id: Option<String>,
    uptime: Option<Duration>,
    fetched: Instant,
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
        mut f: impl FnMut(&mut Checkout) -> Result<T, Failure>,
    ) -> Result<T, BackendError> {
        let mut fresh_only = false;
        loop {
            let mut c = self.checkout(deadline, fresh_only)?;
            match f(&mut c) {
                Ok(value) => {
                    self.checkin(c);
                    return Ok(value);
                }
                Err(failure) => {
                    // Poisoned: `c` is dropped here, closing the socket, and
                    // never goes back to the idle list.
                    drop(c.conn);
                    self.invalidate_info();
                    if failure.stale {
                        // The server closed it: the other idle connections
                        // are most likely dead too (restart).
                        self.idle.lock().clear();
                    }
                    let retry = failure.stale && c.reused && !fresh_only;
                    if retry && Instant::now() < deadline {
                        fresh_only = true;
                        continue;
                    }
                    return Err(failure.error);
                }
            }
        }
    }

    fn checkout(&self, deadline: Instant, fresh_only: bool) -> Result<Checkout, BackendError> {
        if !fresh_only {
            let mut idle = self.idle.lock();
            while let Some(c) = idle.pop() {
                if c.since.elapsed() <= MAX_IDLE_AGE {
                    return Ok(Checkout {
                        conn: c.conn,
                        reused: true,
                        needs_info: false,
                    });
                }
            }
        }
        let remaining = remaining(deadline).ok_or_else(|| self.timeout_error())?;
        match self.client.get_connection_with_timeout(remaining) {
            Ok(conn) => Ok(Checkout {
                conn,
                reused: false,
                needs_info: true,
            }),
            Err(e) => {
                self.invalidate_info();
                Err(self.redis_error(&e, true))
            }
        }
    }

    fn checkin(&self, c: Checkout) {
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(IdleConn {
                conn: c.conn,
                since: Instant::now(),
            });
        }
    }

    fn invalidate_info(&self) {
        *self.info.lock() = None;
    }

    pub(super) fn store_info(&self, text: &str) -> ServerInfo {
        let (run_id, uptime) = parse_info(text);
        let cached = CachedInfo {
            run_id,
            uptime,
            fetched: Instant::now(),
        };
        let info = cached.now();
        *self.info.lock() = Some(cached);
        info
    }

    pub(super) fn failure(&self, e: &redis::RedisError, replies_read: usize) -> Failure {
        let stale = replies_read == 0 && io_error(e).is_some_and(|io| is_dropped(io.kind()));
        Failure {
            error: self.redis_error(e, false),
            stale,
        }
    }
}

impl CachedInfo {
    pub(super) fn now(&self) -> ServerInfo {
        ServerInfo {
            run_id: self.run_id.clone(),
            uptime: self
                .uptime
                .map(|u| u.saturating_add(self.fetched.elapsed())),
        }
    }
}

/// `run_id` and `uptime_in_seconds` from an `INFO` reply.
fn parse_info(text: &str) -> (Option<String>, Option<Duration>) {
    let mut run_id = None;
    let mut uptime = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(id) = line.strip_prefix("run_id:") {
            run_id = Some(id.to_owned()).filter(|id| !id.is_empty());
        } else if let Some(secs) = line.strip_prefix("uptime_in_seconds:") {
            uptime = secs.parse::<u64>().ok().map(Duration::from_secs);
        }
    }
    (run_id, uptime)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn info_parsing() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let (run_id, uptime) = parse_info(text);
        assert_eq!(run_id.as_deref(), Some("abc123"));
        assert_eq!(uptime, Some(Duration::from_secs(42)));
        assert_eq!(parse_info(""), (None, None));
    }
}
