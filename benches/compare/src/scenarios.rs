//! The measuring loops for the blocking clients; every loop is bounded in
//! count and in time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::clients::Service;
use crate::cpu::{self, CpuMeter};
use crate::stats::Throughput;

/// The name of the threads that call the lock clients (so that a census
/// of the process's threads can tell them from the library's).
pub const CALLER: &str = "qb-caller";

/// What one scaling block asks of a client: `threads` threads (or tasks),
/// each `warmup` lock + release before the common start, then `ops`, each
/// thread within `budget`.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub threads: usize,
    pub ops: usize,
    pub warmup: usize,
    pub budget: Duration,
}

/// Scaling: `threads` threads, each on its own key, `ops` lock + release
/// each; the clock runs from a common start (after each thread's set-up
/// and warm-up) until the last thread is done and the service has
/// finished its queued work. `census` runs on the calling thread right
/// after the common start, while every thread is alive. `meter` reads the
/// CPU time of the same block (its start is read while every thread waits
/// at the gate, so neither set-up nor warm-up counts; the census's own
/// CPU is taken off).
pub fn threads(
    service: &dyn Service,
    load: &Load,
    key_prefix: &str,
    census: &mut dyn FnMut(),
    meter: &CpuMeter,
) -> Throughput {
    let &Load {
        threads,
        ops,
        warmup,
        budget,
    } = load;
    let gate = Gate::default();
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let gate = &gate;
                let key = format!("{key_prefix}:{t}").into_bytes();
                thread::Builder::new()
                    .name(CALLER.into())
                    .spawn_scoped(s, move || {
                        let mut locker = match service.locker() {
                            Ok(l) => l,
                            Err(e) => {
                                gate.arrive();
                                return (0, ops, Some(e));
                            }
                        };
                        for _ in 0..warmup {
                            let _ = locker.lock_release(&key);
                        }
                        gate.arrive();
                        let deadline = Instant::now() + budget;
                        let mut tally: PerThread = (0, 0, None);
                        for _ in 0..ops {
                            if Instant::now() >= deadline {
                                tally.1 += 1;
                                continue;
                            }
                            count(&mut tally, locker.lock_release(&key));
                        }
                        tally
                    })
            })
            .collect();
        let started = handles.iter().filter(|h| h.is_ok()).count();
        gate.wait_for(started, budget);
        let cpu_start = meter.start();
        gate.open();
        let start = Instant::now();
        let census_cpu = cpu::on_this_thread(census);
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.map_err(|e| format!("cannot start a thread: {e}"))
                    .and_then(join)
            })
            .collect();
        service.finish();
        let wall = start.elapsed();
        Throughput {
            cpu: meter.stop(cpu_start, census_cpu),
            ..collect(results, wall, None)
        }
    })
}

/// A common start: threads arrive and wait until the gate opens.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    /// Counts this thread in and waits for the opening.
    fn arrive(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 += 1;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Returns once `count` threads arrived, or after `patience`; the gate
    /// stays shut until [`open`](Self::open).
    fn wait_for(&self, count: usize, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.0 < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Lets every thread that arrived (or arrives later) go.
    fn open(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        self.changed.notify_all();
    }
}

/// Scenario 3: `threads` threads contend for `key`; each runs `sections`
/// critical sections. Inside, a shared counter is read, the thread yields,
/// and the counter is written back plus one: overlapping holders lose
/// updates, so the final count checks exclusion.
pub fn contention(
    service: &dyn Service,
    threads: usize,
    sections: usize,
    budget: Duration,
    key: &str,
) -> Throughput {
    let counter = AtomicU64::new(0);
    let barrier = Barrier::new(threads + 1);
    let deadline = Instant::now() + budget;
    let result = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, counter) = (&barrier, &counter);
                s.spawn(move || {
                    let locker = service.locker();
                    barrier.wait();
                    let mut locker = match locker {
                        Ok(l) => l,
                        Err(e) => return (0, sections, Some(e)),
                    };
                    let mut work = || {
                        let seen = counter.load(Ordering::Relaxed);
                        thread::yield_now();
                        counter.store(seen + 1, Ordering::Relaxed);
                    };
                    let mut tally: PerThread = (0, 0, None);
                    for _ in 0..sections {
                        count(
                            &mut tally,
                            locker.critical_section(key.as_bytes(), deadline, &mut work),
                        );
                    }
                    tally
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(join).collect();
        service.finish();
        let wall = start.elapsed();
        collect(results, wall, None)
    });
    Throughput {
        counter: Some(counter.load(Ordering::Relaxed)),
        ..result
    }
}

fn join(handle: thread::ScopedJoinHandle<'_, PerThread>) -> Result<PerThread, String> {
    handle.join().map_err(|_| "a thread panicked".to_owned())
}

/// What one thread (or task) did: operations done, errors, the first
/// error's text.
pub type PerThread = (usize, usize, Option<String>);

/// Counts one operation's result into `tally`.
pub fn count(tally: &mut PerThread, result: Result<(), String>) {
    match result {
        Ok(()) => tally.0 += 1,
        Err(e) => {
            tally.1 += 1;
            tally.2.get_or_insert(e);
        }
    }
}

/// Sums the per-thread results; a thread (or task) that did not finish
/// (`Err` with the reason) counts as one error.
pub fn collect(
    results: impl IntoIterator<Item = Result<PerThread, String>>,
    wall: Duration,
    counter: Option<u64>,
) -> Throughput {
    let mut total = Throughput {
        ops: 0,
        errors: 0,
        first_error: None,
        wall,
        counter,
        cpu: None,
    };
    for result in results {
        let (done, errors, first) = result.unwrap_or_else(|e| (0, 1, Some(e)));
        total.ops += done;
        total.errors += errors;
        if let Some(e) = first {
            total.first_error.get_or_insert(e);
        }
    }
    total
}
