//! One throughput block of `--rw-cost`: 8 threads taking a side (read +
//! release() on one read-write lock, or lock + release() on one mutex) a
//! fixed number of times, in one of three [`Layout`]s, timed together,
//! with the managers' counters over the block; and a run's pair of blocks.
//! Apart from the run (`mod.rs`), which only orders the blocks, and from
//! the tables, which only read them.

use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions, RetryPolicy, RwLock};

/// The read-write lock's name and the mutex's key.
pub(super) const RW: &str = "bench:rw";
pub(super) const MUTEX: &str = "bench:rw-mutex";
/// Threads of a throughput block.
pub(super) const THREADS: usize = 8;
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
pub(super) enum Layout {
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
    pub(super) const ALL: [Self; 3] = [Self::Shared, Self::SharedShortPause, Self::PerThread];

    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn ops_per_thread(self) -> usize {
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
pub(super) enum Side {
    /// read + release() on one read-write lock.
    Read,
    /// lock + release() on one mutex.
    Mutex,
}

/// One throughput block.
#[derive(Debug, Clone, Default)]
pub(super) struct Block {
    pub(super) ops: usize,
    pub(super) errors: usize,
    pub(super) first_error: Option<String>,
    pub(super) wall: Duration,
    /// The most threads inside the (empty) critical section at once: more
    /// than one for readers that share; exactly one for the mutex.
    pub(super) most_at_once: usize,
    /// What the block's managers counted, summed over them.
    pub(super) counters: Counters,
}

/// The block's share of its managers' lock counters (`health().locks`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    /// Attempts refused: held by another.
    pub(super) contended: u64,
    /// Waits a release notice ended early.
    pub(super) woken: u64,
    /// Locks whose first attempt let the waiting managers go first.
    pub(super) yielded: u64,
    /// Locks handed to the next thread of the same manager.
    pub(super) hand_overs: u64,
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
    pub(super) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One run of one layout: the readers' block and the mutex's, and which
/// went first.
#[derive(Debug, Clone)]
pub(super) struct Pair {
    pub(super) read_first: bool,
    pub(super) read: Block,
    pub(super) mutex: Block,
}

impl Pair {
    pub(super) fn ratio(&self) -> f64 {
        self.read.ops_per_sec() / self.mutex.ops_per_sec()
    }

    pub(super) fn clean(&self) -> bool {
        self.read.errors == 0 && self.mutex.errors == 0 && self.mutex.most_at_once <= 1
    }
}

/// `THREADS` threads, each `ops` times: take the side, step into an empty
/// critical section (count the threads inside, yield the CPU), release()
/// and wait for it. Thread `i` uses `managers[i % len]`. Every thread
/// makes its lock handle first; then all start together, and the clock
/// stops when the last is done.
pub(super) fn block(managers: &[LockManager], layout: Layout, side: Side, ops: usize) -> Block {
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
