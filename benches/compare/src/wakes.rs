//! `--wakes`: what one lock costs in counts that the machine's noise
//! barely moves (issue 46): context switches (thread hand-offs) and
//! allocations per lock, for quorum-lock (lock + `release()`, lock +
//! drop), its `RedisBackend` called directly (no engine), the floor (raw
//! commands on plain connections) and rslock.
//!
//! - 1 thread at N=1 and N=3: every client, one block each per run, in an
//!   order that changes run by run (`paired::order`), each client warmed
//!   (connections open, scripts loaded) just before its block.
//! - 8 threads on distinct keys at N=3: the floor (each thread its own
//!   connections), quorum-lock (one shared manager), both endings, and
//!   two design floors with the engine's rules: the shared reader
//!   (`shared_reader.rs`: one thread reads every node) and callers read
//!   (`callers_read.rs`: no reader thread, each batch read by a caller).
//!
//! Context switches are those of every thread of the process (each
//! caller's own, read by the caller at its end, plus the delta of the
//! threads that live through the block: the node threads, a runtime's
//! workers; the table shows these apart, as the client's own threads, so
//! that a node-thread hop on the hot path shows). Allocations are the
//! counting allocator's (`alloc_count.rs`), every thread. A dropped
//! guard's release is part of the block (flushed before the block's
//! end). What the servers received is counted per command, from their
//! `INFO commandstats` before and after each block (`commandstats.rs`).
//! futex calls per lock need the kernel's tracepoints: a full run counts
//! them under `perf stat` (`futex.rs`), and a block run alone prints its
//! calls ([`CALLS_LINE`]) to divide by. `--wakes R N:THREADS:CLIENT` runs one block
//! alone (say `3:8:ours`), so that a profiler or `perf` counts nothing
//! else but the servers' start; a block alone at N=3 may have another
//! count of threads (2 to 128, say `3:32:ours`), which the default run
//! does not count.

use std::fmt::Write as _;
use std::fs;
use std::time::{Duration, Instant};

use quorum_lock::LockManager;
use testkit::RedisServer;

use crate::alloc_count::Allocs;
use crate::callers_read::CallersRead;
use crate::clients::{Client, Locker, Settings};
use crate::commandstats::CommandStats;
use crate::floor::Floor;
use crate::ours::{self, Direct, Ours};
use crate::paired::order;
use crate::peers::RslockSingle;
use crate::procfs::Counters;
use crate::shared_reader::SharedReader;
use crate::stats::Spread;

/// Locks per caller thread in one block.
const OPS_PER_THREAD: usize = 2_000;
/// Locks per thread before each block (connections, scripts, caches).
const WARMUP: usize = 50;
/// Keys each thread cycles through.
const KEYS_PER_THREAD: usize = 64;
/// The longest one block may take.
const BLOCK_BUDGET: Duration = Duration::from_secs(60);
/// How long a block's queued releases may take to finish.
const FLUSH: Duration = Duration::from_secs(10);

/// The clients of a row, always the same set (a run in which one cannot
/// be set up fails instead of publishing a table without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Floor,
    Backend,
    Ours,
    OursDrop,
    Rslock,
    SharedReader,
    CallersRead,
}

impl Who {
    const ONE_THREAD: [Who; 5] = [
        Who::Floor,
        Who::Backend,
        Who::Ours,
        Who::OursDrop,
        Who::Rslock,
    ];
    const THREADS: [Who; 5] = [
        Who::Floor,
        Who::Ours,
        Who::OursDrop,
        Who::SharedReader,
        Who::CallersRead,
    ];

    /// The client it is, by `--only`'s name ([`Client::key`]).
    fn client(self) -> Client {
        match self {
            Who::Floor => Client::Floor,
            Who::Backend => Client::Backend,
            Who::Ours => Client::Ours,
            Who::OursDrop => Client::OursDrop,
            Who::Rslock => Client::Rslock,
            Who::SharedReader => Client::SharedReader,
            Who::CallersRead => Client::CallersRead,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Who::Floor => "floor",
            Who::Backend => "RedisBackend direct",
            Who::Ours => "quorum-lock",
            Who::OursDrop => "quorum-lock",
            Who::Rslock => "rslock 0.10",
            Who::SharedReader => "shared reader (design floor)",
            Who::CallersRead => "callers read (design floor)",
        }
    }

