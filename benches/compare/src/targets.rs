//! The benchmark's performance targets, each with its measured ratio
//! (median over runs of the per-run ratio, and the min-max), whether it is
//! met, and for a miss the counter that shows what limits it.

use std::fmt::Write as _;

use crate::clients::Client;
use crate::contention;
use crate::cpu::CpuUse;
use crate::cross;
use crate::futex::Futex;
use crate::instructions::Instructions;
use crate::latency::third_label;
use crate::plan::Plan;
use crate::preemptions::{Kind, Preemptions};
use crate::report::{Results, clip, switch_ratio};
use crate::scaling::{self, Cell, Figure, Scaling};
use crate::stats::Spread;
use crate::wakes::{Count, Wakes};

/// Throughput on distinct keys with `release()`, against rslock's in the
/// same run: (N, threads, the ratio to reach).
const THROUGHPUT: [(usize, usize, f64); 3] = [(3, 8, 1.0), (3, 32, 1.0), (5, 128, 1.0)];
/// The same with the guard dropped (its release queued, not awaited).
const THROUGHPUT_DROP: [(usize, usize, f64); 2] = [(3, 8, 1.5), (3, 32, 1.5)];
/// Lock + drop p50 against the floor's lock + release, for these N.
const DROP_LATENCY: (&[usize], f64) = (&[3, 5], 0.8);

/// `ok(median)` decides "met"; the spread is shown beside it.
fn line(out: &mut String, target: &str, s: Option<Spread>, ok: impl Fn(f64) -> bool, note: &str) {
    let (text, met) = match s {
        Some(s) => (
            s.ratio_text(),
            if ok(s.median) {
                if ok(s.min) && ok(s.max) {
                    "yes"
                } else {
                    "yes (median; not every run)"
                }
            } else {
                "**no**"
            },
        ),
        None => ("not measured".into(), "-"),
    };
    let _ = writeln!(out, "| {target} | {text} | {met} | {note} |");
}

/// Whether a count's target of at most `bound` is met: by every run, by
/// the median only, or not.
fn met_at_most(s: &Spread, bound: f64) -> &'static str {
    if s.max <= bound {
        "yes"
    } else if s.median <= bound {
        "yes (median; not every run)"
    } else {
        "**no**"
    }
}

/// Context switches per lock + release at N=3, 1 thread, as a note.
fn switches(results: &Results, client: Client) -> Option<f64> {
    let Some(Ok(Some(rows))) = &results.counters else {
        return None;
    };
    rows.iter()
        .find(|r| r.client == client)
        .and_then(|r| r.spread(|p| p.switches()))
        .map(|s| s.median)
}

fn switch_note(results: &Results) -> String {
    match (
        switches(results, Client::Ours),
        switches(results, Client::Floor),
        switches(results, Client::Rslock),
    ) {
        (Some(o), Some(f), r) => format!(
            "context switches per op (N=3): quorum-lock {o:.1}, floor {f:.1}{}",
            r.map_or_else(String::new, |r| format!(", rslock {r:.1}"))
        ),
        _ => String::new(),
    }
}

