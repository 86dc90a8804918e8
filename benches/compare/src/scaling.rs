//! Scaling: lock + release throughput on distinct keys at 1 to 128
//! threads, and the CPU time each block cost this process and the servers
//! (`cpu.rs`); the threads quorum-lock runs while 128 callers use it (with
//! and without auto-extension); memory per held lock.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, LockOptions};

use crate::callers_read::CallersRead;
use crate::clients::{Client, Service, Settings};
use crate::cpu::{CpuMeter, CpuUse};
use crate::floor::FloorService;
use crate::ours::{self, OursService};
use crate::peers::{self, RedlockService, RedsyncService};
use crate::plan::Plan;
use crate::procfs;
use crate::scenarios::{self, CALLER, Load};
use crate::shared_reader::SharedReader;
use crate::stats::{Spread, Throughput};

/// The clients of the scaling runs. redlock and redsync open new
/// connections for every call: they run at up to 8 threads only.
pub const CLIENTS: [Client; 8] = [
    Client::Floor,
    Client::Ours,
    Client::OursDrop,
    Client::Rslock,
    Client::Redlock,
    Client::Redsync,
    Client::SharedReader,
    Client::CallersRead,
];

/// One (N, threads, client) cell, one entry per run.
#[derive(Debug, Clone)]
pub struct Cell {
    pub n: usize,
    pub threads: usize,
    pub client: Client,
    pub runs: Vec<Result<Throughput, String>>,
}

impl Cell {
    /// The per-run rates (a failed run or one with errors gives none).
    pub fn rates(&self) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| match r {
                Ok(t) if t.ops > 0 && t.errors == 0 => Some(t.ops_per_sec()),
                _ => None,
            })
            .collect()
    }

    pub fn rate(&self) -> Option<Spread> {
        Spread::of_runs(self.rates())
    }

    /// Per run, `f` of the block per completed lock + release (none for a
    /// failed run, one with errors, or one whose figure could not be read).
    pub fn per_op(&self, f: Figure) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| match r {
                Ok(t) if t.ops > 0 && t.errors == 0 => Some(f(t.cpu.as_ref()?)? / t.ops as f64),
                _ => None,
            })
            .collect()
    }

    /// [`per_op`](Self::per_op) over the runs: median and range.
    pub fn spread(&self, f: Figure) -> Option<Spread> {
        Spread::of_runs(self.per_op(f))
    }

    /// Per run, how many CPUs this process and the servers kept busy
    /// during the block, on average: their CPU time over its wall time.
    /// A rate is this over the CPU per lock ([`all_cpu`] per op), so a
    /// ratio of two rates splits into these two ratios: CPUs kept busy
    /// and CPU per lock.
    pub fn busy_cpus(&self) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| match r {
                Ok(t) if t.ops > 0 && t.errors == 0 && !t.wall.is_zero() => {
                    Some(all_cpu(t.cpu.as_ref()?)? / 1e6 / t.wall.as_secs_f64())
                }
                _ => None,
            })
            .collect()
    }

    /// Whether a server's thread count changed during any run's block.
    pub fn server_threads_changed(&self) -> bool {
        self.runs.iter().any(|r| {
            r.as_ref()
                .is_ok_and(|t| t.cpu.is_some_and(|c| c.server_threads_changed))
        })
    }
}

/// What [`Cell::per_op`] reads of a block's [`CpuUse`].
pub type Figure = fn(&CpuUse) -> Option<f64>;

/// This process's CPU (user + system, every thread), in microseconds.
pub fn process_cpu(c: &CpuUse) -> Option<f64> {
    Some(c.process().as_secs_f64() * 1e6)
}

/// The servers' CPU, in microseconds.
pub fn servers_cpu(c: &CpuUse) -> Option<f64> {
    Some(c.servers?.as_secs_f64() * 1e6)
}

/// This process's and the servers' CPU together, in microseconds.
pub fn all_cpu(c: &CpuUse) -> Option<f64> {
    Some(process_cpu(c)? + servers_cpu(c)?)
}

/// This process's context switches (every thread).
pub fn process_switches(c: &CpuUse) -> Option<f64> {
    Some(c.switches as f64)
}

/// The servers' context switches (every thread of each).
pub fn servers_switches(c: &CpuUse) -> Option<f64> {
    Some(c.server_switches? as f64)
}

/// Every cell, and the census of quorum-lock's threads per (N, threads).
#[derive(Debug, Clone, Default)]
pub struct Scaling {
    pub cells: Vec<Cell>,
    /// The process's threads other than the callers and the main thread,
    /// by name, while quorum-lock (`release()`) ran with that many callers.
    pub census: BTreeMap<(usize, usize), BTreeMap<String, usize>>,
}

