//! `--cross-process`: K processes contend for one key.
//!
//! The benchmark runs itself as K child processes (`--cross-process-child`),
//! each with its own client (its own manager: its own engine, connections
//! and node threads), on one key over 3 local redis-servers, with the
//! client's *default* retry policy. Each child makes `SECTIONS` critical
//! sections of `CRITICAL` (a sleep) and reports, per section, when the
//! section began and ended (wall clock, comparable between processes on
//! one machine) and how long its `lock` took, retries included.
//!
//! Figures per run: total time (from the common start to the end of the
//! last section) over the time spent inside critical sections, and the
//! longest single wait for the lock. Exclusion is checked too: no two
//! sections (of any process) may overlap. quorum-lock and rslock take
//! turns run by run, in an order that changes (`paired::order`), like the other scenarios.
//! On its own with `--cross-process R` (its own 3 servers), or as the
//! `cross` section of a full run (on the run's first 3 servers).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorum_lock::LockManager;

use crate::stats::Spread;
use testkit::RedisServer;

/// Processes contending in the default run (the machine has 2 cores: more
/// would measure the scheduler); `--cross-process R --processes K` sets
/// another count, from 2 to [`MOST_PROCESSES`].
pub const PROCESSES: usize = 4;
/// Most processes `--processes` accepts.
pub const MOST_PROCESSES: usize = 16;
/// Critical sections per process.
pub const SECTIONS: usize = 25;
/// How long each critical section lasts.
pub const CRITICAL: Duration = Duration::from_millis(2);
/// Most time one child may take (ready, then all its sections).
const CHILD_BUDGET: Duration = Duration::from_secs(60);

/// The clients compared here, by their `--only` names.
pub const CLIENTS: [&str; 2] = ["ours", "rslock"];

/// One process's report: per section (start ns, end ns, wait), errors,
/// and for quorum-lock its counters (failed attempts, waits a release
/// notice ended, locks that let the waiting processes go first).
struct ChildReport {
    sections: Vec<(u128, u128, Duration)>,
    counters: Option<[u64; 3]>,
    errors: usize,
    first_error: Option<String>,
}

/// One run of one client.
#[derive(Debug)]
struct RunFigures {
    ratio: f64,
    total: Duration,
    critical: Duration,
    longest_wait: Duration,
    exclusive: bool,
    errors: usize,
    first_error: Option<String>,
    /// Per lock, over every process: failed attempts, wake-ups, yields.
    per_lock: Option<[f64; 3]>,
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Every run of every client compared.
#[derive(Debug)]
pub struct Cross {
    runs: usize,
    /// Processes contending in each run.
    processes: usize,
    /// `--only` names, in the order of `per_client`.
    clients: Vec<&'static str>,
    /// Per client, one entry per run, in run order.
    per_client: Vec<Vec<RunFigures>>,
}

impl Cross {
    fn runs_of(&self, client: &str) -> Option<&[RunFigures]> {
        let i = self.clients.iter().position(|c| *c == client)?;
        Some(&self.per_client[i])
    }

    /// `client`'s total / time in critical sections, per run without
    /// errors: median and range.
    pub fn total_over_critical(&self, client: &str) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs_of(client)?
            .iter()
            .filter(|f| f.errors == 0)
            .map(|f| f.ratio)
            .collect();
        Spread::of(&v)
    }

    /// `client`'s longest single wait for the lock, in milliseconds, per
    /// run without errors: median and range.
    pub fn longest_wait_ms(&self, client: &str) -> Option<Spread> {
        let v: Vec<f64> = self
            .runs_of(client)?
            .iter()
            .filter(|f| f.errors == 0)
            .map(|f| f.longest_wait.as_secs_f64() * 1e3)
            .collect();
        Spread::of(&v)
    }

