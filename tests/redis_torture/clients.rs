//! The client families of the randomized runs: who they are ([`roster`]),
//! how each locks, holds, steps on the counters and lets go.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, LockManager, LockOptions, RetryPolicy};
use testkit::Rng;

use crate::config::*;
use crate::recorder::*;

/// The kinds of client in the randomized runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
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
    pub(crate) const ALL: [Self; 6] = [
        Self::Plain,
        Self::AutoExtend,
        Self::ManualExtend,
        Self::SharedManager,
        Self::LateManager,
        Self::Fenced,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn name(self) -> &'static str {
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
pub(crate) struct ClientSpec {
    pub(crate) family: Family,
    /// Index into the run's managers; `None` for a late-manager client.
    pub(crate) manager: Option<usize>,
    /// For shared-manager threads: which group (manager) they belong to;
    /// for fenced clients, which of them it is.
    pub(crate) group: Option<usize>,
}

/// The clients of a randomized run and how many long-lived managers they
/// use: [`PLAIN_CLIENTS`] plain clients, one auto-extended, one
/// manual-extend (each its own manager), [`SHARED_GROUPS`] managers with
/// several threads each, [`LATE_CLIENTS`] late-manager clients,
/// [`FENCED_CLIENTS`] fenced clients (each its own manager). Every manager
/// is built by [`client_manager`], with `.ttl(TTL).max_ttl(TTL)`; the
/// returned flags say, per manager, whether it is built with fencing on.
pub(crate) fn roster() -> (Vec<ClientSpec>, Vec<bool>) {
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

pub(crate) fn client_manager(
    urls: &[String],
    quarantine: bool,
    fencing: bool,
    owner: u64,
) -> LockManager {
    LockManager::builder()
        .redis_nodes(urls)
        .unwrap()
        .owner(owner_label(owner))
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

/// The number of `locks`'s owner label (every manager here has one).
pub(crate) fn owner_of(locks: &LockManager) -> u64 {
    owner_number(locks.owner()).unwrap_or(u64::MAX)
}

/// How one hold goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldPlan {
    pub(crate) family: Family,
    /// The holder's manager (its owner number, see [`owner_of`]).
    pub(crate) owner: u64,
    /// The client's holds before this one (its round-robin turn).
    pub(crate) turn: u64,
    pub(crate) handed_over: bool,
    /// The guard is auto-extended: hold for `length` whatever the TTL.
    pub(crate) auto: bool,
    /// The holder also extends the guard itself.
    pub(crate) manual_extends: bool,
    /// Planned length (without auto-extension a long hold, when asked for,
    /// lasts until shortly before the validity ends instead).
    pub(crate) length: Duration,
    /// Pause between steps.
    pub(crate) gap: (u64, u64),
    /// Let go by `drop` instead of `release` (either may hand over).
    pub(crate) drop_it: bool,
    /// Check with `guard.check()` (else `guard.is_valid()`).
    pub(crate) via_check: bool,
    /// Stall once between a check and the write until past the claimed
    /// deadline (a process pause): the write is late.
    pub(crate) stall: bool,
}

impl HoldPlan {
    /// The `turn`-th hold of a client: `length` without auto-extension,
    /// checked with `is_valid`, ended by `release`.
    pub(crate) fn short(family: Family, turn: u64, length: Duration) -> Self {
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
            owner: u64::MAX,
        }
    }
}

/// The deadline the guard claims now, bounded from below (the clock is
/// read before `validity`, which measures against a later `now`), or
/// `None` when it is not valid.
pub(crate) fn observe(guard: &LockGuard, via_check: bool) -> Option<Instant> {
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
pub(crate) fn manual_ttl(turn: u64) -> Duration {
    match turn % 10 {
        0..4 => SHORT_EXTEND_TTL,
        4..6 => TTL / 2 + TTL / 10,
        _ => TTL,
    }
}

/// Sleeps about `d` in small slices, returning early when the run stops.
pub(crate) fn nap(shared: &Shared, d: Duration) {
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
pub(crate) fn wait_until(shared: &Shared, limit: Duration, done: impl FnMut() -> bool) -> bool {
    testkit::wait_until_with(limit, Duration::from_millis(2), || shared.stopping(), done)
}

/// Locks with the family's options, `resource` alone or together with
/// `side` (as a set, without fencing); counts failures. While the gate is
/// closed ([`Shared::quiet`]) it naps instead and returns `None`. A guard
/// returned counts as active until its hold calls [`Shared::done`].
pub(crate) fn acquire(
    id: usize,
    locks: &LockManager,
    resource: &str,
    side: Option<&str>,
    options: &LockOptions,
    shared: &Shared,
) -> Option<LockGuard> {
    shared.active.fetch_add(1, Ordering::SeqCst);
    if shared.gate.load(Ordering::SeqCst) {
        shared.done();
        nap(shared, OPENING_POLL);
        return None;
    }
    let taken = match side {
        Some(side) => locks
            .lock_all([resource, side], &options.clone().fencing(false))
            .inspect(|_| {
                shared.counts.set_holds.fetch_add(1, Ordering::Relaxed);
            }),
        None => locks.lock_with(resource, options),
    };
    if taken.is_err() {
        shared.done();
    }
    match taken {
        Ok(guard) => Some(guard),
        Err(e) if e.is_retryable() => {
            shared.counts.failed_locks.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => panic!("client {id}: unexpected error: {e}"),
    }
}

/// One client with a long-lived manager, until told to stop.
pub(crate) fn client(id: usize, spec: ClientSpec, locks: &LockManager, shared: &Shared, seed: u64) {
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
                    stall: !shared.quick_holds && every(holds, STALL_EVERY, id),
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
        let side = (matches!(spec.family, Family::Plain | Family::AutoExtend)
            && holds.is_multiple_of(3))
        .then(|| SIDES[usize::from((holds / 3) % 2 == 1)]);
        let Some(guard) = acquire(id, locks, RESOURCE, side, &options, shared) else {
            continue;
        };
        let mut plan = HoldPlan {
            owner: owner_of(locks),
            ..plan
        };
        if shared.exercised(spec.family) {
            // The plain hold that opens the run stalls: every run has a
            // late writer, and the others compete meanwhile.
            plan.stall |= spec.family == Family::Plain && !shared.quick_holds;
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
pub(crate) fn late_client(
    id: usize,
    urls: &[String],
    quarantine: bool,
    shared: &Shared,
    seed: u64,
) {
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
        // Late managers: numbers apart from the long-lived ones.
        let number = LATE_OWNERS + id as u64 * 1000 + built;
        let locks = client_manager(urls, quarantine, false, number);
        shared.counts.late_managers.fetch_add(1, Ordering::Relaxed);
        for _ in 0..LATE_ACQUISITIONS {
            if shared.stopping() {
                break;
            }
            let options = LockOptions::new().wait(PATIENT_WAIT);
            let Some(guard) = acquire(id, &locks, RESOURCE, None, &options, shared) else {
                continue;
            };
            let plan = HoldPlan {
                via_check: true,
                owner: owner_of(&locks),
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
pub(crate) fn fenced_client(
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
        let Some(guard) = acquire(id, locks, FENCED_RESOURCE, None, &options, shared) else {
            continue;
        };
        let first = !shared.fenced_opened.swap(true, Ordering::SeqCst);
        let pause = !shared.quick_holds && (first || every(holds, FENCED_PAUSE_EVERY, id));
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
pub(crate) fn fenced_hold(
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
    let long = !shared.quick_holds
        && (shared.want_long_hold.swap(false, Ordering::Relaxed)
            || every(turn, LONG_HOLD_EVERY, id));
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
        // The inspections look at the unfenced resource only.
        owner: u64::MAX,
    });
    counts.ended_by_release.fetch_add(1, Ordering::Relaxed);
    if guard.release().is_err() {
        counts.failed_releases.fetch_add(1, Ordering::Relaxed);
    }
    shared.done();
}

/// The critical section: read-modify-write steps on the shared counter,
/// each read and each write made only if the guard is valid right before
/// it (what a careful user does), with the claimed deadline updated at
/// every such check and after every manual extend. Most holds are a step
/// or two; some (when the fault schedule asks, a few at random, and every
/// auto-extended one) last long, so that faults hit a live holder.
pub(crate) fn hold(
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
    let long = !shared.quick_holds
        && (shared.want_long_hold.swap(false, Ordering::Relaxed)
            || every(plan.turn, LONG_HOLD_EVERY, id));
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
        owner: plan.owner,
    });
    // Both endings may hand the lock to a waiting thread of this manager:
    // the next holder that gets this token got it handed over.
    if let Some(group) = group {
        *shared.dropped_tokens[group].lock().unwrap() = Some(guard.token().as_bytes().to_vec());
    }
    if plan.drop_it {
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
    shared.done();
}
