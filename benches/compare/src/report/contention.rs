//! The sections on one key contended for: threads of one process taking
//! turns (total time, the counter checked), a thread that waits for a held
//! key (the process's CPU meanwhile), and processes of their own
//! contending.

use std::fmt::Write as _;

use super::cells::{clip, spread_ratio, spread_us, titled};
use super::results::Results;
use crate::clients::Client;
use crate::plan::Plan;
use crate::stats::Spread;

/// Contention: one key, 8 threads.
pub fn contention(results: &Results, plan: &Plan) -> String {
    let mut out = String::new();
    if results.contention.is_empty() {
        return out;
    }
    let c = &plan.contention;
    let expected = (c.threads * c.sections_per_thread) as u64;
    let _ = writeln!(
        out,
        "#### {} threads, one key, N=3, {expected} critical sections (total time)\n",
        c.threads
    );
    let _ = writeln!(
        out,
        "| client | time, this machine: median (min-max) | time / rslock's (same run) | counter exact | notes |"
    );
    let _ = writeln!(out, "|---|---:|---:|---|---|");
    for row in &results.contention {
        let walls: Vec<f64> = row.walls(expected).into_iter().flatten().collect();
        let (good, total) = row.exact(expected);
        let first = row.runs.iter().find_map(|r| match r {
            Err(e) => Some(e.clone()),
            Ok(t) => t.first_error.clone(),
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {good}/{total} runs | {} |",
            row.client,
            spread_us(Spread::of(&walls)),
            spread_ratio(crate::contention::ratio(
                &results.contention,
                row.client,
                Client::Rslock,
                expected
            )),
            first.map_or_else(String::new, |e| clip(&e, 80)),
        );
    }
    out.push('\n');
    out
}

/// The process's CPU while a thread waits for a held key.
pub fn waiting(results: &Results) -> String {
    let mut out = String::new();
    let Some(waiting) = &results.waiting else {
        return out;
    };
    let _ = writeln!(
        out,
        "\n#### A thread waiting for a held key (quorum-lock, N=3, default retry policy)\n"
    );
    match waiting {
        Ok(w) => {
            let _ = writeln!(
                out,
                "The process's CPU time (all threads, `/proc/self/task/*/schedstat`) per second, \
                 in blocks of {} s taking turns: idle, and one thread in `lock` for a key another \
                 manager holds.\n",
                w.block.as_secs_f64()
            );
            let _ = writeln!(out, "| run | idle | waiting |\n|---:|---:|---:|");
            for (i, (idle, wait)) in w.idle.iter().zip(&w.waiting).enumerate() {
                let _ = writeln!(out, "| {} | {idle:.2} ms/s | {wait:.2} ms/s |", i + 1);
            }
            let (idle, wait) = (
                crate::stats::median(&w.idle),
                crate::stats::median(&w.waiting),
            );
            let _ = writeln!(out, "| median | {idle:.2} ms/s | {wait:.2} ms/s |");
        }
        Err(e) => {
            let _ = writeln!(out, "failed: {}", clip(e, 120));
        }
    }
    out
}

/// Processes contending for one key.
pub fn cross(results: &Results) -> String {
    titled(
        "Processes contending for one key (the benchmark's own binary as children, each its own client)",
        results.cross.as_ref(),
        crate::cross::Cross::render,
    )
}
