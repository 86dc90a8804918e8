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
//! * Arms of their own, in their files: the semaphore (`semaphore.rs`,
//!   restarts and freezes of one node at a time) and the read-write lock
//!   (`rw.rs`: readers and fenced writers under this fault schedule,
//!   checked for exclusion, fence order and no overtaking of a writer
//!   whose intent is on a quorum, `rw_checker.rs`), the clock steps
//!   (`clock_steps.rs`: servers' wall and monotonic clocks stepped forward
//!   and back, within and past the drift allowance, each step classified
//!   within or beyond the assumptions of docs/safety.md) and the
//!   partitions (`partitions.rs`: links cut through the proxies, one
//!   direction or both, dropped or held, then healed); the last two share
//!   `arms.rs`; and leader election (`election.rs`, checked by
//!   `election_checker.rs`: candidates under
//!   this fault schedule, each leader appending its term to a log that
//!   refuses a lower term after a higher one; checked for one leader at a
//!   time, strictly increasing terms and a log in term order).
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::report::NodeOutcome;
use quorum_lock::{LockGuard, LockManager, RetryPolicy};

use testkit::proxy::Proxy;
use testkit::{RedisCluster, RedisServers, Rng};

mod arms;
mod checker;
#[cfg(test)]
mod checker_tests;
mod clients;
mod clock_steps;
mod config;
mod election;
mod election_checker;
mod faults;
mod partitions;
mod recorder;
mod rw;
mod rw_checker;
mod rw_watch;
mod semaphore;

