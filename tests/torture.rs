//! Fault-injection torture test on five real `redis-server` nodes.
//!
//! * Deterministic scenario: A holds the lock on all five nodes, three of
//!   them are killed (`kill -9`) and restarted empty, B tries to lock. With
//!   restart quarantine off B wins while A's guard is still valid (the
//!   violation the Redlock description warns about); with it on B is refused
//!   until A's TTL has passed.
//! * Randomized runs: client threads of several families lock one
//!   resource, do read-modify-write steps on a shared counter (each step
//!   only if the guard is valid right before it) and let go, while a fault
//!   schedule kills and restarts nodes (sometimes a majority, while someone
//!   holds the lock), freezes them with `SIGSTOP` and delays or blackholes
//!   their traffic in a TCP proxy per node. The families: plain clients
//!   (`lock`, a short or long hold, `release`); auto-extended holders whose
//!   holds last several TTLs; holders that also `extend` by hand (sometimes
//!   to a shorter TTL) while the watchdog extends the same guard; groups of
//!   threads sharing one manager (local turns, hand-over when a guard is
//!   dropped, some holds ended by `release`); a client that builds a new
//!   manager right after each restart (first contact with a just-restarted
//!   server). Every manager is built with `.ttl(TTL).max_ttl(TTL)`. Some
//!   plain holders stall on purpose between a check and a write until past
//!   their deadline (a process pause), and wait there (bounded) until
//!   another client has written the counter: their late write then loses
//!   that update, the hazard plain Redlock cannot exclude.
//! * Fencing, in the same randomized runs: fenced clients (each its own
//!   manager, fencing on) lock a resource of their own on the same nodes
//!   and do read-modify-write steps on a fenced register, a counter on a
//!   separate, never faulted `redis-server`, read and written only through
//!   Lua scripts that refuse an operation whose fence is lower than the
//!   highest the register has seen ([`REGISTER_READ`], [`REGISTER_WRITE`]).
//!   Some of their holds pause past their validity (a GC pause) between
//!   the read and the write, until a newer holder has used the register
//!   (bounded): the register must refuse that stale write, and the fenced
//!   counter must lose no update, pauses or not.
//! * A checker records every holder's window on the process' monotonic
//!   clock, up to the deadline the holder last observed (so an extended
//!   lock's window covers its claimed validity), counts overlaps between
//!   different holders of one resource, and checks that a fenced hold that
//!   began after another one ended has a higher fence. Lost updates on the
//!   unfenced counter are counted apart when a writer was late (its write
//!   completed after its claimed deadline: a descheduled process, not a
//!   lock failure). Without quarantine the schedule must produce overlaps
//!   (the checker can fail); with it there must be none, no update lost
//!   within validity, and on the fenced counter no update lost at all,
//!   pauses included (while the unfenced counter loses the updates its
//!   paused writers overwrite).
//! * Coverage is scheduled, not drawn: the run opens with the families
//!   that share the one resource taking turns ([`OPENING`]): one
//!   acquisition each of plain (its hold stalls), auto-extended,
//!   manual-extend (every such hold calls `extend` first thing) and
//!   shared-manager clients, while the others do not try; then everybody
//!   competes. Which holds stall, pause, hold long, end by `drop`, check
//!   with `check()`, auto-extend (shared managers; all of them until the
//!   watchdog has extended some hold) or ask a shorter TTL is round-robin
//!   per client ([`every`]); the first fenced hold pauses. Only durations
//!   and the fault schedule are random.
//! * Quarantine costs nothing per request: `INFO` runs once per connection.
//!
//! Each randomized run lasts [`DEFAULT_SECS`] seconds; set
//! `QUORUM_LOCK_TORTURE_SECS=<n>` for longer runs and
//! `QUORUM_LOCK_TORTURE_SEED=<u64>` to replay the random choices (the
//! fault schedule, durations; thread timing still varies). Figures are printed: run with
//! `--nocapture` to see them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)] // tests fail by panicking and print their figures

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorum_lock::{LockGuard, LockManager, LockOptions, NodeOutcome, RetryPolicy};

use testkit::proxy::Proxy;
use testkit::{RedisServers, Rng};

/// Nodes in every scenario.
const NODES: usize = 5;
/// Plain clients (each its own manager) in the randomized runs.
const PLAIN_CLIENTS: usize = 3;
/// Threads per shared manager in the randomized runs (one manager per
/// entry).
const SHARED_GROUPS: [usize; 2] = [3, 2];
/// How long the `lock` calls of the auto-extended, manual-extend and
/// late-manager clients may retry: longer than the others', so that these
/// rarer clients seldom give up (right after a restart the late-manager
/// client may have to outwait a quarantine and a holder).
const PATIENT_WAIT: Duration = Duration::from_millis(3000);
/// Late-manager clients (each builds its own managers).
const LATE_CLIENTS: usize = 2;
/// Fenced clients (each its own manager): the first one's manager has
/// fencing on by default (`LockManagerBuilder::fencing`), the others ask
/// for it per lock (`LockOptions::fencing`).
const FENCED_CLIENTS: usize = 3;
/// Every this many holds of a fenced client (about 15 %), the hold pauses
/// between its read and its write of the register until past its validity
/// (the first fenced hold of the run always does).
const FENCED_PAUSE_EVERY: u64 = 7;
/// How far past the validity a pause sleeps at least, in milliseconds
/// (lower and upper bound) before it waits for a newer holder.
const PAUSE_PAST: (u64, u64) = (50, 300);
/// After sleeping past its deadline, a paused holder (fenced or plain)
/// waits at most this long for another holder to use the resource, so
/// that its late write meets a newer one (the case a pause makes harmful).
const TAKEOVER_WAIT: Duration = Duration::from_millis(2000);
/// Acquisitions made with each manager a late-manager client builds.
const LATE_ACQUISITIONS: usize = 2;
/// A late-manager client makes its first contact at once after a
/// restart, or (every other manager) up to this much later.
const LATE_CONTACT_MAX: Duration = Duration::from_millis(1200);
/// Seconds per randomized run unless `QUORUM_LOCK_TORTURE_SECS` says more.
const DEFAULT_SECS: u64 = 15;
/// The one resource everybody fights over.
const RESOURCE: &str = "torture:resource";
/// The lock of the fenced clients: their own resource (the fenced register
/// is what it protects), so that they get the lock often enough, on the
/// same nodes and under the same faults as the others.
const FENCED_RESOURCE: &str = "torture:fenced";
/// The fenced register's keys on its own server: the highest fence seen,
/// and the counter.
const REGISTER_FENCE: &str = "register:fence";
const REGISTER_VALUE: &str = "register:value";
/// The register's read: refused (-1) when the register has seen a higher
/// fence than `ARGV[1]`; else it raises the fence seen to `ARGV[1]` and
/// returns the counter. A read must be fenced too, not only the write: with
/// fenced writes alone, a paused holder's stale write can land between a
/// newer holder's read and its write (the register has not seen the newer
/// fence yet, so it accepts), and the newer write then overwrites it: a
/// lost update with both writes accepted.
const REGISTER_READ: &str = "\
     local highest = tonumber(redis.call('get', KEYS[1]) or '0') \
     if highest > tonumber(ARGV[1]) then return -1 end \
     if highest < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end \
     return tonumber(redis.call('get', KEYS[2]) or '0')";
/// The register's write of `ARGV[2]` with fence `ARGV[1]`: refused (-1)
/// when the register has seen a higher fence (the same holder may write
/// again with its fence); else it records the fence, writes the value and
/// returns the value it replaced (so the checker sees interfering writes).
const REGISTER_WRITE: &str = "\
     if tonumber(redis.call('get', KEYS[1]) or '0') > tonumber(ARGV[1]) then return -1 end \
     redis.call('set', KEYS[1], ARGV[1]) \
     local replaced = tonumber(redis.call('get', KEYS[2]) or '0') \
     redis.call('set', KEYS[2], ARGV[2]) \
     return replaced";
/// Fences stay below this (`LockGuard::fence`).
const FENCE_LIMIT: u64 = 1 << 53;

