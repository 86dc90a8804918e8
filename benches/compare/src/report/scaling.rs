//! The scaling section: throughput on distinct keys per (N, threads) and
//! client, the CPU time per op (this process's and the servers'), the
//! failures, and the threads the process ran besides its callers.

use std::fmt::Write as _;

use super::cells::{census_text, clip, fmt_rate, spread_ratio};
use super::results::Results;
use crate::clients::Client;
use crate::scaling::{Figure, Scaling};

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

/// Scaling: CPU time and context switches per lock + release, this
/// process's and the servers', per (N, threads) and client.
fn scaling_cpu(sc: &Scaling, clients: &[Client]) -> String {
    let mut out = String::new();
    let names: Vec<String> = clients.iter().map(|c| c.to_string()).collect();
    let mut keys: Vec<(usize, usize)> = sc.cells.iter().map(|c| (c.n, c.threads)).collect();
    keys.sort_unstable();
    keys.dedup();
    // What, its figure, its unit and decimals.
    let tables: [(&str, Figure, &str, usize); 4] = [
        (
            "CPU per lock + release on distinct keys: this process's CPU time (user + system, \
             every thread, ended ones included: `getrusage(RUSAGE_SELF)`)",
            crate::scaling::process_cpu,
            "us",
            1,
        ),
        (
            "CPU per lock + release on distinct keys: the servers' CPU time (the N redis-server \
             processes, every thread: `/proc/<pid>/task/*/schedstat`)",
            crate::scaling::servers_cpu,
            "us",
            1,
        ),
        (
            "Context switches per lock + release on distinct keys: this process's (voluntary \
             and involuntary, every thread, ended ones included: `getrusage(RUSAGE_SELF)`)",
            crate::scaling::process_switches,
            "switches",
            2,
        ),
        (
            "Context switches per lock + release on distinct keys: the servers' (times their \
             threads were put on a CPU: the third field of `/proc/<pid>/task/*/schedstat`)",
            crate::scaling::servers_switches,
            "switches",
            2,
        ),
    ];
    for (what, figure, unit, decimals) in tables {
        let _ = writeln!(
            out,
            "\n#### {what}\n\n\
             Over the same block as the throughput (from the common start, after every \
             thread's warm-up, to the end of the last one), divided by the operations \
             completed; {unit}, median (min-max of runs).\n"
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
                        .and_then(|cell| cell.spread(figure))
                        .map_or_else(
                            || "-".into(),
                            |s| {
                                format!(
                                    "{:.d$} ({:.d$}-{:.d$})",
                                    s.median,
                                    s.min,
                                    s.max,
                                    d = decimals
                                )
                            },
                        )
                })
                .collect();
            let _ = writeln!(
                out,
                "| {n} | {t} | {} | {} |",
                cells.join(" | "),
                spread_ratio(sc.ratio_of(*n, *t, Client::Ours, Client::Rslock, |c| {
                    c.per_op(figure)
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
