//! `--rw-cost`: what the read-write lock costs against the mutex, at
//! N = 3, on the same three servers, in one run:
//!
//! - a read lock + release() against a lock + release() of a mutex, and a
//!   write lock + release() against the same, each paired and interleaved
//!   (`ab.rs`), p50 and p90;
//! - 8 threads doing read + release() on one read-write lock against 8
//!   threads doing lock + release() on one mutex (which serializes them):
//!   a fixed number of operations, throughput per block, the two blocks of
//!   a run back to back in A B / B A order (alternating run by run), the
//!   ratio taken per run. In three layouts ([`Layout`]): the threads
//!   sharing one manager (a program's threads), with `read()` / `lock()`
//!   (the default retry policy) and with a short retry pause; and one
//!   manager per thread (as 8 processes), with `read()` / `lock()`.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RedisBackend, RetryPolicy, RwLock};

use crate::ab::{self, Ab};
use crate::stats::{Spread, median};
use testkit::RedisServer;

/// The read-write lock's name and the mutex's key.
const RW: &str = "bench:rw";
const MUTEX: &str = "bench:rw-mutex";
/// Threads of a throughput block.
const THREADS: usize = 8;
/// Operations per thread in a throughput block's warm-up (each layout's
/// blocks: [`Layout::ops_per_thread`]).
const WARMUP_OPS: usize = 5;
/// A throughput block stops here, whatever is left (counted as errors).
const BLOCK_BUDGET: Duration = Duration::from_secs(60);
/// [`Layout::SharedShortPause`]: every attempt until the wait is over,
/// with a pause uniform in [0, 4 ms) after a failed one (the contention
/// section's policy, `--retry-ms` 4).
const RETRY_PAUSE: Duration = Duration::from_millis(4);
const WAIT: Duration = Duration::from_secs(30);

/// How the threads of a throughput block get their manager, and how they
/// wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One manager shared by the 8 threads, as a program's threads use
    /// it; `read()` and `lock()`, with the manager's default retry policy.
    Shared,
    /// The same manager, `read_with` / `lock_with` a short retry pause
    /// (`RETRY_PAUSE`): what the default policy's pause costs the mutex.
    SharedShortPause,
    /// One manager per thread (its own connections and node threads, as 8
    /// processes would have); `read()` and `lock()`, default policy.
    PerThread,
}

impl Layout {
    const ALL: [Self; 3] = [Self::Shared, Self::SharedShortPause, Self::PerThread];

    fn name(self) -> &'static str {
        match self {
            Self::Shared => "one shared manager, read() / lock()",
            Self::SharedShortPause => "one shared manager, retry pause [0, 4 ms)",
            Self::PerThread => "one manager per thread, read() / lock()",
        }
    }

    /// Operations per thread in a block: enough for a few seconds of the
    /// mutex's block at most on the 2-core VM. There, with one shared
    /// manager, the mutex passes from thread to thread without a round
    /// trip, 64 times in a row, then pauses for one retry delay (100-200
    /// ms by default); with a manager per thread it goes from holder to
    /// holder through the servers (tens a second).
    fn ops_per_thread(self) -> usize {
        match self {
            Self::Shared => 100,
            Self::SharedShortPause => 200,
            Self::PerThread => 40,
        }
    }

    /// The options of each call: `None` for `read()` / `lock()`.
    fn options(self) -> Option<LockOptions> {
        (self == Self::SharedShortPause).then(|| {
            LockOptions::new().wait(WAIT).retry(
                RetryPolicy::new()
                    .attempts(u32::MAX)
                    .delay(Duration::ZERO)
                    .jitter(RETRY_PAUSE),
            )
        })
    }
}

/// What the threads of a block do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// read + release() on one read-write lock.
    Read,
    /// lock + release() on one mutex.
    Mutex,
}

/// One throughput block.
#[derive(Debug, Clone, Default)]
struct Block {
    ops: usize,
    errors: usize,
    first_error: Option<String>,
    wall: Duration,
    /// The most threads inside the (empty) critical section at once: more
    /// than one for readers that share; exactly one for the mutex.
    most_at_once: usize,
    /// What the block's managers counted, summed over them.
    counters: Counters,
}

