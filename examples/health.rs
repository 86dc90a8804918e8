//! What `LockManager::health()` shows, and what it costs.
//!
//! Five in-memory nodes: one goes down, one restarts (and is quarantined);
//! a few locks are taken, one is lost. Prints the snapshot, then times
//! `health()` over many calls (no server is contacted, no thread started).
//!
//! ```sh
//! cargo run --release --example health
//! ```
#![allow(clippy::print_stdout, clippy::unwrap_used)] // an example prints, and fails loudly

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, MemoryBackend, RetryPolicy};

fn main() -> Result<(), quorum_lock::Error> {
    let nodes: Vec<MemoryBackend> = (0..5)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(Duration::from_secs(5))
        .retry(RetryPolicy::none())
        .build()?;
    for i in 0..20 {
        locks.try_lock(format!("job-{i}"))?.release()?;
    }
    let _held = locks.try_lock("busy")?;
    let _ = locks.try_lock("busy"); // contended
    nodes[3].set_down(true);
    nodes[4].restart();
    for i in 0..5 {
        let _ = locks.try_lock(format!("after-{i}")).map(|g| g.release());
    }
    println!("{}\n", locks.health());

    const CALLS: u32 = 100_000;
    let started = Instant::now();
    let mut voting = 0;
    for _ in 0..CALLS {
        voting += locks.health().voting();
    }
    let each = started.elapsed() / CALLS;
    println!(
        "health(): {each:?} per call over {CALLS} calls, 5 nodes ({} voting)",
        voting / CALLS as usize
    );
    Ok(())
}
