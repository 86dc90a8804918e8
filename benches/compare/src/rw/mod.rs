//! `--rw-cost`: what the read-write lock costs against the mutex, at
//! N = 3, on the same three servers, in one run:
//!
//! - a read lock + release() against a lock + release() of a mutex, and a
//!   write lock + release() against the same, each paired and interleaved
//!   (`ab.rs`), p50 and p90;
//! - 8 threads doing read + release() on one read-write lock against 8
//!   threads doing lock + release() on one mutex (which serializes them):
//!   a fixed number of operations, throughput per block, the two blocks of
//!   a run back to back in A B / B A order (alternating run by run), the
//!   ratio taken per run. In three layouts ([`Layout`]): the threads
//!   sharing one manager (a program's threads), with `read()` / `lock()`
//!   (the default retry policy) and with a short retry pause; and one
//!   manager per thread (as 8 processes), with `read()` / `lock()`.
//!
//! This file runs the comparison: the servers, the paired latency of the
//! single calls, the throughput blocks run after run. A throughput block
//! and its layouts are in `throughput.rs`, the tables in `render.rs`.

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RedisBackend, RetryPolicy};

use self::render::render;
use self::throughput::{Layout, MUTEX, Pair, RW, Side, THREADS, block};
use crate::ab;
use testkit::RedisServer;

mod render;
mod throughput;

/// Operations per thread in a throughput block's warm-up (each layout's
/// blocks: [`Layout::ops_per_thread`]).
const WARMUP_OPS: usize = 5;

/// A manager with the default settings (retry policy included), but for
/// the quarantine: the servers were started a moment ago.
fn manager(urls: &[String]) -> Result<LockManager, String> {
    LockManager::builder()
        .redis_nodes(urls)
        .and_then(|b| b.restart_quarantine(false).build())
        .map_err(|e| e.to_string())
}

fn progress(what: &str) {
    eprintln!("quorum-bench: [rw-cost: {what}]");
}

/// Runs the comparisons `runs` times and returns markdown tables.
pub fn rw_cost(runs: usize) -> Result<String, String> {
    let runs = runs.max(1);
    let started = Instant::now();
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let version = RedisBackend::open(&urls[0], Duration::from_secs(2))
        .and_then(|node| node.fetch_server_info())
        .ok()
        .and_then(|info| info.version)
        .map_or_else(|| servers[0].kind().name().to_string(), |v| v.to_string());
    let locks = manager(&urls)?;
    let rw = locks.rw_lock(RW).map_err(|e| e.to_string())?;
    let once = LockOptions::new().retry(RetryPolicy::none());

    let mutex = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = locks.lock_with(MUTEX, &once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let read = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = rw.read_with(&once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let write = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = rw.write_with(&once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let percentiles = [("p50", 0.5), ("p90", 0.9)];
    progress(&format!(
        "read + release() vs lock + release(), {runs} runs x {} paired samples",
        ab::SAMPLES
    ));
    let reads = ab::measure(
        runs,
        &percentiles,
        ("mutex", Box::new(mutex)),
        ("read", Box::new(read)),
    )?;
    progress(&format!(
        "write + release() vs lock + release(), {runs} runs x {} paired samples",
        ab::SAMPLES
    ));
    let writes = ab::measure(
        runs,
        &percentiles,
        ("mutex", Box::new(mutex)),
        ("write", Box::new(write)),
    )?;

    // The throughput blocks: the shared manager is the one above; the 8
    // others are made once, and every block of a layout uses the same.
    let own: Vec<LockManager> = (0..THREADS)
        .map(|_| manager(&urls))
        .collect::<Result<_, _>>()?;
    let shared = std::slice::from_ref(&locks);
    let layouts = Layout::ALL.map(|layout| {
        let managers = match layout {
            Layout::Shared | Layout::SharedShortPause => shared,
            Layout::PerThread => &own[..],
        };
        (layout, managers)
    });
    for (layout, managers) in layouts {
        progress(&format!("warm-up, 8 threads, {}", layout.name()));
        for side in [Side::Read, Side::Mutex] {
            // Not fatal: on a loaded host a round may time out; the
            // measured blocks count and report their errors.
            let b = block(managers, layout, side, WARMUP_OPS);
            if let Some(e) = b.first_error {
                progress(&format!(
                    "warm-up, {side:?}: {} errors, first: {e}",
                    b.errors
                ));
            }
        }
    }
    let mut pairs: Vec<(Layout, Vec<Pair>)> = layouts
        .iter()
        .map(|(layout, _)| (*layout, Vec::with_capacity(runs)))
        .collect();
    for run in 0..runs {
        // A B, then B A in the next run: neither side always goes first.
        let read_first = run % 2 == 0;
        for ((layout, managers), (_, out)) in layouts.iter().zip(pairs.iter_mut()) {
            progress(&format!(
                "8 threads, {}, run {}/{runs}, {}",
                layout.name(),
                run + 1,
                if read_first {
                    "readers first"
                } else {
                    "mutex first"
                }
            ));
            let order = if read_first {
                [Side::Read, Side::Mutex]
            } else {
                [Side::Mutex, Side::Read]
            };
            let ops = layout.ops_per_thread();
            let [first, second] = order.map(|side| (side, block(managers, *layout, side, ops)));
            let pick = |want: Side| {
                if first.0 == want {
                    first.1.clone()
                } else {
                    second.1.clone()
                }
            };
            out.push(Pair {
                read_first,
                read: pick(Side::Read),
                mutex: pick(Side::Mutex),
            });
        }
    }
    drop(own);
    drop(rw);
    drop(locks);
    drop(servers);
    let elapsed = started.elapsed();
    Ok(render(&version, &reads, &writes, &pairs, runs, elapsed))
}