/// The block's share of its managers' lock counters (`health().locks`).
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    /// Attempts refused: held by another.
    contended: u64,
    /// Waits a release notice ended early.
    woken: u64,
    /// Locks whose first attempt let the waiting managers go first.
    yielded: u64,
    /// Locks handed to the next thread of the same manager.
    hand_overs: u64,
}

impl Counters {
    fn read(managers: &[LockManager]) -> Self {
        managers.iter().fold(Self::default(), |sum, m| {
            let c = m.health().locks;
            Self {
                contended: sum.contended + c.contended,
                woken: sum.woken + c.woken,
                yielded: sum.yielded + c.yielded,
                hand_overs: sum.hand_overs + c.hand_overs,
            }
        })
    }

    fn since(self, before: Self) -> Self {
        Self {
            contended: self.contended.saturating_sub(before.contended),
            woken: self.woken.saturating_sub(before.woken),
            yielded: self.yielded.saturating_sub(before.yielded),
            hand_overs: self.hand_overs.saturating_sub(before.hand_overs),
        }
    }
}

impl Block {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One run of one layout: the readers' block and the mutex's, and which
/// went first.
#[derive(Debug, Clone)]
struct Pair {
    read_first: bool,
    read: Block,
    mutex: Block,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.read.ops_per_sec() / self.mutex.ops_per_sec()
    }

    fn clean(&self) -> bool {
        self.read.errors == 0 && self.mutex.errors == 0 && self.mutex.most_at_once <= 1
    }
}

/// A manager with the default settings (retry policy included), but for
/// the quarantine: the servers were started a moment ago.
fn manager(urls: &[String]) -> Result<LockManager, String> {
    LockManager::builder()
        .redis_nodes(urls)
        .and_then(|b| b.restart_quarantine(false).build())
        .map_err(|e| e.to_string())
}

fn progress(what: &str) {
    eprintln!("quorum-bench: [rw-cost: {what}]");
}