/// Lock TTL (and `max_ttl`, so the quarantine is this plus drift) in the
/// randomized runs, in milliseconds.
const TTL_MS: u64 = 1000;
const TTL: Duration = Duration::from_millis(TTL_MS);
/// The shorter TTL that manual extends often ask for.
const SHORT_EXTEND_TTL: Duration = Duration::from_millis(300);
/// Per-node timeout in the randomized runs.
const NODE_TIMEOUT: Duration = Duration::from_millis(60);
/// How long one `lock` call may retry.
const LOCK_WAIT: Duration = Duration::from_millis(1500);
/// Every this many plain holds of a client (about 8 %), the holder stalls
/// once between its validity check and its write until past its deadline
/// (a simulated process pause), so that late writers occur and the checker
/// must tell them from overlaps (the plain hold that opens the run always
/// does, see [`OPENING`]).
const STALL_EVERY: u64 = 12;
/// Every this many holds of a client (about 3 %), the hold is long without
/// being asked for by the fault schedule.
const LONG_HOLD_EVERY: u64 = 33;
/// The opening of a randomized run: the families that lock [`RESOURCE`]
/// with long-lived managers take turns in this order, each until one of
/// its clients has acquired the lock, while the others do not try. Then
/// everybody competes. Coverage is thus scheduled, not left to who wins
/// the lock: a family with one client can lose every race of a run. (A
/// turn ends at the acquisition, not later: a holder that waited for its
/// watchdog would be the only holder the fault schedule's majority
/// restart can aim at, so the turn could last the whole run.)
const OPENING: [Family; 4] = [
    Family::Plain,
    Family::AutoExtend,
    Family::ManualExtend,
    Family::SharedManager,
];
/// How often a client waiting for its family's turn in the opening looks.
const OPENING_POLL: Duration = Duration::from_millis(2);
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

fn token_on(server: &testkit::RedisServer) -> Option<Vec<u8>> {
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

/// Round-robin choice: true on every `period`-th turn, the first time at
/// turn `period - 1 - offset % period` (clients with different offsets do
/// not move in step). Which holds get an ingredient is scheduled, so
/// every ingredient shows in a run with enough holds; only durations are
/// drawn at random.
fn every(turn: u64, period: u64, offset: usize) -> bool {
    (turn + offset as u64 + 1).is_multiple_of(period)
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

/// The kinds of client in the randomized runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// Own manager; `lock`, a short (sometimes long) critical section,
    /// `release`.
    Plain,
    /// Own manager; auto-extended holds of several TTLs.
    AutoExtend,
    /// Own manager; auto-extended holds on which the holder also calls
    /// `extend` itself, sometimes with a TTL shorter than the current one:
    /// two sources of extends on one guard.
    ManualExtend,
    /// Several threads of one manager: local turns, hand-over on drop.
    SharedManager,
    /// Builds a new manager (first contact) right after a restart of the
    /// fault schedule and uses it for a few acquisitions.
    LateManager,
    /// Own manager, fenced locks; read-modify-write steps on the fenced
    /// register, sometimes pausing past the validity before the write.
    Fenced,
}

impl Family {
    const ALL: [Self; 6] = [
        Self::Plain,
        Self::AutoExtend,
        Self::ManualExtend,
        Self::SharedManager,
        Self::LateManager,
        Self::Fenced,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::AutoExtend => "auto-extended",
            Self::ManualExtend => "manual-extend",
            Self::SharedManager => "shared-manager",
            Self::LateManager => "late-manager",
            Self::Fenced => "fenced",
        }
    }
}

/// One client thread of a randomized run, and the manager it uses (the
/// late-manager client builds its own).
#[derive(Debug, Clone, Copy)]
struct ClientSpec {
    family: Family,
    /// Index into the run's managers; `None` for a late-manager client.
    manager: Option<usize>,
    /// For shared-manager threads: which group (manager) they belong to;
    /// for fenced clients, which of them it is.
    group: Option<usize>,
}

/// The clients of a randomized run and how many long-lived managers they
/// use: [`PLAIN_CLIENTS`] plain clients, one auto-extended, one
/// manual-extend (each its own manager), [`SHARED_GROUPS`] managers with
/// several threads each, [`LATE_CLIENTS`] late-manager clients,
/// [`FENCED_CLIENTS`] fenced clients (each its own manager). Every manager
/// is built by [`client_manager`], with `.ttl(TTL).max_ttl(TTL)`; the
/// returned flags say, per manager, whether it is built with fencing on.
fn roster() -> (Vec<ClientSpec>, Vec<bool>) {
    let mut clients = Vec::new();
    let mut managers = 0;
    let mut own = |family, clients: &mut Vec<ClientSpec>| {
        clients.push(ClientSpec {
            family,
            manager: Some(managers),
            group: None,
        });
        managers += 1;
    };
    for _ in 0..PLAIN_CLIENTS {
        own(Family::Plain, &mut clients);
    }
    own(Family::AutoExtend, &mut clients);
    own(Family::ManualExtend, &mut clients);
    for (group, &threads) in SHARED_GROUPS.iter().enumerate() {
        for _ in 0..threads {
            clients.push(ClientSpec {
                family: Family::SharedManager,
                manager: Some(managers),
                group: Some(group),
            });
        }
        managers += 1;
    }
    for _ in 0..LATE_CLIENTS {
        clients.push(ClientSpec {
            family: Family::LateManager,
            manager: None,
            group: None,
        });
    }
    let mut fenced_by_default = vec![false; managers];
    for nth in 0..FENCED_CLIENTS {
        clients.push(ClientSpec {
            family: Family::Fenced,
            manager: Some(managers),
            group: Some(nth),
        });
        managers += 1;
        fenced_by_default.push(nth == 0);
    }
    (clients, fenced_by_default)
}

/// Where a window's end came from: the last observation of the guard's
/// validity before the holder let go (or the let-go itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Right after `lock` returned.
    Acquired,
    /// The check before a read or a write of the counter.
    Step,
    /// Right after a successful manual `extend`.
    Extended,
    /// A manual `extend` that asked for less than the claim (it may have
    /// shortened the keys) and was not followed by a valid observation
    /// (it failed, or the guard was lost right after).
    ExtendAsked,
}

/// One holder's time with the lock: from `lock` returning to the moment it
/// let go (start of `release`, or `drop`), cut at the deadline the holder
/// last observed (its last valid observation plus the validity it had
/// then, a lower bound on the guard's deadline at that time). An extended
/// lock's window thus covers the validity it really claimed, and a lock
/// shortened by its holder no longer claims the old deadline.
#[derive(Debug, Clone, Copy)]
struct Window {
    client: usize,
    family: Family,
    start: Instant,
    end: Instant,
    /// Which observation set `end` (when the holder let go after its last
    /// claim, `end` is the let-go time instead).
    seen: Seen,
    /// The lock came by hand-over from another thread of the same manager.
    handed_over: bool,
    /// Successful extends of the guard (manual and automatic) by the end.
    extensions: u32,
    /// Manual extends that succeeded on this guard.
    manual_extends: u32,
    /// The guard's fence (fenced clients).
    fence: Option<u64>,
}

/// One write of the shared counter.
#[derive(Debug, Clone, Copy)]
struct Write {
    client: usize,
    /// Writes done before this writer's read (the sequence number it saw).
    read_seq: usize,
    /// The value it read, and the value its write replaced.
    seen: u64,
    replaced: u64,
    /// The clock read right after the write, in the same critical section
    /// of the counter.
    at: Instant,
    /// The deadline the writer observed at its check right before the
    /// write.
    deadline: Instant,
}

impl Write {
    /// The write completed after the writer's claimed deadline: its thread
    /// was descheduled between the validity check and the write (the
    /// process-pause hazard Redlock cannot exclude), not a lock failure.
    fn late(&self) -> bool {
        self.at >= self.deadline
    }
}

/// The shared resource: a counter that holders read, pause, and write back
/// plus one, with a log of every write for the checker.
#[derive(Debug, Default)]
struct Resource {
    value: u64,
    writes: Vec<Write>,
}

