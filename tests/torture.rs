//! Fault-injection torture test on five real `redis-server` nodes.
//!
//! * Deterministic scenario: A holds the lock on all five nodes, three of
//!   them are killed (`kill -9`) and restarted empty, B tries to lock. With
//!   restart quarantine off B wins while A's guard is still valid (the
//!   violation the Redlock description warns about); with it on B is refused
//!   until A's TTL has passed.
//! * Randomized runs: eight independent clients (each its own manager and
//!   connections, through one TCP proxy per node) lock one resource, do a
//!   read-modify-write of a shared counter and release, while a fault
//!   schedule kills and restarts nodes (sometimes a majority, while someone
//!   holds the lock), freezes them with `SIGSTOP` and delays or blackholes
//!   their traffic in the proxy. A checker records every holder's window on
//!   the process' monotonic clock and counts overlaps between different
//!   holders, and lost updates on the counter. Without quarantine the
//!   schedule must produce overlaps (the checker can fail); with it there
//!   must be none.
//! * Quarantine costs nothing per request: `INFO` runs once per connection.
//!
//! Each randomized run lasts [`DEFAULT_SECS`] seconds; set
//! `QUORUM_LOCK_TORTURE_SECS=<n>` for longer runs and
//! `QUORUM_LOCK_TORTURE_SEED=<u64>` to replay a fault schedule's random
//! choices (thread timing still varies). Figures are printed: run with
//! `--nocapture` to see them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)] // tests fail by panicking and print their figures

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorum_lock::{LockGuard, LockManager, NodeOutcome, RetryPolicy};

use support::RedisServers;
use support::proxy::Proxy;

/// Nodes in every scenario.
const NODES: usize = 5;
/// Independent clients in the randomized runs.
const CLIENTS: usize = 8;
/// Seconds per randomized run unless `QUORUM_LOCK_TORTURE_SECS` says more.
const DEFAULT_SECS: u64 = 12;
/// The one resource everybody fights over.
const RESOURCE: &str = "torture:resource";

/// Lock TTL (and `max_ttl`, so the quarantine is this plus drift) in the
/// randomized runs.
const TTL: Duration = Duration::from_millis(1000);
/// Per-node timeout in the randomized runs.
const NODE_TIMEOUT: Duration = Duration::from_millis(60);
/// How long one `lock` call may retry.
const LOCK_WAIT: Duration = Duration::from_millis(1500);
/// Holds that are long without being asked for by the fault schedule.
const LONG_HOLD_PERCENT: u64 = 3;
/// The fault schedule restarts a majority at least this often.
const MAJORITY_RESTART_EVERY: Duration = Duration::from_millis(2500);
/// A long hold ends this long before the guard's validity does.
const LONG_HOLD_MARGIN: Duration = Duration::from_millis(100);
/// The fault schedule restarts a majority only once a holder has at least
/// this much of its hold left (it waits at most [`HOLDER_WAIT`] for one).
const HOLDER_LEFT: Duration = Duration::from_millis(500);
const HOLDER_WAIT: Duration = Duration::from_secs(2);

/// TTL (and `max_ttl`) of the deterministic scenario.
const SCENARIO_TTL: Duration = Duration::from_secs(2);

/// Hang detector: a randomized run that has not finished this long after
/// its planned end kills its servers and exits the test process.
const HANG_GRACE: Duration = Duration::from_secs(120);

/// The tests of this file run one at a time even without
/// `--test-threads=1`: each one loads both cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// Deterministic scenario
// ---------------------------------------------------------------------------

/// A manager straight to the servers, with the scenario's TTL and one
/// attempt per call.
fn scenario_manager(servers: &RedisServers, quarantine: bool) -> LockManager {
    LockManager::builder()
        .redis_nodes(servers.urls())
        .unwrap()
        .ttl(SCENARIO_TTL)
        .max_ttl(SCENARIO_TTL)
        .node_timeout(Duration::from_millis(300))
        .retry(RetryPolicy::none())
        .restart_quarantine(quarantine)
        .build()
        .unwrap()
}

/// Polls `try_lock` until it succeeds (freshly started servers are
/// quarantined for `max_ttl` plus drift after their start), for at most
/// `limit`.
fn lock_within(locks: &LockManager, limit: Duration) -> LockGuard {
    let end = Instant::now() + limit;
    loop {
        match locks.try_lock(RESOURCE) {
            Ok(guard) => return guard,
            Err(e) if e.is_retryable() && Instant::now() < end => {
                thread::sleep(Duration::from_millis(25));
            }
            Err(e) => panic!("no lock within {limit:?}: {e}"),
        }
    }
}