/// Runs the comparisons `runs` times and returns markdown tables.
pub fn rw_cost(runs: usize) -> Result<String, String> {
    let runs = runs.max(1);
    let started = Instant::now();
    let servers = (0..3)
        .map(|_| RedisServer::try_start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let version = RedisBackend::open(&urls[0], Duration::from_secs(2))
        .and_then(|node| node.fetch_server_info())
        .ok()
        .and_then(|info| info.version)
        .map_or_else(|| servers[0].kind().name().to_string(), |v| v.to_string());
    let locks = manager(&urls)?;
    let rw = locks.rw_lock(RW).map_err(|e| e.to_string())?;
    let once = LockOptions::new().retry(RetryPolicy::none());

    let mutex = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = locks.lock_with(MUTEX, &once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let read = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = rw.read_with(&once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let write = || -> Result<Duration, String> {
        let started = Instant::now();
        let guard = rw.write_with(&once).map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    };
    let percentiles = [("p50", 0.5), ("p90", 0.9)];
    progress(&format!(
        "read + release() vs lock + release(), {runs} runs x {} paired samples",
        ab::SAMPLES
    ));
    let reads = ab::measure(
        runs,
        &percentiles,
        ("mutex", Box::new(mutex)),
        ("read", Box::new(read)),
    )?;
    progress(&format!(
        "write + release() vs lock + release(), {runs} runs x {} paired samples",
        ab::SAMPLES
    ));
    let writes = ab::measure(
        runs,
        &percentiles,
        ("mutex", Box::new(mutex)),
        ("write", Box::new(write)),
    )?;

    // The throughput blocks: the shared manager is the one above; the 8
    // others are made once, and every block of a layout uses the same.
    let own: Vec<LockManager> = (0..THREADS)
        .map(|_| manager(&urls))
        .collect::<Result<_, _>>()?;
    let shared = std::slice::from_ref(&locks);
    let layouts = Layout::ALL.map(|layout| {
        let managers = match layout {
            Layout::Shared | Layout::SharedShortPause => shared,
            Layout::PerThread => &own[..],
        };
        (layout, managers)
    });
    for (layout, managers) in layouts {
        progress(&format!("warm-up, 8 threads, {}", layout.name()));
        for side in [Side::Read, Side::Mutex] {
            // Not fatal: on a loaded host a round may time out; the
            // measured blocks count and report their errors.
            let b = block(managers, layout, side, WARMUP_OPS);
            if let Some(e) = b.first_error {
                progress(&format!(
                    "warm-up, {side:?}: {} errors, first: {e}",
                    b.errors
                ));
            }
        }
    }
    let mut pairs: Vec<(Layout, Vec<Pair>)> = layouts
        .iter()
        .map(|(layout, _)| (*layout, Vec::with_capacity(runs)))
        .collect();
    for run in 0..runs {
        // A B, then B A in the next run: neither side always goes first.
        let read_first = run % 2 == 0;
        for ((layout, managers), (_, out)) in layouts.iter().zip(pairs.iter_mut()) {
            progress(&format!(
                "8 threads, {}, run {}/{runs}, {}",
                layout.name(),
                run + 1,
                if read_first {
                    "readers first"
                } else {
                    "mutex first"
                }
            ));
            let order = if read_first {
                [Side::Read, Side::Mutex]
            } else {
                [Side::Mutex, Side::Read]
            };
            let ops = layout.ops_per_thread();
            let [first, second] = order.map(|side| (side, block(managers, *layout, side, ops)));
            let pick = |want: Side| {
                if first.0 == want {
                    first.1.clone()
                } else {
                    second.1.clone()
                }
            };
            out.push(Pair {
                read_first,
                read: pick(Side::Read),
                mutex: pick(Side::Mutex),
            });
        }
    }
    drop(own);
    drop(rw);
    drop(locks);
    drop(servers);
    let elapsed = started.elapsed();
    Ok(render(&version, &reads, &writes, &pairs, runs, elapsed))
}

/// `THREADS` threads, each `ops` times: take the side, step into an empty
/// critical section (count the threads inside, yield the CPU), release()
/// and wait for it. Thread `i` uses `managers[i % len]`. Every thread
/// makes its lock handle first; then all start together, and the clock
/// stops when the last is done.
fn block(managers: &[LockManager], layout: Layout, side: Side, ops: usize) -> Block {
    let options = layout.options();
    let before = Counters::read(managers);
    let start = Barrier::new(THREADS + 1);
    let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (start, inside, most, options) = (&start, &inside, &most, options.as_ref());
    thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let locks = &managers[i % managers.len()];
                s.spawn(move || {
                    let rw: Result<RwLock, String> = locks.rw_lock(RW).map_err(|e| e.to_string());
                    start.wait();
                    let rw = match rw {
                        Ok(rw) => rw,
                        Err(e) => return (0, ops, Some(e)),
                    };
                    let deadline = Instant::now() + BLOCK_BUDGET;
                    let (mut done, mut errors, mut first) = (0, 0, None);
                    for _ in 0..ops {
                        if Instant::now() >= deadline {
                            errors += 1;
                            first.get_or_insert_with(|| "the block's budget was spent".into());
                            continue;
                        }
                        let guard = match (side, options) {
                            (Side::Read, None) => rw.read(),
                            (Side::Read, Some(options)) => rw.read_with(options),
                            (Side::Mutex, None) => locks.lock(MUTEX),
                            (Side::Mutex, Some(options)) => locks.lock_with(MUTEX, options),
                        };
                        let outcome = guard.and_then(|guard| {
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            thread::yield_now();
                            inside.fetch_sub(1, Ordering::SeqCst);
                            guard.release()
                        });
                        match outcome {
                            Ok(_) => done += 1,
                            Err(e) => {
                                errors += 1;
                                first.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    (done, errors, first)
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let mut out = Block::default();
        for t in threads {
            match t.join() {
                Ok((done, errors, first)) => {
                    out.ops += done;
                    out.errors += errors;
                    if out.first_error.is_none() {
                        out.first_error = first;
                    }
                }
                Err(_) => {
                    out.errors += ops;
                    out.first_error
                        .get_or_insert_with(|| "a thread panicked".into());
                }
            }
        }
        out.wall = began.elapsed();
        out.most_at_once = most.load(Ordering::SeqCst);
        out.counters = Counters::read(managers).since(before);
        out
    })
}

fn micros(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

fn per_sec(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k/s", v / 1000.0)
    } else {
        format!("{v:.0}/s")
    }
}

fn spread_text(s: Option<Spread>) -> String {
    s.map_or_else(|| "-".into(), |s| s.ratio_text())
}

fn render(
    version: &str,
    reads: &Ab,
    writes: &Ab,
    pairs: &[(Layout, Vec<Pair>)],
    runs: usize,
    elapsed: Duration,
) -> String {
    let mut md = format!(
        "## quorum-bench --rw-cost\n\nOn {version} x3 (loopback, N=3), {runs} runs, {:.0} s.\n\n",
        elapsed.as_secs_f64()
    );
    md.push_str("### Summary\n\n");
    md.push_str(
        "| what | read-write lock | mutex | rw / mutex: median of the per-run ratios (min-max) |\n\
         |---|---:|---:|---:|\n",
    );
    for (ab, side) in [(reads, "read"), (writes, "write")] {
        for (k, (label, _)) in ab.percentiles.iter().enumerate() {
            let (mutex, rw) = ab.medians(k);
            md.push_str(&format!(
                "| {side} + release(), 1 thread, {label} | {} | {} | {} |\n",
                micros(rw),
                micros(mutex),
                spread_text(ab.ratio(k))
            ));
        }
    }
    for (layout, runs) in pairs {
        let ops = |f: fn(&Pair) -> &Block| {
            let v: Vec<f64> = runs.iter().map(|p| f(p).ops_per_sec()).collect();
            median(&v)
        };
        let ratios: Vec<f64> = runs.iter().map(Pair::ratio).collect();
        md.push_str(&format!(
            "| 8 threads x {} ops, {}: read + release() / lock + release(), throughput | {} | {} | {} |\n",
            layout.ops_per_thread(),
            layout.name(),
            per_sec(ops(|p| &p.read)),
            per_sec(ops(|p| &p.mutex)),
            spread_text(Spread::of(&ratios)),
        ));
    }
    md.push_str(
        "\n(Latency rows: the median over the runs of each side's percentile; \
         throughput rows: the median over the runs of each block's operations / wall time.)\n\n",
    );
    md.push_str("### read + release() against lock + release(), paired\n\n");
    md.push_str(&reads.table("read + release() at N=3"));
    md.push_str("\n### write + release() against lock + release(), paired\n\n");
    md.push_str(&writes.table("write + release() at N=3"));
    md.push_str(
        "\n### 8 threads: readers on one read-write lock against one mutex\n\n\
         Per lock of the mutex's block: attempts refused, waits a release notice ended, \
         locks that let the waiting managers go first, hand-overs to a thread of the same \
         manager (`health().locks`).\n\n\
         | layout | ops | run | first | readers | mutex | readers / mutex | most inside at once (readers, mutex) | errors (readers, mutex) | mutex: refused, woken, yielded, handed over per lock |\n\
         |---|---:|---|---|---:|---:|---:|---|---|---|\n",
    );
    for (layout, runs) in pairs {
        for (r, p) in runs.iter().enumerate() {
            let c = p.mutex.counters;
            let per = |n: u64| n as f64 / p.mutex.ops.max(1) as f64;
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {:.2}x | {}, {} | {}, {} | {:.2}, {:.2}, {:.2}, {:.2} |\n",
                layout.name(),
                THREADS * layout.ops_per_thread(),
                r + 1,
                if p.read_first { "readers" } else { "mutex" },
                per_sec(p.read.ops_per_sec()),
                per_sec(p.mutex.ops_per_sec()),
                p.ratio(),
                p.read.most_at_once,
                p.mutex.most_at_once,
                p.read.errors,
                p.mutex.errors,
                per(c.contended),
                per(c.woken),
                per(c.yielded),
                per(c.hand_overs),
            ));
        }
    }
    md.push('\n');
    for (layout, runs) in pairs {
        let ratios: Vec<f64> = runs.iter().map(Pair::ratio).collect();
        let clean = runs.iter().filter(|p| p.clean()).count();
        md.push_str(&format!(
            "readers / mutex throughput, 8 threads, {}: median {}; \
             {clean} of {} runs without an error and with one mutex holder at a time\n",
            layout.name(),
            spread_text(Spread::of(&ratios)),
            runs.len(),
        ));
        for p in runs {
            for (who, b) in [("readers", &p.read), ("mutex", &p.mutex)] {
                if let Some(e) = &b.first_error {
                    md.push_str(&format!("- {}, {who}: first error: {e}\n", layout.name()));
                }
            }
            if p.mutex.most_at_once > 1 {
                md.push_str(&format!(
                    "- {}: {} mutex holders at once: EXCLUSION BROKEN\n",
                    layout.name(),
                    p.mutex.most_at_once
                ));
            }
        }
    }
    md
}
