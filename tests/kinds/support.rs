//! What the tests of the kinds of lock share.

use std::time::Duration;

use quorum_lock::{LockManager, MemoryBackend};

/// The TTL of [`manager`]'s locks.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// A manager over `nodes`, with the default retries and a [`TTL`] of 10 s.
pub(crate) fn manager(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(TTL)
        // In-memory nodes answer in microseconds; the default bound (made
        // for a LAN) timed every node out on a machine whose cores were
        // all busy, with eight managers' node threads in this process.
        // No test here is about a slow node, and a loaded machine must
        // not time them out.
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("three memory nodes make a manager")
}