/// The guard's deadline, bounded from above: `validity` is measured against
/// a `now` between the two readings.
fn deadline_upper_bound(guard: &LockGuard) -> Instant {
    let validity = guard.validity();
    Instant::now() + validity
}

fn token_on(server: &support::RedisServer) -> Option<Vec<u8>> {
    server.get(RESOURCE.as_bytes())
}

/// A holds the lock on all five nodes; three are killed and restarted
/// empty. Without quarantine, B wins a quorum on the three empty nodes while
/// A's guard is still valid: two valid holders at once.
#[test]
fn scenario_without_quarantine_b_wins_while_a_is_valid() {
    let _serial = serial();
    let mut servers = RedisServers::start(NODES);
    let a = scenario_manager(&servers, false);
    let b = scenario_manager(&servers, false);

    let guard_a = lock_within(&a, Duration::from_secs(5));
    assert!(a.flush(Duration::from_secs(5)));
    let a_token = guard_a.token().as_bytes().to_vec();
    for server in servers.iter() {
        assert_eq!(token_on(server).as_deref(), Some(&a_token[..]), "A on all");
    }
    let err = b.try_lock(RESOURCE).unwrap_err();
    assert!(
        err.is_contended(),
        "B is refused while all five hold A: {err}"
    );
    // B's releases after that refusal are queued: let them finish before
    // the restart so that none of B's operations runs into a dead server.
    assert!(b.flush(Duration::from_secs(5)));

    for server in servers.iter_mut().take(3) {
        server.kill9();
        server.restart();
    }
    let guard_b = b
        .try_lock(RESOURCE)
        .expect("without quarantine the three empty nodes give B a quorum");
    let (a_valid, b_valid) = (guard_a.is_valid(), guard_b.is_valid());
    eprintln!(
        "quarantine off: A valid {a_valid} ({:?} left), B valid {b_valid} ({:?} left)",
        guard_a.validity(),
        guard_b.validity()
    );
    assert!(
        a_valid && b_valid,
        "two valid holders at once: the violation quarantine prevents"
    );
    let b_token = guard_b.token().as_bytes().to_vec();
    for (i, server) in servers.iter().enumerate() {
        let expected = if i < 3 { &b_token } else { &a_token };
        assert_eq!(token_on(server).as_ref(), Some(expected), "node {i}");
    }
    drop(guard_a);
    drop(guard_b);
    assert!(a.flush(Duration::from_secs(5)) && b.flush(Duration::from_secs(5)));
    for server in servers.iter() {
        assert!(server.keys().is_empty(), "no key left on {}", server.url());
    }
}

