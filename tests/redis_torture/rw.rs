//! The read-write lock under the randomized runs' fault schedule
//! ([`fault_schedule`]: kills and restarts of one node and of a majority
//! under a holder, `SIGSTOP`, proxy delays and blackholes, an evicting
//! policy at run time), quarantine on: [`READERS`] reader and [`WRITERS`]
//! fenced writer clients, each a thread with its own manager, on one
//! `RwLock`, every call and hold recorded, then [`check_rw`].
//!
//! A watcher reads the writer's key on every server directly while a
//! writer call is in progress, for the no-overtaking check
//! (`rw_checker.rs` says what is asserted, and why that much).
//!
//! Coverage is scheduled, not drawn: before the faults start, the opening
//! has a reader in, a writer waiting behind it until the watcher has seen
//! its intent on a quorum, and then a second reader that must wait behind
//! that writer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{Error, LockGuard, LockManager, LockOptions, RwLock};
use testkit::proxy::Proxy;
use testkit::{RedisServers, Rng};

use crate::clients::{client_manager, nap, observe};
use crate::config::*;
use crate::faults::*;
use crate::recorder::Shared;
use crate::rw_checker::*;
use crate::rw_watch::watch;

const NAME: &str = "torture-rw";
pub(crate) const READERS: usize = 3;
pub(crate) const WRITERS: usize = 2;
/// Owner numbers of the arm's managers start here.
const RW_OWNERS: u64 = 2_000_000;
/// How long the opening's calls may wait (fresh servers are quarantined
/// for `max_ttl` plus drift first).
const OPENING_WAIT: Duration = Duration::from_secs(5);
/// Every this many holds of a client extends at once.
const EXTEND_EVERY: u64 = 8;

/// The arm's shared state: the fault schedule's ([`Shared`]: stop, the
/// holders' planned ends, the long-hold request), the record, the
/// watcher's sightings.
struct Arm {
    shared: Shared,
    calls: Mutex<Vec<RwCall>>,
    sightings: Mutex<Vec<Sighting>>,
    /// Writer calls in progress: the watcher looks only then.
    writers_calling: AtomicUsize,
    long_holds: AtomicU64,
    extends_ok: AtomicU64,
    extends_failed: AtomicU64,
    failed_releases: AtomicU64,
}

/// One call of client `id` (`take`: its read or write side), then its
/// hold (`turn`: the client's holds before it): a few milliseconds, or,
/// when the fault schedule asks for a long hold, until shortly before the
/// validity ends.
/// Recorded as the main arms record: the window runs from the return to
/// the deadline last observed or the let-go, whichever comes first.
fn call(
    (id, turn): (usize, u64),
    write: bool,
    arm: &Arm,
    rng: &mut Rng,
    take: impl FnOnce() -> Result<LockGuard, Error>,
) {
    let began = Instant::now();
    if write {
        arm.writers_calling.fetch_add(1, Ordering::SeqCst);
    }
    let taken = take();
    let returned = Instant::now();
    if write {
        arm.writers_calling.fetch_sub(1, Ordering::SeqCst);
    }
    let mut record = RwCall {
        client: id,
        write,
        began,
        returned,
        hold: None,
    };
    let mut guard = match taken {
        Ok(guard) => guard,
        Err(e) if e.is_contended() || e.is_no_quorum() || e.is_lost() || e.is_retryable() => {
            arm.calls.lock().unwrap().push(record);
            return;
        }
        Err(e) => panic!("rw client {id} (write: {write}): unexpected error: {e}"),
    };
    assert_eq!(
        guard.fence().is_some(),
        write,
        "fenced writers, unfenced readers"
    );
    let mut claim = observe(&guard, false).unwrap_or(returned);
    let long = arm.shared.want_long_hold.swap(false, Ordering::Relaxed);
    let planned_end = if long {
        arm.long_holds.fetch_add(1, Ordering::Relaxed);
        claim
            .checked_sub(LONG_HOLD_MARGIN)
            .unwrap_or(returned)
            .max(returned)
    } else {
        returned + rng.millis(1, if write { 5 } else { 20 })
    };
    // A long hold extends halfway (the majority restart it was asked for
    // usually makes that fail); every [`EXTEND_EVERY`]-th hold first thing.
    let mut extend_at = if long {
        Some(returned + (planned_end - returned) / 2)
    } else {
        every(turn, EXTEND_EVERY, id).then_some(returned)
    };
    arm.shared.holding.lock().unwrap()[id] = Some(planned_end);
    loop {
        if extend_at.is_some_and(|at| Instant::now() >= at) {
            extend_at = None;
            let asked = Instant::now();
            let result = guard.extend(TTL);
            // Whatever the outcome, nodes that applied it expire by then.
            claim = claim.min(asked + TTL);
            if let Err(e) = result {
                assert!(e.is_lost(), "rw client {id}: extend: {e}");
                arm.extends_failed.fetch_add(1, Ordering::Relaxed);
                break;
            }
            arm.extends_ok.fetch_add(1, Ordering::Relaxed);
        }
        match observe(&guard, false) {
            Some(deadline) => claim = deadline,
            None => break,
        }
        let now = Instant::now();
        if now >= planned_end || arm.shared.stopping() {
            break;
        }
        thread::sleep((planned_end - now).min(Duration::from_millis(5)));
    }
    let let_go = Instant::now();
    arm.shared.holding.lock().unwrap()[id] = None;
    record.hold = Some(RwHold {
        end: let_go.min(claim),
        let_go,
        fence: guard.fence(),
        token: *guard.token(),
    });
    arm.calls.lock().unwrap().push(record);
    if rng.below(3) == 0 {
        drop(guard);
    } else if guard.release().is_err() {
        arm.failed_releases.fetch_add(1, Ordering::Relaxed);
    }
}

