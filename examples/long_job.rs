//! A job that runs longer than the lock's TTL: auto-extension keeps the
//! lock, and the job stops early if the lock is lost (here: a majority of
//! the nodes fail halfway through).
//!
//! ```text
//! cargo run --example long_job
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, MemoryBackend};

fn main() -> Result<(), quorum_lock::Error> {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(Duration::from_millis(300))
        .build()?;

    // 1. The lock outlives its TTL while the work runs: ten steps of 100 ms
    //    under a 300 ms TTL.
    let opts = LockOptions::new().max_hold(Duration::from_secs(30));
    let steps = locks.with_lock(
        "nightly-report",
        &opts,
        |guard| -> Result<u32, quorum_lock::Error> {
            let mut done = 0;
            for _ in 0..10 {
                guard.check()?; // only work while the lock is ours
                std::thread::sleep(Duration::from_millis(100));
                done += 1;
            }
            println!(
                "finished {done} steps; the lock was extended {} times",
                guard.extensions()
            );
            Ok(done)
        },
    )??;
    assert_eq!(steps, 10);

    // 2. The lock is lost mid-way: the loss notice stops the work at once.
    let guard = locks.lock_with("nightly-report", &LockOptions::new().auto_extend(true))?;
    let lost = guard.lost_signal();
    let started = Instant::now();
    for step in 0.. {
        if step == 3 {
            println!("two of three nodes fail now");
            nodes[0].set_down(true);
            nodes[1].set_down(true);
        }
        // One step of work, here a wait that ends early on a loss notice.
        if let Some(notice) = lost.recv_timeout(Duration::from_millis(100)) {
            println!(
                "stopped after {step} steps ({:?}): {notice}",
                started.elapsed()
            );
            break;
        }
        if step > 50 {
            println!("the loss was never reported");
            break;
        }
    }
    assert!(!guard.is_valid());
    Ok(())
}