    /// Per run, `a`'s total / critical over `b`'s (runs where both had
    /// no error).
    pub fn ratio(&self, a: &str, b: &str) -> Option<Spread> {
        let (a, b) = (self.runs_of(a)?, self.runs_of(b)?);
        let v: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(x, y)| x.errors == 0 && y.errors == 0)
            .map(|(x, y)| x.ratio / y.ratio)
            .collect();
        Spread::of(&v)
    }

    /// Runs of `client` in which no two critical sections overlapped, and
    /// its runs.
    pub fn exclusive(&self, client: &str) -> (usize, usize) {
        self.runs_of(client).map_or((0, 0), |r| {
            (r.iter().filter(|f| f.exclusive).count(), r.len())
        })
    }

    /// The markdown table of every run and a summary per client.
    pub fn render(&self) -> String {
        render(self.runs, self.processes, &self.clients, &self.per_client)
    }
}

/// The parent, on its own (`--cross-process R`): starts the servers, runs
/// `runs` runs of every client with `processes` processes each, and
/// returns a markdown table.
pub fn cross_process(runs: usize, processes: usize) -> Result<String, String> {
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let log = |what: &str| eprintln!("quorum-bench: [{what}]");
    let cross = measure(&urls, runs, processes, &CLIENTS, &log)?;
    drop(servers);
    Ok(cross.render())
}

/// `runs` runs of each of `clients` (names from [`CLIENTS`]), `processes`
/// processes each, on the servers at `urls`, taking turns in an order that
/// changes run by run.
pub fn measure(
    urls: &[String],
    runs: usize,
    processes: usize,
    clients: &[&'static str],
    log: &dyn Fn(&str),
) -> Result<Cross, String> {
    let mut per_client: Vec<Vec<RunFigures>> = clients.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        for c in crate::paired::order(run, clients.len()) {
            log(&format!(
                "cross-process, {processes} processes, one key, {}, run {}/{runs}",
                clients[c],
                run + 1
            ));
            let key = format!("qbench:cross:{}:r{run}", clients[c]);
            per_client[c].push(one_run(clients[c], urls, &key, processes)?);
        }
    }
    Ok(Cross {
        runs,
        processes,
        clients: clients.to_vec(),
        per_client,
    })
}