/// The same scenario with quarantine on: right after the restart B is
/// refused and the three restarted nodes are reported `Quarantined`; B is
/// polled until it wins, and every success of B comes after A's validity
/// has ended.
#[test]
fn scenario_with_quarantine_b_is_refused_until_a_has_expired() {
    let _serial = serial();
    let mut servers = RedisServers::start(NODES);
    let a = scenario_manager(&servers, true);
    let b = scenario_manager(&servers, true);
    // The servers are as young as the test: wait out their quarantine.
    let guard_a = lock_within(&a, SCENARIO_TTL * 3);
    let a_end = deadline_upper_bound(&guard_a);
    assert!(a.flush(Duration::from_secs(5)));
    // B knows every server before the restart, so it witnesses the new
    // run ids (the other path, a first sight of a young server, is the one
    // A took above).
    let err = b.try_lock(RESOURCE).unwrap_err();
    assert!(err.is_retryable(), "{err}");

    // B's release after that refusal is queued: let it finish before the
    // restart so no operation of B's runs into a dead server.
    assert!(b.flush(Duration::from_secs(5)));

    let restarted: Vec<String> = servers.iter().take(3).map(|s| s.url()).collect();
    for server in servers.iter_mut().take(3) {
        server.kill9();
        server.restart();
    }
    assert!(guard_a.is_valid(), "the restarts took less than A's TTL");

    // Poll B until it wins; no success may come before A's deadline. While
    // A is valid the refusals must name restarted nodes as quarantined (a
    // round ends as soon as it is decided, so one report may leave some of
    // them not awaited).
    let poll_end = a_end + SCENARIO_TTL * 3;
    let mut attempts = 0u32;
    let mut quarantined_seen: Vec<String> = Vec::new();
    let mut first_refusal = None;
    let b_at = loop {
        attempts += 1;
        let started = Instant::now();
        match b.try_lock(RESOURCE) {
            Ok(guard_b) => {
                let at = Instant::now();
                let a_valid = guard_a.is_valid();
                eprintln!(
                    "quarantine on: B won at attempt {attempts}, {:?} after A's deadline \
                     (that attempt started {:?} after it)",
                    at.saturating_duration_since(a_end),
                    started.saturating_duration_since(a_end),
                );
                assert!(
                    at >= a_end && !a_valid,
                    "B won {:?} before A's validity ended",
                    a_end.saturating_duration_since(at)
                );
                drop(guard_b);
                break at;
            }
            Err(e) if e.is_retryable() => {
                let report = e.report().expect("a refused lock has a report");
                if Instant::now() < a_end {
                    for name in report.nodes_where(|o| matches!(o, NodeOutcome::Quarantined { .. }))
                    {
                        if !quarantined_seen.iter().any(|n| n == name) {
                            quarantined_seen.push(name.to_owned());
                        }
                    }
                    first_refusal.get_or_insert_with(|| e.to_string());
                }
                assert!(Instant::now() < poll_end, "B never won: {e}");
                thread::sleep(Duration::from_millis(25));
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    };
    eprintln!(
        "quarantine on, first refusal after the restart: {}",
        first_refusal.as_deref().unwrap_or("none")
    );
    eprintln!("quarantine on, nodes reported quarantined while A was valid: {quarantined_seen:?}");
    assert!(
        !quarantined_seen.is_empty(),
        "B's refusals must show the restarted nodes quarantined"
    );
    for name in &quarantined_seen {
        assert!(
            restarted
                .iter()
                .any(|url| url.contains(name.as_str()) || name.contains(url.as_str())),
            "only restarted nodes are quarantined, not {name} (restarted: {restarted:?})"
        );
    }
    assert!(b_at >= a_end);
    drop(guard_a);
    assert!(a.flush(Duration::from_secs(5)) && b.flush(Duration::from_secs(5)));
}

// ---------------------------------------------------------------------------
// Quarantine on the common path
// ---------------------------------------------------------------------------

/// `INFO` calls and connections received, read on one long-lived
/// inspection connection (one `INFO` per reading).
fn info_and_connections(conn: &mut redis::Connection) -> (u64, u64) {
    let text: String = redis::cmd("INFO")
        .arg("stats")
        .arg("commandstats")
        .query(conn)
        .unwrap();
    let mut info_calls = 0;
    let mut connections = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(stats) = line.strip_prefix("cmdstat_info:") {
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .unwrap();
            info_calls = calls.parse().unwrap();
        } else if let Some(n) = line.strip_prefix("total_connections_received:") {
            connections = Some(n.parse().unwrap());
        }
    }
    (info_calls, connections.expect("total_connections_received"))
}

/// Quarantine reads the server's identity when a connection opens, not per
/// request: over 200 lock/release cycles (and the polling while the young
/// servers were quarantined) each server sees exactly one `INFO` per
/// connection the manager opened, and only a handful of connections.
#[test]
fn quarantine_reads_info_once_per_connection_not_per_request() {
    let _serial = serial();
    let servers = RedisServers::start(3);
    let mut inspect: Vec<redis::Connection> = servers.iter().map(|s| s.conn()).collect();
    let before: Vec<(u64, u64)> = inspect.iter_mut().map(info_and_connections).collect();

    let ttl = Duration::from_secs(1);
    let locks = LockManager::builder()
        .redis_nodes(servers.urls())
        .unwrap()
        .ttl(ttl)
        .max_ttl(ttl)
        .node_timeout(Duration::from_millis(300))
        .retry(RetryPolicy::none())
        .restart_quarantine(true)
        .build()
        .unwrap();
    drop(lock_within(&locks, ttl * 4));
    const CYCLES: usize = 200;
    for i in 0..CYCLES {
        let guard = locks
            .try_lock(RESOURCE)
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        guard.release().unwrap();
    }
    assert!(locks.flush(Duration::from_secs(5)));

    for (i, conn) in inspect.iter_mut().enumerate() {
        let after = info_and_connections(conn);
        // The first reading's own INFO is counted after it ran.
        let info_calls = after.0 - before[i].0 - 1;
        let connections = after.1 - before[i].1;
        eprintln!(
            "node {i}: {info_calls} INFO calls, {connections} connections opened, \
             {CYCLES} lock/release cycles"
        );
        assert_eq!(
            info_calls, connections,
            "node {i}: one INFO per connection, none per request"
        );
        assert!(
            connections <= 4,
            "node {i}: {connections} connections for {CYCLES} cycles: pooling broke"
        );
    }
}

// ---------------------------------------------------------------------------
// Randomized runs
// ---------------------------------------------------------------------------

/// splitmix64: small, seedable, good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

fn run_secs() -> u64 {
    env_u64("QUORUM_LOCK_TORTURE_SECS").unwrap_or(DEFAULT_SECS)
}

fn seed() -> u64 {
    env_u64("QUORUM_LOCK_TORTURE_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// One holder's time with the lock: from `lock` returning to the start of
/// its release, cut at the guard's validity.
#[derive(Debug, Clone, Copy)]
struct Window {
    client: usize,
    start: Instant,
    end: Instant,
}

/// What the clients and the checker share.
struct Shared {
    stop: AtomicBool,
    windows: Mutex<Vec<Window>>,
    /// Per client: when its current hold is planned to end.
    holding: Mutex<[Option<Instant>; CLIENTS]>,
    /// Set by the fault schedule before it restarts a majority: the next
    /// client to get the lock holds it until shortly before its validity
    /// ends, so the restart hits a live holder.
    want_long_hold: AtomicBool,
    /// The shared resource: read, pause, write back plus one.
    counter: AtomicU64,
    /// Writes done while the writer's guard was valid right before.
    increments: AtomicU64,
    /// Writes that landed after the writer's validity had ended (its thread
    /// was descheduled between the check and the write): the process-pause
    /// hazard, not a lock failure.
    late_writes: AtomicU64,
    acquisitions: AtomicU64,
    failed_locks: AtomicU64,
    failed_releases: AtomicU64,
}

impl Shared {
    fn new() -> Self {
        Self {
            stop: AtomicBool::new(false),
            windows: Mutex::new(Vec::new()),
            holding: Mutex::new([None; CLIENTS]),
            want_long_hold: AtomicBool::new(false),
            counter: AtomicU64::new(0),
            increments: AtomicU64::new(0),
            late_writes: AtomicU64::new(0),
            acquisitions: AtomicU64::new(0),
            failed_locks: AtomicU64::new(0),
            failed_releases: AtomicU64::new(0),
        }
    }

    /// How much of the longest current hold is left, if anyone holds.
    fn holder_left(&self) -> Option<Duration> {
        let now = Instant::now();
        self.holding
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .map(|end| end.saturating_duration_since(now))
            .max()
    }
}

fn client_manager(urls: &[String], quarantine: bool) -> LockManager {
    LockManager::builder()
        .redis_nodes(urls)
        .unwrap()
        .ttl(TTL)
        .max_ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .retry(
            RetryPolicy::new()
                .attempts(u32::MAX)
                .max_wait(LOCK_WAIT)
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(25)),
        )
        .restart_quarantine(quarantine)
        .build()
        .unwrap()
}

/// One client: lock, critical section, release, until told to stop.
fn client(id: usize, locks: &LockManager, shared: &Shared, seed: u64) {
    let mut rng = Rng::new(seed);
    while !shared.stop.load(Ordering::Relaxed) {
        match locks.lock(RESOURCE) {
            Ok(guard) => hold(id, guard, shared, &mut rng),
            Err(e) if e.is_retryable() => {
                shared.failed_locks.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("client {id}: unexpected error: {e}"),
        }
    }
    // Let queued releases finish before the servers go away.
    let _ = locks.flush(Duration::from_secs(2));
}

/// The critical section: read-modify-write steps on the shared counter,
/// each write made only if the guard is still valid right before it (what
/// a careful user does). Most holds are a step or two; some (when the fault
/// schedule asks, and a few at random) last until shortly before the
/// validity ends, so that faults hit a live holder.
fn hold(id: usize, guard: LockGuard, shared: &Shared, rng: &mut Rng) {
    let start = Instant::now();
    let valid_until = start + guard.validity();
    shared.acquisitions.fetch_add(1, Ordering::Relaxed);
    let long =
        shared.want_long_hold.swap(false, Ordering::Relaxed) || rng.percent(LONG_HOLD_PERCENT);
    let planned_end = if long {
        valid_until
            .checked_sub(LONG_HOLD_MARGIN)
            .unwrap_or(start)
            .max(start)
    } else {
        start + rng.millis(1, 5)
    };
    shared.holding.lock().unwrap()[id] = Some(planned_end);
    loop {
        if !guard.is_valid() {
            break;
        }
        let seen = shared.counter.load(Ordering::SeqCst);
        thread::sleep(rng.millis(1, 3));
        if !guard.is_valid() {
            break;
        }
        shared.counter.store(seen + 1, Ordering::SeqCst);
        shared.increments.fetch_add(1, Ordering::Relaxed);
        if Instant::now() >= valid_until {
            shared.late_writes.fetch_add(1, Ordering::Relaxed);
        }
        if Instant::now() >= planned_end {
            break;
        }
        thread::sleep(
            rng.millis(2, 15)
                .min(planned_end.saturating_duration_since(Instant::now())),
        );
    }
    let released_at = Instant::now();
    shared.holding.lock().unwrap()[id] = None;
    shared.windows.lock().unwrap().push(Window {
        client: id,
        start,
        end: released_at.min(valid_until),
    });
    // Not a failure of the test: a release without quorum leaves keys
    // that expire with the TTL.
    if guard.release().is_err() {
        shared.failed_releases.fetch_add(1, Ordering::Relaxed);
    }
}

/// Faults injected, by kind.
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    /// One node killed (`kill -9`) and restarted empty at once.
    restart_one: u64,
    /// Three nodes killed and restarted together...
    restart_majority: u64,
    /// ...of which while a client held the lock with time left.
    restart_majority_with_holder: u64,
    /// Longest majority restart (kill to all three answering `PING`).
    slowest_majority_restart: Duration,
    /// `SIGSTOP`, a pause, `SIGCONT`.
    sigstop: u64,
    /// The node's proxy delays each request chunk for a while.
    delay: u64,
    /// The node's proxy answers nothing for a while.
    blackhole: u64,
}

impl Faults {
    fn total(&self) -> u64 {
        self.restart_one + self.restart_majority + self.sigstop + self.delay + self.blackhole
    }
}

/// Sets the stop flag when dropped, so the clients end even when the fault
/// schedule panics (the scope joins them before the panic goes on).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The servers' current pids, for the hang detector.
fn record_pids(servers: &RedisServers, pids: &Mutex<Vec<u32>>) {
    *pids.lock().unwrap() = servers.iter().map(support::RedisServer::pid).collect();
}

/// Kills the servers (by pid) and exits the process if the run has not
/// reported back within `limit`: a hung run must not hang CI or leave
/// servers behind. Dropping the returned sender (also on a panic) disarms
/// it.
fn hang_detector(pids: Arc<Mutex<Vec<u32>>>, limit: Duration) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    thread::Builder::new()
        .name("torture-hang-detector".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let pids = pids
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                eprintln!("torture run hung for {limit:?}: killing servers {pids:?} and exiting");
                for pid in pids.iter() {
                    let _ = std::process::Command::new("kill")
                        .arg("-KILL")
                        .arg(pid.to_string())
                        .status();
                }
                std::process::exit(3);
            }
        })
        .unwrap();
    tx
}