pub fn render(results: &Results, plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| target | measured: median of the per-run ratios (min-max, runs) | met | what limits it / notes |"
    );
    let _ = writeln!(out, "|---|---|---|---|");
    let (ours, drop, floor, rslock) = (
        Client::Ours.key(),
        Client::OursDrop.key(),
        Client::Floor.key(),
        Client::Rslock.key(),
    );
    let note = switch_note(results);
    for (n, paired, _) in &results.latency {
        line(
            &mut out,
            &format!("lock + release() p50, 1 thread, N={n}: <= 1.10x floor"),
            paired.ratio(ours, floor),
            |r| r <= 1.10,
            &note,
        );
        line(
            &mut out,
            &format!("lock + release() p50, 1 thread, N={n}: below rslock"),
            paired.ratio(ours, rslock),
            |r| r < 1.0,
            "",
        );
        let (drop_ns, at_most) = DROP_LATENCY;
        if drop_ns.contains(n) {
            line(
                &mut out,
                &format!("lock + drop p50, 1 thread, N={n}: <= {at_most}x floor"),
                paired.ratio(drop, floor),
                |r| r <= at_most,
                "the release is queued, not awaited (flushed untimed before the next turn)",
            );
        }
    }
    if let Some(sc) = &results.scaling {
        let release = THROUGHPUT
            .iter()
            .map(|t| (t, Client::Ours, "release()", "rslock"));
        let drop = THROUGHPUT_DROP
            .iter()
            .map(|t| (t, Client::OursDrop, "drop", "rslock's release"));
        for (&(n, threads, at_least), client, how, against) in release.chain(drop) {
            line(
                &mut out,
                &format!(
                    "{threads} threads, distinct keys, N={n}, {how}: throughput >= {at_least}x {against}"
                ),
                sc.ratio(n, threads, client, Client::Rslock),
                |r| r >= at_least,
                &if plan.scaling.threads.contains(&threads) {
                    throughput_note(sc, n, threads, client)
                } else {
                    "this thread count is not in the run's plan".into()
                },
            );
        }
        line(
            &mut out,
            "8 threads, distinct keys, N=3, release(): this process's CPU (user + system, \
             every thread) per lock + release <= 1x rslock's",
            sc.ratio_of(3, 8, Client::Ours, Client::Rslock, |c| {
                c.per_op(scaling::process_cpu)
            }),
            |r| r <= 1.0,
            &cpu_note(sc, 3, 8),
        );
    }
    if !results.contention.is_empty() {
        let c = &plan.contention;
        let expected = (c.threads * c.sections_per_thread) as u64;
        let exact = |client: Client| {
            results
                .contention
                .iter()
                .find(|r| r.client == client)
                .map(|r| r.exact(expected))
        };
        for client in [Client::Ours, Client::OursDrop] {
            let counter = exact(client)
                .map(|(g, t)| format!("counter exact in {g}/{t} runs"))
                .unwrap_or_default();
            line(
                &mut out,
                &format!(
                    "{} threads, one key, N=3, {expected} critical sections, {}: time <= 0.5x rslock, counter exact",
                    c.threads,
                    if client == Client::Ours {
                        "release()"
                    } else {
                        "drop"
                    }
                ),
                contention::ratio(&results.contention, client, Client::Rslock, expected),
                |r| r <= 0.5,
                &counter,
            );
        }
    }
    if let Some(Ok(Some(rows))) = &results.counters {
        let get = |c: Client| rows.iter().find(|r| r.client == c);
        if let (Some(o), Some(f)) = (get(Client::Ours), get(Client::Floor)) {
            line(
                &mut out,
                "context switches per lock + release(), 1 thread, N=3: <= 1.3x the floor's",
                switch_ratio(o, f, |p| p.switches()),
                |r| r <= 1.3,
                &note,
            );
            line(
                &mut out,
                "the same, voluntary switches only (the involuntary ones follow the machine's load)",
                switch_ratio(o, f, |p| p.voluntary),
                |r| r <= 1.3,
                "",
            );
        }
    }
    if let Some(Ok(paired)) = &results.third {
        for drop_guard in [false, true] {
            for bad in ["refused", "blackholed"] {
                line(
                    &mut out,
                    &format!(
                        "N=3, third node {bad}: p50 of lock + {} <= 1.1x healthy",
                        if drop_guard { "drop" } else { "release()" }
                    ),
                    paired.ratio(
                        &third_label(bad, drop_guard),
                        &third_label("healthy", drop_guard),
                    ),
                    |r| r <= 1.1,
                    "",
                );
            }
        }
    }
    if let Some(Ok(w)) = &results.waiting {
        waiting_line(&mut out, w);
    }
    if let Some(Ok(c)) = &results.cross {
        let (ours, rslock) = (Client::Ours.key(), Client::Rslock.key());
        let (exclusive, runs) = c.exclusive(ours);
        let rslock_median = c
            .total_over_critical(rslock)
            .map_or_else(|| "-".into(), |s| format!("{:.2}x", s.median));
        line(
            &mut out,
            &format!(
                "{} processes x {} sections of {} ms on one key, N=3, default retry policy: \
                 total time / time in critical sections <= 1.3x",
                cross::PROCESSES,
                cross::SECTIONS,
                cross::CRITICAL.as_millis()
            ),
            c.total_over_critical(ours),
            |r| r <= 1.3,
            &format!(
                "rslock's: {rslock_median}; ours over rslock's per run: {}; ours exclusive in \
                 {exclusive}/{runs} runs",
                c.ratio(ours, rslock)
                    .map_or_else(|| "-".into(), |s| s.ratio_text())
            ),
        );
        if let Some(s) = c.longest_wait_ms(ours) {
            let met = met_at_most(&s, 50.0);
            let rslock_wait = c
                .longest_wait_ms(rslock)
                .map_or_else(|| "-".into(), |s| format!("{:.0} ms", s.median));
            let _ = writeln!(
                out,
                "| the same: the longest single wait for the lock <= 50 ms | {:.0} ms ({:.0}-{:.0}, \
                 {} runs) | {met} | rslock's: {rslock_wait} |",
                s.median, s.min, s.max, s.runs
            );
        }
    }
    if let Some(counted) = &results.futex {
        futex_line(&mut out, counted);
    }
    if let Some(Ok(w)) = &results.wakes {
        wakes_lines(
            &mut out,
            w,
            results.futex.as_ref().and_then(|f| f.as_ref().ok()),
            results.preemptions.as_ref().and_then(|p| p.as_ref().ok()),
        );
    }
    if let Some(counted) = &results.instructions {
        instruction_lines(&mut out, counted);
    }
    out
}

