//! The results of a run and the markdown they print as: the machine, the
//! paired latency comparison (per run and summarized), the process's
//! counters, scaling, contention, a dead third node, memory per held lock.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::clients::Client;
use crate::contention;
use crate::counters::ClientCounters;
use crate::latency::third_label;
use crate::machine::Machine;
use crate::paired::Paired;
use crate::plan::Plan;
use crate::scaling::{CpuFigure, Scaling};
use crate::stats::Spread;

/// The latency comparison on N nodes, and the clients that could not start.
pub type LatencyAtN = (usize, Paired, Vec<(Client, String)>);
/// Locks asked for, and (bytes per lock, locks held) or why not.
pub type MemoryAt = (usize, Result<(f64, usize), String>);

/// Everything a run measured (a section not run is `None` / empty).
#[derive(Debug, Default)]
pub struct Results {
    /// Per N: the paired comparison and the clients that could not start.
    pub latency: Vec<LatencyAtN>,
    pub counters: Option<Result<Option<Vec<ClientCounters>>, String>>,
    pub scaling: Option<Scaling>,
    /// quorum-lock's threads while 128 auto-extended locks are held.
    pub auto_census: Option<Result<BTreeMap<String, usize>, String>>,
    pub contention: Vec<contention::Row>,
    pub third: Option<Result<Paired, String>>,
    /// Locks asked for, and (bytes per lock, locks held) or why not.
    pub memory: Vec<MemoryAt>,
    /// The process's CPU while one thread waits for a held key.
    pub waiting: Option<Result<crate::waiting::Waiting, String>>,
    /// Processes (each its own client) contending for one key.
    pub cross: Option<Result<crate::cross::Cross, String>>,
}

pub fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} us")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 1000.0 {
        format!("{:.1}k/s", r / 1000.0)
    } else {
        format!("{r:.0}/s")
    }
}