    fn ending(self) -> &'static str {
        match self {
            Who::OursDrop => "drop",
            Who::Ours => "`release()`",
            _ => "release",
        }
    }
}

/// One block's counts.
#[derive(Debug, Clone)]
struct Block {
    locks: usize,
    voluntary: u64,
    involuntary: u64,
    /// Of the switches, the caller threads' own (each read by the caller
    /// at its end); the rest are the client's own threads' (quorum-lock's
    /// node threads, a runtime's workers) and the main thread's few.
    callers: u64,
    allocs: Allocs,
    took: Duration,
    /// What the block's servers received (`INFO commandstats`, read
    /// before and after the timed part, the warm-up left out).
    servers: CommandStats,
}

impl Block {
    fn per(&self, n: u64) -> f64 {
        n as f64 / self.locks.max(1) as f64
    }

    fn switches(&self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// The switches of the threads other than the callers.
    fn own_threads(&self) -> u64 {
        self.switches().saturating_sub(self.callers)
    }
}

/// A row of the summary: (N, threads, client).
type Cell = (usize, usize, Who);

/// What the runs counted: per row, one block per run.
#[derive(Debug)]
pub struct Wakes {
    cells: Vec<(Cell, Vec<Block>)>,
    runs: usize,
}

/// Runs `runs` runs and returns the markdown tables.
pub fn wakes(runs: usize) -> Result<String, String> {
    run(runs, None).map(|w| w.render())
}

/// The section of a full run: every block, `runs` times (on servers of
/// its own, so that the other sections' keys and connections are not in
/// its counts).
pub fn measure(runs: usize) -> Result<Wakes, String> {
    run(runs, None)
}

/// Runs only the block `spec` names (`N:THREADS:CLIENT`, the client as
/// `--only` names it), `runs` times.
pub fn one_block(runs: usize, spec: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "--wakes block {spec:?}: expected N:THREADS:CLIENT, one of 1:1 or 3:1 with \
             floor, backend, ours, ours-drop or rslock, or 3:T (T from 2 to 128) with floor, \
             ours, ours-drop, shared-reader or callers-read"
        )
    };
    let mut parts = spec.split(':');
    let (Some(n), Some(threads), Some(client), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let Some(who) = Who::ONE_THREAD
        .into_iter()
        .chain(Who::THREADS)
        .find(|w| w.client().key() == client)
    else {
        return Err(bad());
    };
    let block = match (n, threads) {
        ("1", "1") => (1, 1, who),
        ("3", "1") => (3, 1, who),
        ("3", t) if Who::THREADS.contains(&who) => match t.parse() {
            Ok(t @ 2..=MAX_THREADS) => (3, t, who),
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    run(runs, Some(block)).map(|w| {
        // Whatever counts the whole process (`perf stat`) divides by this.
        format!("{}\n{CALLS_LINE}{}\n", w.render(), w.calls_with_warmup())
    })
}

/// The line of a block run alone that gives its lock + release calls,
/// the warm-up included (`futex.rs` reads it).
pub const CALLS_LINE: &str = "lock + release calls in this process, the warm-up included: ";

/// The most caller threads a block run alone may have.
const MAX_THREADS: usize = 128;

/// The runs, of every block or only of `only`.
fn run(runs: usize, only: Option<Cell>) -> Result<Wakes, String> {
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let settings = Settings {
        ttl: Duration::from_secs(10),
        node_timeout: Duration::from_secs(1),
        retry_pause: Duration::from_millis(4),
        reader_in_flight: 1,
    };
    let mut cells: Vec<(Cell, Vec<Block>)> = Vec::new();
    let mut record = |cell: Cell, b: Block| match cells.iter_mut().find(|(c, _)| *c == cell) {
        Some((_, v)) => v.push(b),
        None => cells.push((cell, vec![b])),
    };
    for n in [1usize, 3] {
        if only.is_some_and(|(want, _, _)| want != n) {
            continue;
        }
        let locks = ours::manager(&urls[..n], &settings)?;
        // The design floors share their connections among the block's
        // callers: one of each per N.
        let shared = SharedReader::connect(&urls[..n], &settings)?;
        let callers_read = CallersRead::connect(&urls[..n], &settings)?;
        let floors = (&shared, &callers_read);
        let mut lockers = Vec::new();
        for who in Who::ONE_THREAD {
            lockers.push((who, vec![make(who, &urls[..n], &settings, &locks, floors)?]));
        }
        // 8 callers each, or as many as a block run alone asks for.
        let callers = match only {
            Some((3, t, _)) if t > 1 => t,
            _ => 8,
        };
        let mut threaded = Vec::new();
        if n == 3 {
            for who in Who::THREADS {
                let mut v = Vec::new();
                for _ in 0..callers {
                    v.push(make(who, &urls[..n], &settings, &locks, floors)?);
                }
                threaded.push((who, v));
            }
        }
        for run in 0..runs.max(1) {
            for set in [&mut lockers, &mut threaded] {
                let k = set.len();
                for i in order(run, k) {
                    let (who, threads) = &mut set[i];
                    if only.is_some_and(|cell| cell != (n, threads.len(), *who)) {
                        continue;
                    }
                    eprintln!(
                        "quorum-bench: [wakes N={n}, {} thread(s), {} {}, run {}/{runs}]",
                        threads.len(),
                        who.name(),
                        who.ending(),
                        run + 1
                    );
                    let b = block(*who, &urls[..n], threads, &locks)?;
                    record((n, threads.len(), *who), b);
                }
            }
        }
        drop(lockers);
        drop(threaded);
        drop(locks);
    }
    drop(servers);
    Ok(Wakes { cells, runs })
}

fn make<'a>(
    who: Who,
    urls: &[String],
    settings: &'a Settings,
    locks: &'a LockManager,
    (shared, callers_read): (&SharedReader, &CallersRead),
) -> Result<Box<dyn Locker + Send + 'a>, String> {
    Ok(match who {
        Who::Floor => Box::new(Floor::connect(urls, settings)?),
        Who::Backend => Box::new(Direct::open(urls, settings)?),
        Who::Ours | Who::OursDrop => Box::new(Ours {
            locks,
            settings,
            drop_guard: who == Who::OursDrop,
        }),
        Who::Rslock => Box::new(RslockSingle::new(urls, settings)?),
        Who::SharedReader => Box::new(shared.locker()),
        Who::CallersRead => Box::new(callers_read.locker()?),
    })
}

