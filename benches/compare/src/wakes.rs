//! `--wakes`: thread hand-offs per lock, counted (issue 46): T threads on
//! distinct keys over N=3 servers, lock + `release()` and lock + drop,
//! the context switches of every thread of the process per lock (the
//! callers' own, read by each caller at its end, plus the node threads'
//! delta). Counts barely move with the machine's noise; the throughput
//! printed beside them does. For futex calls per lock, run the same
//! command under `perf stat -e syscalls:sys_enter_futex` and divide by
//! the locks the table reports (docs/benchmarks.md).

use std::fs;
use std::time::{Duration, Instant};

use quorum_lock::LockManager;

use crate::procfs::Counters;

/// Locks per caller thread in one block.
const OPS_PER_THREAD: usize = 2_000;
/// Keys each thread cycles through.
const KEYS_PER_THREAD: usize = 64;
/// The longest one block may take.
const BLOCK_BUDGET: Duration = Duration::from_secs(60);

/// Runs `runs` blocks of each configuration and returns a markdown table.
pub fn wakes(runs: usize) -> Result<String, String> {
    let (_servers, locks) = crate::fencing::three_nodes()?;
    let mut table = String::from(
        "| threads | ending | locks | context switches per lock: voluntary | involuntary | locks/s (this machine, noisy) |\n|---|---|---|---|---|---|\n",
    );
    for run in 0..runs.max(1) {
        for threads in [1, 8] {
            for drop_guard in [run % 2 == 1, run % 2 == 0] {
                let (done, voluntary, involuntary, took) = block(&locks, threads, drop_guard)?;
                let per = |n: u64| n as f64 / done.max(1) as f64;
                table.push_str(&format!(
                    "| {threads} | {} | {done} | {:.2} | {:.2} | {:.0} |\n",
                    if drop_guard { "drop" } else { "release()" },
                    per(voluntary),
                    per(involuntary),
                    done as f64 / took.as_secs_f64()
                ));
            }
        }
    }
    Ok(table)
}

/// One block: `threads` callers; returns the locks taken, the process's
/// voluntary and involuntary switches over the block, and its time.
fn block(
    locks: &LockManager,
    threads: usize,
    drop_guard: bool,
) -> Result<(usize, u64, u64, Duration), String> {
    // Connections open, scripts loaded, node threads idle.
    for i in 0..20 {
        let guard = locks
            .lock(format!("qbench:wakes:warm{i}"))
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
    }
    locks.flush(Duration::from_secs(5));
    let before = Counters::now().ok_or("cannot read /proc/self")?;
    let started = Instant::now();
    let deadline = started + BLOCK_BUDGET;
    let callers: Vec<(usize, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut done = 0;
                    for i in 0..OPS_PER_THREAD {
                        if Instant::now() >= deadline {
                            break;
                        }
                        let key = format!("qbench:wakes:{t}:{}", i % KEYS_PER_THREAD);
                        if let Ok(guard) = locks.lock(key) {
                            if drop_guard {
                                drop(guard);
                            } else {
                                let _ = guard.release();
                            }
                            done += 1;
                        }
                    }
                    let (v, n) = own_switches();
                    (done, v, n)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    // The dropped guards' releases are part of the cost.
    locks.flush(Duration::from_secs(10));
    let took = started.elapsed();
    let after = Counters::now().ok_or("cannot read /proc/self")?;
    let done = callers.iter().map(|c| c.0).sum();
    let voluntary =
        after.voluntary.saturating_sub(before.voluntary) + callers.iter().map(|c| c.1).sum::<u64>();
    let involuntary = after.involuntary.saturating_sub(before.involuntary)
        + callers.iter().map(|c| c.2).sum::<u64>();
    Ok((done, voluntary, involuntary, took))
}

/// This thread's own switches so far (a caller thread is new per block).
fn own_switches() -> (u64, u64) {
    let status = fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}
