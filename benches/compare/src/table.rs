//! The results of a run and the markdown they print as: the machine, one
//! table of every figure with its ratio to the floor, and the targets of
//! the performance issue with the measured ratios.

use std::fmt::{self, Write as _};
use std::process::Command;
use std::time::Duration;

use crate::clients::{Client, Settings};
use crate::stats::{Latency, Throughput, median};

/// The third node of scenario 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Third {
    Healthy,
    /// Nothing listens on its port: connection refused.
    Refused,
    /// Accepts connections and never answers.
    Blackholed,
}

impl fmt::Display for Third {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Third::Healthy => "healthy",
            Third::Refused => "refused",
            Third::Blackholed => "blackholed",
        })
    }
}

/// What was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// 1: one thread, lock + release, no contention, on N nodes.
    Uncontended { n: usize },
    /// 2: 8 threads on distinct keys, N=3.
    Distinct,
    /// 3: 8 threads contending for one key, N=3.
    Contended,
    /// 4: quorum-lock, N=3 with the third node healthy or not; the guard
    /// released by `release()` or by drop.
    ThirdNode { node: Third, drop_guard: bool },
}

impl Scenario {
    fn label(&self, threads: usize, sections: usize) -> String {
        match self {
            Scenario::Uncontended { n } => format!("1: 1 thread, N={n}"),
            Scenario::Distinct => format!("2: {threads} threads, distinct keys, N=3"),
            Scenario::Contended => format!(
                "3: {threads} threads, one key, N=3, {} critical sections",
                threads * sections
            ),
            Scenario::ThirdNode { node, drop_guard } => format!(
                "4: N=3, third node {node}, lock + {}",
                if *drop_guard { "drop" } else { "release()" }
            ),
        }
    }

    /// The floor row this scenario's figures are divided by.
    fn floor(&self) -> Option<Scenario> {
        match self {
            Scenario::Uncontended { .. } | Scenario::Distinct => Some(*self),
            Scenario::Contended => None,
            Scenario::ThirdNode { .. } => Some(Scenario::Uncontended { n: 3 }),
        }
    }
}

/// One run's figure, or why there is none.
#[derive(Debug, Clone)]
pub enum Measure {
    Latency(Latency),
    Throughput(Throughput),
    Failed(String),
}

#[derive(Debug)]
struct Row {
    scenario: Scenario,
    client: Client,
    runs: Vec<Measure>,
}

/// Medians over the runs of one row.
#[derive(Debug, Default, Clone)]
struct Summary {
    p50: Option<Duration>,
    p99: Option<Duration>,
    rate: Option<f64>,
    wall: Option<Duration>,
    samples: usize,
    ok_runs: usize,
    runs: usize,
    errors: usize,
    first_error: Option<String>,
    counter_ok: Option<(usize, usize)>,
}

/// Every figure of a run.
#[derive(Debug)]
pub struct Results {
    rows: Vec<Row>,
    threads: usize,
    sections: usize,
}

impl Results {
    pub fn new(threads: usize, sections: usize) -> Self {
        Self {
            rows: Vec::new(),
            threads,
            sections,
        }
    }

    pub fn push(&mut self, scenario: Scenario, client: Client, measure: Measure) {
        match self
            .rows
            .iter_mut()
            .find(|r| r.scenario == scenario && r.client == client)
        {
            Some(row) => row.runs.push(measure),
            None => self.rows.push(Row {
                scenario,
                client,
                runs: vec![measure],
            }),
        }
    }

