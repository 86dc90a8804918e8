//! What a waiting thread costs: the process's CPU time per second while
//! one thread waits in `lock` for a key that another manager of the same
//! process holds (and never releases during the block), against the same
//! process doing nothing for as long. The two blocks take turns in every
//! run, so each run's pair shares the machine's weather.
//!
//! CPU time is summed over every thread of the process from
//! `/proc/self/task/*/schedstat` (nanoseconds on a CPU), so the node
//! threads' polling, the timer and the waiter's own attempts all count.
//! The waiter uses the default retry policy (a retry delay of 100 ms plus
//! up to 100 ms of jitter between attempts, woken early by release
//! notices, and, while notices are heard, waiting for the holder's
//! expiry up to a second); the holder's manager is idle (no
//! auto-extension).

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions};

use crate::clients::Settings;
use crate::ours;

/// CPU milliseconds per second of wall time, per run.
#[derive(Debug, Clone, Default)]
pub struct Waiting {
    /// The process with nothing to do.
    pub idle: Vec<f64>,
    /// The process with one thread waiting for a held key.
    pub waiting: Vec<f64>,
    /// How long each block lasted.
    pub block: Duration,
}

/// `runs` pairs of blocks of `block` each, N = `urls.len()`.
pub fn measure(
    urls: &[String],
    settings: &Settings,
    runs: usize,
    block: Duration,
) -> Result<Waiting, String> {
    let holder = ours::manager(urls, settings)?;
    let waiter = LockManager::builder()
        .redis_nodes(urls)
        .and_then(|b| {
            b.node_timeout(settings.node_timeout)
                .ttl(settings.ttl)
                .restart_quarantine(false)
                .build()
        })
        .map_err(|e| format!("quorum-lock: {e}"))?;
    // Holds the key for the whole section (TTL 10 s, extended by hand
    // between runs, so it never expires during a block).
    let mut held = holder
        .try_lock("qbench:wait")
        .map_err(|e| format!("holder: {e}"))?;
    // Both managers connect, and the waiter's node threads subscribe,
    // before the first measured block.
    let _ = waiter.lock_with(
        "qbench:wait",
        &LockOptions::new().wait(Duration::from_millis(300)),
    );
    let mut out = Waiting {
        block,
        ..Waiting::default()
    };
    for run in 0..runs {
        held.extend(settings.ttl)
            .map_err(|e| format!("holder's extend: {e}"))?;
        let idle = || {
            cpu_per_sec(|| {
                thread::sleep(block);
                Ok(())
            })
        };
        let wait = || {
            cpu_per_sec(
                || match waiter.lock_with("qbench:wait", &LockOptions::new().wait(block)) {
                    Ok(_) => Err("the waiter was granted a key that is held".to_string()),
                    Err(_) => Ok(()),
                },
            )
        };
        // Alternate which block goes first.
        if run % 2 == 0 {
            out.idle.push(idle()?);
            out.waiting.push(wait()?);
        } else {
            out.waiting.push(wait()?);
            out.idle.push(idle()?);
        }
    }
    drop(held.release_on_nodes());
    Ok(out)
}

/// The process's CPU milliseconds per wall second while `work` runs.
fn cpu_per_sec(work: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let before = cpu_ns().ok_or("cannot read /proc/self/task/*/schedstat")?;
    let started = Instant::now();
    work()?;
    let wall = started.elapsed();
    let after = cpu_ns().ok_or("cannot read /proc/self/task/*/schedstat")?;
    Ok(after.saturating_sub(before) as f64 / 1e6 / wall.as_secs_f64())
}

/// Nanoseconds on a CPU, summed over the threads alive now (the node
/// threads and the timer live as long as their managers).
fn cpu_ns() -> Option<u64> {
    let mut total = 0;
    for entry in fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        // A thread may end between the listing and the read.
        let Ok(stat) = fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}
