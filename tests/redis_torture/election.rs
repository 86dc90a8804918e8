//! Leader election under the randomized runs' fault schedule
//! ([`fault_schedule`]: kills and restarts of one node and of a majority
//! under a leader, `SIGSTOP`, proxy delays and blackholes, an evicting
//! policy at run time), quarantine on: [`CANDIDATES`] candidates, each a
//! thread with its own manager, campaign for one [`Election`]; each
//! leader appends its term to a checked log (on a server of its own, out
//! of the faults) while it believes it leads, as a fencing-checked
//! resource would take it: an entry with a lower term than one already
//! logged is refused. Every few leaderships the leader pauses past its
//! validity before its last write (a process pause), so stale leaders
//! write too. An observer follows the leaders with `wait_update`.
//!
//! [`check_election`] (`election_checker.rs`) then asserts: one leader at a time (no two
//! leaderships' windows, from the campaign's return to the deadline last
//! observed, overlap), terms strictly increasing from one leader to the
//! next, the log in term order with each term written by one candidate
//! only, no write refused that ended within its writer's validity, and
//! the observer's terms never going back. And that the run meant
//! something: several leaders, faults injected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{Election, Leader, LockManager, LockOptions};
use testkit::proxy::Proxy;
use testkit::{RedisServer, RedisServers, Rng};

use crate::clients::{client_manager, nap, observe};
use crate::config::*;
use crate::election_checker::*;
use crate::faults::*;
use crate::recorder::Shared;

const NAME: &str = "torture-election";
pub(crate) const CANDIDATES: usize = 3;
/// Owner numbers of the arm's managers start here.
const ELECTION_OWNERS: u64 = 4_000_000;
/// How long one campaign may wait before the candidate tries again.
const CAMPAIGN_WAIT: Duration = Duration::from_millis(1500);
/// Every this many leaderships of a candidate, its last write comes
/// after a pause past its validity (a stale leader's write).
const STALE_EVERY: u64 = 4;
/// The checked log's keys on its own server: the highest term logged,
/// and the log (a list of `term:candidate:seq`).
const LOG_TERM: &str = "election-log:term";
const LOG: &str = "election-log";
/// Appends `ARGV[2]` to the log with term `ARGV[1]`: refused (-1) when
/// the log has a higher term already (a stale leader's write); else it
/// records the term and returns the log's length.
const LOG_APPEND: &str = "\
     local highest = tonumber(redis.call('get', KEYS[1]) or '0') \
     if highest > tonumber(ARGV[1]) then return -1 end \
     if highest < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end \
     return redis.call('rpush', KEYS[2], ARGV[2])";

/// What the candidates share.
struct Arm {
    shared: Shared,
    register_url: String,
    reigns: Mutex<Vec<Reign>>,
    writes: Mutex<Vec<LogWrite>>,
    failed_campaigns: AtomicU64,
    proclaims_ok: AtomicU64,
    proclaims_failed: AtomicU64,
}

/// Appends `term` for `candidate` to the checked log; whether it was
/// accepted (`None`: the log's server did not answer).
fn append(conn: &mut redis::Connection, term: u64, candidate: usize, seq: u64) -> Option<bool> {
    let entry = format!("{term}:{candidate}:{seq}");
    let reply: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(LOG_APPEND)
        .arg(2)
        .arg(LOG_TERM)
        .arg(LOG)
        .arg(term)
        .arg(entry)
        .query(conn);
    reply.ok().map(|n| n >= 0)
}

