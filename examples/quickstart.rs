//! Several threads contend for one resource over five lock servers while
//! one server fails, and the program prints what happened.
//!
//! ```text
//! cargo run --example quickstart                       # in-memory nodes
//! QUORUM_LOCK_NODES=redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381 \
//!     cargo run --example quickstart                   # real Redis masters
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockManagerBuilder, LockOptions, MemoryBackend, RetryPolicy};

const THREADS: usize = 4;
const ROUNDS: usize = 25;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Display, not Debug: the report names every node and what it did.
            println!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (builder, memory_nodes) = nodes()?;
    let locks = builder
        .ttl(Duration::from_secs(5))
        // Also the restart quarantine: freshly started Redis servers vote
        // after 10 s (the default max_ttl of 60 s would make a demo wait).
        .max_ttl(Duration::from_secs(10))
        // Keep trying until each call's wait budget (30 s, below) is spent.
        .retry(
            RetryPolicy::new()
                .attempts(u32::MAX)
                .delay(Duration::from_millis(1))
                .jitter(Duration::from_millis(4)),
        )
        .build()?;
    println!("nodes: {:?} (quorum {})", locks.nodes(), locks.quorum());

    // A value that only the lock holder may touch: a read-modify-write with
    // a pause in the middle loses updates unless the lock excludes others.
    let shared = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let locks = locks.clone();
            let shared = Arc::clone(&shared);
            thread::spawn(move || -> Result<u64, quorum_lock::Error> {
                let mut held_for = Duration::ZERO;
                for _ in 0..ROUNDS {
                    let guard = locks.lock_with(
                        "quickstart:counter",
                        &LockOptions::new().wait(Duration::from_secs(30)),
                    )?;
                    let t0 = Instant::now();
                    let seen = shared.load(Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(200));
                    guard.check()?; // still ours? only then write
                    shared.store(seen + 1, Ordering::SeqCst);
                    held_for += t0.elapsed();
                    guard.release()?;
                }
                println!("thread {t}: {ROUNDS} critical sections, {held_for:?} inside the lock");
                Ok(held_for.as_micros() as u64)
            })
        })
        .collect();

    // Halfway through, one node fails.
    if let Some(nodes) = &memory_nodes {
        thread::sleep(Duration::from_millis(20));
        nodes[2].set_down(true);
        println!("node {} is now down", locks.nodes()[2]);
    }

    for w in workers {
        w.join().map_err(|_| "a worker thread panicked")??;
    }
    let total = shared.load(Ordering::SeqCst);
    println!(
        "{total} increments by {THREADS} threads x {ROUNDS} rounds in {:?}: {}",
        started.elapsed(),
        if total == (THREADS * ROUNDS) as u64 {
            "no update lost"
        } else {
            "UPDATES LOST"
        }
    );

    // With the failed node still down, a lock still works, and a report
    // shows which node did what.
    let guard = locks.try_lock("quickstart:report")?;
    let report = guard.release()?;
    println!("last release: {report}");

    if let Some(nodes) = &memory_nodes {
        for node in nodes.iter() {
            node.set_down(true);
        }
        if let Err(err) = locks.try_lock("quickstart:report") {
            println!("with every node down: {err}");
        }
    }
    Ok(())
}

/// A builder with the nodes, and handles to break them when they are in memory.
type Nodes = (LockManagerBuilder, Option<Vec<MemoryBackend>>);

/// Real Redis masters from `QUORUM_LOCK_NODES`, or five in-memory nodes.
fn nodes() -> Result<Nodes, Box<dyn std::error::Error>> {
    #[cfg(feature = "redis")]
    if let Ok(urls) = std::env::var("QUORUM_LOCK_NODES") {
        let urls: Vec<&str> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        println!("using Redis nodes from QUORUM_LOCK_NODES");
        return Ok((LockManager::builder().redis_nodes(urls)?, None));
    }
    println!("QUORUM_LOCK_NODES is not set: using five in-memory nodes");
    let nodes: Vec<MemoryBackend> = (0..5)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    for node in &nodes {
        node.set_latency(Duration::from_micros(100));
    }
    Ok((
        LockManager::builder().nodes(nodes.iter().cloned()),
        Some(nodes),
    ))
}