/// K children of one client on `key`, started together.
fn one_run(
    client: &str,
    urls: &[String],
    key: &str,
    processes: usize,
) -> Result<RunFigures, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut children: Vec<Child> = Vec::with_capacity(processes);
    for _ in 0..processes {
        let child = Command::new(&exe)
            .args(["--cross-process-child", client, key, &urls.join(",")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start a child: {e}"));
        match child {
            Ok(child) => children.push(child),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
    }
    let outcome = drive(&mut children);
    kill_all(&mut children);
    let (start, reports) = outcome?;
    Ok(figures(start, &reports, processes))
}

/// Waits for every child to be ready, starts them together, and reads
/// their reports. Returns the common start (wall ns) and the reports.
fn drive(children: &mut [Child]) -> Result<(u128, Vec<ChildReport>), String> {
    let mut readers = Vec::with_capacity(children.len());
    for child in children.iter_mut() {
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut reader = BufReader::new(out);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .map_err(|e| format!("child: {e}"))?;
        if line.trim() != "ready" {
            return Err(format!("child did not get ready: {line:?}"));
        }
        readers.push(reader);
    }
    let start = wall_ns();
    for child in children.iter_mut() {
        let stdin = child.stdin.as_mut().ok_or("no stdin")?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("child: {e}"))?;
    }
    let mut reports = Vec::with_capacity(readers.len());
    for reader in readers {
        let mut report = ChildReport {
            sections: Vec::new(),
            counters: None,
            errors: 0,
            first_error: None,
        };
        for line in reader.lines().take(SECTIONS * 4 + 8) {
            let line = line.map_err(|e| format!("child: {e}"))?;
            let mut words = line.split_whitespace();
            match words.next() {
                Some("cs") => {
                    let mut n = || words.next().and_then(|w| w.parse::<u128>().ok());
                    let (Some(a), Some(b), Some(w)) = (n(), n(), n()) else {
                        return Err(format!("bad child line {line:?}"));
                    };
                    let wait = Duration::from_nanos(u64::try_from(w).unwrap_or(u64::MAX));
                    report.sections.push((a, b, wait));
                }
                Some("error") => {
                    report.errors += 1;
                    let text: Vec<&str> = words.collect();
                    report.first_error.get_or_insert(text.join(" "));
                }
                Some("counters") => {
                    let v: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                    report.counters = v.try_into().ok();
                }
                Some("done") => break,
                _ => return Err(format!("bad child line {line:?}")),
            }
        }
        reports.push(report);
    }
    Ok((start, reports))
}

fn kill_all(children: &mut [Child]) {
    for child in children.iter_mut() {
        // Our own children, by their handles; most have exited already.
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn figures(start: u128, reports: &[ChildReport], processes: usize) -> RunFigures {
    let mut all: Vec<(u128, u128, Duration)> = reports
        .iter()
        .flat_map(|r| r.sections.iter().copied())
        .collect();
    all.sort_by_key(|s| s.0);
    let exclusive = all.windows(2).all(|w| w[1].0 >= w[0].1);
    let end = all.iter().map(|s| s.1).max().unwrap_or(start);
    let nanos = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    let total = nanos(end.saturating_sub(start));
    let critical: Duration = all.iter().map(|s| nanos(s.1.saturating_sub(s.0))).sum();
    let longest_wait = all.iter().map(|s| s.2).max().unwrap_or_default();
    let missing = (processes * SECTIONS).saturating_sub(all.len());
    let per_lock = reports
        .iter()
        .map(|r| r.counters)
        .collect::<Option<Vec<[u64; 3]>>>()
        .map(|all_counters| {
            let locks = (processes * SECTIONS) as f64;
            let sum = |i: usize| all_counters.iter().map(|c| c[i]).sum::<u64>() as f64 / locks;
            [sum(0), sum(1), sum(2)]
        });
    RunFigures {
        per_lock,
        ratio: total.as_secs_f64() / critical.as_secs_f64().max(1e-9),
        total,
        critical,
        longest_wait,
        exclusive,
        errors: reports.iter().map(|r| r.errors).sum::<usize>() + missing,
        first_error: reports.iter().find_map(|r| r.first_error.clone()),
    }
}

fn render(
    runs: usize,
    processes: usize,
    clients: &[&str],
    per_client: &[Vec<RunFigures>],
) -> String {
    let mut out = format!(
        "{processes} processes (each its own client), one key, N=3, {SECTIONS} critical \
         sections of {CRITICAL:?} each per process, default retry policy\n\n\
         | run | client | total | in critical sections | total / critical | longest lock wait | failed attempts / lock | wake-ups / lock | exclusive | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    );
    for run in 0..runs {
        for (c, name) in clients.iter().enumerate() {
            let Some(f) = per_client[c].get(run) else {
                continue;
            };
            out.push_str(&format!(
                "| {} | {name} | {:.0} ms | {:.0} ms | {:.2}x | {:.0} ms | {} | {} | {} | {}{} |\n",
                run + 1,
                f.total.as_secs_f64() * 1e3,
                f.critical.as_secs_f64() * 1e3,
                f.ratio,
                f.longest_wait.as_secs_f64() * 1e3,
                f.per_lock.map_or("-".into(), |p| format!("{:.2}", p[0])),
                f.per_lock.map_or("-".into(), |p| format!("{:.2}", p[1])),
                if f.exclusive { "yes" } else { "NO" },
                f.errors,
                f.first_error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default(),
            ));
        }
    }
    out.push('\n');
    for (c, name) in clients.iter().enumerate() {
        let ratios: Vec<f64> = per_client[c].iter().map(|f| f.ratio).collect();
        let waits: Vec<f64> = per_client[c]
            .iter()
            .map(|f| f.longest_wait.as_secs_f64() * 1e3)
            .collect();
        if let (Some(r), Some(w)) = (Spread::of(&ratios), Spread::of(&waits)) {
            out.push_str(&format!(
                "{name}: total / critical median {:.2}x (min {:.2}x, max {:.2}x); longest lock \
                 wait median {:.0} ms (min {:.0}, max {:.0}) over {runs} runs\n",
                r.median, r.min, r.max, w.median, w.min, w.max
            ));
        }
    }
    out
}

/// One critical section: its start and end (wall ns), and the wait for
/// the lock before it.
type Section = (u128, u128, Duration);

/// The work under the lock: its bounds are taken inside the lock (after
/// `lock` returned, before the release is sent), so two processes'
/// sections overlap only if both held the lock at once.
fn critical(waited: Duration) -> Section {
    let start = wall_ns();
    std::thread::sleep(CRITICAL);
    (start, wall_ns(), waited)
}

/// A child: `args` = client, key, comma-separated URLs. Prints `ready`,
/// waits for `go` on stdin, runs its sections, prints one `cs` line per
/// section (start ns, end ns, wait ns), `error` lines, then `done`.
pub fn child(args: &[String]) -> Result<(), String> {
    let [client, key, urls] = args else {
        return Err("usage: --cross-process-child CLIENT KEY URL,URL,URL".into());
    };
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let deadline = Instant::now() + CHILD_BUDGET;
    // Its own key: the children warm up at the same time.
    let connect = format!("qbench:cross:connect:{}", std::process::id());
    let mut section: Box<dyn FnMut() -> Result<Section, String>> = match client.as_str() {
        "ours" => {
            let locks = LockManager::builder()
                .redis_nodes(&urls)
                .and_then(|b| b.restart_quarantine(false).build())
                .map_err(|e| format!("quorum-lock: {e}"))?;
            // Connect every node before the start.
            drop(locks.try_lock(&connect).map_err(|e| e.to_string())?);
            let key = key.clone();
            let mut done = 0;
            Box::new(move || {
                done += 1;
                if done == SECTIONS {
                    // What the waits did, for the report (before the last
                    // section: the counters cover the 24 waits before it).
                    let c = locks.health().locks;
                    let line = format!("counters {} {} {}", c.contended, c.woken, c.yielded);
                    let _ = writeln!(std::io::stdout().lock(), "{line}");
                }
                let asked = Instant::now();
                loop {
                    match locks.lock(&key) {
                        Ok(guard) => {
                            let section = critical(asked.elapsed());
                            let _ = guard.release();
                            return Ok(section);
                        }
                        Err(_) if Instant::now() < deadline => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
            })
        }
        "rslock" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("tokio: {e}"))?;
            // The defaults: 3 attempts, a random delay in [0, 200 ms).
            let lm = rslock::LockManager::new(urls.clone());
            let ttl = Duration::from_secs(10);
            if let Ok(lock) = rt.block_on(lm.lock(connect.as_bytes(), ttl)) {
                rt.block_on(lm.unlock(&lock));
            }
            let key = key.clone().into_bytes();
            Box::new(move || {
                let asked = Instant::now();
                loop {
                    match rt.block_on(lm.lock(&key, ttl)) {
                        Ok(lock) => {
                            let section = critical(asked.elapsed());
                            rt.block_on(lm.unlock(&lock));
                            return Ok(section);
                        }
                        Err(_) if Instant::now() < deadline => {}
                        Err(e) => return Err(format!("rslock: {e}")),
                    }
                }
            })
        }
        other => return Err(format!("unknown client {other:?}")),
    };
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: String| {
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    say(&mut out, "ready".into()).map_err(|e| e.to_string())?;
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .map_err(|e| e.to_string())?;
    for _ in 0..SECTIONS {
        let line = match section() {
            Ok((start, end, waited)) => format!("cs {start} {end} {}", waited.as_nanos()),
            Err(e) => format!("error {}", e.replace('\n', " ")),
        };
        say(&mut out, line).map_err(|e| e.to_string())?;
    }
    say(&mut out, "done".into()).map_err(|e| e.to_string())
}