    fn summary(&self, scenario: Scenario, client: Client) -> Option<Summary> {
        let row = self
            .rows
            .iter()
            .find(|r| r.scenario == scenario && r.client == client)?;
        Some(summarize(row, (self.threads * self.sections) as u64))
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn summarize(row: &Row, expected_counter: u64) -> Summary {
    let mut s = Summary {
        runs: row.runs.len(),
        ..Summary::default()
    };
    let (mut p50, mut p99, mut rate, mut wall) = (vec![], vec![], vec![], vec![]);
    for m in &row.runs {
        match m {
            Measure::Latency(l) => {
                if l.samples > 0 {
                    s.ok_runs += 1;
                    p50.push(secs(l.p50));
                    p99.push(secs(l.p99));
                    rate.push(l.ops_per_sec);
                }
                s.samples += l.samples;
                s.errors += l.errors;
                if let Some(e) = &l.first_error {
                    s.first_error.get_or_insert(e.clone());
                }
            }
            Measure::Throughput(t) => {
                if t.ops > 0 {
                    s.ok_runs += 1;
                    rate.push(t.ops_per_sec());
                    wall.push(secs(t.wall));
                }
                s.samples += t.ops;
                s.errors += t.errors;
                if let Some(e) = &t.first_error {
                    s.first_error.get_or_insert(e.clone());
                }
                if let Some(c) = t.counter {
                    let ok = usize::from(c == expected_counter && t.errors == 0);
                    let (good, total) = s.counter_ok.unwrap_or((0, 0));
                    s.counter_ok = Some((good + ok, total + 1));
                }
            }
            Measure::Failed(e) => {
                s.errors += 1;
                s.first_error.get_or_insert(e.clone());
            }
        }
    }
    let dur = |v: &[f64]| (!v.is_empty()).then(|| Duration::from_secs_f64(median(v)));
    s.p50 = dur(&p50);
    s.p99 = dur(&p99);
    s.wall = dur(&wall);
    s.rate = (!rate.is_empty()).then(|| median(&rate));
    s
}

/// The machine the run happened on.
#[derive(Debug, Clone)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
    pub kernel: String,
    pub redis: String,
    pub load: String,
    pub commit: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let output = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let redis = output("redis-server", &["--version"]).unwrap_or_else(|| "unknown".into());
        let commit = match output("git", &["rev-parse", "--short", "HEAD"]) {
            Some(c) => {
                let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"])
                    .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{c} (with uncommitted changes)")
                } else {
                    c
                }
            }
            None => "unknown".into(),
        };
        Self {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            kernel: read("/proc/sys/kernel/osrelease"),
            redis,
            load: read("/proc/loadavg"),
            commit,
        }
    }
}

/// What the run was asked to do.
#[derive(Debug, Clone)]
pub struct PlanSummary {
    pub command: String,
    pub runs: usize,
    pub quick: bool,
    pub samples: usize,
    pub slow_samples: usize,
    pub threads: usize,
    pub ops_per_thread: usize,
    pub sections_per_thread: usize,
    pub dead_samples: usize,
    pub settings: Settings,
}

fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} us")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 1000.0 {
        format!("{:.1}k/s", r / 1000.0)
    } else {
        format!("{r:.0}/s")
    }
}

fn ratio(x: Option<f64>, floor: Option<f64>) -> Option<f64> {
    match (x, floor) {
        (Some(x), Some(f)) if f > 0.0 => Some(x / f),
        _ => None,
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.2}x"))
}

