//! `--scripts-cost`: the server's own commands (`DELIFEQ`, `SET IFEQ`,
//! with `Scripts::Never`) against the Lua scripts (`Scripts::Always`) for
//! lock + extend + release(), at N = 3, paired and interleaved (`ab.rs`).
//! Run it on a server that has the commands (Valkey 9.1: see
//! docs/benchmarks.md); on one that does not, it says so and stops.

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, RedisBackend, RetryPolicy, Scripts};

use crate::ab;
use testkit::RedisServer;

/// Runs the comparison `runs` times and returns a markdown table.
pub fn scripts_cost(runs: usize) -> Result<String, String> {
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let info = RedisBackend::open(&urls[0], Duration::from_secs(2))
        .and_then(|node| node.fetch_server_info())
        .map_err(|e| e.to_string())?;
    let version = info.version.ok_or("the server's version is unknown")?;
    let can = version.without_scripts();
    if !(can.release && can.extend) {
        return Err(format!(
            "{version} has no DELIFEQ / DELEX and SET IFEQ: run this on Valkey 9.1 (see docs/benchmarks.md)"
        ));
    }
    let manager = |scripts: Scripts| {
        LockManager::builder()
            .redis_nodes(&urls)
            .and_then(|b| {
                b.restart_quarantine(false) // servers started a moment ago
                    .retry(RetryPolicy::none())
                    .scripts(scripts)
                    .build()
            })
            .map_err(|e| e.to_string())
    };
    let (lua, commands) = (manager(Scripts::Always)?, manager(Scripts::Never)?);
    let once = |locks: &LockManager| -> Result<Duration, String> {
        let started = Instant::now();
        let mut guard = locks.lock("bench:scripts").map_err(|e| e.to_string())?;
        guard.extend(guard.ttl()).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let table = ab::compare(
        runs,
        "lock + extend + release() at N=3",
        ("scripts", Box::new(|| once(&lua))),
        ("commands", Box::new(|| once(&commands))),
    )?;
    Ok(format!(
        "On {version} ({} x3, loopback):\n\n{table}",
        servers[0].kind().name()
    ))
}
