//! Saying so when a run goes on with a degraded cluster: the nodes that
//! did not take part in the acquire, a node that fails an extend of the
//! lock it holds, and the nodes that failed its release, each once and
//! in the words the library's reports use (which `doctor` and `status`
//! use too). Never a password (the nodes' names are redacted) nor the
//! token (the library scrubs it from every message).
//!
//! An extend returns once a quorum confirmed it, without a per-node
//! report; the nodes' own part is read from the manager's health after
//! it (flushed first, bounded): a node whose failure count grew in an
//! extend failed it, and its last error says why. The manager is this
//! run's own, so every failure it counts is this lock's.

use std::time::Duration;

use quorum_lock::LockManager;
use quorum_lock::health::NodeState;
use quorum_lock::report::{NodeOutcome, Report};

use crate::logger::warn;

/// What has been said of the nodes of one held lock.
pub(crate) struct Notices {
    /// The lock's name, for messages.
    name: String,
    /// The longest wait for the nodes' part of a round before looking.
    within: Duration,
    /// Nothing is said (`-q`): nothing is looked at either.
    quiet: bool,
    /// Per node, in configuration order: named by the acquire's notice
    /// (it took no part, so it holds no copy of the lock).
    missing: Vec<bool>,
    /// Per node: named for a failed extend already.
    failed_extend: Vec<bool>,
    /// Per node: the failures counted when last looked.
    failures: Vec<u64>,
}

impl Notices {
    /// Says nothing: before the acquire's notice, or with `-q`.
    pub(crate) fn quiet() -> Self {
        Self {
            name: String::new(),
            within: Duration::ZERO,
            quiet: true,
            missing: Vec::new(),
            failed_extend: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// After an extend a quorum confirmed: names, once each, the nodes
    /// that failed it (a failed extend is the loss, said by `run`).
    pub(crate) fn extended(&mut self, locks: &LockManager) {
        if self.quiet {
            return;
        }
        locks.flush(self.within);
        let health = locks.health();
        let total = health.nodes.len();
        for (i, node) in health.nodes.iter().enumerate() {
            let Some(seen) = self.failures.get_mut(i) else {
                continue;
            };
            let grew = node.failures > *seen;
            *seen = node.failures;
            if !grew || self.missing[i] || self.failed_extend[i] {
                continue;
            }
            let Some(error) = &node.last_error else {
                continue;
            };
            self.failed_extend[i] = true;
            let left = (0..total)
                .filter(|&n| !self.missing[n] && !self.failed_extend[n])
                .count();
            warn(&format!(
                "{}: {} failed an extend ({}): the lock now rests on {left} of {total} nodes \
                 ({} needed; this node's later extends are not reported)",
                self.name,
                node.name,
                crate::wording::flags(&error.reason(&node.name)),
                health.quorum
            ));
        }
    }

    /// After a release that a quorum answered: names the nodes that held
    /// a copy and failed to delete it (it stays until its TTL, at most
    /// `ttl`), in one line.
    pub(crate) fn released(&self, report: &Report, ttl: Duration) {
        if self.quiet {
            return;
        }
        let failed: Vec<String> = report
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.missing.get(*i).copied().unwrap_or(false))
            .filter_map(|(_, node)| {
                let why = match node.outcome() {
                    NodeOutcome::Failed(e) => e.reason(node.node()),
                    NodeOutcome::TimedOut => "timed out".to_owned(),
                    _ => return None,
                };
                Some(format!("{} ({})", node.node(), crate::wording::flags(&why)))
            })
            .collect();
        if failed.is_empty() {
            return;
        }
        warn(&format!(
            "{}: the release failed on {}: its copy stays until it expires (within {} ms)",
            self.name,
            failed.join("; "),
            ttl.as_millis()
        ));
    }
}

/// Names the nodes that did not grant `name`'s lock, waiting at most
/// `within` for the slow ones to answer first; what later notices need
/// (`within` is also their wait). The manager is this run's own, so any
/// error it saw was in this run.
pub(crate) fn degraded_run(locks: &LockManager, name: &str, within: Duration) -> Notices {
    if !log::log_enabled!(log::Level::Warn) {
        return Notices::quiet(); // -q: not worth the wait
    }
    locks.flush(within);
    let health = locks.health();
    let mut missing = Vec::new();
    let mut lines = Vec::new();
    for node in &health.nodes {
        let why = match &node.state {
            NodeState::Up => node.last_error.as_ref().map(|e| e.reason(&node.name)),
            NodeState::DuplicateOf(other) => Some(format!("the same server as {other}")),
            other => Some(other.to_string()),
        };
        missing.push(why.is_some());
        if let Some(why) = why {
            lines.push(format!("{} ({why})", node.name));
        }
    }
    if !lines.is_empty() {
        warn(&format!(
            "{name}: locked without {} of {} nodes: {}",
            lines.len(),
            health.nodes.len(),
            lines.join("; ")
        ));
    }
    Notices {
        name: name.to_owned(),
        within,
        quiet: false,
        failed_extend: vec![false; missing.len()],
        failures: health.nodes.iter().map(|n| n.failures).collect(),
        missing,
    }
}