impl Scaling {
    pub fn cell(&self, n: usize, threads: usize, client: Client) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.n == n && c.threads == threads && c.client == client)
    }

    /// Per run, `a`'s rate / `b`'s rate (same N and thread count).
    pub fn ratio(&self, n: usize, threads: usize, a: Client, b: Client) -> Option<Spread> {
        self.ratio_of(n, threads, a, b, Cell::rates)
    }

    /// Per run, `a`'s `figure` / `b`'s (same N and thread count; the runs
    /// of a cell are in run order, every run measures every client).
    pub fn ratio_of(
        &self,
        n: usize,
        threads: usize,
        a: Client,
        b: Client,
        figure: impl Fn(&Cell) -> Vec<Option<f64>>,
    ) -> Option<Spread> {
        let (a, b) = (self.cell(n, threads, a)?, self.cell(n, threads, b)?);
        let v: Vec<f64> = figure(a)
            .into_iter()
            .zip(figure(b))
            .filter_map(|(x, y)| Some(x? / y?))
            .collect();
        Spread::of(&v)
    }
}

/// The main thread's name (the process's).
fn main_thread_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Threads that are neither callers nor the main thread.
fn library_threads() -> BTreeMap<String, usize> {
    let main = main_thread_name();
    let mut names = procfs::threads_by_name();
    names.remove(CALLER);
    if let Some(count) = names.get_mut(&main) {
        *count -= 1;
        if *count == 0 {
            names.remove(&main);
        }
    }
    names
}

/// Runs every cell: per run, per N, per thread count, the clients in an
/// order that changes (`paired::order`), so the clients of one cell are measured back to
/// back. `pids[i]` is the server at `urls[i]`: each block's CPU time is
/// read for this process and for the N servers the cell uses.
pub fn measure(urls: &[String], pids: &[u32], plan: &Plan, log: &dyn Fn(&str)) -> Scaling {
    let mut out = Scaling::default();
    let clients: Vec<Client> = CLIENTS.into_iter().filter(|c| plan.has(*c)).collect();
    for run in 0..plan.runs {
        for &n in &[3usize, 5] {
            for &threads in &plan.scaling.threads {
                let here: Vec<Client> = clients
                    .iter()
                    .copied()
                    .filter(|c| !c.connects_per_call() || threads <= 8)
                    .collect();
                for i in crate::paired::order(run, here.len()) {
                    let client = here[i];
                    log(&format!(
                        "scaling N={n}, {threads} threads, {client}, run {}/{}",
                        run + 1,
                        plan.runs
                    ));
                    let mut census = None;
                    let meter = CpuMeter::new(&pids[..n]);
                    let result = one(client, &urls[..n], threads, plan, run, &mut census, &meter);
                    if let Some(c) = census {
                        out.census.entry((n, threads)).or_insert(c);
                    }
                    match out
                        .cells
                        .iter_mut()
                        .find(|c| c.n == n && c.threads == threads && c.client == client)
                    {
                        Some(cell) => cell.runs.push(result),
                        None => out.cells.push(Cell {
                            n,
                            threads,
                            client,
                            runs: vec![result],
                        }),
                    }
                }
            }
        }
    }
    out
}

fn one(
    client: Client,
    urls: &[String],
    threads: usize,
    plan: &Plan,
    run: usize,
    census: &mut Option<BTreeMap<String, usize>>,
    meter: &CpuMeter,
) -> Result<Throughput, String> {
    let settings = &plan.settings;
    let total = if client.connects_per_call() {
        plan.scaling.ops / 4
    } else {
        plan.scaling.ops
    };
    let load = Load {
        threads,
        ops: (total / threads).max(plan.scaling.min_ops_per_thread),
        warmup: if client.connects_per_call() { 2 } else { 5 },
        budget: plan.scaling.budget,
    };
    let prefix = format!(
        "qbench:{}:scale:n{}:t{threads}:r{run}",
        client.key(),
        urls.len()
    );
    let mut none = || {};
    let run_with = |service: &dyn Service, census: &mut dyn FnMut()| {
        scenarios::threads(service, &load, &prefix, census, meter)
    };
    Ok(match client {
        Client::Floor => run_with(&FloorService { urls, settings }, &mut none),
        Client::SharedReader => run_with(&SharedReader::connect(urls, settings)?, &mut none),
        Client::CallersRead => run_with(&CallersRead::connect(urls, settings)?, &mut none),
        Client::Ours | Client::OursDrop => {
            let service = OursService {
                locks: ours::manager(urls, settings)?,
                settings: settings.clone(),
                drop_guard: client == Client::OursDrop,
            };
            let mut take = || {
                if client == Client::Ours {
                    *census = Some(library_threads());
                }
            };
            run_with(&service, &mut take)
        }
        Client::Redlock => run_with(&RedlockService::new(urls, settings), &mut none),
        Client::Redsync => run_with(&RedsyncService::new(urls, settings)?, &mut none),
        Client::Rslock => peers::rslock_threads(urls, settings, &load, &prefix, meter)?,
        Client::Backend => return Err("not measured".into()),
    })
}

