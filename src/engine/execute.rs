//! Running one batch of operations on a node, in two halves: `begin`
//! sends it (or settles what needs no server: a node marked down), and
//! `complete` reads the answers and turns them into votes, with the
//! node's upkeep (latency, liveness, identity, release retries).
//!
//! The node's thread runs both halves back to back; a caller that drives
//! a round itself (see `drive.rs`) sends to every idle node first and
//! reads afterwards, or hands a batch it no longer waits for to the node's
//! thread between the halves.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use super::action::Action;
use super::identity::Standing;
use super::worker::{Shared, Vote, Worker};
use crate::backend::{
    Answers, BackendError, BackendErrorKind, InFlight, KeySet, Op, Reply, ServerInfo,
};
use crate::owner;
use crate::report::NodeOutcome;
use crate::token::{TOKEN_LEN, Token};

/// One operation as the executor runs it.
pub(super) struct Item<'a> {
    pub(super) action: Action,
    pub(super) keys: &'a KeySet,
    pub(super) token: Token,
}

/// A batch between its halves: the votes settled without the server, and
/// the batch sent to it.
pub(crate) struct Begun {
    known: Vec<Option<Vote>>,
    in_flight: Option<Box<dyn InFlight>>,
    started: Instant,
}

impl Begun {
    /// Whether the answers have begun to arrive (waiting at most until
    /// `until`); a batch settled without the server always has.
    pub(super) fn ready(&mut self, until: Instant) -> bool {
        let Some(in_flight) = self.in_flight.as_mut() else {
            return true;
        };
        catch_unwind(AssertUnwindSafe(|| in_flight.wait(until))).unwrap_or(true)
    }
}

/// A send that panicked: every op failed.
struct Panicked;

impl InFlight for Panicked {
    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        let e = BackendError::new(BackendErrorKind::Panicked, "the backend panicked");
        Answers::new(vec![Err(e); ops.len()], None)
    }
}

