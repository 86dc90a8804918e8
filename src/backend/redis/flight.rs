//! A Redis batch in flight: written on a pooled connection by
//! [`send`], its replies read by [`InFlight::finish`] (`RedisBackend`'s
//! [`Backend::send`](crate::backend::Backend::send) in two halves, so that
//! a caller can write to every node before it reads from any).

use std::sync::Arc;
use std::time::Instant;

use super::Inner;
use super::batch::{FirstSent, ttl_millis};
use super::pool::Checkout;
use crate::backend::{Answers, BackendError, BackendErrorKind, InFlight, Op, Reply, ServerInfo};

/// Writes the pipeline for `ops` on a pooled connection and returns; the
/// answers are read by [`InFlight::finish`], bounded by the same deadline
/// (one node timeout from now). A stale pooled connection (closed by the
/// server before anything was read) is retried once on a fresh one,
/// within that deadline, as a whole batch.
pub(super) fn send(inner: &Arc<Inner>, ops: &[Op<'_>]) -> Box<dyn InFlight> {
    let inner = Arc::clone(inner);
    let deadline = inner.deadline();
    let (mut results, ttls) = checked_ttls(ops);
    if results.iter().all(Option::is_some) {
        return Box::new(inner.answers(results, None));
    }
    let mut conn = match inner.checkout(deadline, false) {
        Ok(conn) => conn,
        Err(e) => {
            fail_unanswered(&mut results, Err(e));
            return Box::new(inner.answers(results, None));
        }
    };
    match inner.send_first(&mut conn, ops, &ttls, &mut results, deadline) {
        Ok(first) => Box::new(Sent {
            inner,
            conn,
            first,
            ttls,
            results,
            deadline,
        }),
        Err(failure) => {
            let stale = failure.stale && conn.reused;
            drop(conn);
            let mut server = None;
            let outcome = if stale {
                inner.with_fresh_conn(deadline, |c| {
                    inner.run_batch(c, ops, &ttls, &mut results, &mut server, deadline)
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
    ttls: Vec<u64>,
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

    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        let Sent {
            inner,
            mut conn,
            first,
            ttls,
            mut results,
            deadline,
        } = *self;
        let mut server = None;
        let read = inner.finish_batch(
            &mut conn,
            &first,
            ops,
            &ttls,
            &mut results,
            &mut server,
            deadline,
        );
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
                        inner.run_batch(c, ops, &ttls, &mut results, &mut server, deadline)
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
/// call, `None` for an op to send; and the TTLs in whole milliseconds.
#[allow(clippy::type_complexity)] // the two lists the batch runs on
fn checked_ttls(ops: &[Op<'_>]) -> (Vec<Option<Result<Reply, BackendError>>>, Vec<u64>) {
    let mut results = Vec::with_capacity(ops.len());
    let mut ttls = Vec::with_capacity(ops.len());
    for op in ops {
        let ttl = op.ttl();
        match ttl.map(ttl_millis).transpose() {
            Ok(ms) => {
                results.push(None);
                ttls.push(ms.unwrap_or(0));
            }
            Err(e) => {
                results.push(Some(Err(e)));
                ttls.push(0);
            }
        }
    }
    (results, ttls)
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
