//! A leader's proclaim: its record written on every node where the
//! election's lock key still holds its token (`OpKind::Proclaim`), and
//! counted once a quorum of counted nodes did, within the validity.
//!
//! The op goes through each node's queue, as an inspection does
//! ([`Engine::proclaim`](crate::engine::Engine::proclaim)): the node's
//! thread runs it after the work queued before it, through `node/io.rs`
//! (panics contained), and a node marked down is not asked. It needs no
//! order against a lock's rounds for safety (it compares the token, so it
//! is refused wherever the lock is not held, whenever it arrives).
//! Whether a node's answer counts is the manager's view of it
//! ([`counts`](super::counts)): a quarantined node's does not.

use std::time::{Duration, Instant};

use super::keys::Keys;
use super::{counts, record};
use crate::backend::BackendErrorKind;
use crate::engine::Record;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::owner::{push_value, value_suffix};
use crate::report::{NodeOutcome, NodeReport, Report, Round};

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
    let answers = rounds.engine().proclaim(
        Record {
            lock: keys.lock.clone(),
            stored,
            key: keys.record.clone(),
            record,
        },
        wait,
    );
    let elapsed = started.elapsed();
    let health = rounds.engine().health(rounds.now());
    let nodes: Vec<NodeReport> = answers
        .into_iter()
        .zip(health)
        .map(|(answer, node)| {
            let outcome = match (answer, counts(&node.state)) {
                (Ok(reply), Ok(())) if reply.is_yes() => NodeOutcome::Granted,
                (Ok(reply), Err(not_counted)) if reply.is_yes() => not_counted,
                (Ok(_), _) => NodeOutcome::Refused,
                (Err(e), _) if e.kind() == BackendErrorKind::Timeout => NodeOutcome::TimedOut,
                (Err(e), _) => NodeOutcome::Failed(e),
            };
            NodeReport {
                node: node.name.into(),
                outcome,
            }
        })
        .collect();
    let report = Report {
        round: Round::Proclaim,
        resource: keys.name.to_string().into(),
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
    if report.nodes.len() - report.refused() < config.quorum {
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