use checker::*;
use clients::*;
use config::*;
use faults::*;
use recorder::*;

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
    let a_token = *guard_a.token();
    for server in servers.iter() {
        assert!(
            token_on(server).is_some_and(|v| a_token.matches_stored(&v)),
            "A on all"
        );
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
    let b_token = *guard_b.token();
    assert!(b.flush(Duration::from_secs(5)));
    for (i, server) in servers.iter().enumerate() {
        let expected = if i < 3 { b_token } else { a_token };
        assert!(
            token_on(server).is_some_and(|v| expected.matches_stored(&v)),
            "node {i}"
        );
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

/// Quarantine reads the server's identity when a connection opens, and the
/// settings that can change at run time (three `INFO <section>`) at most
/// once per 500 ms per connection, never per request: over 200
/// lock/release cycles (and the polling while the young servers were
/// quarantined) each server sees one `INFO` per connection the manager
/// opened plus at most three per connection and started half second of
/// the manager's life, far fewer than one per request, and only a handful
/// of connections.
#[test]
fn quarantine_reads_info_once_per_connection_and_settings_per_half_second_not_per_request() {
    let _serial = serial();
    let servers = RedisServers::start(3);
    let mut inspect: Vec<redis::Connection> = servers.iter().map(|s| s.conn()).collect();
    let before: Vec<(u64, u64)> = inspect.iter_mut().map(info_and_connections).collect();

    let ttl = Duration::from_secs(1);
    let born = std::time::Instant::now();
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
    let lived = born.elapsed();
    // The manager's background looks stop with it.
    drop(locks);

    let half_seconds = u64::try_from(lived.as_millis() / 500).unwrap() + 1;
    for (i, conn) in inspect.iter_mut().enumerate() {
        let after = info_and_connections(conn);
        // The first reading's own INFO is counted after it ran.
        let info_calls = after.0 - before[i].0 - 1;
        let connections = after.1 - before[i].1;
        eprintln!(
            "node {i}: {info_calls} INFO calls, {connections} connections opened, \
             {CYCLES} lock/release cycles in {lived:?}"
        );
        assert!(
            info_calls >= connections,
            "node {i}: every connection reads the identity"
        );
        if lived >= Duration::from_secs(1) {
            // At least one read of the settings again (three sections).
            assert!(
                info_calls >= connections + 3,
                "node {i}: the settings were not read again in {lived:?}"
            );
        }
        let bound = connections * (1 + 3 * half_seconds);
        assert!(
            info_calls <= bound && info_calls < CYCLES as u64,
            "node {i}: {info_calls} INFO calls, over {bound} (one per connection, the \
             settings every 500 ms) or one per request"
        );
        assert!(
            connections <= 4,
            "node {i}: {connections} connections for {CYCLES} cycles: pooling broke"
        );
    }
}

/// One randomized run: five servers behind five proxies, the clients of
/// [`roster`], the fault schedule, then the checker.
/// One randomized run; `with_cluster`: node 0 is a cluster of three
/// shards with a replica each (the cluster arm), whose shard of the
/// resource the schedule crashes, pauses and fails over.
fn torture(quarantine: bool, with_cluster: bool) -> Figures {
    let secs = run_secs();
    let seed = seed();
    let label = match (quarantine, with_cluster) {
        (true, false) => "quarantine ON",
        (false, false) => "quarantine OFF",
        (true, true) => "quarantine ON, node 0 a cluster",
        (false, true) => "quarantine OFF, node 0 a cluster",
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
    let mut urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let mut cluster = with_cluster.then(|| RedisCluster::start(3, 1));
    if let Some(cluster) = &cluster {
        urls[0] = cluster.seed_url();
    }
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, cluster.as_ref(), &pids);
    let hang = hang_detector(
        Arc::clone(&pids),
        Some(register.pid()),
        Duration::from_secs(secs) + HANG_GRACE,
    );

    let shared = Shared::new(clients.len());
    let managers: Vec<LockManager> = fenced_by_default
        .iter()
        .enumerate()
        .map(|(m, &fenced)| client_manager(&urls, quarantine, fenced, m as u64))
        .collect();
    // Looks at the resource all along, as an operator would.
    let inspector = client_manager(&urls, quarantine, false, INSPECTOR_OWNER);
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
        let (shared_ref, inspector) = (&shared, &inspector);
        thread::Builder::new()
            .name("torture-inspector".into())
            .spawn_scoped(scope, move || inspect_all_along(inspector, shared_ref))
            .unwrap();
        fault_schedule(
            &mut servers,
            &proxies,
            cluster.as_mut(),
            &shared,
            &mut rng,
            deadline,
            &pids,
        )
    });
    let run_time = started.elapsed();
    drop(managers);
    drop(inspector);
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
    let inspected = check_inspections(&shared.sights.lock().unwrap(), &windows);
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
        set_holds: load(&c.set_holds),
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
        inspections: load(&shared.inspections),
        inspected,
    };
    let f = &figures.faults;
    let l = &figures.lost;
    let fe = &figures.fenced;
    eprintln!(
        "torture [{label}] figures after {run_time:.1?} (seed {seed}):\n\
         \x20 acquisitions {} (opening turns done {}/{}; lock calls that gave up: {}, releases \
         without quorum: {}): \
         plain {}, auto-extended {}, manual-extend {}, shared-manager {} (by hand-over {}), \
         late-manager {} ({} managers built after a restart); held as a set with a side \
         resource {}\n\
         \x20 extends: manual ok {}, manual failed {}, automatic (watchdog) ok {}; holds cut short \
         by an invalid guard {}; holds ended by drop {}, by release {}\n\
         \x20 faults {}: kill -9 + restart of one node {}, of three nodes {} ({} while a holder \
         had >= {HOLDER_LEFT:?} left; slowest {:.0?}), SIGSTOP {}, proxy delay {}, proxy blackhole {}, \
         evicting policy at run time {} ({} keys evicted), cluster shard crashed {}, failed \
         over {}\n\
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
        figures.set_holds,
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
        f.eviction,
        f.evicted_keys,
        f.shard_crash,
        f.shard_failover,
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
    eprintln!(
        "  inspections {}: {} seen held by a holder whose window covers them, {} contradicted \
         by a holder of another manager within the time left they gave",
        figures.inspections, figures.inspected.checked, figures.inspected.contradicted
    );
    if let Some((sight, seen, next)) = &figures.inspected.first {
        eprintln!(
            "  first contradicted inspection: {:?} left at {:.1?}, held by\n    {}\n  then\n    {}",
            sight.time_left,
            sight.end.saturating_duration_since(started),
            describe(seen, started),
            describe(next, started),
        );
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
    let figures = torture(false, false);
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
    assert_safe_and_exercised(&torture(true, false));
}

/// The cluster arm: node 0 is a cluster of three shards with a replica
/// each, and the schedule crashes the master of the resource's shard (the
/// cluster promotes its replica), pauses it, and fails it over, besides
/// the plain nodes' faults. The same checks hold: a hold confirmed by the
/// shard's replica survives the promotion, and a restarted shard master
/// waits out its quarantine alone.
#[test]
fn randomized_faults_with_a_cluster_node_never_overlap() {
    let _serial = serial();
    let figures = torture(true, true);
    assert!(
        figures.faults.shard_crash + figures.faults.shard_failover > 0,
        "the cluster's shard never crashed nor failed over: {figures:?}"
    );
    assert_safe_and_exercised(&figures);
}

/// What a run with quarantine on must show: no overlap, no update lost
/// within validity, fencing intact, and every ingredient exercised.
fn assert_safe_and_exercised(figures: &Figures) {
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
        figures.inspected.checked > 0 && figures.inspected.contradicted == 0,
        "inspections (who holds the lock, and for how long at least) must hold against the \
         holders' windows: {:?}",
        figures.inspected
    );
    assert!(
        figures.set_holds > 0,
        "no client held the resource as part of a set (lock_all): {figures:?}"
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
    assert_fencing_holds(figures);
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

/// The inspector: every [`INSPECT_EVERY`] until the run stops, who holds
/// the resource and for how long at least (kept when a holder is named).
fn inspect_all_along(inspector: &LockManager, shared: &Shared) {
    while !shared.stopping() {
        let start = Instant::now();
        let seen = inspector.inspect(RESOURCE);
        let end = Instant::now();
        shared.inspections.fetch_add(1, Ordering::Relaxed);
        if let Ok(seen) = seen
            && let Some(owner) = seen.owner().and_then(owner_number)
            && seen.is_held()
        {
            let mut sights = shared.sights.lock().unwrap();
            if sights.len() < MAX_SIGHTS {
                sights.push(Sight {
                    start,
                    end,
                    owner,
                    time_left: seen.time_left(),
                });
            }
        }
        nap(shared, INSPECT_EVERY);
    }
}
