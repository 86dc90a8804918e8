//! The measuring loops for the blocking clients; every loop is bounded in
//! count and in time.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::clients::Service;
use crate::stats::{Latency, Recorder, Throughput};

/// Scenario 1 (and 4): one thread, `warmup` unrecorded operations, then
/// samples of `op` until the recorder is done.
pub fn latency(
    mut op: impl FnMut() -> Result<(), String>,
    warmup: usize,
    mut rec: Recorder,
) -> Result<Latency, String> {
    for _ in 0..warmup {
        op()?;
    }
    while !rec.done() {
        let start = Instant::now();
        let outcome = op();
        rec.record(start.elapsed(), outcome);
    }
    Ok(rec.finish())
}

/// Scenario 2: `threads` threads, each on its own key, `ops` lock +
/// release each; the clock runs from a common start (after each thread's
/// set-up and warm-up) until the last thread is done.
pub fn threads(
    service: &dyn Service,
    threads: usize,
    ops: usize,
    warmup: usize,
    budget: Duration,
    key_prefix: &str,
) -> Throughput {
    let barrier = Barrier::new(threads + 1);
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let key = format!("{key_prefix}:{t}").into_bytes();
                s.spawn(move || {
                    let mut locker = match service.locker() {
                        Ok(l) => Some(l),
                        Err(e) => {
                            barrier.wait();
                            return (0, ops, Some(e));
                        }
                    };
                    if let Some(l) = locker.as_mut() {
                        for _ in 0..warmup {
                            let _ = l.lock_release(&key);
                        }
                    }
                    barrier.wait();
                    let deadline = Instant::now() + budget;
                    let mut tally: PerThread = (0, 0, None);
                    if let Some(l) = locker.as_mut() {
                        for _ in 0..ops {
                            if Instant::now() >= deadline {
                                tally.1 += 1;
                                continue;
                            }
                            count(&mut tally, l.lock_release(&key));
                        }
                    }
                    tally
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(join).collect();
        let wall = start.elapsed();
        collect(results, wall, None)
    })
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
