//! A worker that holds a lock for a long job while the lock servers fail
//! under it: auto-extension keeps the lock through the loss of one node of
//! three, and when a second one goes the worker is told at once (its lost
//! signal), stops, and reports why.
//!
//! ```text
//! cargo run --example worker_under_faults
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, MemoryBackend};

const TTL: Duration = Duration::from_secs(3);

/// `pub(crate)`: `tests/examples/in_process.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(TTL)
        .build()?;
    // Renewed every third of the TTL while the job runs.
    let guard = locks.lock_with("nightly-job", &LockOptions::new().auto_extend(true))?;
    let lost = guard.lost_signal();
    let started = Instant::now();
    let mut step = 0;
    let outcome = loop {
        step += 1;
        // One step of the job, then a look at the lost signal: the work
        // goes on only while the lock is ours.
        if let Some(why) = lost.recv_timeout(Duration::from_millis(100)) {
            break Err(why);
        }
        match step {
            5 => {
                println!("step {step}: node mem-0 fails (2 of 3 still hold the lock)");
                nodes[0].set_down(true);
            }
            40 => {
                println!("step {step}: node mem-1 fails too (no quorum is left)");
                nodes[1].set_down(true);
            }
            100 => break Ok(()),
            _ => {}
        }
    };
    let extended = guard.extensions();
    match outcome {
        Ok(()) => return Err("the job finished without a quorum".into()),
        Err(why) => {
            println!(
                "step {step}, after {:.1?}: the lock is lost, the worker stops: {why}",
                started.elapsed()
            );
        }
    }
    if extended < 2 {
        return Err(format!("only {extended} extends while a quorum was up").into());
    }
    println!("ok: {extended} extends while 2 of 3 nodes held it, then told at once");
    Ok(())
}
