//! In-memory clusters: the nodes most of the library's tests lock on, and
//! managers over them on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use quorum_lock::{LockManager, LockManagerBuilder, ManualClock, MemoryBackend, RetryPolicy};

/// `n` in-memory nodes named `mem-0`, `mem-1`, ..., on the real clock.
pub fn memory_nodes(n: usize) -> Vec<MemoryBackend> {
    memory_nodes_with("mem", n, None)
}

/// `n` in-memory nodes named `mem-0`, `mem-1`, ..., whose keys expire on
/// `clock`.
pub fn memory_nodes_on(n: usize, clock: &ManualClock) -> Vec<MemoryBackend> {
    memory_nodes_with("mem", n, Some(clock))
}

/// `n` in-memory nodes named `{prefix}-0`, `{prefix}-1`, ..., on `clock`
/// when one is given (on the real clock otherwise): for tests that tell
/// their nodes apart by name, in reports or logs.
pub fn memory_nodes_with(
    prefix: &str,
    n: usize,
    clock: Option<&ManualClock>,
) -> Vec<MemoryBackend> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            match clock {
                Some(clock) => MemoryBackend::with_clock(name, Arc::new(clock.clone())),
                None => MemoryBackend::new(name),
            }
        })
        .collect()
}

/// A builder of a manager over `nodes` on `clock`: one attempt per call
/// (no retries), and 1 s for a node to answer (memory nodes answer in
/// microseconds; a loaded machine must not time them out). The test sets
/// the TTL and anything else it is about.
pub fn builder_on(nodes: &[MemoryBackend], clock: &ManualClock) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .clock(Arc::new(clock.clone()))
        .node_timeout(Duration::from_secs(1))
        .retry(RetryPolicy::none())
}

/// Three in-memory nodes on `clock` (`mem-0` to `mem-2`), and a manager
/// over them from [`builder_on`] with `ttl`.
pub fn cluster_on(clock: &ManualClock, ttl: Duration) -> (Vec<MemoryBackend>, LockManager) {
    let nodes = memory_nodes_on(3, clock);
    let locks = builder_on(&nodes, clock)
        .ttl(ttl)
        .build()
        .expect("three memory nodes make a manager");
    (nodes, locks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_named_in_order_and_keep_time_on_their_clock() {
        let names: Vec<String> = memory_nodes(3).iter().map(|n| format!("{n:?}")).collect();
        assert!(
            names[0].contains("mem-0") && names[2].contains("mem-2"),
            "{names:?}"
        );
        let clock = ManualClock::new();
        let nodes = memory_nodes_with("obs", 2, Some(&clock));
        assert!(format!("{:?}", nodes[1]).contains("obs-1"));
        let locks = builder_on(&nodes, &clock)
            .ttl(Duration::from_secs(10))
            .build()
            .unwrap();
        let (three, other) = cluster_on(&clock, Duration::from_secs(10));
        assert_eq!(three.len(), 3);
        drop(other.try_lock("r").unwrap());
        let guard = locks.try_lock("r").unwrap();
        assert!(locks.flush(Duration::from_secs(10)));
        clock.advance(Duration::from_secs(11));
        assert!(!guard.is_valid(), "the guard's time is the manual clock's");
        assert!(nodes.iter().all(|n| n.key_count() == 0), "so is the nodes'");
    }
}
