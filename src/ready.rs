//! [`LockManager::check_ready`] and [`LockManager::check_ready_all`]:
//! whether a lock can be taken now, asked of the servers with a probe
//! lock of the crate's own, and whether some node refuses what locks need
//! (or, for the second, falls short in any way).

use std::time::Duration;

use crate::backend::{BackendErrorKind, KeySet};
use crate::error::{Error, Result};
use crate::health::{Health, NodeHealth, NodeState};
use crate::manager::LockManager;
use crate::report::{NodeOutcome, Report, Round};
use crate::resource::{READY, RESERVED};
use crate::token::random_u64;

impl LockManager {
    /// Whether a lock can be taken and kept now, and no node refuses what
    /// locks need: takes a probe lock, extends it and releases it, as any
    /// lock would (`SET NX PX`, the extend and release scripts), on every
    /// node. `Ok` with the release's per-node report when all three
    /// reached a quorum and no node refuses; otherwise the error of the
    /// step that failed, naming each node and why (the probe lock is
    /// released in any case), or [`Error::Degraded`] naming each node
    /// that refuses.
    ///
    /// A node *refuses what locks need* when its access rules refuse
    /// (`NOPERM`) an acquire, an extend or a release on the crate's own
    /// keys under the manager's prefix: an ACL user without the scripting
    /// commands (on Redis 7 every extend and release is a script), or
    /// whose key pattern misses the prefix. Such a node is
    /// [`NodeState::Refuses`] in [`health()`](Self::health) and does not
    /// count as voting there. The check fails on it even though a quorum
    /// of the others took the probe lock: the fault does not pass by
    /// itself, every lock then rests on the other nodes (with three
    /// nodes, one more failure loses them all), and its releases leave
    /// keys there until their TTL. Nodes down or in restart quarantine
    /// pass (they come back by themselves, and the manager does without
    /// them); to require every node, use
    /// [`check_ready_all`](Self::check_ready_all). To keep serving
    /// through a refusing node (a load balancer's readiness must not take
    /// every replica of a service out of rotation for one misconfigured
    /// lock server), read [`Health::has_quorum`] instead: it counts the
    /// nodes that serve, and costs nothing.
    ///
    /// [`health()`](Self::health) contacts no server and knows only what
    /// the last operations showed; this check asks. After the three
    /// rounds it waits (at most four node timeouts, and at least a
    /// second) until every node has read its answers to them and judged
    /// any refusal among them, then reads `health()`.
    ///
    /// The probe lock is `<prefix>{quorum-lock}:ready:<random>` (the
    /// crate's own namespace, which no resource can enter), a new name
    /// per call so that checks from several processes never contend; it
    /// lives for the manager's TTL at most and is released at once. It
    /// costs three rounds (one round trip each) and counts in
    /// [`health()`](Self::health)`.locks` like any lock. Restart
    /// quarantine applies: a fresh server is not ready until its grants
    /// count.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use quorum_lock::backend::OpKind;
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("n{i}"))).collect();
    /// let locks = LockManager::builder().nodes(nodes.iter().cloned()).build()?;
    /// assert_eq!(locks.check_ready()?.granted(), 3);
    ///
    /// // One node's access rules refuse every extend and release (as an
    /// // ACL user without scripts on Redis 7): a quorum still works, but
    /// // the check says which node refuses and why.
    /// nodes[2].set_denied(Some(Arc::new(|op| !matches!(op.kind, OpKind::Acquire { .. }))));
    /// let degraded = locks.check_ready().unwrap_err();
    /// assert!(degraded.is_degraded(), "{degraded}");
    /// assert!(degraded.to_string().contains("n2: refuses what locks need (extend, release)"));
    /// assert_eq!(locks.health().voting(), 2);
    ///
    /// nodes[2].set_denied(None);
    /// nodes[0].set_down(true);
    /// nodes[1].set_down(true);
    /// let not_ready = locks.check_ready().unwrap_err();
    /// assert!(not_ready.is_no_quorum(), "{not_ready}");
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What taking the probe lock gave (`NoQuorum` naming each node's
    /// failure, `ValidityExpired`, `Runtime` when the OS has no
    /// randomness), `Lost` when too few nodes extended it (an ACL without
    /// `PEXPIRE`: every lock would be lost at its first extend),
    /// `NoQuorum` when its release reached too few nodes, or
    /// [`Error::Degraded`] when a quorum did all three but a node refuses
    /// what locks need.
    pub fn check_ready(&self) -> Result<Report> {
        let (report, health) = self.take_probe_lock()?;
        let refusing: Vec<String> = health
            .nodes
            .iter()
            .filter_map(|node| refuses(node, &report))
            .collect();
        degraded(refusing, report)
    }

    /// [`check_ready`](Self::check_ready) that requires every node: `Ok`
    /// only when every node serves locks. Besides what `check_ready`
    /// refuses, [`Error::Degraded`] names each node that is not
    /// [`NodeState::Up`] in [`health()`](Self::health) after the check
    /// (down, quarantined, unusable, a replica, ...), did not release the
    /// probe lock, or failed an operation while the check ran (its own,
    /// or another of this manager's at the same time: the node's
    /// `failures` counter moved). For a deploy gate or a monitor that
    /// must hear of any node that falls short; a readiness probe that
    /// should keep serving through one node's restart wants
    /// `check_ready`.
    ///
    /// ```
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("n{i}"))).collect();
    /// let locks = LockManager::builder().nodes(nodes.iter().cloned()).build()?;
    /// assert_eq!(locks.check_ready_all()?.granted(), 3);
    ///
    /// nodes[1].set_down(true);
    /// assert_eq!(locks.check_ready()?.granted(), 2, "a quorum is ready");
    /// let short = locks.check_ready_all().unwrap_err();
    /// assert!(short.is_degraded() && short.to_string().contains("n1: "), "{short}");
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`check_ready`](Self::check_ready); [`Error::Degraded`] also
    /// when any node falls short as above.
    pub fn check_ready_all(&self) -> Result<Report> {
        let before = self.health();
        let (report, after) = self.take_probe_lock()?;
        let short: Vec<String> = after
            .nodes
            .iter()
            .filter_map(|node| {
                if let Some(refusal) = refuses(node, &report) {
                    return Some(refusal);
                }
                if node.state != NodeState::Up {
                    return Some(format!("{}: {}", node.name, node.state));
                }
                match released(node, &report) {
                    Some(NodeOutcome::Granted) => {}
                    Some(outcome) => {
                        return Some(format!(
                            "{}: the probe lock's release: {}",
                            node.name,
                            outcome.describe(Round::Release, &node.name)
                        ));
                    }
                    None => return Some(format!("{}: not in the release's report", node.name)),
                }
                let failed_before = before
                    .nodes
                    .iter()
                    .find(|b| b.name == node.name)
                    .map_or(0, |b| b.failures);
                (node.failures > failed_before).then(|| {
                    let last = node.last_error.as_ref().map_or_else(String::new, |e| {
                        format!(", the last: {}", e.reason(&node.name))
                    });
                    format!(
                        "{}: {} operations failed while the check ran{last}",
                        node.name,
                        node.failures - failed_before
                    )
                })
            })
            .collect();
        degraded(short, report)
    }

    /// Takes, extends and releases a probe lock of its own, then waits
    /// until every node has read its answers to these rounds (and judged
    /// what they said: a refusal asks the node's thread to try what locks
    /// need, which it does before it answers the wait): the release's
    /// report, and `health()` then.
    fn take_probe_lock(&self) -> Result<(Report, Health)> {
        let rounds = self.core().rounds();
        let name = [
            RESERVED,
            b":",
            READY.as_bytes(),
            b":",
            format!("{:016x}", random_u64()).as_bytes(),
        ]
        .concat();
        let resources = KeySet::one(name);
        let lock = rounds.lock_on(&resources);
        let lease = rounds.acquire_once(&resources, &lock, self.ttl(), false)?;
        let extended = rounds.extend(&lease, self.ttl());
        let released = rounds.release(&lease, None);
        let report = extended.and(released)?;
        let settle = rounds
            .config()
            .node_timeout
            .saturating_mul(4)
            .max(Duration::from_secs(1));
        // Bounded: a node that has not read its answers by then is judged
        // on what it has read.
        let _ = self.flush(settle);
        Ok((report, self.health()))
    }
}

/// Why `node` refuses what locks need, in one line, if it does: its
/// health says so, or its access rules refused the probe lock's release
/// (a key of the crate's own, so no resource's refusal).
fn refuses(node: &NodeHealth, report: &Report) -> Option<String> {
    if matches!(node.state, NodeState::Refuses { .. }) {
        return Some(format!("{}: {}", node.name, node.state));
    }
    match released(node, report) {
        Some(NodeOutcome::Failed(e)) if e.kind() == BackendErrorKind::Denied => Some(format!(
            "{}: refuses the probe lock's release: {}",
            node.name,
            e.reason(&node.name)
        )),
        _ => None,
    }
}

/// What `node` did with the probe lock's release.
fn released<'a>(node: &NodeHealth, report: &'a Report) -> Option<&'a NodeOutcome> {
    report
        .nodes()
        .iter()
        .find(|n| n.node() == node.name)
        .map(|n| n.outcome())
}

/// `Ok(report)` when no node falls `short`, else [`Error::Degraded`]
/// naming each.
fn degraded(short: Vec<String>, report: Report) -> Result<Report> {
    if short.is_empty() {
        return Ok(report);
    }
    Err(Error::Degraded {
        reason: short.join("; "),
        report: Box::new(report),
    })
}