/// The first target: futex wake-ups per lock + release at 8
/// threads, N=3, at most 2.5, a count (median of the runs), not a ratio.
fn futex_line(out: &mut String, counted: &Result<Futex, String>) {
    let target = "futex wake-ups (`FUTEX_WAKE` calls) per lock + release(), 8 threads on distinct keys, N=3 (perf): <= 2.5";
    let f = match counted {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(out, "| {target} | not measured | - | {} |", clip(e, 160));
            return;
        }
    };
    let Some(w) = f.wakes(Client::Ours) else {
        let _ = writeln!(out, "| {target} | not measured | - | no block counted |");
        return;
    };
    let met = met_at_most(&w, 2.5);
    let median = |s: Option<Spread>| s.map_or_else(|| "-".into(), |s| format!("{:.2}", s.median));
    let _ = writeln!(
        out,
        "| {target} | {:.2} ({:.2}-{:.2}, {} runs) | {met} | every futex call per lock: quorum-lock {}, floor {}, the shared-reader design floor {}; wake-ups: floor {}, design floor {} |",
        w.median,
        w.min,
        w.max,
        w.runs,
        median(f.all(Client::Ours)),
        median(f.all(Client::Floor)),
        median(f.all(Client::SharedReader)),
        median(f.wakes(Client::Floor)),
        median(f.wakes(Client::SharedReader)),
    );
}

/// The engine's instructions per lock + release against the bare
/// backend's, under callgrind: one run of each block (its count moves by
/// under 0.1% between runs); a callgrind that could not run says why in
/// the note.
fn instruction_lines(out: &mut String, counted: &Result<Instructions, String>) {
    for n in [1, 3] {
        let target = format!(
            "instructions per lock + release(), 1 thread, N={n} (callgrind): <= 1.3x its RedisBackend called directly"
        );
        match counted {
            Ok(i) => {
                let per = |client| {
                    i.per_lock(n, client)
                        .map_or_else(|| "-".into(), |v| format!("{v:.0}"))
                };
                let ratio = |client| {
                    i.vs(n, client)
                        .map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
                };
                line(
                    out,
                    &target,
                    i.vs_backend(n).and_then(|r| Spread::of(&[r])),
                    |r| r <= 1.3,
                    &format!(
                        "per lock: quorum-lock {}, RedisBackend direct {}, floor {}, rslock {} (1 run: the counts move by under 0.1% between runs); quorum-lock / floor {}, / rslock {}",
                        per(Client::Ours),
                        per(Client::Backend),
                        per(Client::Floor),
                        per(Client::Rslock),
                        ratio(Client::Floor),
                        ratio(Client::Rslock)
                    ),
                );
            }
            Err(e) => line(out, &target, None, |_| false, &clip(e, 160)),
        }
    }
}

