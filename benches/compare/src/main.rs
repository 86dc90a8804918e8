//! `quorum-bench`: quorum-lock side by side with the round-trip floor and
//! the peer Redlock crates, on redis-server nodes it starts on loopback.
//!
//! ```sh
//! cargo run --release -p quorum-lock-bench            # the full run (a few minutes)
//! cargo run --release -p quorum-lock-bench -- --quick # a smoke test
//! cargo run --release -p quorum-lock-bench -- --help
//! cargo run --release -p quorum-lock-bench -- --cross-process 5  # only: K processes, one key
//! cargo run --release -p quorum-lock-bench -- --rw-cost 5        # only: read-write lock vs mutex
//! cargo run --release -p quorum-lock-bench -- --election-cost 5  # only: campaign + resign vs fenced lock + release
//! cargo run --release -p quorum-lock-bench -- --wakes 3          # only: context switches and allocations per lock
//! cargo run --release -p quorum-lock-bench -- --wake-cost 5      # only: what one thread wake-up costs here
//! ```
//!
//! Clients are compared paired and interleaved (they take turns, so they
//! see the same noise of this machine): every ratio is computed within a
//! run, then summarized over the runs (median, min-max). Prints one
//! markdown report to stdout (progress goes to stderr) and writes it, with
//! SVG charts, to `--out` (default `target/bench/`). See
//! `docs/benchmarks.md` for what each part measures.

mod ab;
mod alloc_count;
mod callers_read;
mod charts;
mod clients;
mod commandstats;
mod contention;
mod counters;
mod cpu;
mod cross;
mod fencing;
mod floor;
mod futex;
mod hog;
mod instructions;
mod latency;
mod machine;
mod ours;
mod paired;
mod peers;
mod plan;
mod preemptions;
mod procfs;
mod report;
mod rw;
mod scaling;
mod scenarios;
mod scripts;
mod shared_reader;
mod stats;
mod svg;
mod targets;
mod under_tool;
mod waiting;
mod wake_cost;
mod wakes;

use std::process::ExitCode;
use std::time::Instant;

use crate::machine::Machine;
use crate::plan::{Plan, USAGE};
use crate::report::Results;
use testkit::RedisServer;

/// Callers of the auto-extension thread census.
const CENSUS_CALLERS: usize = 128;