fn reader(id: usize, rw: &RwLock, arm: &Arm, seed: u64) {
    let mut rng = Rng::new(seed);
    for turn in 0.. {
        if arm.shared.stopping() {
            break;
        }
        call((id, turn), false, arm, &mut rng, || rw.read());
        nap(&arm.shared, rng.millis(0, 10));
    }
}

fn writer(id: usize, rw: &RwLock, arm: &Arm, seed: u64) {
    let mut rng = Rng::new(seed);
    let options = LockOptions::new().fencing(true).wait(PATIENT_WAIT);
    for turn in 0.. {
        if arm.shared.stopping() {
            break;
        }
        call((id, turn), true, arm, &mut rng, || rw.write_with(&options));
        nap(&arm.shared, rng.millis(20, 120));
    }
}

/// The opening, before any fault: reader 0 in; writer `READERS` waits
/// behind it until the watcher has seen its intent on a quorum; then
/// reader 1 asks and must wait behind that writer; reader 0 leaves.
fn opening(rws: &[RwLock], arm: &Arm) {
    let wait = LockOptions::new().wait(OPENING_WAIT);
    let began = Instant::now();
    let first = rws[0].read_with(&wait).expect("the opening's reader");
    let first_returned = Instant::now();
    thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let options = LockOptions::new().fencing(true).wait(OPENING_WAIT);
            call((READERS, 0), true, arm, &mut Rng::new(8), || {
                rws[READERS].write_with(&options)
            });
        });
        let seen = testkit::wait_until_with(
            OPENING_WAIT,
            Duration::from_millis(1),
            || writer.is_finished(),
            || !arm.sightings.lock().unwrap().is_empty(),
        );
        assert!(
            seen,
            "the opening's writer intent was never seen on a quorum"
        );
        let later = scope.spawn(|| {
            call((1, 0), false, arm, &mut Rng::new(9), || {
                rws[1].read_with(&wait)
            });
        });
        thread::sleep(Duration::from_millis(100));
        let end = observe(&first, false).unwrap_or(first_returned);
        let let_go = Instant::now();
        arm.calls.lock().unwrap().push(RwCall {
            client: 0,
            write: false,
            began,
            returned: first_returned,
            hold: Some(RwHold {
                end: end.min(let_go),
                let_go,
                fence: None,
                token: *first.token(),
            }),
        });
        first.release().expect("the opening's release");
        writer.join().unwrap();
        later.join().unwrap();
    });
}