impl Worker {
    /// Runs `items` as one backend batch and returns one vote each.
    pub(super) fn execute(&mut self, items: &[Item<'_>]) -> Vec<Vote> {
        let begun = self.begin(items);
        self.complete(begun, items)
    }

    /// Sends `items` to the node (a node marked down skips acquires and
    /// extends at no cost, and keeps its releases for when it is back: an
    /// earlier acquire may have landed there).
    pub(super) fn begin(&mut self, items: &[Item<'_>]) -> Begun {
        let down = self.liveness.is_down();
        let mut known: Vec<Option<Vote>> = Vec::with_capacity(items.len());
        for item in items {
            if down {
                if item.action == Action::Release {
                    self.keep(item.keys, item.token);
                }
                known.push(Some((NodeOutcome::Down, None)));
            } else {
                known.push(None);
            }
        }
        let started = Instant::now();
        let values = self.values_for(items, &known);
        let shared = self.counters_for(items);
        let ops = ops_for(items, &known, &values, counters(shared.as_deref()));
        let in_flight = (!ops.is_empty()).then(|| {
            let backend = &self.backend;
            catch_unwind(AssertUnwindSafe(|| backend.send(&ops)))
                .unwrap_or_else(|_| Box::new(Panicked))
        });
        Begun {
            known,
            in_flight,
            started,
        }
    }

    /// The shared settings, which hold the fence counters' key that the
    /// ops borrow while `self` is borrowed mutably: cloned only for a
    /// batch with a fenced op (no work on the plain path).
    fn counters_for(&self, items: &[Item<'_>]) -> Option<Arc<Shared>> {
        items
            .iter()
            .any(|i| i.action.is_fenced())
            .then(|| Arc::clone(&self.shared))
    }

    /// The values the unsettled items store (each token followed by the
    /// owner label, see src/owner.rs), packed in one buffer in item order.
    fn values_for(&self, items: &[Item<'_>], known: &[Option<Vote>]) -> Vec<u8> {
        let suffix = &self.shared.value_suffix;
        let mut values = Vec::with_capacity(items.len() * (TOKEN_LEN + suffix.len()));
        for (item, _) in items.iter().zip(known).filter(|(_, k)| k.is_none()) {
            owner::push_value(&item.token, suffix, &mut values);
        }
        values
    }

    /// Reads the answers of a batch `begin` sent with the same `items`, and
    /// returns one vote each.
    pub(super) fn complete(&mut self, begun: Begun, items: &[Item<'_>]) -> Vec<Vote> {
        let Begun {
            known,
            in_flight,
            started,
        } = begun;
        let mut results = Vec::new().into_iter();
        let mut standing = Standing::Voting;
        let mut identified = false;
        if let Some(in_flight) = in_flight {
            let values = self.values_for(items, &known);
            let shared = self.counters_for(items);
            let ops = ops_for(items, &known, &values, counters(shared.as_deref()));
            let (answers, server) = finish(in_flight, &ops);
            let took = started.elapsed();
            self.health.note_latency(took);
            crate::metrics::round_trip(self.name(), took);
            self.note_health(&answers);
            standing = self.standing(&answers, server.as_ref());
            identified = server.is_some_and(|s| s.run_id.is_some());
            results = answers.into_iter();
        }
        let votes: Vec<Vote> = items
            .iter()
            .zip(known)
            .map(|(item, known)| {
                if let Some(vote) = known {
                    return vote;
                }
                let result = results.next().unwrap_or_else(|| {
                    Err(BackendError::new(
                        BackendErrorKind::Protocol,
                        "no result for this op",
                    ))
                });
                if item.action == Action::Release {
                    self.keep_for_retry(item.keys, item.token, &result);
                    if let Ok(reply) = result {
                        self.note_release(item.keys, reply);
                    }
                }
                if matches!(
                    item.action,
                    Action::Acquire { .. } | Action::AcquireFenced { .. }
                ) {
                    match &result {
                        // Who holds the lock, for the waiters' early
                        // wake-ups.
                        Ok(Reply::HeldBy(digest)) => {
                            self.shared
                                .waiters
                                .note_holder(item.keys, self.index, *digest);
                        }
                        // The key was free here: as good as a notice of
                        // its release, for a waiter this node may not
                        // have been listening for yet (`note_free`).
                        Ok(reply) if reply.is_yes() => {
                            self.shared.waiters.note_free(item.keys, self.index);
                        }
                        _ => {}
                    }
                }
                match result {
                    Ok(Reply::No | Reply::HeldBy(_)) => (NodeOutcome::Refused, None),
                    // Our token already there: another name of this server
                    // set it. That server votes once: here only when it is
                    // identified and this node is the name it votes under
                    // (its other name's grant then counts as a duplicate's,
                    // i.e. not at all), and not for a fenced acquire, whose
                    // vote must carry the counter it read.
                    Ok(Reply::AlreadyOurs)
                        if identified
                            && standing == Standing::Voting
                            && matches!(item.action, Action::Acquire { .. }) =>
                    {
                        (NodeOutcome::Granted, None)
                    }
                    Ok(Reply::AlreadyOurs) => (NodeOutcome::Failed(already_ours()), None),
                    // Releases count whoever answers: undoing needs no vote.
                    Ok(_) if item.action == Action::Release => (NodeOutcome::Granted, None),
                    Ok(Reply::Fenced(read)) => {
                        let outcome = self.grant(standing);
                        let fence = outcome.is_granted().then_some(read);
                        (outcome, fence)
                    }
                    Ok(_) => (self.grant(standing), None),
                    Err(e) => (NodeOutcome::Failed(e), None),
                }
            })
            .collect();
        let holds = items
            .iter()
            .zip(&votes)
            .any(|(item, (outcome, _))| item.action != Action::Release && outcome.is_granted());
        if holds {
            // A lock may be held here until max TTL from now: its
            // settings are watched that long (see `settings_look.rs`).
            self.settings_look.granted(Instant::now());
        }
        votes
    }

    /// What the grants of a batch count for, judged by the identity of the
    /// server that answered it (reported with the answers, never a cache
    /// another connection may have refreshed).
    fn standing(
        &mut self,
        results: &[Result<Reply, BackendError>],
        server: Option<&ServerInfo>,
    ) -> Standing {
        if server.is_none() && !results.iter().any(Result::is_ok) {
            return Standing::Voting; // nothing was granted, nothing learned
        }
        self.judge_server(server)
    }

    /// The outcome of a grant from a node in `standing`.
    fn grant(&self, standing: Standing) -> NodeOutcome {
        match standing {
            Standing::Voting => NodeOutcome::Granted,
            Standing::Quarantined(remaining) => NodeOutcome::Quarantined { remaining },
            Standing::Unverified => NodeOutcome::Failed(BackendError::new(
                BackendErrorKind::Protocol,
                "the server's identity (run_id in INFO server) is unknown, so a restart \
                 cannot be ruled out: with restart quarantine on, its grant does not count",
            )),
            Standing::MayEvict => NodeOutcome::Failed(BackendError::new(
                BackendErrorKind::Config,
                format!(
                    "{}: the server may evict lock keys under memory pressure, and a lock \
                     whose keys were evicted can be taken by a second holder: set \
                     `maxmemory-policy noeviction` (or no maxmemory), or accept the risk \
                     with LockManagerBuilder::accept_eviction_risk",
                    self.identity
                        .eviction()
                        .unwrap_or("maxmemory with an evicting policy")
                ),
            )),
            Standing::Replica => NodeOutcome::Failed(BackendError::new(
                BackendErrorKind::Config,
                "the server is a replica now (role in INFO replication): its keys are \
                 its master's, and what it grants is gone at the next sync",
            )),
            Standing::DuplicateOf(owner) => {
                let other = self
                    .shared
                    .names
                    .get(owner)
                    .map_or("another node", String::as_str);
                NodeOutcome::Failed(BackendError::new(
                    BackendErrorKind::Config,
                    format!("the same server as {other} (same run id): one server casts one vote"),
                ))
            }
        }
    }
}

/// The fence counters' key in `shared`, if the batch needs it.
fn counters(shared: Option<&Shared>) -> &[u8] {
    shared.map_or(&[][..], |s| &s.fence_counters[..])
}

/// The backend ops for the items whose vote is not settled yet; `values`
/// holds their stored values, all of one length, in order
/// ([`Worker::values_for`]).
fn ops_for<'a>(
    items: &'a [Item<'_>],
    known: &[Option<Vote>],
    values: &'a [u8],
    counter: &'a [u8],
) -> Vec<Op<'a>> {
    let unsettled = known.iter().filter(|k| k.is_none()).count();
    let len = values.len().checked_div(unsettled).unwrap_or(0);
    items
        .iter()
        .zip(known)
        .filter(|(_, known)| known.is_none())
        .zip(values.chunks(len.max(1)))
        .map(|((item, _), value)| item.action.op(item.keys, value, counter))
        .collect()
}

/// Reads a sent batch's answers, with panics contained and the result
/// count checked: every op gets exactly one answer. Also returns the
/// identity of the server that answered, when the backend knows it.
fn finish(
    in_flight: Box<dyn InFlight>,
    ops: &[Op<'_>],
) -> (Vec<Result<Reply, BackendError>>, Option<ServerInfo>) {
    contained(ops.len(), || in_flight.finish(ops))
}

/// The answers to `n` ops that `call` gets from a backend, with a panic
/// contained (every op failed) and the result count checked.
pub(super) fn contained(
    n: usize,
    call: impl FnOnce() -> Answers,
) -> (Vec<Result<Reply, BackendError>>, Option<ServerInfo>) {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(answers) => {
            let (results, server) = answers.into_parts();
            (counted(results, n), server)
        }
        Err(_) => {
            let e = BackendError::new(BackendErrorKind::Panicked, "the backend panicked");
            (vec![Err(e); n], None)
        }
    }
}

/// `results` made exactly `n` long: missing ones (or extra ones) are a
/// protocol error of the backend.
fn counted(
    mut results: Vec<Result<Reply, BackendError>>,
    n: usize,
) -> Vec<Result<Reply, BackendError>> {
    if results.len() != n {
        let e = BackendError::new(
            BackendErrorKind::Protocol,
            format!("backend returned {} results for {n} ops", results.len()),
        );
        results.truncate(n);
        results.resize(n, Err(e));
    }
    results
}

/// The outcome of an acquire that found our token already there: the same
/// server reached under another name, whose vote counted under that name.
fn already_ours() -> BackendError {
    BackendError::new(
        BackendErrorKind::Config,
        "the key already held this attempt's token: the same server as another configured \
         node (one server casts one vote)",
    )
}