/// `--processes K` among `args` (for `--cross-process`): 4 without it;
/// from 2 to [`cross::MOST_PROCESSES`].
fn cross_processes(args: &[String]) -> Result<usize, String> {
    let Some(at) = args.iter().position(|a| a == "--processes") else {
        return Ok(cross::PROCESSES);
    };
    let given = args.get(at + 1).map(String::as_str).unwrap_or_default();
    match given.parse::<usize>() {
        Ok(k) if (2..=cross::MOST_PROCESSES).contains(&k) => Ok(k),
        _ => Err(format!(
            "--processes wants a count from 2 to {}, not {given:?}",
            cross::MOST_PROCESSES
        )),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only: Option<fn(usize) -> Result<String, String>> = match args.first().map(String::as_str) {
        Some("--fencing-cost") => Some(fencing::fencing_cost),
        Some("--scripts-cost") => Some(scripts::scripts_cost),
        Some("--rw-cost") => Some(rw::rw_cost),
        Some("--wakes") => Some(wakes::wakes),
        Some("--wake-cost") => Some(wake_cost::wake_cost),
        Some("--election-cost") => Some(fencing::election_cost),
        _ => None,
    };
    if let Some(comparison) = only {
        let runs = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5);
        let result = match (args[0].as_str(), args.get(2)) {
            ("--wakes", Some(block)) => wakes::one_block(runs, block),
            _ => comparison(runs),
        };
        return match result {
            Ok(table) => {
                print!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("quorum-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some(hog::CHILD_ARG) {
        hog::spin();
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("--cross-process-child") {
        return match cross::child(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("quorum-bench child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("--cross-process") {
        let runs = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5);
        let processes = match cross_processes(&args) {
            Ok(processes) => processes,
            Err(e) => {
                eprintln!("quorum-bench: {e}");
                return ExitCode::from(2);
            }
        };
        return match cross::cross_process(runs, processes) {
            Ok(table) => {
                print!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("quorum-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let plan = match Plan::parse(&args) {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("quorum-bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&plan, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quorum-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn log(what: &str) {
    eprintln!("quorum-bench: [{what}]");
}

fn run(plan: &Plan, args: &[String]) -> Result<(), String> {
    let machine = Machine::detect();
    log("starting 5 redis-server nodes on loopback");
    // Dropped (killed) at the end of this function, or while unwinding.
    let servers = (0..5)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    // For the servers' CPU time per block.
    let pids: Vec<u32> = servers.iter().map(RedisServer::pid).collect();
    // Killed when dropped, with the servers.
    let hog = if plan.cpu_hog {
        log("starting a process that keeps one core busy (--cpu-hog)");
        Some(hog::CpuHog::start()?)
    } else {
        None
    };
    let mut results = Results::default();
    let started = Instant::now();

    if plan.runs_section("latency") {
        for n in [1usize, 3, 5] {
            log(&format!(
                "latency, 1 thread, N={n}, {} runs, paired",
                plan.runs
            ));
            let (paired, failed) = latency::by_nodes(&urls[..n], plan);
            results.latency.push((n, paired, failed));
        }
    }
    if plan.runs_section("counters") {
        log("counters, 1 thread, N=3");
        results.counters = Some(counters::measure(&urls[..3], plan));
    }
    if plan.runs_section("scaling") {
        results.scaling = Some(scaling::measure(&urls, &pids, plan, &log));
        if plan.has(clients::Client::Ours) {
            log("thread census, 128 auto-extended locks, N=3");
            results.auto_census = Some(scaling::auto_extend_census(
                &urls[..3],
                &plan.settings,
                CENSUS_CALLERS,
            ));
        }
    }
    if plan.runs_section("contention") {
        results.contention = contention::measure(&urls[..3], plan, &log);
    }
    if plan.runs_section("third") && plan.has(clients::Client::Ours) {
        log("third node healthy / refused / blackholed, N=3, paired");
        results.third = Some(latency::third_node(&urls[..3], plan));
    }
    if plan.runs_section("memory") && plan.has(clients::Client::Ours) {
        for &count in &plan.memory.held {
            log(&format!("memory, {count} held locks, N=3"));
            let r = scaling::memory_per_lock(&urls[..3], &plan.settings, count, plan.memory.budget);
            results.memory.push((count, r));
        }
    }
    if plan.runs_section("waiting") && plan.has(clients::Client::Ours) {
        log(&format!(
            "waiting: CPU of the process, idle / one thread waiting for a held key, N=3, {} runs",
            plan.runs
        ));
        results.waiting = Some(waiting::measure(
            &urls[..3],
            &plan.settings,
            plan.runs,
            plan.waiting_block,
        ));
    }
    if plan.runs_section("cross") {
        // A few seconds per run (4 processes x 25 sections of 2 ms): cheap
        // enough for every full run.
        let clients: Vec<&'static str> = cross::CLIENTS
            .into_iter()
            .filter(|name| plan.clients.iter().any(|c| c.key() == *name))
            .collect();
        if !clients.is_empty() {
            results.cross = Some(cross::measure(
                &urls[..3],
                plan.runs,
                cross::PROCESSES,
                &clients,
                &log,
            ));
        }
    }
    if plan.runs_section("wakes") {
        // On servers of its own, after the others (about 7 s a run).
        log(&format!(
            "wakes: context switches and allocations per lock, {} runs",
            plan.runs
        ));
        results.wakes = Some(wakes::measure(plan.runs));
        // Counts that move by under 0.1% between runs: one run of each
        // of the eight blocks (about 55 s).
        log("wakes: instructions per lock + release under callgrind");
        results.instructions = Some(instructions::measure());
        // The process's futex calls, under perf: its runs of three blocks
        // (about 2 s each).
        log(&format!(
            "wakes: futex calls per lock under perf stat, {} runs",
            plan.runs
        ));
        results.futex = Some(futex::measure(plan.runs));
        // The same blocks under `perf record`: who switched out, and who
        // preempted whom (about 4 s a block).
        log(&format!(
            "wakes: context switches by kind of thread under perf record, {} runs",
            plan.runs
        ));
        results.preemptions = Some(preemptions::measure(plan.runs));
    }
    let elapsed = started.elapsed();
    drop(hog);
    drop(servers);

    let command = if args.is_empty() {
        "cargo run --release -p quorum-lock-bench".to_string()
    } else {
        format!(
            "cargo run --release -p quorum-lock-bench -- {}",
            args.join(" ")
        )
    };
    let mut md = String::from("## quorum-bench results\n\n");
    md.push_str(&report::header(plan, &machine, &command, elapsed));
    md.push_str("### Targets\n\n");
    md.push_str(&targets::render(&results, plan));
    md.push_str("\n### Figures\n\n");
    md.push_str(&report::latency(&results));
    md.push_str(&report::counters(&results));
    md.push_str(&report::scaling(&results));
    md.push_str(&report::contention(&results, plan));
    md.push_str(&report::third(&results));
    md.push_str(&report::memory(&results));
    md.push_str(&report::waiting(&results));
    md.push_str(&report::cross(&results));
    md.push_str(&report::wakes(&results));
    md.push_str(&report::instructions(&results));
    md.push_str(&report::futex(&results));
    md.push_str(&report::preemptions(&results));
    print!("{md}");
    let charts = charts::charts(&results);
    charts::write(&plan.out, &charts, &md)?;
    log(&format!(
        "wrote results.md and {} charts to {}",
        charts.len(),
        plan.out.display()
    ));
    Ok(())
}
