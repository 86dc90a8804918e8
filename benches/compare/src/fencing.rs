//! `--fencing-cost`: what a fencing token costs per lock + release(), at
//! N = 3, plain and fenced paired and interleaved (`ab.rs`); and
//! `--election-cost`: a leader's campaign + resign against a fenced
//! lock and its release (an election is a fenced, auto-extended lock
//! plus the leader's record written on a quorum).

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RetryPolicy};

use crate::ab;
use testkit::RedisServer;

/// Three servers started now and a manager over them, one attempt per
/// call. The servers stop when the returned list is dropped.
pub fn three_nodes() -> Result<(Vec<RedisServer>, LockManager), String> {
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let locks = LockManager::builder()
        .redis_nodes(&urls)
        .and_then(|b| {
            b.restart_quarantine(false) // servers started a moment ago
                .node_timeout(Duration::from_secs(1))
                .retry(RetryPolicy::none())
                .build()
        })
        .map_err(|e| e.to_string())?;
    Ok((servers, locks))
}

/// Runs the comparison `runs` times and returns a markdown table.
pub fn fencing_cost(runs: usize) -> Result<String, String> {
    let (_servers, locks) = three_nodes()?;
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

/// `--election-cost`: campaign + resign against a fenced lock + release,
/// paired and interleaved, `runs` times; a markdown table.
pub fn election_cost(runs: usize) -> Result<String, String> {
    let (_servers, locks) = three_nodes()?;
    let fenced = LockOptions::new().retry(RetryPolicy::none()).fencing(true);
    let election = locks
        .election("bench:election")
        .map_err(|e| e.to_string())?;
    let lock = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = locks
            .lock_with("bench:fenced", &fenced)
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let lead = || -> Result<Duration, String> {
        let started = Instant::now();
        let leadership = election
            .try_campaign(b"bench-leader")
            .map_err(|e| e.to_string())?;
        leadership.resign().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    ab::compare(
        runs,
        "at N=3",
        ("fenced lock + release()", Box::new(lock)),
        ("campaign + resign()", Box::new(lead)),
    )
}