/// The fault schedule, until `deadline`: every 100-400 ms one fault, one
/// at a time (a paused node is resumed, a proxy set back to pass, before
/// the next). Kinds, by weight: kill -9 and restart of one node 20 %, of
/// three nodes under a holder 20 % (and at least every
/// [`MAJORITY_RESTART_EVERY`]), `SIGSTOP` for 50-600 ms 20 %, proxy delay
/// of 20-150 ms per request chunk for 200-800 ms 20 %, proxy blackhole for
/// 100-600 ms 20 %.
fn fault_schedule(
    servers: &mut RedisServers,
    proxies: &[Proxy],
    shared: &Shared,
    rng: &mut Rng,
    deadline: Instant,
    pids: &Mutex<Vec<u32>>,
) -> Faults {
    let mut faults = Faults::default();
    let mut last_majority = Instant::now();
    loop {
        let gap = rng.millis(100, 400);
        if Instant::now() + gap >= deadline {
            break;
        }
        thread::sleep(gap);
        let node = rng.below(NODES as u64) as usize;
        let mut kind = rng.below(100);
        if last_majority.elapsed() >= MAJORITY_RESTART_EVERY {
            kind = 20; // the deterministic pattern, repeated
        }
        match kind {
            0..20 => {
                servers[node].restart(); // kill -9, then start again (empty)
                faults.restart_one += 1;
            }
            20..40 => {
                restart_majority(servers, shared, rng, deadline, &mut faults);
                last_majority = Instant::now();
            }
            40..60 => {
                servers[node].pause();
                thread::sleep(rng.millis(50, 600));
                servers[node].resume();
                faults.sigstop += 1;
            }
            60..80 => {
                proxies[node].delay(rng.millis(20, 150));
                thread::sleep(rng.millis(200, 800));
                proxies[node].pass();
                faults.delay += 1;
            }
            _ => {
                proxies[node].blackhole();
                thread::sleep(rng.millis(100, 600));
                proxies[node].pass();
                faults.blackhole += 1;
            }
        }
        record_pids(servers, pids);
    }
    faults
}