/// The rows of the `wakes` section: thread hand-offs at 8 threads against
/// the floor's, and the engine's allocations against the bare backend's.
fn wakes_lines(
    out: &mut String,
    w: &Wakes,
    futex: Option<&Futex>,
    preempted: Option<&Preemptions>,
) {
    let per = |n, threads, client, count| {
        w.per_lock(n, threads, client, count)
            .map_or_else(|| "-".into(), |v| format!("{v:.1}"))
    };
    // The same blocks under `perf stat`: the servers' switches counted
    // too (`futex.rs`).
    let with_servers = |client| {
        futex
            .and_then(|f| f.switches(client))
            .map_or_else(|| "-".into(), |s| format!("{:.2}", s.median))
    };
    // The same blocks under `perf record`: whose threads were preempted
    // (`preemptions.rs`).
    let preempted = |client, kind| {
        preempted
            .and_then(|p| p.involuntary(client, kind))
            .map_or_else(|| "-".into(), |s| format!("{:.2}", s.median))
    };
    line(
        out,
        "context switches per lock + release(), 8 threads on distinct keys, N=3: <= the floor's",
        w.switches_vs_floor(),
        |r| r <= 1.0,
        &format!(
            "per lock: quorum-lock {} (its node threads {}), floor {} (every thread of the process), the shared-reader design floor {}, the callers-read design floor (no reader thread) {}; with drop: {}. With the servers' switches (perf, the same blocks): quorum-lock {}, floor {}, shared reader {}, callers read {}. Preempted per lock (perf record, the same blocks): quorum-lock's own threads {} and its callers {}, its servers {}; the floor's callers {}, its servers {}",
            per(3, 8, Client::Ours, Count::Switches),
            per(3, 8, Client::Ours, Count::OwnThreads),
            per(3, 8, Client::Floor, Count::Switches),
            per(3, 8, Client::SharedReader, Count::Switches),
            per(3, 8, Client::CallersRead, Count::Switches),
            per(3, 8, Client::OursDrop, Count::Switches),
            with_servers(Client::Ours),
            with_servers(Client::Floor),
            with_servers(Client::SharedReader),
            with_servers(Client::CallersRead),
            preempted(Client::Ours, Kind::Own),
            preempted(Client::Ours, Kind::Callers),
            preempted(Client::Ours, Kind::Servers),
            preempted(Client::Floor, Kind::Callers),
            preempted(Client::Floor, Kind::Servers),
        ),
    );
    line(
        out,
        "the same, voluntary switches only (the involuntary ones are mostly the reader preempted by the threads it wakes, and follow the machine's load)",
        w.voluntary_switches_vs_floor(),
        |r| r <= 1.0,
        "",
    );
    for n in [1, 3] {
        line(
            out,
            &format!(
                "allocations per lock + release(), 1 thread, N={n}: <= 1.3x its RedisBackend called directly"
            ),
            w.allocations_vs_backend(n),
            |r| r <= 1.3,
            &format!(
                "per lock: quorum-lock {}, RedisBackend direct {}, floor {}, rslock {}",
                per(n, 1, Client::Ours, Count::Allocations),
                per(n, 1, Client::Backend, Count::Allocations),
                per(n, 1, Client::Floor, Count::Allocations),
                per(n, 1, Client::Rslock, Count::Allocations),
            ),
        );
    }
}

/// What a throughput ratio against rslock is made of, from the same
/// blocks: the CPU this process and the servers spent per lock, and how
/// many CPUs they kept busy (a rate is the second over the first).
fn throughput_note(sc: &Scaling, n: usize, threads: usize, client: Client) -> String {
    let per_lock: fn(&Cell) -> Vec<Option<f64>> = |cell| cell.per_op(scaling::all_cpu);
    let busy: fn(&Cell) -> Vec<Option<f64>> = Cell::busy_cpus;
    let median = |c: Client, figure: fn(&Cell) -> Vec<Option<f64>>| {
        Spread::of_runs(figure(sc.cell(n, threads, c)?)).map(|s| s.median)
    };
    let ratio = |figure| {
        sc.ratio_of(n, threads, client, Client::Rslock, figure)
            .map_or_else(|| "-".into(), |s| s.ratio_text())
    };
    let (Some(cpu_ours), Some(cpu_theirs), Some(busy_ours), Some(busy_theirs)) = (
        median(client, per_lock),
        median(Client::Rslock, per_lock),
        median(client, busy),
        median(Client::Rslock, busy),
    ) else {
        return String::new();
    };
    format!(
        "CPU per lock, this process and the {n} servers: ours {cpu_ours:.1} us, rslock \
         {cpu_theirs:.1} us, {}; CPUs kept busy (of {}): ours {busy_ours:.2}, rslock \
         {busy_theirs:.2}, {} (the rate ratio is the second ratio over the first)",
        ratio(per_lock),
        std::thread::available_parallelism().map_or(0, |c| c.get()),
        ratio(busy),
    )
}

