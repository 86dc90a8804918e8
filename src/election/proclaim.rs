//! A leader's proclaim: its record written on every node where the
//! election's lock key still holds its token (`OpKind::Proclaim`), and
//! counted once a quorum of counted nodes did, within the validity.
//!
//! The op goes to each node's backend from a thread of its own (one per
//! node, bounded by the node timeout), not through the node's queue: it
//! changes nothing that a lock's rounds read or undo (no key of a lock,
//! no expiry), it needs no order against them (it compares the token, so
//! it is refused wherever the lock is not held, whenever it arrives), and
//! it carries data of its own (the record) that the engine's batches do
//! not. Whether a node's answer counts is the manager's view of it
//! ([`counts`](super::counts)): a quarantined node's does not.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::keys::Keys;
use super::{counts, record};
use crate::backend::{self, BackendError, BackendErrorKind, KeySet, Op, Reply};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::owner::{push_value, value_suffix};
use crate::report::{NodeOutcome, NodeReport, Report, Round};

/// One node's answer to the proclaim.
type Answer = Result<Reply, BackendError>;

/// Writes the record of `guard`'s leader (`term`, `value`) on every node,
/// and returns once a quorum of counted nodes confirmed it while `guard`
/// is valid.
///
/// # Errors
///
/// [`Error::Lost`] when the guard is no longer valid, or so many nodes
/// refused (their lock key no longer holds its token) that no quorum is
/// left; [`Error::NoQuorum`] when too few nodes answered in time.
pub(super) fn proclaim(
    locks: &LockManager,
    keys: &Keys,
    guard: &LockGuard,
    term: u64,
    value: &[u8],
) -> Result<()> {
    guard.check()?;
    let rounds = locks.core().rounds();
    let config = rounds.config();
    let record = record::encode(term, guard.token(), value);
    let mut stored = Vec::new();
    push_value(guard.token(), &value_suffix(&config.owner), &mut stored);
    let started = Instant::now();
    let wait = config.node_timeout.min(guard.validity());
    let answers = on_every_node(locks, keys, &stored, &record, wait);
    let elapsed = started.elapsed();
    let health = rounds.engine().health(rounds.now());
    let nodes: Vec<NodeReport> = answers
        .into_iter()
        .zip(health)
        .map(|(answer, node)| {
            let outcome = match (answer, counts(&node.state)) {
                (Some(Ok(reply)), Ok(())) if reply.is_yes() => NodeOutcome::Granted,
                (Some(Ok(reply)), Err(not_counted)) if reply.is_yes() => not_counted,
                (Some(Ok(_)), _) => NodeOutcome::Refused,
                (Some(Err(e)), _) if e.kind() == BackendErrorKind::Timeout => NodeOutcome::TimedOut,
                (Some(Err(e)), _) => NodeOutcome::Failed(e),
                (None, _) => NodeOutcome::TimedOut,
            };
            NodeReport {
                node: node.name,
                outcome,
            }
        })
        .collect();
    let report = Report {
        round: Round::Proclaim,
        resource: keys.name.to_string(),
        quorum: config.quorum,
        nodes,
        elapsed,
        attempts: 1,
        waited: Duration::ZERO,
        held_here: false,
        writer_here: false,
    };
    // Confirmed only within the validity: a proclaim that a quorum
    // confirmed after the leadership ran out is not this leader's.
    guard.check()?;
    if report.granted() >= config.quorum {
        return Ok(());
    }
    let refused = report
        .nodes
        .iter()
        .filter(|n| matches!(n.outcome, NodeOutcome::Refused))
        .count();
    if report.nodes.len() - refused < config.quorum {
        return Err(Error::Lost {
            reason: "the election's lock key no longer holds this leader's token on enough \
                     nodes for a quorum"
                .into(),
            report: Some(Box::new(report)),
        });
    }
    Err(Error::NoQuorum {
        report: Box::new(report),
    })
}

/// What the proclaim's op borrows, owned by the threads that send it.
struct Owned {
    lock: KeySet,
    token: Vec<u8>,
    record_key: Vec<u8>,
    record: Vec<u8>,
}

/// The proclaim on every node, each from a thread of its own; one answer
/// per node in node order, `None` for a node that did not answer within
/// `wait` (its thread finishes on its own, bounded by the backend's own
/// timeouts).
fn on_every_node(
    locks: &LockManager,
    keys: &Keys,
    stored: &[u8],
    record: &[u8],
    wait: Duration,
) -> Vec<Option<Answer>> {
    let engine = locks.core().rounds().engine();
    let backends: Vec<_> = engine.backends().cloned().collect();
    let mut found: Vec<Option<Answer>> = vec![None; backends.len()];
    let (tx, rx) = crossbeam_channel::bounded(backends.len());
    let shared = Arc::new(Owned {
        lock: keys.lock.clone(),
        token: stored.to_vec(),
        record_key: keys.record.clone(),
        record: record.to_vec(),
    });
    let mut expected = 0;
    for (slot, backend) in backends.into_iter().enumerate() {
        let (tx, shared) = (tx.clone(), Arc::clone(&shared));
        let spawned = std::thread::Builder::new()
            .name(format!("quorum-lock-proclaim-{slot}"))
            .spawn(move || {
                let Owned {
                    lock,
                    token,
                    record_key,
                    record,
                } = &*shared;
                let op = Op::proclaim(lock, token, record_key, record);
                let answer = catch_unwind(AssertUnwindSafe(|| {
                    backend::run(&*backend, &[op]).into_results().pop()
                }));
                let answer = match answer {
                    Ok(Some(answer)) => answer,
                    Ok(None) => Err(BackendError::new(
                        BackendErrorKind::Protocol,
                        "the backend returned no result for the proclaim",
                    )),
                    Err(_) => Err(BackendError::new(
                        BackendErrorKind::Panicked,
                        "the backend panicked during the proclaim",
                    )),
                };
                let _ = tx.send((slot, answer));
            });
        match spawned {
            Ok(_) => expected += 1,
            Err(e) => {
                found[slot] = Some(Err(BackendError::new(
                    BackendErrorKind::Other,
                    format!("no thread for the proclaim: {e}"),
                )));
            }
        }
    }
    drop(tx);
    let deadline = Instant::now().checked_add(wait);
    for _ in 0..expected {
        let got = match deadline {
            Some(deadline) => rx.recv_deadline(deadline).ok(),
            None => rx.recv().ok(),
        };
        let Some((slot, answer)) = got else { break };
        found[slot] = Some(answer);
    }
    found
}