/// Kills and restarts three nodes at once, preferring the ones that hold
/// the lock key, after asking for a long hold and waiting (bounded) for a
/// holder with at least [`HOLDER_LEFT`] of its hold left: the pattern that
/// lets a second client in when the restarted nodes vote at once.
fn restart_majority(
    servers: &mut RedisServers,
    shared: &Shared,
    rng: &mut Rng,
    deadline: Instant,
    faults: &mut Faults,
) {
    shared.want_long_hold.store(true, Ordering::Relaxed);
    let wait_end = (Instant::now() + HOLDER_WAIT).min(deadline);
    let mut with_holder = false;
    while Instant::now() < wait_end {
        if shared.holder_left().is_some_and(|left| left >= HOLDER_LEFT) {
            with_holder = true;
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    shared.want_long_hold.store(false, Ordering::Relaxed);
    let mut order: Vec<usize> = (0..NODES).collect();
    for i in (1..NODES).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    // Holders of the key first, so that the restart empties a majority.
    order.sort_by_key(|&i| servers[i].get(RESOURCE.as_bytes()).is_none());
    let chosen = &order[..3];
    let started = Instant::now();
    thread::scope(|scope| {
        for (i, server) in servers.iter_mut().enumerate() {
            if chosen.contains(&i) {
                scope.spawn(move || server.restart());
            }
        }
    });
    faults.slowest_majority_restart = faults.slowest_majority_restart.max(started.elapsed());
    faults.restart_majority += 1;
    if with_holder {
        faults.restart_majority_with_holder += 1;
    }
}

/// What a randomized run measured.
#[derive(Debug)]
struct Figures {
    acquisitions: u64,
    failed_locks: u64,
    failed_releases: u64,
    faults: Faults,
    overlaps: u64,
    longest_overlap: Duration,
    first_overlap: Option<(Window, Window)>,
    increments: u64,
    counter: u64,
    lost_updates: u64,
    late_writes: u64,
}

/// Pairs of windows of different clients that intersect, the longest
/// intersection, and the earliest such pair.
fn count_overlaps(windows: &mut [Window]) -> (u64, Duration, Option<(Window, Window)>) {
    windows.sort_by_key(|w| w.start);
    let mut count = 0;
    let mut longest = Duration::ZERO;
    let mut first = None;
    for (i, a) in windows.iter().enumerate() {
        for b in &windows[i + 1..] {
            if b.start >= a.end {
                break; // sorted by start: no later window meets `a` either
            }
            if a.client != b.client && b.start < b.end {
                count += 1;
                longest = longest.max(a.end.min(b.end) - b.start);
                first.get_or_insert((*a, *b));
            }
        }
    }
    (count, longest, first)
}

/// One randomized run: five servers behind five proxies, eight clients,
/// the fault schedule, then the checker.
fn torture(quarantine: bool) -> Figures {
    let secs = run_secs();
    let seed = seed();
    let label = if quarantine {
        "quarantine ON"
    } else {
        "quarantine OFF"
    };
    eprintln!(
        "torture [{label}]: {NODES} nodes, {CLIENTS} clients, {secs} s, TTL {TTL:?}, \
         node timeout {NODE_TIMEOUT:?}, seed {seed} (QUORUM_LOCK_TORTURE_SEED={seed} replays the \
         fault choices)"
    );
    let mut servers = RedisServers::start(NODES);
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, &pids);
    let hang = hang_detector(Arc::clone(&pids), Duration::from_secs(secs) + HANG_GRACE);

    let shared = Shared::new();
    let managers: Vec<LockManager> = (0..CLIENTS)
        .map(|_| client_manager(&urls, quarantine))
        .collect();
    let mut rng = Rng::new(seed);
    let client_seeds: Vec<u64> = (0..CLIENTS).map(|_| rng.next_u64()).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let faults = thread::scope(|scope| {
        let _stop = StopOnDrop(&shared.stop);
        for (id, locks) in managers.iter().enumerate() {
            let (shared, seed) = (&shared, client_seeds[id]);
            thread::Builder::new()
                .name(format!("torture-client-{id}"))
                .spawn_scoped(scope, move || client(id, locks, shared, seed))
                .unwrap();
        }
        fault_schedule(&mut servers, &proxies, &shared, &mut rng, deadline, &pids)
    });
    let run_time = started.elapsed();
    drop(managers);
    let _ = hang.send(());

    let mut windows = std::mem::take(&mut *shared.windows.lock().unwrap());
    let (overlaps, longest_overlap, first_overlap) = count_overlaps(&mut windows);
    let increments = shared.increments.load(Ordering::SeqCst);
    let counter = shared.counter.load(Ordering::SeqCst);
    let figures = Figures {
        acquisitions: shared.acquisitions.load(Ordering::SeqCst),
        failed_locks: shared.failed_locks.load(Ordering::SeqCst),
        failed_releases: shared.failed_releases.load(Ordering::SeqCst),
        faults,
        overlaps,
        longest_overlap,
        first_overlap,
        increments,
        counter,
        lost_updates: increments - counter,
        late_writes: shared.late_writes.load(Ordering::SeqCst),
    };
    let f = &figures.faults;
    eprintln!(
        "torture [{label}] figures after {run_time:.1?} (seed {seed}):\n\
         \x20 acquisitions {} (lock calls that gave up: {}, releases without quorum: {})\n\
         \x20 faults {}: kill -9 + restart of one node {}, of three nodes {} ({} while a holder \
         had >= {HOLDER_LEFT:?} left; slowest {:.0?}), SIGSTOP {}, proxy delay {}, proxy blackhole {}\n\
         \x20 overlaps {} (longest {:.1?}), counter {} of {} increments: lost updates {}, \
         writes after validity {}",
        figures.acquisitions,
        figures.failed_locks,
        figures.failed_releases,
        f.total(),
        f.restart_one,
        f.restart_majority,
        f.restart_majority_with_holder,
        f.slowest_majority_restart,
        f.sigstop,
        f.delay,
        f.blackhole,
        figures.overlaps,
        figures.longest_overlap,
        figures.counter,
        figures.increments,
        figures.lost_updates,
        figures.late_writes,
    );
    if let Some((a, b)) = figures.first_overlap {
        eprintln!(
            "  first overlap: client {} held [{:.3?}, {:.3?}), client {} held [{:.3?}, {:.3?}) \
             (times from the run's start)",
            a.client,
            a.start.saturating_duration_since(started),
            a.end.saturating_duration_since(started),
            b.client,
            b.start.saturating_duration_since(started),
            b.end.saturating_duration_since(started),
        );
    }
    figures
}

/// Without quarantine the fault schedule (restarting a majority while a
/// client holds the lock) must let a second holder in: the checker sees
/// overlapping validity windows. This proves the checker can fail.
#[test]
fn randomized_faults_without_quarantine_produce_overlaps() {
    let _serial = serial();
    let figures = torture(false);
    assert!(figures.acquisitions > 0, "no client ever got the lock");
    assert!(
        figures.overlaps > 0,
        "restarting a majority under a holder without quarantine must produce overlaps: \
         {figures:?}"
    );
}

/// With quarantine the same fault schedule never lets two holders overlap,
/// and no update of the shared counter is lost, over the whole run.
#[test]
fn randomized_faults_with_quarantine_never_overlap() {
    let _serial = serial();
    let figures = torture(true);
    assert!(
        figures.acquisitions >= 10,
        "too few acquisitions to mean anything: {figures:?}"
    );
    assert_eq!(
        figures.overlaps, 0,
        "two holders at once with quarantine on: a safety bug. {figures:?}"
    );
    assert_eq!(
        figures.lost_updates, 0,
        "lost updates with quarantine on: {figures:?}"
    );
}
