//! A Redis batch in flight: written on a pooled connection by
//! [`send`], its replies read by [`InFlight::finish`] (`RedisBackend`'s
//! [`Backend::send`](crate::backend::Backend::send) in two halves, so that
//! a caller can write to every node before it reads from any).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Inner;
use super::batch::FirstSent;
use super::pool::Checkout;
use crate::backend::{Answers, BackendError, BackendErrorKind, InFlight, Op, Reply, ServerInfo};

/// Largest TTL sent to the server (about 285 000 years). Redis refuses
/// expiries whose absolute time would overflow a signed 64-bit millisecond
/// count, so anything near `i64::MAX` is refused here before any network
/// call.
const MAX_TTL_MS: u64 = 1 << 53;

/// Writes the pipeline for `ops` on a pooled connection and returns; the
/// answers are read by [`InFlight::finish`], bounded by the same
/// `deadline` (one node timeout from `now`, or sooner for a cluster's
/// call). A stale pooled connection (closed by the server before
/// anything was read) is retried once on a fresh one, within that
/// deadline, as a whole batch.
pub(super) fn send(
    inner: &Arc<Inner>,
    ops: &[Op<'_>],
    now: Instant,
    deadline: Instant,
) -> Box<dyn InFlight> {
    let inner = Arc::clone(inner);
    let mut results = checked_ttls(ops);
    if results.iter().all(Option::is_some) {
        return Box::new(inner.answers(results, None));
    }
    let mut conn = match inner.checkout(now, deadline, false) {
        Ok(conn) => conn,
        Err(e) => {
            fail_unanswered(&mut results, Err(e));
            return Box::new(inner.answers(results, None));
        }
    };
    match inner.send_first(&mut conn, ops, &mut results, deadline) {
        Ok(first) => Box::new(Sent {
            inner,
            conn,
            first,
            results,
            deadline,
        }),
        Err(failure) => {
            let stale = failure.stale && conn.reused;
            drop(conn);
            let mut server = None;
            let outcome = if stale {
                inner.with_fresh_conn(deadline, |c| {
                    inner.run_batch(c, ops, &mut results, &mut server, deadline)
                })
            } else {
                Err(failure.error)
            };
            fail_unanswered(&mut results, outcome);
            Box::new(inner.answers(results, server))
        }
    }
}

/// A Redis batch written on `conn` whose replies are still to be read.
struct Sent {
    inner: Arc<Inner>,
    conn: Checkout,
    first: FirstSent,
    results: Vec<Option<Result<Reply, BackendError>>>,
    deadline: Instant,
}

impl InFlight for Sent {
    fn wait(&mut self, until: Instant) -> bool {
        // Every op refused before sending (scripts off): no reply to wait for.
        if self.first.awaits_nothing() {
            return true;
        }
        self.conn.conn.wait_reply(until.min(self.deadline))
    }

    #[cfg(unix)]
    fn readable_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        if self.first.awaits_nothing() {
            return None;
        }
        self.conn.conn.readable_fd()
    }

    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        let Sent {
            inner,
            mut conn,
            first,
            mut results,
            deadline,
        } = *self;
        let mut server = None;
        let read = inner.finish_batch(&mut conn, &first, ops, &mut results, &mut server, deadline);
        let outcome = match read {
            Ok(()) => {
                inner.checkin(conn);
                Ok(())
            }
            Err(failure) => {
                let stale = failure.stale && conn.reused;
                drop(conn);
                if stale {
                    // The server had closed the pooled connection: nothing
                    // ran. The whole batch again, on a fresh connection.
                    inner.with_fresh_conn(deadline, |c| {
                        inner.run_batch(c, ops, &mut results, &mut server, deadline)
                    })
                } else {
                    Err(failure.error)
                }
            }
        };
        fail_unanswered(&mut results, outcome);
        inner.answers(results, server)
    }
}

/// One slot per op: `Some(error)` for a TTL refused before any network
/// call, `None` for an op to send (its TTL then in range: [`ttl_ms`]).
fn checked_ttls(ops: &[Op<'_>]) -> Vec<Option<Result<Reply, BackendError>>> {
    ops.iter()
        .map(|op| match op.ttl().map(ttl_millis) {
            Some(Err(e)) => Some(Err(e)),
            Some(Ok(_)) | None => None,
        })
        .collect()
}

/// `op`'s TTL in whole milliseconds (0 for an op without one), as sent:
/// read where the op is packed instead of kept in a list of its own (one
/// allocation less per batch). An op whose TTL is out of range was
/// answered by [`checked_ttls`] and is never packed.
pub(super) fn ttl_ms(op: &Op<'_>) -> u64 {
    op.ttl().and_then(|ttl| ttl_millis(ttl).ok()).unwrap_or(0)
}

/// After a failed round trip: every op without an answer gets its error.
fn fail_unanswered(
    results: &mut [Option<Result<Reply, BackendError>>],
    outcome: Result<(), BackendError>,
) {
    if let Err(e) = outcome {
        for slot in results.iter_mut().filter(|r| r.is_none()) {
            *slot = Some(Err(e.clone()));
        }
    }
}

impl Inner {
    /// The batch's answers, an op left without one reported as such.
    pub(super) fn answers(
        &self,
        results: Vec<Option<Result<Reply, BackendError>>>,
        server: Option<ServerInfo>,
    ) -> Answers {
        let results = results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(self.node_error(BackendErrorKind::Protocol, "no reply for this op", None))
                })
            })
            .collect();
        Answers::new(results, server)
    }
}

/// `ttl` in whole milliseconds, rounded up, at least 1.
///
/// Rounding down would let the key expire before the deadline the client
/// computed from `ttl`.
pub(super) fn ttl_millis(ttl: Duration) -> Result<u64, BackendError> {
    let nanos = ttl.as_nanos();
    let ms = nanos.div_ceil(1_000_000).max(1);
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_TTL_MS => Ok(ms),
        _ => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("TTL {ttl:?} is out of range for Redis"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn ttl_rounds_up_to_whole_milliseconds() {
        assert_eq!(ttl_millis(Duration::ZERO).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(999)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1001)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_secs(10)).unwrap(), 10_000);
        assert_eq!(
            ttl_millis(Duration::from_secs(10) + Duration::from_nanos(1)).unwrap(),
            10_001
        );
    }

    #[test]
    fn ttl_out_of_range_is_refused_before_any_call() {
        assert!(ttl_millis(Duration::from_millis(MAX_TTL_MS)).is_ok());
        let err = ttl_millis(Duration::from_millis(MAX_TTL_MS + 1)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Other);
        assert!(ttl_millis(Duration::MAX).is_err());
    }
}
