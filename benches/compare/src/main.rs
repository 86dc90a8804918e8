//! `quorum-bench`: quorum-lock side by side with the round-trip floor and
//! the peer Redlock crates, on redis-server nodes it starts on loopback.
//!
//! ```sh
//! cargo run --release -p quorum-lock-bench            # the full run (a few minutes)
//! cargo run --release -p quorum-lock-bench -- --quick # a smoke test
//! cargo run --release -p quorum-lock-bench -- --help
//! ```
//!
//! Prints one markdown table to stdout (progress goes to stderr). See
//! `docs/benchmarks.md` for what each scenario measures.

mod clients;
mod fencing;
mod floor;
mod ours;
mod peers;
mod scenarios;
mod servers;
mod stats;
mod table;

use std::process::ExitCode;
use std::time::Duration;

use crate::clients::{Client, Locker, Service, Settings};
use crate::floor::{Floor, FloorService};
use crate::ours::{Direct, Ours, OursService};
use crate::peers::{RedlockService, RedsyncService};
use crate::servers::{Blackhole, RedisServer};
use crate::stats::{Latency, Recorder, Throughput};
use crate::table::{Measure, Results, Scenario};

const USAGE: &str = "\
quorum-bench: quorum-lock vs the round-trip floor and the redlock, redsync
and rslock crates, on redis-server nodes started on loopback.

Usage: cargo run --release -p quorum-lock-bench -- [OPTIONS]

Options:
  --fencing-cost [R]  only: the cost of fencing tokens, paired and interleaved, R runs (default 5)
  --runs R          repeat every measurement R times, report medians (default 3; 1 with --quick)
  --quick           small counts: a smoke test that the benchmark runs
  --only LIST       clients to run, comma-separated: floor,ours,backend,redlock,redsync,rslock
                    (default: all; the floor is needed for the ratios)
  --scenarios LIST  scenarios to run, comma-separated: 1,2,3,4 (default: all)
  --retry-ms D      contention: pause after a failed attempt, uniform in [0, D) ms (default 4)
  -h, --help        this text
";

/// Scenario 4: the longest a warm-up may run past its planned length.
const WARMUP_EXTRA: Duration = Duration::from_secs(5);

/// Counts and time bounds of a run.
#[derive(Debug, Clone)]
struct Plan {
    runs: usize,
    quick: bool,
    clients: Vec<Client>,
    scenarios: Vec<u8>,
    /// Scenario 1: samples per measurement (fast clients, and those that
    /// connect per call), and unrecorded warm-up operations.
    samples: usize,
    slow_samples: usize,
    warmup: usize,
    slow_warmup: usize,
    latency_budget: Duration,
    /// Scenarios 2 and 3.
    threads: usize,
    ops_per_thread: usize,
    sections_per_thread: usize,
    threads_budget: Duration,
    /// Scenario 4.
    dead_samples: usize,
    dead_budget: Duration,
    dead_warmup: Duration,
    settings: Settings,
}