/// The CPU row's note: both clients' figures per lock + release, what
/// share of it is system time, their context switches and the servers'
/// (counts, which explain the times), and the servers' CPU beside it.
fn cpu_note(sc: &Scaling, n: usize, threads: usize) -> String {
    let median_of = |client: Client, f: Figure| {
        sc.cell(n, threads, client)
            .and_then(|c| c.spread(f))
            .map(|s| s.median)
    };
    let system = |c: &CpuUse| Some(c.system.as_secs_f64() * 1e6);
    let mut parts = Vec::new();
    for client in [Client::Ours, Client::Rslock] {
        let (Some(total), Some(sys)) = (
            median_of(client, scaling::process_cpu),
            median_of(client, system),
        ) else {
            continue;
        };
        let switches = match (
            median_of(client, scaling::process_switches),
            median_of(client, scaling::servers_switches),
        ) {
            (Some(own), Some(servers)) => {
                format!(", {own:.2} context switches (the servers' {servers:.2})")
            }
            _ => String::new(),
        };
        parts.push(format!(
            "{}: {total:.1} us per op ({:.0}% system){switches}",
            client.key(),
            100.0 * sys / total
        ));
    }
    let servers = sc.ratio_of(n, threads, Client::Ours, Client::Rslock, |c| {
        c.per_op(scaling::servers_cpu)
    });
    if let (Some(o), Some(r)) = (
        median_of(Client::Ours, scaling::servers_cpu),
        median_of(Client::Rslock, scaling::servers_cpu),
    ) {
        parts.push(format!(
            "the {n} servers' CPU per op: ours {o:.1} us, rslock {r:.1} us, {}",
            servers.map_or_else(|| "-".into(), |s| s.ratio_text())
        ));
    }
    parts.join("; ")
}

/// An absolute figure (CPU milliseconds per second), not a ratio.
fn waiting_line(out: &mut String, w: &crate::waiting::Waiting) {
    const TARGET_MS_PER_S: f64 = 2.0;
    let target = format!(
        "a process with one thread waiting on a held key ({} s blocks), default retry policy: \
         CPU <= {TARGET_MS_PER_S} ms per s",
        w.block.as_secs_f64()
    );
    let Some(s) = Spread::of(&w.waiting) else {
        let _ = writeln!(out, "| {target} | not measured | - | |");
        return;
    };
    let met = if s.max <= TARGET_MS_PER_S {
        "yes"
    } else if s.median <= TARGET_MS_PER_S {
        "yes (median; not every run)"
    } else {
        "**no**"
    };
    let idle = crate::stats::median(&w.idle);
    let _ = writeln!(
        out,
        "| {target} | {:.1} ms/s ({:.1}-{:.1}, {} runs) | {met} | the same process idle: \
         {idle:.2} ms/s; the rest is the waiter's own timed attempts (about one a second: \
         they wait for the holder's expiry, at most 1 s) |",
        s.median, s.min, s.max, s.runs
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::futex::Counted;

    fn counted(client: Client, wakes: u64) -> Counted {
        Counted {
            client,
            wakes,
            all: 2 * wakes,
            switches: Some(3 * wakes),
            calls: 1000,
        }
    }

    #[test]
    fn a_count_is_met_by_every_run_by_the_median_or_not() {
        let spread = |median, min, max| Spread {
            median,
            min,
            max,
            runs: 3,
        };
        assert_eq!(met_at_most(&spread(2.0, 1.9, 2.5), 2.5), "yes");
        assert_eq!(
            met_at_most(&spread(2.4, 1.9, 2.6), 2.5),
            "yes (median; not every run)"
        );
        assert_eq!(met_at_most(&spread(2.6, 2.4, 2.7), 2.5), "**no**");
    }

    #[test]
    fn the_futex_row_reads_the_median_wake_ups_and_says_why_when_unmeasured() {
        let f = Futex {
            blocks: vec![
                counted(Client::Ours, 1900),
                counted(Client::Ours, 2000),
                counted(Client::Ours, 2600),
                counted(Client::SharedReader, 2000),
            ],
        };
        let mut out = String::new();
        futex_line(&mut out, &Ok(f));
        assert!(
            out.contains("| 2.00 (1.90-2.60, 3 runs) | yes (median; not every run) |"),
            "{out}"
        );
        assert!(
            out.contains("quorum-lock 4.00, floor -, the shared-reader design floor 4.00"),
            "{out}"
        );
        let mut out = String::new();
        futex_line(&mut out, &Err("perf did not start".into()));
        assert!(
            out.contains("| not measured | - | perf did not start |"),
            "{out}"
        );
    }
}