/// One write attempted on the fenced register.
#[derive(Debug, Clone, Copy)]
struct FencedWrite {
    client: usize,
    fence: u64,
    /// The value read (through the register, with the same fence).
    seen: u64,
    /// The value the write replaced, or `None` when the register refused
    /// it (it had seen a higher fence).
    replaced: Option<u64>,
    /// The clock read right after the register answered.
    at: Instant,
    /// The deadline the writer observed at its last check before the write.
    deadline: Instant,
}

impl FencedWrite {
    /// Completed after the writer's claimed deadline (a paused holder).
    fn late(&self) -> bool {
        self.at >= self.deadline
    }
}

/// The fenced register, as one client sees it: a connection to its server
/// and the two scripts.
struct Register {
    conn: redis::Connection,
}

impl Register {
    fn connect(url: &str) -> Self {
        Self {
            conn: testkit::connect(url),
        }
    }

    fn eval(&mut self, script: &str, fence: u64, value: Option<u64>) -> Option<u64> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script)
            .arg(2)
            .arg(REGISTER_FENCE)
            .arg(REGISTER_VALUE)
            .arg(fence);
        if let Some(value) = value {
            cmd.arg(value);
        }
        let answer: i64 = cmd
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("the fenced register failed: {e}"));
        u64::try_from(answer).ok()
    }

    /// The counter, or `None` when the register has seen a higher fence.
    fn read(&mut self, fence: u64) -> Option<u64> {
        self.eval(REGISTER_READ, fence, None)
    }

    /// Writes `value`; the value replaced, or `None` when refused.
    fn write(&mut self, fence: u64, value: u64) -> Option<u64> {
        self.eval(REGISTER_WRITE, fence, Some(value))
    }

    /// Whether a holder newer than `fence` has used the register, or the
    /// counter no longer holds `seen`.
    fn overtaken(&mut self, fence: u64, seen: u64) -> bool {
        let (highest, value): (Option<u64>, Option<u64>) = redis::cmd("MGET")
            .arg(REGISTER_FENCE)
            .arg(REGISTER_VALUE)
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("the fenced register failed: {e}"));
        highest.unwrap_or(0) > fence || value.unwrap_or(0) != seen
    }
}

/// Counters of the randomized runs, by family where it matters.
#[derive(Debug, Default)]
struct Counts {
    acquisitions: [AtomicU64; Family::ALL.len()],
    failed_locks: AtomicU64,
    failed_releases: AtomicU64,
    /// Holds that stopped early because the guard was no longer valid.
    cut_short: AtomicU64,
    manual_extends_ok: AtomicU64,
    manual_extends_failed: AtomicU64,
    /// Extends done by the watchdog (guard's extensions minus manual).
    auto_extends: AtomicU64,
    /// Shared-manager acquisitions that came by hand-over.
    hand_overs: AtomicU64,
    ended_by_drop: AtomicU64,
    ended_by_release: AtomicU64,
    late_managers: AtomicU64,
    /// Holders stalled between a check and a write past their deadline.
    stalls: AtomicU64,
    /// ...of which another client wrote the counter during the stall.
    stalls_overtaken: AtomicU64,
    /// Fenced holds paused between the read and the write past their
    /// deadline...
    fenced_pauses: AtomicU64,
    /// ...of which a newer holder used the register during the pause.
    fenced_pauses_overtaken: AtomicU64,
    /// Fenced reads the register refused (a newer fence was seen).
    refused_reads: AtomicU64,
}

/// What the clients and the checker share.
struct Shared {
    stop: AtomicBool,
    windows: Mutex<Vec<Window>>,
    /// Per client: when its current hold is planned to end.
    holding: Mutex<Vec<Option<Instant>>>,
    /// Set by the fault schedule before it restarts a majority: the next
    /// client to get the lock holds it until shortly before its validity
    /// ends (or, auto-extended, for its planned time), so the restart hits
    /// a live holder.
    want_long_hold: AtomicBool,
    /// Restarts done by the fault schedule so far (one node or three): the
    /// late-manager clients build a new manager when it changes.
    restarts: AtomicU64,
    resource: Mutex<Resource>,
    /// Every write attempted on the fenced register.
    fenced_writes: Mutex<Vec<FencedWrite>>,
    /// Per shared-manager group: the token of the guard a thread dropped
    /// last (a later acquisition with the same token was handed over).
    dropped_tokens: Vec<Mutex<Option<Vec<u8>>>>,
    /// Index into [`OPENING`] of the family whose turn it is;
    /// `OPENING.len()` once the opening is over.
    opening: AtomicUsize,
    /// Set by the first fenced hold of the run (it pauses).
    fenced_opened: AtomicBool,
    /// Set once a hold ended with an extension by the watchdog: until
    /// then every shared-manager hold is auto-extended.
    watchdog_seen: AtomicBool,
    counts: Counts,
}

impl Shared {
    fn new(clients: usize) -> Self {
        Self {
            stop: AtomicBool::new(false),
            windows: Mutex::new(Vec::new()),
            holding: Mutex::new(vec![None; clients]),
            want_long_hold: AtomicBool::new(false),
            restarts: AtomicU64::new(0),
            resource: Mutex::new(Resource::default()),
            fenced_writes: Mutex::new(Vec::new()),
            dropped_tokens: SHARED_GROUPS.iter().map(|_| Mutex::new(None)).collect(),
            opening: AtomicUsize::new(0),
            fenced_opened: AtomicBool::new(false),
            watchdog_seen: AtomicBool::new(false),
            counts: Counts::default(),
        }
    }

    /// Whether a client of `family` may try to lock [`RESOURCE`] now: the
    /// opening is over, or it is this family's turn.
    fn may_lock(&self, family: Family) -> bool {
        OPENING
            .get(self.opening.load(Ordering::SeqCst))
            .is_none_or(|turn| *turn == family)
    }

