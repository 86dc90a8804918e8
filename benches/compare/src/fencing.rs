//! `--fencing-cost`: what a fencing token costs per lock + release(), at
//! N = 3, plain and fenced paired and interleaved (`ab.rs`).

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RetryPolicy};

use crate::ab;
use testkit::RedisServer;

/// Runs the comparison `runs` times and returns a markdown table.
pub fn fencing_cost(runs: usize) -> Result<String, String> {
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let locks = LockManager::builder()
        .redis_nodes(&urls)
        .and_then(|b| {
            b.restart_quarantine(false) // servers started a moment ago
                .retry(RetryPolicy::none())
                .build()
        })
        .map_err(|e| e.to_string())?;
    let plain = LockOptions::new().retry(RetryPolicy::none());
    let fenced = plain.clone().fencing(true);
    let once = |options: &LockOptions| -> Result<Duration, String> {
        let started = Instant::now();
        let guard = locks
            .lock_with("bench:fencing", options)
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    ab::compare(
        runs,
        "lock + release() at N=3",
        ("plain", Box::new(|| once(&plain))),
        ("fenced", Box::new(|| once(&fenced))),
    )
}
