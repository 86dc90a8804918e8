//! The counters sections: the process's context switches and syscalls per
//! lock + release, per client, and each against the floor's of the same
//! run ([`switch_ratio`], which the targets read too); and the `wakes`
//! section's thread hand-offs and allocations per lock ([`wakes`]).

use std::fmt::Write as _;

use super::cells::{clip, spread_ratio, titled};
use super::results::Results;
use crate::clients::Client;
use crate::counters::ClientCounters;
use crate::stats::Spread;

/// The process's counters per lock + release.
pub fn counters(results: &Results) -> String {
    let mut out = String::new();
    let Some(c) = &results.counters else {
        return out;
    };
    let _ = writeln!(
        out,
        "#### Counters per lock + release, 1 thread, N=3 (the process's own, all threads)\n"
    );
    let rows = match c {
        Err(e) => {
            let _ = writeln!(out, "failed: {e}\n");
            return out;
        }
        Ok(None) => {
            let _ = writeln!(out, "not measured: /proc/self is not readable here\n");
            return out;
        }
        Ok(Some(rows)) => rows,
    };
    let _ = writeln!(
        out,
        "| client | context switches: voluntary | involuntary | total (min-max of runs) | total / floor's (same run) | read syscalls (syscr) | write syscalls (syscw) | notes |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---|");
    let floor = rows.iter().find(|r| r.client == Client::Floor);
    for row in rows {
        let med = |f: fn(&crate::procfs::PerOp) -> f64| {
            row.spread(f)
                .map_or_else(|| "-".into(), |s| format!("{:.2}", s.median))
        };
        let total = row.spread(|p| p.switches()).map_or_else(
            || "-".into(),
            |s| format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
        );
        let ratio = floor.and_then(|f| switch_ratio(row, f, |p| p.switches()));
        let mut notes = Vec::new();
        if row.runs.iter().any(|r| r.threads_changed) {
            notes.push("a thread started or ended during a block".to_string());
        }
        if row.errors > 0 {
            notes.push(format!(
                "{} errors, first: {}",
                row.errors,
                clip(row.first_error.as_deref().unwrap_or(""), 60)
            ));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {total} | {} | {} | {} | {} |",
            row.client,
            med(|p| p.voluntary),
            med(|p| p.involuntary),
            spread_ratio(ratio),
            med(|p| p.syscr),
            med(|p| p.syscw),
            notes.join("; "),
        );
    }
    out.push('\n');
    out
}

/// Per run, `row`'s context switches per op / `floor`'s.
pub fn switch_ratio(
    row: &ClientCounters,
    floor: &ClientCounters,
    f: impl Fn(&crate::procfs::PerOp) -> f64,
) -> Option<Spread> {
    let v: Vec<f64> = row
        .runs
        .iter()
        .zip(&floor.runs)
        .map(|(a, b)| f(a) / f(b))
        .collect();
    Spread::of(&v)
}

/// The `wakes` section: context switches and allocations per lock, 1
/// thread at N=1 and N=3 and 8 threads at N=3 (`--wakes`).
pub fn wakes(results: &Results) -> String {
    titled(
        "Thread hand-offs and allocations per lock (`--wakes`, on servers of its own)",
        results.wakes.as_ref(),
        crate::wakes::Wakes::render,
    )
}

/// futex calls per lock + release under perf (with `--wakes`).
pub fn futex(results: &Results) -> String {
    titled(
        "futex calls per lock + release, 8 threads (perf, with `--wakes`)",
        results.futex.as_ref(),
        crate::futex::Futex::render,
    )
}

/// Context switches by kind of thread under perf (with `--wakes`).
pub fn preemptions(results: &Results) -> String {
    titled(
        "Who switches out and who preempts whom, 8 threads (perf, with `--wakes`)",
        results.preemptions.as_ref(),
        crate::preemptions::Preemptions::render,
    )
}

/// Instructions per lock + release under callgrind (with `--wakes`).
pub fn instructions(results: &Results) -> String {
    titled(
        "Instructions per lock + release (callgrind, with `--wakes`)",
        results.instructions.as_ref(),
        crate::instructions::Instructions::render,
    )
}