/// The highest term the checked log has taken.
fn log_term(conn: &mut redis::Connection) -> u64 {
    redis::cmd("GET")
        .arg(LOG_TERM)
        .query::<Option<u64>>(conn)
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// One candidate until the run stops: campaign (bounded), then while it
/// leads, a few log writes each after a check of its validity, a
/// proclaim between them. Every [`STALE_EVERY`]-th leadership is not
/// extended (`max_extensions(0)`): before its last write it pauses past
/// its validity and waits (bounded) for a newer leader's write, then
/// writes with its old term, as a stale leader does. Resigns or drops.
fn candidate(id: usize, election: &Election, arm: &Arm, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut conn = redis::Client::open(arm.register_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let (mut turn, mut seq) = (0u64, 0u64);
    while !arm.shared.stopping() {
        let stale = every(turn, STALE_EVERY, id);
        let mut options = LockOptions::new().wait(CAMPAIGN_WAIT);
        if stale {
            options = options.max_extensions(0);
        }
        let value = format!("candidate-{id}:{turn}");
        let Ok(mut leading) = election.campaign_with(value.as_bytes(), &options) else {
            arm.failed_campaigns.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let start = Instant::now();
        turn += 1;
        let term = leading.term();
        let Some(mut end) = observe(leading.lock(), false) else {
            continue;
        };
        // A long leadership when the fault schedule asks for one (its
        // majority restart then hits a live leader).
        let long = arm.shared.want_long_hold.load(Ordering::Relaxed) && !stale;
        let hold = if long { TTL * 2 } else { rng.millis(20, 300) };
        let planned_end = start + hold;
        arm.shared.holding.lock().unwrap()[id] = Some(planned_end);
        loop {
            let last = Instant::now() >= planned_end || arm.shared.stopping();
            if last && stale {
                // A process pause past the validity, until a newer leader
                // wrote (or a while passed): then the stale write.
                arm.shared.holding.lock().unwrap()[id] = None;
                thread::sleep(leading.validity() + rng.millis(50, 300));
                let newer = || log_term(&mut conn) > term;
                crate::clients::wait_until(&arm.shared, TAKEOVER_WAIT, newer);
            }
            let deadline = observe(leading.lock(), true);
            match deadline {
                Some(deadline) => end = deadline,
                None if !(last && stale) => break,
                None => {}
            }
            seq += 1;
            let Some(accepted) = append(&mut conn, term, id, seq) else {
                break;
            };
            arm.writes.lock().unwrap().push(LogWrite {
                candidate: id,
                term,
                deadline,
                returned: Instant::now(),
                accepted,
            });
            if last || deadline.is_none() {
                break;
            }
            if seq.is_multiple_of(2) {
                let value = format!("candidate-{id}:{turn}:{seq}");
                let counter = match leading.proclaim(value.as_bytes()) {
                    Ok(()) => &arm.proclaims_ok,
                    Err(_) => &arm.proclaims_failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            nap(&arm.shared, rng.millis(5, 60));
        }
        let let_go = Instant::now();
        if let Some(deadline) = observe(leading.lock(), false) {
            end = deadline;
        }
        arm.shared.holding.lock().unwrap()[id] = None;
        arm.reigns.lock().unwrap().push(Reign {
            candidate: id,
            term,
            start,
            end: end.min(let_go),
        });
        if turn.is_multiple_of(2) {
            drop(leading);
        } else {
            let _ = leading.resign();
        }
    }
}

/// The observer: `wait_update` again and again; the terms it saw, in
/// order.
fn follow(election: &Election, shared: &Shared) -> Vec<u64> {
    let mut seen: Option<Leader> = None;
    let mut terms = Vec::new();
    while !shared.stopping() {
        if let Ok(now) = election.wait_update(seen.as_ref(), Duration::from_millis(300)) {
            if let Some(leader) = &now {
                terms.push(leader.term());
            }
            seen = now;
        }
    }
    terms
}

/// Leaders under faults: one at a time, terms strictly increasing, a
/// stale leader's write refused by the term-checked log.
#[test]
fn leaders_under_faults_are_one_at_a_time_with_increasing_terms() {
    let _serial = crate::serial();
    let secs = run_secs();
    let seed = seed();
    let mut servers = RedisServers::start(NODES);
    let register = RedisServer::start();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, None, &pids);
    let hang = hang_detector(
        Arc::clone(&pids),
        Some(register.pid()),
        Duration::from_secs(secs) + HANG_GRACE,
    );
    let managers: Vec<LockManager> = (0..=CANDIDATES)
        .map(|id| client_manager(&urls, true, false, ELECTION_OWNERS + id as u64))
        .collect();
    let elections: Vec<Election> = managers.iter().map(|m| m.election(NAME).unwrap()).collect();
    let arm = Arm {
        shared: Shared::new(CANDIDATES),
        register_url: register.url(),
        reigns: Mutex::new(Vec::new()),
        writes: Mutex::new(Vec::new()),
        failed_campaigns: AtomicU64::new(0),
        proclaims_ok: AtomicU64::new(0),
        proclaims_failed: AtomicU64::new(0),
    };
    let mut rng = Rng::new(seed);
    let seeds: Vec<u64> = (0..CANDIDATES).map(|_| rng.next_u64()).collect();
    let started = Instant::now();
    let (faults, observed) = thread::scope(|scope| {
        let _stop = StopOnDrop(&arm.shared.stop);
        let arm = &arm;
        let (watcher, candidates) = elections.split_last().unwrap();
        let follower = scope.spawn(move || follow(watcher, &arm.shared));
        for (id, election) in candidates.iter().enumerate() {
            let seed = seeds[id];
            scope.spawn(move || candidate(id, election, arm, seed));
        }
        let deadline = started + Duration::from_secs(secs);
        let faults = fault_schedule(
            &mut servers,
            &proxies,
            None,
            &arm.shared,
            &mut rng,
            deadline,
            &pids,
        );
        arm.shared.stop.store(true, Ordering::SeqCst);
        (faults, follower.join().unwrap())
    });
    let run_time = started.elapsed();
    for locks in &managers {
        let _ = locks.flush(Duration::from_secs(2));
    }
    drop(elections);
    drop(managers);
    let _ = hang.send(());
    let raw: Vec<String> = register.cmd(redis::cmd("LRANGE").arg(LOG).arg(0).arg(-1));
    drop(register);
    let log: Vec<Entry> = raw
        .iter()
        .map(|e| {
            let mut parts = e.split(':');
            let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap();
            let term = next();
            Entry {
                term,
                candidate: next() as usize,
            }
        })
        .collect();
    let reigns = arm.reigns.lock().unwrap().clone();
    let writes = arm.writes.lock().unwrap().clone();
    let f = check_election(&reigns, &writes, &log);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "torture [election, quarantine ON, {}] after {run_time:.1?} (seed {seed}), {CANDIDATES} \
         candidates and an observer:\n\
         \x20 leaders {} (campaigns that gave up {}), log writes {} ({} entries logged), stale \
         writes {} of which refused {}, proclaims ok {} failed {}; the observer saw {} changes\n\
         \x20 faults {}: restart one {}, restart three {} ({} under a leader), SIGSTOP {}, delay \
         {}, blackhole {}, eviction {} ({} keys evicted)\n\
         \x20 overlaps {:?}; terms out of order {:?}; log out of order {:?}; a term shared {:?}; \
         refused within validity {}; accepted writes missing from the log {}",
        testkit::ServerKind::chosen().name(),
        f.leaders,
        load(&arm.failed_campaigns),
        f.writes,
        log.len(),
        f.stale_writes,
        f.stale_refused,
        load(&arm.proclaims_ok),
        load(&arm.proclaims_failed),
        observed.len(),
        faults.total(),
        faults.restart_one,
        faults.restart_majority,
        faults.restart_majority_with_holder,
        faults.sigstop,
        faults.delay,
        faults.blackhole,
        faults.eviction,
        faults.evicted_keys,
        f.overlap,
        f.term_order,
        f.log_order,
        f.shared_term,
        f.refused_while_valid,
        f.missing,
    );
    assert_eq!(f.overlap, None, "two leaders at once: {f:?}");
    assert_eq!(f.term_order, None, "terms did not increase: {f:?}");
    assert_eq!(
        f.log_order, None,
        "the log took a lower term after a higher one"
    );
    assert_eq!(f.shared_term, None, "two candidates wrote with one term");
    assert_eq!(
        f.refused_while_valid, 0,
        "a valid leader's write was refused: {f:?}"
    );
    assert_eq!(f.missing, 0, "accepted writes missing from the log");
    assert!(
        observed.windows(2).all(|w| w[0] <= w[1]),
        "the observer's terms went back: {observed:?}"
    );
    // The run meant something.
    assert!(f.leaders >= 4, "too few leaders: {f:?}");
    assert!(f.writes >= f.leaders as u64, "leaders did not write: {f:?}");
    assert!(faults.total() > 0, "no fault: {faults:?}");
}
