//! `--fencing-cost`: what a fencing token costs per lock + release(), at
//! N = 3, measured paired and interleaved: plain and fenced alternate
//! sample by sample (in ABBA order), so both see the same noise of this
//! machine; the figure is the ratio of their medians, per run, and its
//! spread over the runs.

use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RetryPolicy};

use crate::stats::{median, percentile};
use testkit::RedisServer;

/// Samples per client per run, after the warm-up.
const SAMPLES: usize = 2_000;
const WARMUP: usize = 200;

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
    for _ in 0..WARMUP {
        once(&plain)?;
        once(&fenced)?;
    }
    let mut out =
        String::from("| run | plain p50 | fenced p50 | fenced / plain |\n|---|---|---|---|\n");
    let mut ratios = Vec::new();
    for run in 1..=runs {
        let (mut a, mut b) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
        for i in 0..SAMPLES {
            // ABBA: neither client always goes first.
            if i % 2 == 0 {
                a.push(once(&plain)?);
                b.push(once(&fenced)?);
            } else {
                b.push(once(&fenced)?);
                a.push(once(&plain)?);
            }
        }
        a.sort_unstable();
        b.sort_unstable();
        let (pa, pb) = (percentile(&a, 0.5), percentile(&b, 0.5));
        let ratio = pb.as_secs_f64() / pa.as_secs_f64();
        ratios.push(ratio);
        out.push_str(&format!("| {run} | {pa:?} | {pb:?} | {ratio:.2}x |\n"));
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    out.push_str(&format!(
        "\nfenced / plain lock + release() p50 at N=3: median {:.2}x over {runs} runs \
         (min {lo:.2}x, max {hi:.2}x), {SAMPLES} paired samples each\n",
        median(&ratios)
    ));
    Ok(out)
}