    /// A client of `family` acquired the lock: if it was the family's turn
    /// in the opening, the next family's turn begins. Whether this call
    /// ended the turn.
    fn exercised(&self, family: Family) -> bool {
        let Some(turn) = OPENING.iter().position(|f| *f == family) else {
            return false;
        };
        self.opening
            .compare_exchange(turn, turn + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
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

    /// Reads the counter: its value and how many writes were done so far.
    fn read(&self) -> (u64, usize) {
        let resource = self.resource.lock().unwrap();
        (resource.value, resource.writes.len())
    }

    /// Writes `seen + 1`, reads the clock right after, and logs the write.
    /// Returns whether it was late (completed after `deadline`).
    fn write(&self, client: usize, seen: u64, read_seq: usize, deadline: Instant) -> bool {
        let mut resource = self.resource.lock().unwrap();
        let replaced = resource.value;
        resource.value = seen + 1;
        let write = Write {
            client,
            read_seq,
            seen,
            replaced,
            at: Instant::now(),
            deadline,
        };
        resource.writes.push(write);
        write.late()
    }
}

fn client_manager(urls: &[String], quarantine: bool, fencing: bool) -> LockManager {
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
        .fencing(fencing)
        .build()
        .unwrap()
}

/// How one hold goes.
#[derive(Debug, Clone, Copy)]
struct HoldPlan {
    family: Family,
    /// The client's holds before this one (its round-robin turn).
    turn: u64,
    handed_over: bool,
    /// The guard is auto-extended: hold for `length` whatever the TTL.
    auto: bool,
    /// The holder also extends the guard itself.
    manual_extends: bool,
    /// Planned length (without auto-extension a long hold, when asked for,
    /// lasts until shortly before the validity ends instead).
    length: Duration,
    /// Pause between steps.
    gap: (u64, u64),
    /// Let go by `drop` (hand-over path) instead of `release`.
    drop_it: bool,
    /// Check with `guard.check()` (else `guard.is_valid()`).
    via_check: bool,
    /// Stall once between a check and the write until past the claimed
    /// deadline (a process pause): the write is late.
    stall: bool,
}

impl HoldPlan {
    /// The `turn`-th hold of a client: `length` without auto-extension,
    /// checked with `is_valid`, ended by `release`.
    fn short(family: Family, turn: u64, length: Duration) -> Self {
        Self {
            family,
            turn,
            handed_over: false,
            auto: false,
            manual_extends: false,
            length,
            gap: (2, 15),
            drop_it: false,
            via_check: false,
            stall: false,
        }
    }
}

/// The deadline the guard claims now, bounded from below (the clock is
/// read before `validity`, which measures against a later `now`), or
/// `None` when it is not valid.
fn observe(guard: &LockGuard, via_check: bool) -> Option<Instant> {
    let valid = if via_check {
        guard.check().is_ok()
    } else {
        guard.is_valid()
    };
    if !valid {
        return None;
    }
    let before = Instant::now();
    let left = guard.validity();
    (!left.is_zero()).then(|| before + left)
}

/// The TTL of the `turn`-th manual extend: in every ten, four shorter
/// than the current one, two about half, four the full TTL.
fn manual_ttl(turn: u64) -> Duration {
    match turn % 10 {
        0..4 => SHORT_EXTEND_TTL,
        4..6 => TTL / 2 + TTL / 10,
        _ => TTL,
    }
}

/// Sleeps about `d` in small slices, returning early when the run stops.
fn nap(shared: &Shared, d: Duration) {
    let end = Instant::now() + d;
    while !shared.stopping() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// Polls `done` every 2 ms until it holds (returns true), `limit` has
/// passed or the run stops (false).
fn wait_until(shared: &Shared, limit: Duration, done: impl FnMut() -> bool) -> bool {
    testkit::wait_until_with(limit, Duration::from_millis(2), || shared.stopping(), done)
}

/// Locks with the family's options; counts failures.
fn acquire(
    id: usize,
    locks: &LockManager,
    resource: &str,
    options: &LockOptions,
    shared: &Shared,
) -> Option<LockGuard> {
    match locks.lock_with(resource, options) {
        Ok(guard) => Some(guard),
        Err(e) if e.is_retryable() => {
            shared.counts.failed_locks.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => panic!("client {id}: unexpected error: {e}"),
    }
}

/// One client with a long-lived manager, until told to stop.
fn client(id: usize, spec: ClientSpec, locks: &LockManager, shared: &Shared, seed: u64) {
    let mut rng = Rng::new(seed);
    // Holds so far: the round-robin turn of this client's choices.
    let mut holds = 0u64;
    while !shared.stopping() {
        if !shared.may_lock(spec.family) {
            nap(shared, OPENING_POLL);
            continue;
        }
        let (options, plan) = match spec.family {
            Family::Plain => (
                LockOptions::new(),
                HoldPlan {
                    stall: every(holds, STALL_EVERY, id),
                    ..HoldPlan::short(spec.family, holds, rng.millis(1, 5))
                },
            ),
            Family::AutoExtend => (
                LockOptions::new().auto_extend(true).wait(PATIENT_WAIT),
                HoldPlan {
                    auto: true,
                    gap: (5, 40),
                    drop_it: holds.is_multiple_of(3),
                    via_check: true,
                    ..HoldPlan::short(spec.family, holds, rng.millis(2 * TTL_MS, 3 * TTL_MS))
                },
            ),
            Family::ManualExtend => (
                LockOptions::new().auto_extend(true).wait(PATIENT_WAIT),
                HoldPlan {
                    auto: true,
                    manual_extends: true,
                    gap: (5, 30),
                    // Over six holds, every pairing of the two.
                    drop_it: holds.is_multiple_of(3),
                    via_check: holds.is_multiple_of(2),
                    ..HoldPlan::short(spec.family, holds, rng.millis(TTL_MS, 5 * TTL_MS / 2))
                },
            ),
            Family::SharedManager => {
                // Every tenth hold auto-extends, and every one until the
                // watchdog has extended some hold of the run.
                let auto = every(holds, 10, id) || !shared.watchdog_seen.load(Ordering::SeqCst);
                let length = if auto {
                    // Longer than a third of the TTL: the watchdog extends.
                    rng.millis(TTL_MS / 2, 3 * TTL_MS / 2)
                } else {
                    rng.millis(1, 20)
                };
                (
                    LockOptions::new().auto_extend(auto),
                    HoldPlan {
                        auto,
                        // Over four holds, every pairing of the two.
                        drop_it: holds.is_multiple_of(2),
                        via_check: (holds / 2).is_multiple_of(2),
                        ..HoldPlan::short(spec.family, holds, length)
                    },
                )
            }
            Family::LateManager => unreachable!("the late-manager client builds its own managers"),
            Family::Fenced => unreachable!("fenced clients run `fenced_client`"),
        };
        let Some(guard) = acquire(id, locks, RESOURCE, &options, shared) else {
            continue;
        };
        let mut plan = plan;
        if shared.exercised(spec.family) {
            // The plain hold that opens the run stalls: every run has a
            // late writer, and the others compete meanwhile.
            plan.stall |= spec.family == Family::Plain;
        }
        if let Some(group) = spec.group {
            let dropped = shared.dropped_tokens[group].lock().unwrap();
            plan.handed_over = dropped.as_deref() == Some(guard.token().as_bytes());
        }
        hold(id, guard, shared, &mut rng, plan, spec.group);
        holds += 1;
        if matches!(spec.family, Family::AutoExtend | Family::ManualExtend) {
            // A break after a long hold, so that others get their turn.
            nap(shared, rng.millis(3 * TTL_MS / 2, 5 * TTL_MS / 2));
        }
    }
    // Let queued releases finish before the servers go away.
    let _ = locks.flush(Duration::from_secs(2));
}

/// A late-manager client: after a restart of the fault schedule (the next
/// one once it is done with its previous manager), at once or up to
/// [`LATE_CONTACT_MAX`] later, a new manager, whose first contact with the
/// freshly restarted server is its first sight of it; used for
/// [`LATE_ACQUISITIONS`] acquisitions, then dropped.
fn late_client(id: usize, urls: &[String], quarantine: bool, shared: &Shared, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut seen_restarts = shared.restarts.load(Ordering::SeqCst);
    // Managers built and holds so far (round-robin turns).
    let (mut built, mut holds) = (0u64, 0u64);
    while !shared.stopping() {
        let restarts = shared.restarts.load(Ordering::SeqCst);
        if restarts == seen_restarts {
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        seen_restarts = restarts;
        // Every other manager makes its first contact at once.
        if every(built, 2, id) {
            nap(shared, rng.millis(0, LATE_CONTACT_MAX.as_millis() as u64));
        }
        built += 1;
        let locks = client_manager(urls, quarantine, false);
        shared.counts.late_managers.fetch_add(1, Ordering::Relaxed);
        for _ in 0..LATE_ACQUISITIONS {
            if shared.stopping() {
                break;
            }
            let options = LockOptions::new().wait(PATIENT_WAIT);
            let Some(guard) = acquire(id, &locks, RESOURCE, &options, shared) else {
                continue;
            };
            let plan = HoldPlan {
                via_check: true,
                ..HoldPlan::short(Family::LateManager, holds, rng.millis(1, 10))
            };
            hold(id, guard, shared, &mut rng, plan, None);
            holds += 1;
        }
        let _ = locks.flush(Duration::from_secs(2));
    }
}

/// A fenced client: its own manager (`nth` 0 has fencing on in the
/// builder and locks with default options; the others ask for it per
/// lock), short holds of read-modify-write steps on the fenced register,
/// until told to stop. The first fenced hold of the run pauses past its
/// validity, and every [`FENCED_PAUSE_EVERY`]-th hold of each client.
fn fenced_client(
    id: usize,
    nth: usize,
    locks: &LockManager,
    register_url: &str,
    shared: &Shared,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut register = Register::connect(register_url);
    let options = if nth == 0 {
        LockOptions::new()
    } else {
        LockOptions::new().fencing(true)
    };
    let mut holds = 0u64;
    while !shared.stopping() {
        let Some(guard) = acquire(id, locks, FENCED_RESOURCE, &options, shared) else {
            continue;
        };
        let first = !shared.fenced_opened.swap(true, Ordering::SeqCst);
        let pause = first || every(holds, FENCED_PAUSE_EVERY, id);
        fenced_hold(id, guard, shared, &mut register, &mut rng, (holds, pause));
        holds += 1;
    }
    let _ = locks.flush(Duration::from_secs(2));
}

/// A fenced hold: read-modify-write steps on the fenced register, each
/// read and write with the guard's fence, each made only if the guard is
/// valid right before it; with `pause`, the holder sleeps once between
/// its read and its write until [`PAUSE_PAST`] beyond its deadline, then
/// (bounded by [`TAKEOVER_WAIT`]) until a newer holder has used the
/// register, and writes anyway, without checking (a GC pause after the
/// check): the register must refuse that write. A refused operation ends
/// the hold (the holder learns that it lost the lock). `turn` is the
/// client's holds before this one.
fn fenced_hold(
    id: usize,
    guard: LockGuard,
    shared: &Shared,
    register: &mut Register,
    rng: &mut Rng,
    (turn, pause): (u64, bool),
) {
    let start = Instant::now();
    let counts = &shared.counts;
    counts.acquisitions[Family::Fenced.index()].fetch_add(1, Ordering::Relaxed);
    let fence = guard
        .fence()
        .unwrap_or_else(|| panic!("client {id}: a fenced lock without a fence"));
    assert!(
        fence > 0 && fence < FENCE_LIMIT,
        "client {id}: fence {fence} out of range"
    );
    let mut claim = observe(&guard, false).unwrap_or(start);
    let long =
        shared.want_long_hold.swap(false, Ordering::Relaxed) || every(turn, LONG_HOLD_EVERY, id);
    let planned_end = if long {
        claim
            .checked_sub(LONG_HOLD_MARGIN)
            .unwrap_or(start)
            .max(start)
    } else {
        start + rng.millis(1, 5)
    };
    shared.holding.lock().unwrap()[id] = Some(planned_end);
    let mut seen = Seen::Acquired;
    let mut paused = false;
    while let Some(deadline) = observe(&guard, false) {
        (claim, seen) = (deadline, Seen::Step);
        let Some(value) = register.read(fence) else {
            counts.refused_reads.fetch_add(1, Ordering::Relaxed);
            break;
        };
        thread::sleep(rng.millis(1, 3));
        match observe(&guard, false) {
            Some(deadline) => (claim, seen) = (deadline, Seen::Step),
            None => break,
        }
        if pause && !paused {
            paused = true;
            counts.fenced_pauses.fetch_add(1, Ordering::Relaxed);
            let past = rng.millis(PAUSE_PAST.0, PAUSE_PAST.1);
            thread::sleep((claim + past).saturating_duration_since(Instant::now()));
            if wait_until(shared, TAKEOVER_WAIT, || register.overtaken(fence, value)) {
                counts
                    .fenced_pauses_overtaken
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let replaced = register.write(fence, value + 1);
        let at = Instant::now();
        shared.fenced_writes.lock().unwrap().push(FencedWrite {
            client: id,
            fence,
            seen: value,
            replaced,
            at,
            deadline: claim,
        });
        if replaced.is_none() || at >= planned_end || shared.stopping() {
            break;
        }
        thread::sleep(
            rng.millis(2, 15)
                .min(planned_end.saturating_duration_since(at)),
        );
    }
    let let_go = Instant::now();
    if !guard.is_valid() {
        counts.cut_short.fetch_add(1, Ordering::Relaxed);
    }
    shared.holding.lock().unwrap()[id] = None;
    shared.windows.lock().unwrap().push(Window {
        client: id,
        family: Family::Fenced,
        start,
        end: let_go.min(claim),
        seen,
        handed_over: false,
        extensions: guard.extensions(),
        manual_extends: 0,
        fence: Some(fence),
    });
    counts.ended_by_release.fetch_add(1, Ordering::Relaxed);
    if guard.release().is_err() {
        counts.failed_releases.fetch_add(1, Ordering::Relaxed);
    }
}

/// The critical section: read-modify-write steps on the shared counter,
/// each read and each write made only if the guard is valid right before
/// it (what a careful user does), with the claimed deadline updated at
/// every such check and after every manual extend. Most holds are a step
/// or two; some (when the fault schedule asks, a few at random, and every
/// auto-extended one) last long, so that faults hit a live holder.
fn hold(
    id: usize,
    mut guard: LockGuard,
    shared: &Shared,
    rng: &mut Rng,
    plan: HoldPlan,
    group: Option<usize>,
) {
    let start = Instant::now();
    let counts = &shared.counts;
    counts.acquisitions[plan.family.index()].fetch_add(1, Ordering::Relaxed);
    if plan.handed_over {
        counts.hand_overs.fetch_add(1, Ordering::Relaxed);
    }
    // A guard fresh from `lock` has validity left, except in a pathological
    // schedule (the thread descheduled right after `lock` returned).
    let mut claim = observe(&guard, plan.via_check).unwrap_or(start);
    let mut seen = Seen::Acquired;
    let long = shared.want_long_hold.swap(false, Ordering::Relaxed)
        || every(plan.turn, LONG_HOLD_EVERY, id);
    let planned_end = if plan.auto {
        start + plan.length
    } else if long {
        claim
            .checked_sub(LONG_HOLD_MARGIN)
            .unwrap_or(start)
            .max(start)
    } else {
        start + plan.length
    };
    shared.holding.lock().unwrap()[id] = Some(planned_end);
    let mut manual_ok = 0u32;
    // Manual extends asked (the round-robin turn of their TTLs).
    let mut manual_asked = 0u64;
    let mut stalled = false;
    // A manual-extend hold extends first thing (every such hold calls
    // `extend`), then every 10-250 ms.
    let mut next_extend = start;
    loop {
        if plan.manual_extends && Instant::now() >= next_extend {
            let ttl = manual_ttl(plan.turn + manual_asked);
            manual_asked += 1;
            let asked = Instant::now();
            let result = guard.extend(ttl);
            // Whatever the outcome, the nodes that applied this extend
            // expire by `asked + ttl` (`PEXPIRE` may shorten): the holder
            // claims no more than that until it observes the guard again.
            if asked + ttl < claim {
                (claim, seen) = (asked + ttl, Seen::ExtendAsked);
            }
            match result {
                Ok(_) => {
                    counts.manual_extends_ok.fetch_add(1, Ordering::Relaxed);
                    manual_ok += 1;
                    match observe(&guard, plan.via_check) {
                        Some(deadline) => (claim, seen) = (deadline, Seen::Extended),
                        None => break,
                    }
                }
                Err(e) if e.is_lost() => {
                    counts.manual_extends_failed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => panic!("client {id}: unexpected error from extend({ttl:?}): {e}"),
            }
            next_extend = Instant::now() + rng.millis(10, 250);
        }
        match observe(&guard, plan.via_check) {
            Some(deadline) => (claim, seen) = (deadline, Seen::Step),
            None => break,
        }
        let (value, read_seq) = shared.read();
        thread::sleep(rng.millis(1, 3));
        match observe(&guard, plan.via_check) {
            Some(deadline) => (claim, seen) = (deadline, Seen::Step),
            None => break,
        }
        if plan.stall && !stalled {
            stalled = true;
            counts.stalls.fetch_add(1, Ordering::Relaxed);
            thread::sleep((claim + rng.millis(20, 150)).saturating_duration_since(Instant::now()));
            // Still paused until someone else has written the counter (or a
            // bound): the late write below then loses that update.
            if wait_until(shared, TAKEOVER_WAIT, || shared.read().1 > read_seq) {
                counts.stalls_overtaken.fetch_add(1, Ordering::Relaxed);
            }
        }
        shared.write(id, value, read_seq, claim);
        let now = Instant::now();
        if now >= planned_end || shared.stopping() {
            break;
        }
        thread::sleep(
            rng.millis(plan.gap.0, plan.gap.1)
                .min(planned_end.saturating_duration_since(now)),
        );
    }
    let let_go = Instant::now();
    if !guard.is_valid() {
        counts.cut_short.fetch_add(1, Ordering::Relaxed);
    }
    shared.holding.lock().unwrap()[id] = None;
    let extensions = guard.extensions();
    if plan.auto {
        counts.auto_extends.fetch_add(
            u64::from(extensions.saturating_sub(manual_ok)),
            Ordering::Relaxed,
        );
    }
    if extensions > manual_ok {
        shared.watchdog_seen.store(true, Ordering::SeqCst);
    }
    shared.windows.lock().unwrap().push(Window {
        client: id,
        family: plan.family,
        start,
        end: let_go.min(claim),
        seen,
        handed_over: plan.handed_over,
        extensions,
        manual_extends: manual_ok,
        fence: None,
    });
    if plan.drop_it {
        if let Some(group) = group {
            *shared.dropped_tokens[group].lock().unwrap() = Some(guard.token().as_bytes().to_vec());
        }
        counts.ended_by_drop.fetch_add(1, Ordering::Relaxed);
        drop(guard); // may hand the lock to a waiting thread of this manager
    } else {
        counts.ended_by_release.fetch_add(1, Ordering::Relaxed);
        // Not a failure of the test: a release without quorum leaves keys
        // that expire with the TTL.
        if guard.release().is_err() {
            counts.failed_releases.fetch_add(1, Ordering::Relaxed);
        }
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
    *pids.lock().unwrap() = servers.iter().map(testkit::RedisServer::pid).collect();
}

/// Kills the servers (by pid) and exits the process if the run has not
/// reported back within `limit`: a hung run must not hang CI or leave
/// servers behind. Dropping the returned sender (also on a panic) disarms
/// it.
fn hang_detector(pids: Arc<Mutex<Vec<u32>>>, register: u32, limit: Duration) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    thread::Builder::new()
        .name("torture-hang-detector".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let pids = pids
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                eprintln!("torture run hung for {limit:?}: killing servers {pids:?} and exiting");
                for pid in pids.iter().chain([&register]) {
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
                shared.restarts.fetch_add(1, Ordering::SeqCst);
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
    // Holders of the key first (the unfenced clients' key, then the fenced
    // clients'), so that the restart empties a majority.
    order.sort_by_key(|&i| {
        let holds = |key: &str| servers[i].get(key.as_bytes()).is_some();
        if holds(RESOURCE) {
            0
        } else if holds(FENCED_RESOURCE) {
            1
        } else {
            2
        }
    });
    let chosen = &order[..3];
    let started = Instant::now();
    thread::scope(|scope| {
        for (i, server) in servers.iter_mut().enumerate() {
            if chosen.contains(&i) {
                scope.spawn(move || server.restart());
            }
        }
    });
    shared.restarts.fetch_add(1, Ordering::SeqCst);
    faults.slowest_majority_restart = faults.slowest_majority_restart.max(started.elapsed());
    faults.restart_majority += 1;
    if with_holder {
        faults.restart_majority_with_holder += 1;
    }
}

/// Lost updates on the counter, split by cause.
///
/// A write "interferes" when another write landed between its read and its
/// own write; it then replaced a value other than the one it read, and
/// `replaced - seen` increments are lost by it (these add up to
/// `writes - counter`). If this writer or one of the writes that landed in
/// between was late (completed after its writer's claimed deadline), the
/// loss is put down to a late writer: a descheduled process, which a lock
/// with a deadline cannot exclude. Otherwise both writes were made within
/// their writers' claimed validity, so the two windows overlap: a lock
/// failure, which the overlap checker sees too.
#[derive(Debug, Default)]
struct LostUpdates {
    writes: u64,
    counter: u64,
    /// `writes - counter`.
    total: u64,
    /// Writes that completed after their writer's claimed deadline.
    late_writes: u64,
    /// Increments lost where a late writer was involved, and the number of
    /// interfering writes concerned.
    by_late_writers: i64,
    late_interferences: u64,
    /// Increments lost between writers that were both within their claimed
    /// validity (an overlap), and the number of such interfering writes.
    within_validity: i64,
    valid_interferences: u64,
    /// The first such pair: the write that landed in between, and the one
    /// that overwrote it.
    first_within_validity: Option<(Write, Write)>,
}

fn lost_updates(resource: &Resource) -> LostUpdates {
    let writes = &resource.writes;
    let mut lost = LostUpdates {
        writes: writes.len() as u64,
        counter: resource.value,
        total: writes.len() as u64 - resource.value,
        late_writes: writes.iter().filter(|w| w.late()).count() as u64,
        ..LostUpdates::default()
    };
    for (i, write) in writes.iter().enumerate() {
        let between = &writes[write.read_seq.min(i)..i];
        if between.is_empty() {
            continue; // nothing landed in between: it replaced what it read
        }
        let lost_here = write.replaced as i64 - write.seen as i64;
        if write.late() || between.iter().any(Write::late) {
            lost.by_late_writers += lost_here;
            lost.late_interferences += 1;
        } else {
            lost.within_validity += lost_here;
            lost.valid_interferences += 1;
            lost.first_within_validity
                .get_or_insert((between[0], *write));
        }
    }
    lost
}

/// What the fenced register saw, and lost.
///
/// A lost update on the fenced counter is an accepted increment that the
/// final value does not contain: `accepted - counter`. Every accepted
/// write stores (value read) + 1, so this equals the sum over accepted
/// writes of `replaced - seen`, the increments a write overwrote because
/// an accepted write landed between its read and its own write (the
/// checker computes both and they must agree). Fencing must keep it at 0:
/// a holder's read raises the register's fence to its own, so once a
/// newer holder has read, every read or write of an older one is refused;
/// an accepted write with fence `f`, read at `r`, can therefore only
/// follow writes with fences `<= f` after `r`, and a fence equal to `f`
/// is its own holder's (fences differ from one holder to the next), whose
/// steps are sequential. So no accepted write lands between a holder's
/// read and its accepted write: none is overwritten. A stale write
/// (refused) changes nothing, and counts apart.
#[derive(Debug, Default)]
struct FencedFigures {
    /// Writes attempted, accepted, and refused because the register had
    /// seen a higher fence: after the writer's claimed deadline (a stale
    /// write of a paused holder), or within it (which would mean a newer
    /// holder while this one was valid).
    attempted: u64,
    accepted: u64,
    refused_stale: u64,
    refused_within_validity: u64,
    /// Accepted writes that completed after their writer's deadline
    /// (a pause the register could not tell: nobody newer came).
    accepted_late: u64,
    counter: u64,
    /// `accepted - counter`.
    lost: i64,
    /// Sum of `replaced - seen` over accepted writes, and how many
    /// accepted writes overwrote an accepted write made after their read.
    lost_by_interference: i64,
    interferences: u64,
    /// Pairs of fenced holds where the later one (it began after the
    /// earlier one ended) has a fence not above the earlier one's, and
    /// pairs of holds with the same fence.
    fence_order_violations: u64,
    duplicate_fences: u64,
    /// A violating pair: (earlier fence, later fence).
    first_violation: Option<(u64, u64)>,
    /// The first stale write refused, and the first accepted write that
    /// overwrote another (for the report).
    first_refused: Option<FencedWrite>,
    first_interference: Option<FencedWrite>,
}

fn fenced_figures(writes: &[FencedWrite], counter: u64, windows: &[Window]) -> FencedFigures {
    let mut f = FencedFigures {
        attempted: writes.len() as u64,
        counter,
        ..FencedFigures::default()
    };
    for w in writes {
        match w.replaced {
            Some(replaced) => {
                f.accepted += 1;
                if w.late() {
                    f.accepted_late += 1;
                }
                let lost_here = replaced as i64 - w.seen as i64;
                if lost_here != 0 {
                    f.lost_by_interference += lost_here;
                    f.interferences += 1;
                    f.first_interference.get_or_insert(*w);
                }
            }
            None if w.late() => {
                f.refused_stale += 1;
                f.first_refused.get_or_insert(*w);
            }
            None => f.refused_within_validity += 1,
        }
    }
    f.lost = f.accepted as i64 - counter as i64;
    let mut fenced: Vec<&Window> = windows.iter().filter(|w| w.fence.is_some()).collect();
    fenced.sort_by_key(|w| w.start);
    for (i, b) in fenced.iter().enumerate() {
        for a in &fenced[..i] {
            let (fa, fb) = (a.fence.unwrap_or(0), b.fence.unwrap_or(0));
            if fa == fb {
                f.duplicate_fences += 1;
            }
            if a.end <= b.start && fa >= fb {
                f.fence_order_violations += 1;
                f.first_violation.get_or_insert((fa, fb));
            }
        }
    }
    f
}

/// What a randomized run measured.
#[derive(Debug)]
struct Figures {
    /// Acquisitions, indexed like [`Family::ALL`].
    acquisitions: [u64; Family::ALL.len()],
    /// Turns of [`OPENING`] completed (all of them once every family
    /// exercised its ingredient).
    opening_turns: usize,
    failed_locks: u64,
    failed_releases: u64,
    cut_short: u64,
    manual_extends_ok: u64,
    manual_extends_failed: u64,
    auto_extends: u64,
    hand_overs: u64,
    ended_by_drop: u64,
    ended_by_release: u64,
    late_managers: u64,
    stalls: u64,
    stalls_overtaken: u64,
    fenced_pauses: u64,
    fenced_pauses_overtaken: u64,
    refused_reads: u64,
    fenced: FencedFigures,
    faults: Faults,
    /// Overlapping holders, of either resource (and of the fenced one).
    overlaps: u64,
    fenced_overlaps: u64,
    longest_overlap: Duration,
    first_overlap: Option<(Window, Window)>,
    lost: LostUpdates,
}

impl Figures {
    fn acquisitions(&self) -> u64 {
        self.acquisitions.iter().sum()
    }

    fn of(&self, family: Family) -> u64 {
        self.acquisitions[family.index()]
    }
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

/// A window for the report, times from the run's start.
fn describe(w: &Window, started: Instant) -> String {
    format!(
        "client {} ({}{}) held [{:.3?}, {:.3?}), end from {:?}, {} extends ({} manual)",
        w.client,
        w.family.name(),
        if w.handed_over { ", handed over" } else { "" },
        w.start.saturating_duration_since(started),
        w.end.saturating_duration_since(started),
        w.seen,
        w.extensions,
        w.manual_extends,
    )
}

/// A write for the report, times from the run's start.
fn describe_write(w: &Write, started: Instant) -> String {
    format!(
        "client {} wrote {} over {} at {:.3?} (its deadline {:.3?})",
        w.client,
        w.seen + 1,
        w.replaced,
        w.at.saturating_duration_since(started),
        w.deadline.saturating_duration_since(started),
    )
}

/// A fenced write for the report, times from the run's start.
fn describe_fenced_write(w: &FencedWrite, started: Instant) -> String {
    let outcome = match w.replaced {
        Some(replaced) => format!("accepted over {replaced}"),
        None => "refused".to_owned(),
    };
    format!(
        "client {} with fence {} wrote {} at {:.3?} (its deadline {:.3?}): {outcome}",
        w.client,
        w.fence,
        w.seen + 1,
        w.at.saturating_duration_since(started),
        w.deadline.saturating_duration_since(started),
    )
}

/// One randomized run: five servers behind five proxies, the clients of
/// [`roster`], the fault schedule, then the checker.
fn torture(quarantine: bool) -> Figures {
    let secs = run_secs();
    let seed = seed();
    let label = if quarantine {
        "quarantine ON"
    } else {
        "quarantine OFF"
    };
    let (clients, fenced_by_default) = roster();
    let roster_text: Vec<String> = Family::ALL
        .iter()
        .map(|f| {
            let n = clients.iter().filter(|c| c.family == *f).count();
            format!("{n} {}", f.name())
        })
        .collect();
    eprintln!(
        "torture [{label}]: {NODES} nodes, {} client threads ({}; shared-manager groups of \
         {SHARED_GROUPS:?} threads), {secs} s, TTL = max_ttl = {TTL:?}, node timeout \
         {NODE_TIMEOUT:?}, seed {seed} (QUORUM_LOCK_TORTURE_SEED={seed} replays the fault choices)",
        clients.len(),
        roster_text.join(", "),
    );
    let mut servers = RedisServers::start(NODES);
    // The fenced register: its own server, never faulted.
    let register = testkit::RedisServer::start();
    let register_url = register.url();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, &pids);
    let hang = hang_detector(
        Arc::clone(&pids),
        register.pid(),
        Duration::from_secs(secs) + HANG_GRACE,
    );

    let shared = Shared::new(clients.len());
    let managers: Vec<LockManager> = fenced_by_default
        .iter()
        .map(|&fenced| client_manager(&urls, quarantine, fenced))
        .collect();
    let mut rng = Rng::new(seed);
    let client_seeds: Vec<u64> = clients.iter().map(|_| rng.next_u64()).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let faults = thread::scope(|scope| {
        let _stop = StopOnDrop(&shared.stop);
        for (id, spec) in clients.iter().enumerate() {
            let (shared, seed, spec, urls) = (&shared, client_seeds[id], *spec, &urls);
            let register_url = register_url.as_str();
            let locks = spec.manager.map(|m| &managers[m]);
            thread::Builder::new()
                .name(format!("torture-client-{id}"))
                .spawn_scoped(scope, move || match (locks, spec.family) {
                    (Some(locks), Family::Fenced) => {
                        let nth = spec.group.unwrap_or(0);
                        fenced_client(id, nth, locks, register_url, shared, seed);
                    }
                    (Some(locks), _) => client(id, spec, locks, shared, seed),
                    (None, _) => late_client(id, urls, quarantine, shared, seed),
                })
                .unwrap();
        }
        fault_schedule(&mut servers, &proxies, &shared, &mut rng, deadline, &pids)
    });
    let run_time = started.elapsed();
    drop(managers);
    let _ = hang.send(());

    let windows = std::mem::take(&mut *shared.windows.lock().unwrap());
    // One lock per resource: the fenced clients' windows are checked among
    // themselves, the others' among themselves.
    let (mut fenced_windows, mut windows): (Vec<Window>, Vec<Window>) =
        windows.into_iter().partition(|w| w.fence.is_some());
    let (overlaps, longest_overlap, first_overlap) = count_overlaps(&mut windows);
    let (fenced_overlaps, fenced_longest, fenced_first) = count_overlaps(&mut fenced_windows);
    let (overlaps, longest_overlap, first_overlap) = (
        overlaps + fenced_overlaps,
        longest_overlap.max(fenced_longest),
        first_overlap.or(fenced_first),
    );
    let lost = lost_updates(&shared.resource.lock().unwrap());
    let register_value = register.get(REGISTER_VALUE.as_bytes()).map_or(0, |v| {
        String::from_utf8_lossy(&v)
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("register value {v:?}: {e}"))
    });
    drop(register);
    let fenced = fenced_figures(
        &shared.fenced_writes.lock().unwrap(),
        register_value,
        &fenced_windows,
    );
    let c = &shared.counts;
    let load = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let figures = Figures {
        acquisitions: std::array::from_fn(|i| load(&c.acquisitions[i])),
        opening_turns: shared.opening.load(Ordering::SeqCst),
        failed_locks: load(&c.failed_locks),
        failed_releases: load(&c.failed_releases),
        cut_short: load(&c.cut_short),
        manual_extends_ok: load(&c.manual_extends_ok),
        manual_extends_failed: load(&c.manual_extends_failed),
        auto_extends: load(&c.auto_extends),
        hand_overs: load(&c.hand_overs),
        ended_by_drop: load(&c.ended_by_drop),
        ended_by_release: load(&c.ended_by_release),
        late_managers: load(&c.late_managers),
        stalls: load(&c.stalls),
        stalls_overtaken: load(&c.stalls_overtaken),
        fenced_pauses: load(&c.fenced_pauses),
        fenced_pauses_overtaken: load(&c.fenced_pauses_overtaken),
        refused_reads: load(&c.refused_reads),
        fenced,
        faults,
        overlaps,
        fenced_overlaps,
        longest_overlap,
        first_overlap,
        lost,
    };
    let f = &figures.faults;
    let l = &figures.lost;
    let fe = &figures.fenced;
    eprintln!(
        "torture [{label}] figures after {run_time:.1?} (seed {seed}):\n\
         \x20 acquisitions {} (opening turns done {}/{}; lock calls that gave up: {}, releases \
         without quorum: {}): \
         plain {}, auto-extended {}, manual-extend {}, shared-manager {} (by hand-over {}), \
         late-manager {} ({} managers built after a restart)\n\
         \x20 extends: manual ok {}, manual failed {}, automatic (watchdog) ok {}; holds cut short \
         by an invalid guard {}; holds ended by drop {}, by release {}\n\
         \x20 faults {}: kill -9 + restart of one node {}, of three nodes {} ({} while a holder \
         had >= {HOLDER_LEFT:?} left; slowest {:.0?}), SIGSTOP {}, proxy delay {}, proxy blackhole {}\n\
         \x20 overlaps {} ({} of them between fenced holders; longest {:.1?})\n\
         \x20 unfenced counter {} of {} writes: lost updates {} = by late writers {} ({} \
         interfering writes; {} writes completed after their deadline, {} holders stalled on \
         purpose, {} of them overtaken during the stall) + within validity {} ({} interfering \
         writes)\n\
         \x20 fenced: acquisitions {}, increments attempted {}, accepted {} ({} of them late), \
         stale writes refused {} (+ {} refused within validity), reads refused {}; pauses past \
         validity {} ({} overtaken by a newer holder); register {}: lost updates {} (by \
         interference {} in {} writes); fence order violations {}, duplicate fences {}",
        figures.acquisitions(),
        figures.opening_turns,
        OPENING.len(),
        figures.failed_locks,
        figures.failed_releases,
        figures.of(Family::Plain),
        figures.of(Family::AutoExtend),
        figures.of(Family::ManualExtend),
        figures.of(Family::SharedManager),
        figures.hand_overs,
        figures.of(Family::LateManager),
        figures.late_managers,
        figures.manual_extends_ok,
        figures.manual_extends_failed,
        figures.auto_extends,
        figures.cut_short,
        figures.ended_by_drop,
        figures.ended_by_release,
        f.total(),
        f.restart_one,
        f.restart_majority,
        f.restart_majority_with_holder,
        f.slowest_majority_restart,
        f.sigstop,
        f.delay,
        f.blackhole,
        figures.overlaps,
        figures.fenced_overlaps,
        figures.longest_overlap,
        l.counter,
        l.writes,
        l.total,
        l.by_late_writers,
        l.late_interferences,
        l.late_writes,
        figures.stalls,
        figures.stalls_overtaken,
        l.within_validity,
        l.valid_interferences,
        figures.of(Family::Fenced),
        fe.attempted,
        fe.accepted,
        fe.accepted_late,
        fe.refused_stale,
        fe.refused_within_validity,
        figures.refused_reads,
        figures.fenced_pauses,
        figures.fenced_pauses_overtaken,
        fe.counter,
        fe.lost,
        fe.lost_by_interference,
        fe.interferences,
        fe.fence_order_violations,
        fe.duplicate_fences,
    );
    eprintln!(
        "torture [{label}] summary: unfenced lost updates {} ({} by late writers), fenced lost \
         updates {}, overlaps {}",
        l.total, l.by_late_writers, fe.lost, figures.overlaps,
    );
    if let Some((a, b)) = fe.first_violation {
        eprintln!("  first fence order violation: fence {a}, then fence {b}");
    }
    for (what, w) in [
        ("first stale write refused", fe.first_refused),
        ("first fenced write over another", fe.first_interference),
    ] {
        if let Some(w) = w {
            eprintln!("  {what}: {}", describe_fenced_write(&w, started));
        }
    }
    if let Some((a, b)) = &figures.first_overlap {
        eprintln!(
            "  first overlap (times from the run's start):\n    {}\n    {}",
            describe(a, started),
            describe(b, started),
        );
    }
    if let Some((between, over)) = &l.first_within_validity {
        eprintln!(
            "  first lost update within validity:\n    {}\n    {}, having read at write #{}",
            describe_write(between, started),
            describe_write(over, started),
            over.read_seq,
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
    assert!(figures.acquisitions() > 0, "no client ever got the lock");
    assert!(
        figures.overlaps > 0,
        "restarting a majority under a holder without quarantine must produce overlaps: \
         {figures:?}"
    );
}

/// With quarantine the same fault schedule never lets two holders overlap,
/// whatever the family (auto-extended, extended by hand and by the
/// watchdog at once, handed over between threads, first contact of a new
/// manager after a restart), and no update of the shared counter is lost
/// between writers that were both within their claimed validity. Updates
/// lost because a writer was descheduled past its deadline between its
/// check and its write are counted, not failed: no lock can exclude them.
#[test]
fn randomized_faults_with_quarantine_never_overlap() {
    let _serial = serial();
    let figures = torture(true);
    assert_eq!(
        figures.overlaps, 0,
        "two holders at once with quarantine on: a safety bug. {figures:?}"
    );
    assert_eq!(
        (
            figures.lost.within_validity,
            figures.lost.valid_interferences
        ),
        (0, 0),
        "updates lost between writers within their validity, with quarantine on: {figures:?}"
    );
    // The run meant something: enough acquisitions, and every ingredient
    // was exercised (a family that never got the lock, or extends that
    // never happened, would make the zeros above hollow). The opening
    // schedules an acquisition of each family, and a manual-extend hold
    // extends at once: these fail only when the run was too short (or too
    // faulty) for the opening to finish.
    assert!(
        figures.acquisitions() >= 10,
        "too few acquisitions to mean anything: {figures:?}"
    );
    assert_eq!(
        figures.opening_turns,
        OPENING.len(),
        "the opening did not finish: no {} client got the lock. {figures:?}",
        OPENING.get(figures.opening_turns).map_or("?", |f| f.name())
    );
    for family in OPENING {
        assert!(
            figures.of(family) > 0,
            "no {} acquisition: that ingredient was not exercised. {figures:?}",
            family.name()
        );
    }
    assert!(
        figures.late_managers > 0,
        "no manager was built after a restart: {figures:?}"
    );
    assert!(
        figures.manual_extends_ok + figures.manual_extends_failed > 0 && figures.auto_extends > 0,
        "extends from both sources must have happened: {figures:?}"
    );
    // Plain Redlock and pauses: a plain holder paused past its deadline
    // (and overtaken meanwhile) loses the update written in between.
    assert!(
        figures.stalls > 0,
        "the plain hold that opens the run stalls: {figures:?}"
    );
    assert!(
        figures.ended_by_drop > 0 && figures.ended_by_release > 0,
        "holds end by drop (every third auto-extended one, the first included) and by \
         release (every plain one): {figures:?}"
    );
    if figures.stalls_overtaken > 0 {
        assert!(
            figures.lost.by_late_writers > 0,
            "a stalled plain writer that was overtaken must lose an update: {figures:?}"
        );
    }
    assert_fencing_holds(&figures);
}

/// Fencing under the same run (quarantine on): the fenced counter loses no
/// update although fenced holders pause past their validity, every pause
/// overtaken by a newer holder ends in a refused stale write, no write is
/// refused within its writer's validity, and a hold that began after
/// another one ended has a higher fence.
fn assert_fencing_holds(figures: &Figures) {
    let fe = &figures.fenced;
    assert_eq!(
        (fe.lost, fe.lost_by_interference, fe.interferences),
        (0, 0, 0),
        "fenced lost updates with quarantine on: {figures:?}"
    );
    assert!(
        figures.of(Family::Fenced) >= 3 && fe.accepted >= 3,
        "too few fenced acquisitions or increments to mean anything: {figures:?}"
    );
    assert!(
        figures.fenced_pauses > 0,
        "the first fenced hold of the run pauses: {figures:?}"
    );
    assert!(
        fe.refused_stale >= figures.fenced_pauses_overtaken,
        "every pause overtaken by a newer holder must end in a refused write: {figures:?}"
    );
    assert!(
        figures.fenced_pauses_overtaken == 0 || fe.refused_stale > 0,
        "no stale write refused: {figures:?}"
    );
    assert_eq!(
        (
            fe.refused_within_validity,
            fe.fence_order_violations,
            fe.duplicate_fences
        ),
        (0, 0, 0),
        "fences out of order with quarantine on: {figures:?}"
    );
}
