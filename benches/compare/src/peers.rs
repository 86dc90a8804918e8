//! The peer crates from crates.io, each used the way its documentation
//! shows: `redlock` 2.0.0 and `redsync` 1.0.1 (blocking, nodes called one
//! after another, a new connection per call), `rslock` 0.10 (async on
//! tokio, nodes called concurrently over multiplexed connections).
//!
//! Retries: for the uncontended scenarios every peer makes one attempt. For
//! contention each uses its own retry loop, set so that the pause after a
//! failed attempt has a mean of about `retry_pause / 2`, like quorum-lock's
//! (uniform in `[0, retry_pause)`): redlock and rslock draw a whole number
//! of milliseconds in `[0, retry_pause)`; redsync pauses `retry_pause / 2`
//! plus or minus its own jitter. Each call makes a bounded number of
//! attempts, and the benchmark calls again until its deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redlock::RedLock;
use redsync::{RedisInstance, Redsync, RedsyncBuilder, RedsyncError};

use crate::clients::{Locker, Service, Settings, millis};
use crate::cpu::CpuMeter;
use crate::scenarios::{Load, PerThread, collect, count};
use crate::stats::Throughput;

/// Attempts per call to a peer's own retrying lock function; the benchmark
/// calls again until its deadline.
const ATTEMPTS_PER_CALL: u32 = 10;

fn whole_millis(d: Duration) -> u32 {
    u32::try_from(millis(d)).unwrap_or(u32::MAX).max(1)
}

// ---------------------------------------------------------------- redlock

/// One manager for single attempts, one for waiting; threads share both.
pub struct RedlockService {
    single: RedLock,
    patient: RedLock,
    ttl_ms: usize,
}

impl RedlockService {
    pub fn new(urls: &[String], settings: &Settings) -> Self {
        // `RedLock::new` unwraps `Client::open`: the URLs are ours and valid.
        let mut single = RedLock::new(urls.to_vec());
        // redlock sleeps a random [0, delay) ms after a failed attempt and
        // panics on an empty range: 1 ms is the smallest valid delay.
        single.set_retry(1, 1);
        let mut patient = RedLock::new(urls.to_vec());
        patient.set_retry(ATTEMPTS_PER_CALL, whole_millis(settings.retry_pause));
        Self {
            single,
            patient,
            ttl_ms: usize::try_from(millis(settings.ttl)).unwrap_or(usize::MAX),
        }
    }
}

impl Service for RedlockService {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(RedlockLocker(self)))
    }
}

struct RedlockLocker<'a>(&'a RedlockService);

impl Locker for RedlockLocker<'_> {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let s = self.0;
        match s.single.lock(key, s.ttl_ms) {
            Ok(Some(lock)) => {
                s.single.unlock(&lock);
                Ok(())
            }
            Ok(None) => Err("redlock: not acquired".into()),
            Err(e) => Err(format!("redlock: {e}")),
        }
    }

    fn critical_section(
        &mut self,
        key: &[u8],
        deadline: Instant,
        work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let s = self.0;
        loop {
            match s.patient.lock(key, s.ttl_ms) {
                Ok(Some(lock)) => {
                    work();
                    s.patient.unlock(&lock);
                    return Ok(());
                }
                Ok(None) if Instant::now() < deadline => continue,
                Ok(None) => return Err("redlock: not acquired before the deadline".into()),
                Err(e) => return Err(format!("redlock: {e}")),
            }
        }
    }
}

// ---------------------------------------------------------------- redsync

pub struct RedsyncService {
    single: Redsync<RedisInstance>,
    patient: Redsync<RedisInstance>,
    ttl: Duration,
}

impl RedsyncService {
    pub fn new(urls: &[String], settings: &Settings) -> Result<Self, String> {
        let instances = || {
            urls.iter()
                .map(|u| RedisInstance::new(u.as_str()).map_err(|e| format!("redsync: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        let single = RedsyncBuilder::new(instances()?).retry_count(1).build();
        let patient = RedsyncBuilder::new(instances()?)
            .retry_count(ATTEMPTS_PER_CALL)
            .retry_delay(settings.retry_pause / 2)
            .build();
        Ok(Self {
            single,
            patient,
            ttl: settings.ttl,
        })
    }
}

impl Service for RedsyncService {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(RedsyncLocker(self)))
    }
}

struct RedsyncLocker<'a>(&'a RedsyncService);

fn utf8(key: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(key).map_err(|_| "redsync: the key must be UTF-8".to_string())
}

impl Locker for RedsyncLocker<'_> {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let s = self.0;
        let lock = s
            .single
            .lock(utf8(key)?, s.ttl)
            .map_err(|e| format!("redsync: {e}"))?;
        s.single.unlock(&lock).map_err(|e| format!("redsync: {e}"))
    }

    fn critical_section(
        &mut self,
        key: &[u8],
        deadline: Instant,
        work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let s = self.0;
        let key = utf8(key)?;
        loop {
            match s.patient.lock(key, s.ttl) {
                Ok(lock) => {
                    work();
                    return s.patient.unlock(&lock).map_err(|e| format!("redsync: {e}"));
                }
                Err(RedsyncError::LockRetriesExceeded(_)) if Instant::now() < deadline => {}
                Err(e) => return Err(format!("redsync: {e}")),
            }
        }
    }
}

// ----------------------------------------------------------------- rslock

fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = match threads {
        None => tokio::runtime::Builder::new_current_thread(),
        Some(_) => tokio::runtime::Builder::new_multi_thread(),
    };
    if let Some(n) = threads {
        builder.worker_threads(n);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))
}