/// Readers share, a writer is alone and not overtaken by readers that came
/// after its intent, fences increase, under the main arms' faults.
#[test]
fn rw_lock_readers_share_writers_are_alone_and_not_overtaken_under_faults() {
    let _serial = crate::serial();
    let secs = run_secs();
    let seed = seed();
    let mut servers = RedisServers::start(NODES);
    let direct = servers.urls();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, None, &pids);
    let hang = hang_detector(
        Arc::clone(&pids),
        None,
        Duration::from_secs(secs) + HANG_GRACE,
    );
    let managers: Vec<LockManager> = (0..READERS + WRITERS)
        .map(|id| client_manager(&urls, true, false, RW_OWNERS + id as u64))
        .collect();
    let rws: Vec<RwLock> = managers.iter().map(|m| m.rw_lock(NAME).unwrap()).collect();
    let key = rws[0].keys().1.to_vec();
    let arm = Arm {
        shared: Shared::new(READERS + WRITERS),
        calls: Mutex::new(Vec::new()),
        sightings: Mutex::new(Vec::new()),
        writers_calling: AtomicUsize::new(0),
        long_holds: AtomicU64::new(0),
        extends_ok: AtomicU64::new(0),
        extends_failed: AtomicU64::new(0),
        failed_releases: AtomicU64::new(0),
    };
    let mut rng = Rng::new(seed);
    let seeds: Vec<u64> = rws.iter().map(|_| rng.next_u64()).collect();
    let started = Instant::now();
    let faults = thread::scope(|scope| {
        let _stop = StopOnDrop(&arm.shared.stop);
        let (arm, direct, key) = (&arm, &direct, &key);
        scope.spawn(move || {
            watch(
                direct,
                key,
                (&arm.shared, &arm.writers_calling, &arm.sightings),
            )
        });
        opening(&rws, arm);
        for (id, rw) in rws.iter().enumerate() {
            let seed = seeds[id];
            scope.spawn(move || match id < READERS {
                true => reader(id, rw, arm, seed),
                false => writer(id, rw, arm, seed),
            });
        }
        // The opening counts in the run's time.
        let deadline = started + Duration::from_secs(secs);
        fault_schedule(
            &mut servers,
            &proxies,
            None,
            &arm.shared,
            &mut rng,
            deadline,
            &pids,
        )
    });
    let run_time = started.elapsed();
    for locks in &managers {
        let _ = locks.flush(Duration::from_secs(2));
    }
    drop(managers);
    let _ = hang.send(());
    let calls = arm.calls.lock().unwrap().clone();
    let sightings = arm.sightings.lock().unwrap().clone();
    let f = check_rw(&calls, &sightings);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    eprintln!(
        "torture [rw lock, quarantine ON, {}] after {run_time:.1?} (seed {seed}), {READERS} \
         readers, {WRITERS} fenced writers:\n\
         \x20 reads {} (calls that gave up {}), writes {} (gave up {}); long holds {}, extends ok \
         {} failed {}, releases without quorum {}\n\
         \x20 faults {}: restart one {}, restart three {} ({} under a holder), SIGSTOP {}, delay \
         {}, blackhole {}, eviction {} ({} keys evicted)\n\
         \x20 overlaps with a writer {} (longest {:?}); fence order violations {}\n\
         \x20 writers alone from call to admission {}: reads begun after the writer's call and \
         granted before its admission {} (at most {} for one writer; not bounded, see \
         rw_checker.rs)\n\
         \x20 writers whose intent was seen on a quorum before admission {} of {}: reads granted \
         between sighting and admission {} <= in flight at the sighting {} (writers over that \
         bound {}); reads begun after the sighting that waited for the admission {}, granted \
         before it {}",
        testkit::ServerKind::chosen().name(),
        f.reads,
        f.failed_reads,
        f.writes,
        f.failed_writes,
        load(&arm.long_holds),
        load(&arm.extends_ok),
        load(&arm.extends_failed),
        load(&arm.failed_releases),
        faults.total(),
        faults.restart_one,
        faults.restart_majority,
        faults.restart_majority_with_holder,
        faults.sigstop,
        faults.delay,
        faults.blackhole,
        faults.eviction,
        faults.evicted_keys,
        f.overlaps,
        f.longest_overlap,
        f.fence_violations,
        f.sole_writers,
        f.overtook_sole_writers,
        f.most_for_one_writer,
        f.seen_writers,
        f.writes,
        f.granted_after_sighting,
        f.in_flight_at_sighting,
        f.bound_exceeded,
        f.stood_back,
        f.overtook_intent,
    );
    let at = |i: Instant| i.saturating_duration_since(started);
    let show = |c: &RwCall| {
        format!(
            "client {} ({}) called at {:.3?}, returned at {:.3?}, window end {:?}",
            c.client,
            if c.write { "write" } else { "read" },
            at(c.began),
            at(c.returned),
            c.hold.map(|h| at(h.end)),
        )
    };
    if let Some((a, b)) = &f.first_overlap {
        eprintln!("  first overlap:\n    {}\n    {}", show(a), show(b));
    }
    if let Some((w, r)) = &f.first_overtaking {
        eprintln!(
            "  first overtaking:\n    writer {}\n    reader {}",
            show(w),
            show(r)
        );
    }
    assert_eq!(f.overlaps, 0, "a writer met another holder: {f:?}");
    assert_eq!(f.fence_violations, 0, "fences out of order: {f:?}");
    assert_eq!(
        (f.overtook_intent, f.bound_exceeded),
        (0, 0),
        "a reader that came after a writer's intent was on a quorum got in first: {f:?}"
    );
    // The run meant something (the opening alone gives a stood-back read
    // and a seen writer).
    assert!(f.reads >= 10 && f.writes >= 3, "too few holds: {f:?}");
    assert!(
        f.seen_writers >= 1 && f.stood_back >= 1,
        "the opening did not run: {f:?}"
    );
    assert!(faults.total() > 0, "no fault: {faults:?}");
}