/// One block: each locker on a thread of its own; warmed first (untimed,
/// uncounted), then all start together.
fn block(
    who: Who,
    urls: &[String],
    lockers: &mut [Box<dyn Locker + Send + '_>],
    locks: &LockManager,
) -> Result<Block, String> {
    let n = urls.len();
    let keys: Vec<Vec<Vec<u8>>> = (0..lockers.len())
        .map(|t| {
            (0..KEYS_PER_THREAD)
                .map(|i| format!("qbench:wakes:n{n}:{who:?}:{t}:{i}").into_bytes())
                .collect()
        })
        .collect();
    for (locker, keys) in lockers.iter_mut().zip(&keys) {
        for i in 0..WARMUP {
            locker
                .lock_release(&keys[i % KEYS_PER_THREAD])
                .map_err(|e| format!("{} warm-up: {e}", who.name()))?;
        }
    }
    locks.flush(FLUSH);
    let served_before = CommandStats::read(urls)?;
    let gate = std::sync::Barrier::new(lockers.len() + 1);
    let deadline = Instant::now() + BLOCK_BUDGET;
    let mut start = None;
    let callers: Vec<(usize, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = lockers
            .iter_mut()
            .zip(&keys)
            .map(|(locker, keys)| {
                let gate = &gate;
                s.spawn(move || {
                    gate.wait();
                    let mut done = 0;
                    for i in 0..OPS_PER_THREAD {
                        if Instant::now() >= deadline {
                            break;
                        }
                        if locker.lock_release(&keys[i % KEYS_PER_THREAD]).is_ok() {
                            done += 1;
                        }
                    }
                    let (v, n) = own_switches();
                    (done, v, n)
                })
            })
            .collect();
        // Read once every caller exists and before any starts.
        start = Some((Counters::now(), Allocs::now(), Instant::now()));
        gate.wait();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    // The dropped guards' releases are part of the cost.
    locks.flush(FLUSH);
    let allocs_after = Allocs::now();
    let (Some((Some(before), allocs_before, started)), Some(after)) = (start, Counters::now())
    else {
        return Err("cannot read /proc/self".into());
    };
    let allocs = allocs_before.since(allocs_after);
    let took = started.elapsed();
    let servers = CommandStats::read(urls)?.since(&served_before);
    Ok(Block {
        locks: callers.iter().map(|c| c.0).sum(),
        voluntary: after.voluntary.saturating_sub(before.voluntary)
            + callers.iter().map(|c| c.1).sum::<u64>(),
        involuntary: after.involuntary.saturating_sub(before.involuntary)
            + callers.iter().map(|c| c.2).sum::<u64>(),
        callers: callers.iter().map(|c| c.1 + c.2).sum(),
        allocs,
        took,
        servers,
    })
}

impl Wakes {
    /// The blocks of one row, one per run.
    fn blocks(&self, cell: Cell) -> Option<&[Block]> {
        self.cells
            .iter()
            .find(|(c, _)| *c == cell)
            .map(|(_, b)| b.as_slice())
    }

    /// Per run, quorum-lock's (`release()`) `count` per lock over
    /// `other`'s, in the row of `n` nodes and `threads` threads.
    fn ratio(
        &self,
        n: usize,
        threads: usize,
        other: Who,
        count: impl Fn(&Block) -> u64,
    ) -> Option<Spread> {
        let ours = self.blocks((n, threads, Who::Ours))?;
        let theirs = self.blocks((n, threads, other))?;
        let r: Vec<f64> = ours
            .iter()
            .zip(theirs)
            .map(|(o, t)| o.per(count(o)) / t.per(count(t)))
            .collect();
        Spread::of(&r)
    }

    /// Context switches (voluntary and involuntary) per lock +
    /// `release()`, 8 threads on distinct keys, N=3: quorum-lock's over
    /// the floor's, per run.
    pub fn switches_vs_floor(&self) -> Option<Spread> {
        self.ratio(3, 8, Who::Floor, Block::switches)
    }

    /// The same, voluntary switches only (a thread that waited): the
    /// involuntary ones are threads preempted, mostly quorum-lock's reader
    /// by the callers and servers it has just woken (docs/benchmarks.md),
    /// and follow how busy the machine is.
    pub fn voluntary_switches_vs_floor(&self) -> Option<Spread> {
        self.ratio(3, 8, Who::Floor, |b| b.voluntary)
    }

    /// Allocations per lock + `release()`, 1 thread, `n` nodes:
    /// quorum-lock's over its `RedisBackend` called directly, per run.
    pub fn allocations_vs_backend(&self, n: usize) -> Option<Spread> {
        self.ratio(n, 1, Who::Backend, |b| b.allocs.calls)
    }

    /// The median per lock of `count` in a row, for a note.
    pub fn per_lock(&self, n: usize, threads: usize, client: Client, count: Count) -> Option<f64> {
        let who = Who::ONE_THREAD
            .into_iter()
            .chain(Who::THREADS)
            .find(|w| w.client() == client)?;
        let blocks = self.blocks((n, threads, who))?;
        let v: Vec<f64> = blocks
            .iter()
            .map(|b| match count {
                Count::Switches => b.per(b.switches()),
                Count::OwnThreads => b.per(b.own_threads()),
                Count::Allocations => b.per(b.allocs.calls),
            })
            .collect();
        Spread::of(&v).map(|s| s.median)
    }

    /// The summary tables (see [`render`]).
    pub fn render(&self) -> String {
        render(&self.cells, self.runs)
    }

    /// Every block's lock + release calls, its warm-up included: all the
    /// calls the process made.
    fn calls_with_warmup(&self) -> usize {
        self.cells
            .iter()
            .map(|((_, threads, _), blocks)| {
                blocks
                    .iter()
                    .map(|b| b.locks + WARMUP * threads)
                    .sum::<usize>()
            })
            .sum()
    }
}

/// What [`Wakes::per_lock`] reads.
#[derive(Debug, Clone, Copy)]
pub enum Count {
    /// Context switches, every thread of the process.
    Switches,
    /// Context switches of the threads other than the callers (see
    /// [`Block::callers`]).
    OwnThreads,
    Allocations,
}

/// The summary (medians over the runs, min-max) and, per run, the ratio
/// of quorum-lock's allocations to the bare backend's.
fn render(cells: &[(Cell, Vec<Block>)], runs: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Per lock, median over {runs} run(s) (min-max); every thread of the process counted. \
         The client's own threads are those other than the callers: quorum-lock's node \
         threads, a runtime's workers if it has any (rslock's here runs on its caller's \
         thread), and the main thread's few switches.\n"
    );
    let _ = writeln!(
        out,
        "| N | threads | client | ending | context switches: voluntary | involuntary | of both, the client's own threads' | allocations | bytes allocated | locks/s (noisy) |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for ((n, threads, who), blocks) in cells {
        let s = |f: &dyn Fn(&Block) -> f64| {
            Spread::of(&blocks.iter().map(f).collect::<Vec<_>>())
                .map_or_else(|| "-".into(), |s| spread(s, 2))
        };
        let _ = writeln!(
            out,
            "| {n} | {threads} | {} | {} | {} | {} | {} | {} | {} | {} |",
            who.name(),
            who.ending(),
            s(&|b| b.per(b.voluntary)),
            s(&|b| b.per(b.involuntary)),
            s(&|b| b.per(b.own_threads())),
            s(&|b| b.per(b.allocs.calls)),
            Spread::of(
                &blocks
                    .iter()
                    .map(|b| b.per(b.allocs.bytes))
                    .collect::<Vec<_>>()
            )
            .map_or_else(|| "-".into(), |s| spread(s, 0)),
            Spread::of(
                &blocks
                    .iter()
                    .map(|b| b.locks as f64 / b.took.as_secs_f64())
                    .collect::<Vec<_>>()
            )
            .map_or_else(|| "-".into(), |s| format!("{:.0}", s.median)),
        );
    }
    let _ = writeln!(
        out,
        "\n| N | allocations per lock + release: quorum-lock / RedisBackend direct (per run) | quorum-lock / floor | quorum-lock / rslock |\n|---|---|---|---|"
    );
    for n in [1usize, 3] {
        let get = |who: Who| {
            cells
                .iter()
                .find(|((cn, t, w), _)| *cn == n && *t == 1 && *w == who)
                .map(|(_, b)| b)
        };
        let ratio = |other: Who| {
            let (Some(o), Some(b)) = (get(Who::Ours), get(other)) else {
                return "-".to_string();
            };
            let r: Vec<f64> = o
                .iter()
                .zip(b)
                .map(|(o, b)| o.per(o.allocs.calls) / b.per(b.allocs.calls))
                .collect();
            Spread::of(&r).map_or_else(|| "-".into(), |s| s.ratio_text())
        };
        let _ = writeln!(
            out,
            "| {n} | {} | {} | {} |",
            ratio(Who::Backend),
            ratio(Who::Floor),
            ratio(Who::Rslock)
        );
    }
    let _ = writeln!(
        out,
        "\nWhat the servers received per lock (`INFO commandstats` of the block's N servers, \
         summed; the warm-up left out): calls per lock, and in brackets the microseconds the \
         servers spent per call, medians over the runs. A command a script runs \
         (`redis.call`) is listed too and its time is also inside the script's: do not add \
         the figures up. The manager's own background commands (a `SCRIPT LOAD`, a \
         `PING`) count when they fall in the block; `INFO` is left out, this harness \
         reading the counts with it.\n\n\
         | N | threads | client | ending | per lock: calls (us per call) |\n|---|---|---|---|---|"
    );
    for ((n, threads, who), blocks) in cells {
        let _ = writeln!(
            out,
            "| {n} | {threads} | {} | {} | {} |",
            who.name(),
            who.ending(),
            served(blocks)
        );
    }
    out
}

/// The commands the servers received in a row's blocks, most called
/// first: `evalsha 3.00 (4.06 us), ...` (medians over the blocks); those
/// called less than once per 100 locks are left out.
fn served(blocks: &[Block]) -> String {
    let mut names: Vec<&String> = blocks
        .iter()
        .flat_map(|b| b.servers.by_command.keys())
        .collect();
    names.sort();
    names.dedup();
    let median = |f: &dyn Fn(&Block) -> Option<f64>| {
        Spread::of(&blocks.iter().filter_map(f).collect::<Vec<_>>()).map(|s| s.median)
    };
    let mut rows: Vec<(f64, String)> = names
        .into_iter()
        .filter_map(|name| {
            let calls = median(&|b| Some(b.per(b.servers.of(name).0)))?;
            let per_call = median(&|b| {
                let (c, us) = b.servers.of(name);
                (c > 0).then(|| us as f64 / c as f64)
            })?;
            (calls >= 0.01).then(|| (calls, format!("{name} {calls:.2} ({per_call:.2} us)")))
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    if rows.is_empty() {
        return "-".into();
    }
    rows.into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(", ")
}

fn spread(s: Spread, digits: usize) -> String {
    if s.runs <= 1 || (s.max - s.min).abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{:.digits$}", s.median)
    } else {
        format!(
            "{:.digits$} ({:.digits$}-{:.digits$})",
            s.median, s.min, s.max
        )
    }
}

/// This thread's own switches so far (a caller thread is new per block).
fn own_switches() -> (u64, u64) {
    let status = fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(voluntary: u64, involuntary: u64, callers: u64) -> Block {
        Block {
            locks: 10,
            voluntary,
            involuntary,
            callers,
            allocs: Allocs::default(),
            took: Duration::from_secs(1),
            servers: CommandStats::default(),
        }
    }

    #[test]
    fn the_client_s_own_threads_are_the_switches_beside_the_callers() {
        let w = Wakes {
            cells: vec![((3, 8, Who::Ours), vec![block(30, 10, 25)])],
            runs: 1,
        };
        assert_eq!(w.per_lock(3, 8, Client::Ours, Count::Switches), Some(4.0));
        assert_eq!(w.per_lock(3, 8, Client::Ours, Count::OwnThreads), Some(1.5));
        let table = w.render();
        assert!(
            table.contains("| 3 | 8 | quorum-lock | `release()` | 3.00 | 1.00 | 1.50 |"),
            "{table}"
        );
        // Callers that counted more than the whole (their switches before
        // the start) leave zero, not a wrapped count.
        assert_eq!(block(1, 0, 5).own_threads(), 0);
    }

    #[test]
    fn the_servers_table_lists_each_command_per_lock_most_called_first() {
        let with = |evalsha: (u64, u64), info_like: (u64, u64)| {
            let mut b = block(0, 0, 0);
            b.servers.by_command.insert("set".into(), (30, 21));
            b.servers.by_command.insert("evalsha".into(), evalsha);
            b.servers.by_command.insert("script|load".into(), info_like);
            b
        };
        // 10 locks per block: 3 calls per lock of `evalsha`, at 4 and at
        // 2 us per call (median 3); one `SCRIPT LOAD` in 10 locks.
        let blocks = [with((30, 120), (1, 15)), with((30, 60), (1, 15))];
        assert_eq!(
            served(&blocks),
            "evalsha 3.00 (3.00 us), set 3.00 (0.70 us), script|load 0.10 (15.00 us)"
        );
        // A command called less than once per 100 locks is left out.
        let rare = [with((30, 90), (0, 0))];
        assert_eq!(served(&rare), "evalsha 3.00 (3.00 us), set 3.00 (0.70 us)");
        assert_eq!(served(&[block(0, 0, 0)]), "-");
    }
}