impl Plan {
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut runs = None;
        let mut quick = false;
        let mut clients = Client::ALL.to_vec();
        let mut scenarios = vec![1, 2, 3, 4];
        let mut retry_ms = 4u64;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "--quick" => quick = true,
                "--runs" => {
                    let v = value("--runs")?;
                    let r: usize = v.parse().map_err(|_| format!("bad --runs {v:?}"))?;
                    if !(1..=20).contains(&r) {
                        return Err("--runs must be in 1..=20".into());
                    }
                    runs = Some(r);
                }
                "--only" => {
                    clients = value("--only")?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::parse)
                        .collect::<Result<_, _>>()?;
                    clients.sort();
                    clients.dedup();
                }
                "--scenarios" => {
                    scenarios = value("--scenarios")?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| match s.parse::<u8>() {
                            Ok(n @ 1..=4) => Ok(n),
                            _ => Err(format!("unknown scenario {s:?}; one of 1, 2, 3, 4")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--retry-ms" => {
                    let v = value("--retry-ms")?;
                    retry_ms = v.parse().map_err(|_| format!("bad --retry-ms {v:?}"))?;
                    if !(1..=1000).contains(&retry_ms) {
                        return Err("--retry-ms must be in 1..=1000".into());
                    }
                }
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        let settings = Settings {
            ttl: Duration::from_secs(10),
            node_timeout: Duration::from_millis(100),
            retry_pause: Duration::from_millis(retry_ms),
        };
        let plan = if quick {
            Plan {
                runs: runs.unwrap_or(1),
                quick,
                clients,
                scenarios,
                samples: 200,
                slow_samples: 40,
                warmup: 20,
                slow_warmup: 5,
                latency_budget: Duration::from_secs(2),
                threads: 8,
                ops_per_thread: 40,
                sections_per_thread: 20,
                threads_budget: Duration::from_secs(20),
                dead_samples: 100,
                dead_budget: Duration::from_secs(1),
                dead_warmup: Duration::from_millis(500),
                settings,
            }
        } else {
            Plan {
                runs: runs.unwrap_or(3),
                quick,
                clients,
                scenarios,
                samples: 2000,
                slow_samples: 400,
                warmup: 100,
                slow_warmup: 20,
                latency_budget: Duration::from_secs(5),
                threads: 8,
                ops_per_thread: 300,
                sections_per_thread: 200,
                threads_budget: Duration::from_secs(60),
                dead_samples: 1000,
                dead_budget: Duration::from_secs(3),
                dead_warmup: Duration::from_millis(1500),
                settings,
            }
        };
        Ok(Some(plan))
    }

    fn has(&self, client: Client) -> bool {
        self.clients.contains(&client)
    }

    fn recorder(&self, client: Client) -> (Recorder, usize) {
        if client.connects_per_call() {
            (
                Recorder::new(self.slow_samples, self.latency_budget),
                self.slow_warmup,
            )
        } else {
            (
                Recorder::new(self.samples, self.latency_budget),
                self.warmup,
            )
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--fencing-cost") {
        let runs = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5);
        return match fencing::fencing_cost(runs) {
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

fn run(plan: &Plan, args: &[String]) -> Result<(), String> {
    let machine = table::Machine::detect();
    eprintln!("quorum-bench: starting 5 redis-server nodes on loopback");
    // Dropped (killed) at the end of this function, or while unwinding.
    let servers = (0..5)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut results = Results::new(plan.threads, plan.sections_per_thread);
    let started = std::time::Instant::now();

    if plan.scenarios.contains(&1) {
        for n in [1usize, 3, 5] {
            for run in 0..plan.runs {
                for &client in &plan.clients {
                    if client == Client::Backend && n != 1 {
                        continue;
                    }
                    progress(&format!("1 thread, N={n}"), client, run, plan.runs);
                    let key = format!("qbench:{}:s1:n{n}:r{run}", client.key());
                    let measure = latency_1(client, &urls[..n], plan, &key)
                        .map_or_else(Measure::Failed, Measure::Latency);
                    results.push(Scenario::Uncontended { n }, client, measure);
                }
            }
        }
    }
    if plan.scenarios.contains(&2) {
        for run in 0..plan.runs {
            for &client in &plan.clients {
                if client == Client::Backend {
                    continue;
                }
                progress("8 threads, distinct keys, N=3", client, run, plan.runs);
                let prefix = format!("qbench:{}:s2:r{run}", client.key());
                let measure = threads_2(client, &urls[..3], plan, &prefix)
                    .map_or_else(Measure::Failed, Measure::Throughput);
                results.push(Scenario::Distinct, client, measure);
            }
        }
    }
    if plan.scenarios.contains(&3) {
        for run in 0..plan.runs {
            for &client in &plan.clients {
                if matches!(client, Client::Floor | Client::Backend) {
                    continue;
                }
                progress("8 threads, one key, N=3", client, run, plan.runs);
                let key = format!("qbench:{}:s3:r{run}", client.key());
                let measure = contention_3(client, &urls[..3], plan, &key)
                    .map_or_else(Measure::Failed, Measure::Throughput);
                results.push(Scenario::Contended, client, measure);
            }
        }
    }
    if plan.scenarios.contains(&4) && plan.has(Client::Ours) {
        let blackhole = Blackhole::start()?;
        for run in 0..plan.runs {
            for node in [
                table::Third::Healthy,
                table::Third::Refused,
                table::Third::Blackholed,
            ] {
                let third = match node {
                    table::Third::Healthy => urls[2].clone(),
                    table::Third::Refused => servers::dead_url()?,
                    table::Third::Blackholed => blackhole.url(),
                };
                let nodes = [urls[0].clone(), urls[1].clone(), third];
                eprintln!(
                    "quorum-bench: [4: N=3, third node {node}] quorum-lock, run {}/{}",
                    run + 1,
                    plan.runs
                );
                for (drop_guard, measure) in dead_4(&nodes, plan, run, node) {
                    let measure = measure.map_or_else(Measure::Failed, Measure::Latency);
                    let client = if drop_guard {
                        Client::OursDrop
                    } else {
                        Client::Ours
                    };
                    results.push(Scenario::ThirdNode { node, drop_guard }, client, measure);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    drop(servers);

    print!(
        "{}",
        table::render(&results, &machine, plan_summary(plan, args), elapsed)
    );
    Ok(())
}

fn progress(scenario: &str, client: Client, run: usize, runs: usize) {
    eprintln!(
        "quorum-bench: [{scenario}] {client}, run {}/{runs}",
        run + 1
    );
}

fn plan_summary(plan: &Plan, args: &[String]) -> table::PlanSummary {
    let command = if args.is_empty() {
        "cargo run --release -p quorum-lock-bench".to_string()
    } else {
        format!(
            "cargo run --release -p quorum-lock-bench -- {}",
            args.join(" ")
        )
    };
    table::PlanSummary {
        command,
        runs: plan.runs,
        quick: plan.quick,
        samples: plan.samples,
        slow_samples: plan.slow_samples,
        threads: plan.threads,
        ops_per_thread: plan.ops_per_thread,
        sections_per_thread: plan.sections_per_thread,
        dead_samples: plan.dead_samples,
        settings: plan.settings.clone(),
    }
}

/// Scenario 1 for one client.
fn latency_1(client: Client, urls: &[String], plan: &Plan, key: &str) -> Result<Latency, String> {
    let settings = &plan.settings;
    let key = key.as_bytes();
    let (rec, warmup) = plan.recorder(client);
    match client {
        Client::Floor => {
            let mut floor = Floor::connect(urls, settings)?;
            scenarios::latency(|| floor.lock_release(key), warmup, rec)
        }
        Client::Ours | Client::OursDrop => {
            let locks = ours::manager(urls, settings)?;
            let mut ours = Ours {
                locks: &locks,
                settings,
                drop_guard: client == Client::OursDrop,
            };
            scenarios::latency(|| ours.lock_release(key), warmup, rec)
        }
        Client::Backend => {
            let mut direct = Direct::open(urls, settings)?;
            scenarios::latency(|| direct.lock_release(key), warmup, rec)
        }
        Client::Redlock => {
            let service = RedlockService::new(urls, settings);
            let mut locker = service.locker()?;
            scenarios::latency(|| locker.lock_release(key), warmup, rec)
        }
        Client::Redsync => {
            let service = RedsyncService::new(urls, settings)?;
            let mut locker = service.locker()?;
            scenarios::latency(|| locker.lock_release(key), warmup, rec)
        }
        Client::Rslock => peers::rslock_latency(urls, settings, key, warmup, rec),
    }
}

/// Scenario 2 for one client.
fn threads_2(
    client: Client,
    urls: &[String],
    plan: &Plan,
    prefix: &str,
) -> Result<Throughput, String> {
    let settings = &plan.settings;
    let (threads, ops, budget) = (plan.threads, plan.ops_per_thread, plan.threads_budget);
    let warmup = if client.connects_per_call() { 2 } else { 10 };
    Ok(match client {
        Client::Floor => {
            let service = FloorService { urls, settings };
            scenarios::threads(&service, threads, ops, warmup, budget, prefix)
        }
        Client::Ours | Client::OursDrop => {
            let service = OursService {
                locks: ours::manager(urls, settings)?,
                settings: settings.clone(),
                drop_guard: client == Client::OursDrop,
            };
            scenarios::threads(&service, threads, ops, warmup, budget, prefix)
        }
        Client::Redlock => {
            let service = RedlockService::new(urls, settings);
            scenarios::threads(&service, threads, ops, warmup, budget, prefix)
        }
        Client::Redsync => {
            let service = RedsyncService::new(urls, settings)?;
            scenarios::threads(&service, threads, ops, warmup, budget, prefix)
        }
        Client::Rslock => {
            peers::rslock_threads(urls, settings, threads, ops, warmup, budget, prefix)?
        }
        Client::Backend => return Err("not measured".into()),
    })
}

/// Scenario 3 for one client.
fn contention_3(
    client: Client,
    urls: &[String],
    plan: &Plan,
    key: &str,
) -> Result<Throughput, String> {
    let settings = &plan.settings;
    let (threads, sections, budget) = (plan.threads, plan.sections_per_thread, plan.threads_budget);
    Ok(match client {
        Client::Ours | Client::OursDrop => {
            let service = OursService {
                locks: ours::manager(urls, settings)?,
                settings: settings.clone(),
                drop_guard: client == Client::OursDrop,
            };
            // Connect every node before the clock starts.
            service.locker()?.lock_release(b"qbench:ours:connect")?;
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Redlock => {
            let service = RedlockService::new(urls, settings);
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Redsync => {
            let service = RedsyncService::new(urls, settings)?;
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Rslock => peers::rslock_contention(urls, settings, threads, sections, budget, key)?,
        Client::Floor | Client::Backend => return Err("not measured".into()),
    })
}

/// Scenario 4: quorum-lock on `nodes` (the third healthy, refusing or
/// blackholed), after a warm-up long enough to mark a bad node down; lock
/// + `release()`, then lock + drop.
fn dead_4(
    nodes: &[String],
    plan: &Plan,
    run: usize,
    node: table::Third,
) -> Vec<(bool, Result<Latency, String>)> {
    let settings = &plan.settings;
    let locks = match ours::manager(nodes, settings) {
        Ok(l) => l,
        Err(e) => return vec![(false, Err(e.clone())), (true, Err(e))],
    };
    let mut ours = Ours {
        locks: &locks,
        settings,
        drop_guard: false,
    };
    let key = format!("qbench:ours:s4:{node}:r{run}");
    let key = key.as_bytes();
    // Warm up: connect, and let the engine mark a bad node down (two failed
    // round trips; each costs the node timeout on a blackholed node). At
    // least `dead_warmup` and 20 operations, at most 100 000 operations or
    // `dead_warmup` + 5 s.
    let now = std::time::Instant::now();
    let (warm_until, hard_stop) = (
        now + plan.dead_warmup,
        now + plan.dead_warmup + WARMUP_EXTRA,
    );
    let mut warm_ops = 0u32;
    loop {
        let now = std::time::Instant::now();
        if (now >= warm_until && warm_ops >= 20) || now >= hard_stop || warm_ops >= 100_000 {
            break;
        }
        let _ = ours.lock_release(key);
        warm_ops += 1;
    }
    let release = scenarios::latency(
        || ours.lock_release(key),
        0,
        Recorder::new(plan.dead_samples, plan.dead_budget),
    );
    let dropped = scenarios::latency(
        || ours::lock_drop(&locks, key),
        0,
        Recorder::new(plan.dead_samples, plan.dead_budget),
    );
    // Let the queued releases finish before the next measurement.
    locks.flush(Duration::from_secs(2));
    vec![(false, release), (true, dropped)]
}