/// Threads of quorum-lock while `callers` threads each hold one
/// auto-extended lock (N=3); the guards are held by the main thread after
/// the callers are gone, so every thread counted is the library's.
pub fn auto_extend_census(
    urls: &[String],
    settings: &Settings,
    callers: usize,
) -> Result<BTreeMap<String, usize>, String> {
    let locks = ours::manager(urls, settings)?;
    let options = LockOptions::new().auto_extend(true);
    let guards: Vec<LockGuard> = thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|t| {
                let (locks, options) = (&locks, &options);
                thread::Builder::new()
                    .name(CALLER.into())
                    .spawn_scoped(s, move || {
                        locks
                            .lock_with(format!("qbench:census:{t}"), options)
                            .map_err(|e| e.to_string())
                    })
                    .map_err(|e| e.to_string())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.and_then(|h| h.join().map_err(|_| "a thread panicked".to_string())?))
            .collect::<Result<_, _>>()
    })?;
    let census = library_threads();
    drop(guards);
    locks.flush(Duration::from_secs(10));
    Ok(census)
}

/// Memory per held lock: the process's resident memory before and after
/// acquiring `count` locks on distinct keys (8 threads acquire, the main
/// thread then holds every guard), on real redis-servers (so the figure is
/// the client's side only). Returns bytes per lock and how many were held.
pub fn memory_per_lock(
    urls: &[String],
    settings: &Settings,
    count: usize,
    budget: Duration,
) -> Result<(f64, usize), String> {
    const ACQUIRERS: usize = 8;
    // Long enough that no lock expires while the others are taken (and
    // within the default max_ttl).
    let settings = Settings {
        ttl: Duration::from_secs(50),
        ..settings.clone()
    };
    let locks = ours::manager(urls, &settings)?;
    for i in 0..20 {
        let _ = locks.try_lock(format!("qbench:mem:warm:{i}"));
    }
    locks.flush(Duration::from_secs(5));
    let before = procfs::rss_bytes().ok_or("cannot read VmRSS")?;
    let deadline = Instant::now() + budget;
    let per = count.div_ceil(ACQUIRERS);
    let parts: Vec<Vec<LockGuard>> = thread::scope(|s| {
        let handles: Vec<_> = (0..ACQUIRERS)
            .map(|t| {
                let locks = &locks;
                s.spawn(move || {
                    let mut held = Vec::with_capacity(per);
                    for i in (t * per)..((t + 1) * per).min(count) {
                        if Instant::now() >= deadline {
                            break;
                        }
                        if let Ok(g) = locks.try_lock(format!("qbench:mem:{count}:{i}")) {
                            held.push(g);
                        }
                    }
                    held
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let held: usize = parts.iter().map(Vec::len).sum();
    let after = procfs::rss_bytes().ok_or("cannot read VmRSS")?;
    drop(parts);
    locks.flush(Duration::from_secs(60));
    if held == 0 {
        return Err("no lock acquired".into());
    }
    Ok((after.saturating_sub(before) as f64 / held as f64, held))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ops: usize, wall_ms: u64, process_ms: u64, servers_ms: u64) -> Throughput {
        Throughput {
            ops,
            errors: 0,
            first_error: None,
            wall: Duration::from_millis(wall_ms),
            counter: None,
            cpu: Some(CpuUse {
                user: Duration::from_millis(process_ms / 2),
                system: Duration::from_millis(process_ms - process_ms / 2),
                excluded: Duration::ZERO,
                switches: 0,
                servers: Some(Duration::from_millis(servers_ms)),
                server_switches: None,
                server_threads_changed: false,
            }),
        }
    }

    #[test]
    fn a_rate_is_the_cpus_kept_busy_over_the_cpu_per_lock() {
        let cell = |runs| Cell {
            n: 3,
            threads: 8,
            client: Client::Ours,
            runs,
        };
        // 20,000 locks in 1 s, 800 ms here and 700 ms in the servers.
        let ours = cell(vec![
            Ok(block(20_000, 1_000, 800, 700)),
            Err("a failed run".into()),
        ]);
        let busy = ours.busy_cpus();
        assert!((busy[0].unwrap() - 1.5).abs() < 1e-9, "{busy:?}");
        assert_eq!(busy[1], None);
        let per_lock = ours.per_op(all_cpu)[0].unwrap();
        assert!((per_lock - 75.0).abs() < 1e-9, "{per_lock}");
        let rate = ours.rates()[0].unwrap();
        assert!((rate - busy[0].unwrap() * 1e6 / per_lock).abs() < 1e-6);
        // A block with errors, or no servers' figure, gives none.
        let mut failed = block(10, 1_000, 1, 1);
        failed.errors = 1;
        let mut unread = block(10, 1_000, 1, 1);
        unread.cpu.as_mut().unwrap().servers = None;
        assert_eq!(cell(vec![Ok(failed), Ok(unread)]).busy_cpus(), [None, None]);
    }
}