pub fn clip(s: &str, max: usize) -> String {
    let s = s.replace('|', "/").replace('\n', " ");
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

fn fmt_us(secs: f64) -> String {
    fmt_dur(Duration::from_secs_f64(secs.max(0.0)))
}

fn spread_us(s: Option<Spread>) -> String {
    s.map_or_else(
        || "-".into(),
        |s| format!("{} ({}-{})", fmt_us(s.median), fmt_us(s.min), fmt_us(s.max)),
    )
}

fn spread_ratio(s: Option<Spread>) -> String {
    s.map_or_else(|| "-".into(), |s| s.ratio_text())
}

fn census_text(c: &BTreeMap<String, usize>) -> String {
    let total: usize = c.values().sum();
    let names: Vec<String> = c.iter().map(|(n, k)| format!("{k} x `{n}`")).collect();
    format!("{total} ({})", names.join(", "))
}

/// The header: command, machine, plan.
pub fn header(plan: &Plan, machine: &Machine, command: &str, elapsed: Duration) -> String {
    let mut out = String::new();
    let s = &plan.settings;
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(
        out,
        "- machine: {} cores ({}), Linux {}, {}",
        machine.nproc, machine.cpu, machine.kernel, machine.redis
    );
    let _ = writeln!(out, "- load average at start: {}", machine.load);
    if plan.cpu_hog {
        let _ = writeln!(
            out,
            "- with a CPU hog: a process of the benchmark's own spinning on one core throughout (`--cpu-hog`)"
        );
    }
    let _ = writeln!(out, "- quorum-lock commit: {}", machine.commit);
    let _ = writeln!(
        out,
        "- {} runs{}; latency: up to {} rounds per run (redlock and redsync in 1 round of {}), \
         {} warm-up rounds; counters: {} ops per block; scaling: {} ops per measurement; \
         contention: {} threads x {} critical sections; third node: up to {} rounds per run",
        plan.runs,
        if plan.quick { " (--quick)" } else { "" },
        plan.latency.rounds.rounds,
        plan.latency.slow_every,
        plan.latency.rounds.warmup,
        plan.counters.ops,
        plan.scaling.ops,
        plan.contention.threads,
        plan.contention.sections_per_thread,
        plan.third.rounds.rounds,
    );
    let _ = writeln!(
        out,
        "- TTL {:?}, quorum-lock node timeout {:?}, contention retry pause uniform in [0, {:?}); \
         wall time of the run {:.0} s\n",
        s.ttl,
        s.node_timeout,
        s.retry_pause,
        elapsed.as_secs_f64()
    );
    out
}

/// Latency: per N, one summary table and one table of the runs.
pub fn latency(results: &Results) -> String {
    let mut out = String::new();
    for (n, paired, failed) in &results.latency {
        let floor = Client::Floor.key();
        let _ = writeln!(
            out,
            "#### 1 thread, lock + release, N={n} (paired, interleaved)\n"
        );
        let _ = writeln!(
            out,
            "| client | p50, this machine: median (min-max of runs) | p99 (median) | p50 / floor p50 of the same run: median (min-max) | samples | errors |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
        for label in &paired.labels {
            let client: Option<Client> = label.parse().ok();
            let name = client.map_or_else(|| label.clone(), |c| c.to_string());
            let (samples, errors, first) = paired.totals(label);
            let err = if errors > 0 {
                format!(
                    "{errors}, first: {}",
                    clip(first.as_deref().unwrap_or(""), 80)
                )
            } else {
                "0".into()
            };
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {samples} | {err} |",
                spread_us(paired.p50(label)),
                paired
                    .p99(label)
                    .map_or_else(|| "-".into(), |s| fmt_us(s.median)),
                spread_ratio(paired.ratio(label, floor)),
            );
        }
        for (c, e) in failed {
            let _ = writeln!(out, "| {c} | could not start: {} | | | | |", clip(e, 80));
        }
        let _ = writeln!(out, "\nPer run (p50, and / floor p50 of the same run):\n");
        let _ = writeln!(out, "| run | {} |", paired.labels.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(paired.labels.len()));
        let fi = paired.labels.iter().position(|l| l == floor);
        for (r, run) in paired.runs.iter().enumerate() {
            let base = fi.and_then(|i| run[i].p50);
            let cells: Vec<String> = run
                .iter()
                .map(|a| match (a.p50, base) {
                    (Some(p), Some(b)) => {
                        format!("{} ({:.2}x)", fmt_dur(p), p.as_secs_f64() / b.as_secs_f64())
                    }
                    (Some(p), None) => fmt_dur(p),
                    _ => "-".into(),
                })
                .collect();
            let _ = writeln!(out, "| {} | {} |", r + 1, cells.join(" | "));
        }
        out.push('\n');
    }
    out
}

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

/// Scaling: throughput per (N, threads) and client; the thread census.
pub fn scaling(results: &Results) -> String {
    let mut out = String::new();
    let Some(sc) = &results.scaling else {
        return out;
    };
    let _ = writeln!(
        out,
        "#### Throughput on distinct keys, lock + release (ops/s, this machine: median (min-max of runs))\n"
    );
    let clients: Vec<Client> = crate::scaling::CLIENTS
        .into_iter()
        .filter(|c| sc.cells.iter().any(|x| x.client == *c))
        .collect();
    let names: Vec<String> = clients.iter().map(|c| c.to_string()).collect();
    let _ = writeln!(
        out,
        "| N | threads | {} | quorum-lock (release()) / rslock (same run) | / floor (same run) |",
        names.join(" | ")
    );
    let _ = writeln!(out, "|---|---:|{}---:|---:|", "---:|".repeat(clients.len()));
    let mut keys: Vec<(usize, usize)> = sc.cells.iter().map(|c| (c.n, c.threads)).collect();
    keys.sort_unstable();
    keys.dedup();
    for (n, t) in &keys {
        let cells: Vec<String> = clients
            .iter()
            .map(|c| {
                sc.cell(*n, *t, *c)
                    .and_then(|cell| cell.rate())
                    .map_or_else(
                        || "-".into(),
                        |s| {
                            format!(
                                "{} ({}-{})",
                                fmt_rate(s.median),
                                fmt_rate(s.min),
                                fmt_rate(s.max)
                            )
                        },
                    )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {n} | {t} | {} | {} | {} |",
            cells.join(" | "),
            spread_ratio(sc.ratio(*n, *t, Client::Ours, Client::Rslock)),
            spread_ratio(sc.ratio(*n, *t, Client::Ours, Client::Floor)),
        );
    }
    out.push_str(&scaling_cpu(sc, &clients));
    let failures: Vec<String> = sc
        .cells
        .iter()
        .flat_map(|c| {
            c.runs.iter().filter_map(move |r| match r {
                Err(e) => Some(format!(
                    "{} N={} {}t: {}",
                    c.client,
                    c.n,
                    c.threads,
                    clip(e, 80)
                )),
                Ok(t) if t.errors > 0 => Some(format!(
                    "{} N={} {}t: {} errors, first: {}",
                    c.client,
                    c.n,
                    c.threads,
                    t.errors,
                    clip(t.first_error.as_deref().unwrap_or(""), 80)
                )),
                Ok(_) => None,
            })
        })
        .collect();
    for f in failures.iter().take(10) {
        let _ = writeln!(out, "\n- failed: {f}");
    }
    let _ = writeln!(
        out,
        "\nThreads of the process besides the callers and the main thread, while quorum-lock (`release()`) ran (first run):\n"
    );
    for ((n, t), c) in &sc.census {
        let _ = writeln!(out, "- N={n}, {t} callers: {}", census_text(c));
    }
    if let Some(c) = &results.auto_census {
        match c {
            Ok(c) => {
                let _ = writeln!(
                    out,
                    "- N=3, 128 auto-extended locks held: {}",
                    census_text(c)
                );
            }
            Err(e) => {
                let _ = writeln!(out, "- N=3, 128 auto-extended locks: failed: {e}");
            }
        }
    }
    out.push('\n');
    out
}

/// Scaling: CPU time per lock + release, this process's and the servers',
/// per (N, threads) and client.
fn scaling_cpu(sc: &Scaling, clients: &[Client]) -> String {
    let mut out = String::new();
    let names: Vec<String> = clients.iter().map(|c| c.to_string()).collect();
    let mut keys: Vec<(usize, usize)> = sc.cells.iter().map(|c| (c.n, c.threads)).collect();
    keys.sort_unstable();
    keys.dedup();
    let tables: [(&str, CpuFigure); 2] = [
        (
            "this process's CPU time (user + system, every thread, ended ones included: \
             `getrusage(RUSAGE_SELF)`)",
            crate::scaling::process_cpu,
        ),
        (
            "the servers' CPU time (the N redis-server processes, every thread: \
             `/proc/<pid>/task/*/schedstat`)",
            crate::scaling::servers_cpu,
        ),
    ];
    for (what, figure) in tables {
        let _ = writeln!(
            out,
            "\n#### CPU per lock + release on distinct keys: {what}\n\n\
             Over the same block as the throughput (from the common start, after every \
             thread's warm-up, to the end of the last one), divided by the operations \
             completed; us, median (min-max of runs).\n"
        );
        let _ = writeln!(
            out,
            "| N | threads | {} | quorum-lock (release()) / rslock (same run) |",
            names.join(" | ")
        );
        let _ = writeln!(out, "|---|---:|{}---:|", "---:|".repeat(clients.len()));
        for (n, t) in &keys {
            let cells: Vec<String> = clients
                .iter()
                .map(|c| {
                    sc.cell(*n, *t, *c)
                        .and_then(|cell| cell.cpu(figure))
                        .map_or_else(
                            || "-".into(),
                            |s| format!("{:.1} ({:.1}-{:.1})", s.median, s.min, s.max),
                        )
                })
                .collect();
            let _ = writeln!(
                out,
                "| {n} | {t} | {} | {} |",
                cells.join(" | "),
                spread_ratio(sc.ratio_of(*n, *t, Client::Ours, Client::Rslock, |c| {
                    c.cpu_per_op(figure)
                })),
            );
        }
    }
    let changed: Vec<String> = sc
        .cells
        .iter()
        .filter(|c| c.server_threads_changed())
        .map(|c| format!("{} N={} {}t", c.client, c.n, c.threads))
        .collect();
    if !changed.is_empty() {
        let _ = writeln!(
            out,
            "\n- a server's thread count changed during a block (an ended server thread's \
             time is missing): {}",
            changed.join(", ")
        );
    }
    out
}

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
            spread_ratio(contention::ratio(
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

/// quorum-lock with the third of three nodes healthy or not.
pub fn third(results: &Results) -> String {
    let mut out = String::new();
    let Some(third) = &results.third else {
        return out;
    };
    let _ = writeln!(
        out,
        "#### quorum-lock, N=3, third node healthy / refused / blackholed (paired, interleaved)\n"
    );
    let paired = match third {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(out, "failed: {e}\n");
            return out;
        }
    };
    let _ = writeln!(
        out,
        "| third node, lock + | p50, this machine: median (min-max) | p99 (median) | p50 / healthy p50 (same run) | samples | errors |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for label in &paired.labels {
        let healthy = third_label("healthy", label.ends_with("/drop"));
        let (samples, errors, first) = paired.totals(label);
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {samples} | {} |",
            spread_us(paired.p50(label)),
            paired
                .p99(label)
                .map_or_else(|| "-".into(), |s| fmt_us(s.median)),
            spread_ratio(paired.ratio(label, &healthy)),
            if errors > 0 {
                format!(
                    "{errors}, first: {}",
                    clip(first.as_deref().unwrap_or(""), 60)
                )
            } else {
                "0".into()
            }
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
    let mut out = String::new();
    let Some(cross) = &results.cross else {
        return out;
    };
    let _ = writeln!(
        out,
        "\n#### Processes contending for one key (the benchmark's own binary as children, \
         each its own client)\n"
    );
    match cross {
        Ok(c) => out.push_str(&c.render()),
        Err(e) => {
            let _ = writeln!(out, "failed: {}", clip(e, 120));
        }
    }
    out
}

/// Memory per held lock.
pub fn memory(results: &Results) -> String {
    let mut out = String::new();
    if results.memory.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "#### Memory per held lock (quorum-lock, N=3 real redis-servers: the client's side only)\n"
    );
    let _ = writeln!(
        out,
        "| locks held | RSS delta / locks held | notes |\n|---:|---:|---|"
    );
    for (asked, r) in &results.memory {
        match r {
            Ok((bytes, held)) => {
                let _ = writeln!(
                    out,
                    "| {held} | {bytes:.0} bytes | {} |",
                    if held < asked {
                        format!("{asked} asked, the rest failed or ran out of time")
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "| {asked} | - | failed: {} |", clip(e, 80));
            }
        }
    }
    let _ = writeln!(
        out,
        "\nIncludes the `LockGuard` itself ({} bytes, kept in a `Vec`) and the allocator's overhead.\n",
        std::mem::size_of::<quorum_lock::LockGuard>()
    );
    out
}