fn clip(s: &str, max: usize) -> String {
    let s = s.replace('|', "/").replace('\n', " ");
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

/// The whole report, in markdown.
pub fn render(
    results: &Results,
    machine: &Machine,
    plan: PlanSummary,
    elapsed: Duration,
) -> String {
    let mut out = String::new();
    let s = &plan.settings;
    let _ = writeln!(out, "## quorum-bench results\n");
    let _ = writeln!(out, "- command: `{}`", plan.command);
    let _ = writeln!(
        out,
        "- machine: {} cores ({}), Linux {}, {}",
        machine.nproc, machine.cpu, machine.kernel, machine.redis
    );
    let _ = writeln!(out, "- load average at start: {}", machine.load);
    let _ = writeln!(out, "- quorum-lock commit: {}", machine.commit);
    let _ = writeln!(
        out,
        "- {} run(s){}, medians reported; {} latency samples per run ({} for redlock/redsync); \
         {} threads x {} ops; {} threads x {} critical sections; {} samples per scenario-4 row",
        plan.runs,
        if plan.quick { " (--quick)" } else { "" },
        plan.samples,
        plan.slow_samples,
        plan.threads,
        plan.ops_per_thread,
        plan.threads,
        plan.sections_per_thread,
        plan.dead_samples,
    );
    let _ = writeln!(
        out,
        "- TTL {:?}, quorum-lock node timeout {:?}, contention retry pause uniform in [0, {:?}) \
         (redsync: {:?} +- jitter); wall time of the run {:.0} s\n",
        s.ttl,
        s.node_timeout,
        s.retry_pause,
        s.retry_pause / 2,
        elapsed.as_secs_f64()
    );

    let _ = writeln!(
        out,
        "| scenario | client | p50 | p99 | lock+release/s | wall | p50 / floor | p99 / floor | rate / floor | notes |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for row in &results.rows {
        let sum = summarize(row, (results.threads * results.sections) as u64);
        let floor = row
            .scenario
            .floor()
            .and_then(|f| results.summary(f, Client::Floor));
        let f = floor.as_ref();
        let p50_ratio = ratio(sum.p50.map(secs), f.and_then(|f| f.p50).map(secs));
        let p99_ratio = ratio(sum.p99.map(secs), f.and_then(|f| f.p99).map(secs));
        // Scenario 4's rate would be compared with a one-thread floor: the
        // p50 ratio says it all there.
        let rate_ratio = match row.scenario {
            Scenario::ThirdNode { .. } => None,
            _ => ratio(sum.rate, f.and_then(|f| f.rate)),
        };
        let mut notes = Vec::new();
        if let Some((good, total)) = sum.counter_ok {
            notes.push(format!(
                "counter = {} in {good}/{total} runs{}",
                results.threads * results.sections,
                if good == total {
                    ""
                } else {
                    " (LOST UPDATES or errors)"
                }
            ));
        }
        notes.push(format!("{} ok samples/ops", sum.samples));
        if sum.ok_runs < sum.runs {
            notes.push(format!(
                "{}/{} runs failed",
                sum.runs - sum.ok_runs,
                sum.runs
            ));
        }
        if sum.errors > 0 {
            notes.push(format!(
                "{} errors, first: {}",
                sum.errors,
                clip(sum.first_error.as_deref().unwrap_or(""), 90)
            ));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.scenario.label(results.threads, results.sections),
            row.client,
            sum.p50.map_or_else(|| "-".into(), fmt_dur),
            sum.p99.map_or_else(|| "-".into(), fmt_dur),
            sum.rate.map_or_else(|| "-".into(), fmt_rate),
            sum.wall.map_or_else(|| "-".into(), fmt_dur),
            fmt_ratio(p50_ratio),
            fmt_ratio(p99_ratio),
            fmt_ratio(rate_ratio),
            notes.join("; "),
        );
    }
    out.push('\n');
    out.push_str(&targets(results));
    out
}

/// One line per target of the performance issue.
fn targets(results: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| target | measured | met |");
    let _ = writeln!(out, "|---|---|---|");
    let get = |sc: Scenario, c: Client| results.summary(sc, c);
    let mut line = |target: String, measured: Option<(f64, String)>, ok: &dyn Fn(f64) -> bool| {
        let (text, met) = match measured {
            Some((r, detail)) => (
                format!("{r:.2}x ({detail})"),
                if ok(r) { "yes" } else { "no" },
            ),
            None => ("not measured".into(), "-"),
        };
        let _ = writeln!(out, "| {target} | {text} | {met} |");
    };

    for client in [Client::Ours, Client::OursDrop] {
        for n in [1, 3, 5] {
            let sc = Scenario::Uncontended { n };
            let ours = get(sc, client).and_then(|s| s.p50);
            let floor = get(sc, Client::Floor).and_then(|s| s.p50);
            let measured = ours.zip(floor).map(|(o, f)| {
                (
                    secs(o) / secs(f),
                    format!("{} vs floor {}", fmt_dur(o), fmt_dur(f)),
                )
            });
            line(
                format!("{client}, 1 thread, N={n}: p50 <= 1.2x floor"),
                measured,
                &|r| r <= 1.2,
            );
        }

        let rate = |c: Client| get(Scenario::Distinct, c).and_then(|s| s.rate);
        let ours = rate(client);
        for (peer, name, bound) in [
            (Client::Floor, "floor", 2.0),
            (Client::Rslock, "rslock", 1.5),
        ] {
            let measured = ours
                .zip(rate(peer))
                .map(|(o, p)| (o / p, format!("{} vs {name} {}", fmt_rate(o), fmt_rate(p))));
            line(
                format!("{client}, 8 threads, distinct keys, N=3: throughput >= {bound}x {name}"),
                measured,
                &|r| r >= bound,
            );
        }

        let wall = |c: Client| {
            get(Scenario::Contended, c).and_then(|s| {
                let clean = s.counter_ok.is_some_and(|(g, t)| g == t) && s.errors == 0;
                s.wall.filter(|_| clean)
            })
        };
        let measured = wall(client).zip(wall(Client::Rslock)).map(|(o, r)| {
            (
                secs(o) / secs(r),
                format!("{} vs rslock {}", fmt_dur(o), fmt_dur(r)),
            )
        });
        line(
            format!(
                "{client}, 8 threads, one key, N=3, {} critical sections: time <= 0.5x rslock (no lost updates)",
                results.threads * results.sections
            ),
            measured,
            &|r| r <= 0.5,
        );
    }

    for drop_guard in [false, true] {
        let client = if drop_guard {
            Client::OursDrop
        } else {
            Client::Ours
        };
        let healthy = get(
            Scenario::ThirdNode {
                node: Third::Healthy,
                drop_guard,
            },
            client,
        )
        .and_then(|s| s.p50);
        for node in [Third::Refused, Third::Blackholed] {
            let bad = get(Scenario::ThirdNode { node, drop_guard }, client).and_then(|s| s.p50);
            let measured = bad.zip(healthy).map(|(b, h)| {
                (
                    secs(b) / secs(h),
                    format!("{} vs healthy {}", fmt_dur(b), fmt_dur(h)),
                )
            });
            line(
                format!(
                    "N=3, one node {node} (marked down): p50 of lock + {} <= 1.2x healthy",
                    if drop_guard { "drop" } else { "release()" }
                ),
                measured,
                &|r| r <= 1.2,
            );
        }
    }
    out
}