fn rslock_manager(urls: &[String], attempts: u32, pause: Duration) -> rslock::LockManager {
    // `LockManager::new` unwraps `Client::open`: the URLs are ours and valid.
    let mut lm = rslock::LockManager::new(urls.to_vec());
    // rslock draws a random [0, delay) ms and panics on an empty range.
    lm.set_retry(attempts, pause.max(Duration::from_millis(1)));
    lm
}

async fn rslock_once(lm: &rslock::LockManager, key: &[u8], ttl: Duration) -> Result<(), String> {
    let lock = lm
        .lock(key, ttl)
        .await
        .map_err(|e| format!("rslock: {e}"))?;
    lm.unlock(&lock).await;
    Ok(())
}

/// rslock from one OS thread: a current-thread runtime (as a
/// single-threaded async program would run it), one `block_on` per lock +
/// release, so that it can take turns with the blocking clients.
pub struct RslockSingle {
    rt: tokio::runtime::Runtime,
    lm: rslock::LockManager,
    ttl: Duration,
}

impl RslockSingle {
    pub fn new(urls: &[String], settings: &Settings) -> Result<Self, String> {
        Ok(Self {
            rt: runtime(None)?,
            lm: rslock_manager(urls, 1, Duration::from_millis(1)),
            ttl: settings.ttl,
        })
    }
}

impl Locker for RslockSingle {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        self.rt.block_on(rslock_once(&self.lm, key, self.ttl))
    }
}

/// Scenario 2: `tasks` tasks on a multi-thread runtime with one worker per
/// core, sharing one manager, each on its own key. `meter` reads the CPU
/// time of the block, from after every task's warm-up to the end of the
/// last one, as `scenarios::threads` does for the blocking clients.
pub fn rslock_threads(
    urls: &[String],
    settings: &Settings,
    load: &Load,
    key_prefix: &str,
    meter: &CpuMeter,
) -> Result<Throughput, String> {
    let &Load {
        threads: tasks,
        ops,
        warmup,
        budget,
    } = load;
    let rt = runtime(Some(cores()))?;
    let lm = rslock_manager(urls, 1, Duration::from_millis(1));
    let ttl = settings.ttl;
    rt.block_on(async move {
        // Two barriers, so that the CPU reading at the start falls after
        // every task's warm-up and before any task goes on (the blocking
        // clients' gate does the same).
        let warmed = Arc::new(tokio::sync::Barrier::new(tasks + 1));
        let go = Arc::new(tokio::sync::Barrier::new(tasks + 1));
        let mut handles = Vec::with_capacity(tasks);
        for t in 0..tasks {
            let lm = lm.clone();
            let (warmed, go) = (Arc::clone(&warmed), Arc::clone(&go));
            let key = format!("{key_prefix}:{t}").into_bytes();
            handles.push(tokio::spawn(async move {
                for _ in 0..warmup {
                    let _ = rslock_once(&lm, &key, ttl).await;
                }
                warmed.wait().await;
                go.wait().await;
                let deadline = Instant::now() + budget;
                let mut tally: PerThread = (0, 0, None);
                for _ in 0..ops {
                    if Instant::now() >= deadline {
                        tally.1 += 1;
                        continue;
                    }
                    count(&mut tally, rslock_once(&lm, &key, ttl).await);
                }
                tally
            }));
        }
        warmed.wait().await;
        let cpu_start = meter.start();
        go.wait().await;
        let start = Instant::now();
        let results = futures::future::join_all(handles).await;
        let wall = start.elapsed();
        Ok(Throughput {
            cpu: meter.stop(cpu_start, Duration::ZERO),
            ..gather(results, wall, None)
        })
    })
}

/// Scenario 3: `tasks` tasks contend for one key; each runs `sections`
/// critical sections that read a shared counter, yield, and write it back
/// plus one (a lost update shows as a short count).
pub fn rslock_contention(
    urls: &[String],
    settings: &Settings,
    tasks: usize,
    sections: usize,
    budget: Duration,
    key: &str,
) -> Result<Throughput, String> {
    let rt = runtime(Some(cores()))?;
    let lm = rslock_manager(urls, ATTEMPTS_PER_CALL, settings.retry_pause);
    let ttl = settings.ttl;
    let key = key.as_bytes().to_vec();
    rt.block_on(async move {
        // Connect before the clock starts, as the other clients do.
        rslock_once(&lm, b"qbench:rslock:connect", ttl).await?;
        let counter = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + budget;
        let start = Instant::now();
        let mut handles = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            let lm = lm.clone();
            let key = key.clone();
            let counter = Arc::clone(&counter);
            handles.push(tokio::spawn(async move {
                let mut tally: PerThread = (0, 0, None);
                for _ in 0..sections {
                    let outcome = loop {
                        match lm.lock(&key, ttl).await {
                            Ok(lock) => {
                                let seen = counter.load(Ordering::Relaxed);
                                tokio::task::yield_now().await;
                                counter.store(seen + 1, Ordering::Relaxed);
                                lm.unlock(&lock).await;
                                break Ok(());
                            }
                            Err(_) if Instant::now() < deadline => {}
                            Err(e) => break Err(format!("rslock: {e}")),
                        }
                    };
                    count(&mut tally, outcome);
                }
                tally
            }));
        }
        let results = futures::future::join_all(handles).await;
        let wall = start.elapsed();
        Ok(gather(results, wall, Some(counter.load(Ordering::Relaxed))))
    })
}

/// Turns the tasks' join errors into text for `scenarios::collect`.
fn gather(
    results: Vec<Result<PerThread, tokio::task::JoinError>>,
    wall: Duration,
    counter: Option<u64>,
) -> Throughput {
    let results = results
        .into_iter()
        .map(|r| r.map_err(|e| format!("rslock task: {e}")));
    collect(results, wall, counter)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
