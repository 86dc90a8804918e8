//! Saying so when a run went ahead on a degraded cluster: the nodes that
//! did not take part, and why, in the words the library's reports use
//! (which `doctor` and `status` use too).

use std::time::Duration;

use quorum_lock::LockManager;
use quorum_lock::health::NodeState;

/// Names the nodes that did not grant `name`'s lock, waiting at most
/// `within` for the slow ones to answer first. The manager is this run's
/// own, so any error it saw was in this run.
pub(crate) fn degraded_run(locks: &LockManager, name: &str, within: Duration) {
    if !log::log_enabled!(log::Level::Warn) {
        return; // -q: not worth the wait
    }
    locks.flush(within);
    let health = locks.health();
    let missing: Vec<String> = health
        .nodes
        .iter()
        .filter_map(|node| {
            let why = match &node.state {
                NodeState::Up => node.last_error.as_ref()?.reason(&node.name),
                NodeState::DuplicateOf(other) => format!("the same server as {other}"),
                other => other.to_string(),
            };
            Some(format!("{} ({why})", node.name))
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    crate::logger::warn(&format!(
        "{name}: locked without {} of {} nodes: {}",
        missing.len(),
        health.nodes.len(),
        missing.join("; ")
    ));
}
