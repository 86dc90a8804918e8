//! Who holds a lock, and for how long: owner labels and `inspect`, as an
//! operator's dashboard (or `quorum-lock status`) shows them. An
//! inspection is a snapshot, stale as soon as it is read: show it to
//! people, never use it to decide to act without the lock.
//!
//! ```text
//! cargo run --example inspection
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use quorum_lock::inspection::Verdict;
use quorum_lock::{LockManager, MemoryBackend};

/// `pub(crate)`: `tests/examples/in_process.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    // Two services on the same nodes, each with its own owner label.
    let reports = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .owner("report-job@host-1")
        .build()?;
    let dashboard = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .owner("dashboard@host-2")
        .build()?;

    let free = dashboard.inspect("nightly-report")?;
    println!("before: {free}");
    let guard = reports.lock("nightly-report")?;
    reports.flush(std::time::Duration::from_secs(1));
    let seen = dashboard.inspect("nightly-report")?;
    println!("while held: {seen}");
    for node in seen.nodes() {
        println!("  {}: {:?}", node.node(), node.state());
    }
    if seen.verdict() != Verdict::Held || seen.owner() != Some("report-job@host-1") {
        return Err(format!("expected held by report-job@host-1: {seen}").into());
    }
    guard.release()?;
    let after = dashboard.inspect("nightly-report")?;
    println!("after release: {after}");
    if after.is_held() {
        return Err("still held after the release".into());
    }
    println!("ok");
    Ok(())
}
