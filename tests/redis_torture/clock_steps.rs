//! The clock-step arm: five servers whose clocks are stepped, the wall
//! clock and the monotonic clock together (testkit's `LD_PRELOAD` shim),
//! forward and back, by amounts inside and outside the drift allowance
//! (`TTL x 1 % + 2 ms`: 12 ms here), on one node, on a majority and on all
//! of them, while plain and fenced clients compete for their resources.
//!
//! Each step is an episode of [`SCHEDULE`] (run in order, again and again
//! until the run's time is up, and at least once):
//!
//! 1. the gate closes and the arm waits until nobody holds and no lock
//!    call is in progress ([`Shared::quiet`]), so the prober below is the
//!    only holder whose keys were set before the step;
//! 2. the prober (a manager of the arm's own) takes the plain resource and
//!    the fenced one, on every node or, when two nodes are kept busy by a
//!    foreign value, on a bare quorum; it reads the counter and the fenced
//!    register (its fence raises the register's);
//! 3. the chosen nodes' clocks step ([`testkit::RedisServer::set_clock_offset`]
//!    returns once the server reads the new offset), and the step is
//!    classified. **Within** the assumptions of docs/safety.md when every
//!    lock held keeps a quorum of nodes whose clocks did not jump forward
//!    by the drift allowance or more (a step inside the allowance, a step
//!    back, one node while the lock is on more than a bare quorum);
//!    **beyond** them otherwise (a majority stepped forward past the
//!    allowance, or one node under a lock on a bare quorum): an
//!    [`Exposure`] from the step until `max_ttl` + drift later;
//! 4. the gate opens: the clients compete while the prober holds, to the
//!    end of its validity when the step acts there (a step forward within
//!    the allowance, or past it but less than the TTL), else a while; it
//!    writes the counter and the register back (when it still holds a
//!    valid guard) and lets go. After the majority's step back it lets
//!    its plain lock expire instead (a holder that died), and the arm
//!    measures how long the next holder waited past the guard's deadline.
//!
//! The verdict is strict within the assumptions ([`ArmVerdict::assert_safe`]):
//! no two holders at once, no update lost between writers within their
//! validity, no fenced write refused within its writer's validity.
//! Beyond them, overlaps, updates lost and fenced writes refused within
//! the writer's validity are counted and reported, as expected, and must
//! happen (the arm bites); fencing must hold everywhere: the fenced
//! counter loses nothing and fences rise from one holder to the next.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, LockOptions};
use testkit::clock::ClockOffset;
use testkit::{RedisServers, Rng};

use crate::arms::*;
use crate::checker::Exposure;
use crate::clients::{Family, nap};
use crate::config::*;
use crate::recorder::*;

/// Which nodes an episode steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nodes {
    /// One node; under a bare-quorum lock, one of those that hold it.
    One,
    /// Three of five.
    Majority,
    All,
}

/// How far an episode steps each chosen node's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Amount {
    /// Forward by 1 ms up to half the drift allowance.
    AheadWithin,
    /// Back by 1 ms up to half the drift allowance.
    BehindWithin,
    /// Forward past the drift allowance: by [`PAST_DRIFT`] (keys set
    /// before the step expire that much early, after the holder's
    /// validity has begun to run), or, every other round of the
    /// schedule, by [`PAST_TTL`].
    AheadPastDrift,
    /// Forward by [`PAST_TTL`]: keys set before the step expire at once.
    AheadPastTtl,
    /// Back by [`BEHIND_PAST_DRIFT`].
    BehindPastDrift,
    /// Back to the real time (whichever way that is).
    Zero,
}

/// Forward steps past the drift allowance but short of the TTL, in ms.
const PAST_DRIFT: (u64, u64) = (650, 900);
/// Forward steps past the TTL, in ms.
const PAST_TTL: (u64, u64) = (1500, 3000);
/// Backward steps past the drift allowance, in ms.
const BEHIND_PAST_DRIFT: (u64, u64) = (200, 600);

/// How the prober holds after the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProberHold {
    /// Until its guards are no longer valid, writing back shortly before.
    ToTheEnd,
    /// [`PROBER_HOLD`] (or to the end, if sooner), writing back then.
    Short,
    /// Writes back after [`PROBER_HOLD`], then lets its plain lock expire
    /// (`forget`); the arm waits for the next plain holder.
    Forget,
}

/// How long a short prober hold lasts after the step.
const PROBER_HOLD: Duration = Duration::from_millis(300);
/// A prober that holds to the end writes back with this much left.
const WRITE_LEFT: Duration = Duration::from_millis(40);
/// How long the prober may wait for each of its locks (the first episode
/// waits out the fresh servers' quarantine).
const PROBER_WAIT: Duration = Duration::from_secs(3);
/// How long the clients get the resources to themselves between episodes.
const FREE_TIME: Duration = Duration::from_millis(100);

/// What an episode's classification must say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Within,
    Beyond,
    /// Whatever the rule says (the step back to the real time: its
    /// directions depend on the earlier steps).
    ByRule,
}

/// One episode of the schedule.
#[derive(Debug, Clone, Copy)]
struct Plan {
    what: &'static str,
    nodes: Nodes,
    amount: Amount,
    /// Two nodes are kept busy while the prober locks: it holds on three.
    bare_quorum: bool,
    hold: ProberHold,
    expect: Expect,
}

/// The episodes, in order. Steps are relative to the offsets the earlier
/// episodes left, except the last, which brings every node back.
const SCHEDULE: [Plan; 7] = [
    Plan {
        what: "a majority ahead within the drift allowance",
        nodes: Nodes::Majority,
        amount: Amount::AheadWithin,
        bare_quorum: false,
        hold: ProberHold::ToTheEnd,
        expect: Expect::Within,
    },
    Plan {
        what: "one node behind within the drift allowance",
        nodes: Nodes::One,
        amount: Amount::BehindWithin,
        bare_quorum: false,
        hold: ProberHold::Short,
        expect: Expect::Within,
    },
    Plan {
        what: "one node ahead past the TTL, the lock on every node",
        nodes: Nodes::One,
        amount: Amount::AheadPastTtl,
        bare_quorum: false,
        hold: ProberHold::Short,
        expect: Expect::Within,
    },
    Plan {
        what: "a majority behind past the drift allowance, the holder gone",
        nodes: Nodes::Majority,
        amount: Amount::BehindPastDrift,
        bare_quorum: false,
        hold: ProberHold::Forget,
        expect: Expect::Within,
    },
    Plan {
        what: "a majority ahead past the drift allowance",
        nodes: Nodes::Majority,
        amount: Amount::AheadPastDrift,
        bare_quorum: false,
        hold: ProberHold::ToTheEnd,
        expect: Expect::Beyond,
    },
    Plan {
        what: "one node ahead past the TTL, the lock on a bare quorum",
        nodes: Nodes::One,
        amount: Amount::AheadPastTtl,
        bare_quorum: true,
        hold: ProberHold::Short,
        expect: Expect::Beyond,
    },
    Plan {
        what: "every node back to the real time",
        nodes: Nodes::All,
        amount: Amount::Zero,
        bare_quorum: false,
        hold: ProberHold::Short,
        expect: Expect::ByRule,
    },
];

/// One step made, for the report and the checker.
#[derive(Debug, Clone)]
struct Step {
    plan: Plan,
    at: Instant,
    /// (node, offset before, offset after).
    moved: Vec<(usize, ClockOffset, ClockOffset)>,
    /// Nodes holding the prober's plain lock and its fenced lock.
    held_on: [Vec<usize>; 2],
    /// The fewest nodes whose clocks did not jump forward past the drift
    /// allowance that still hold one of the prober's locks.
    kept: usize,
    within: bool,
    /// For an expired (forgotten) holder: how long after its guard's
    /// deadline the next plain holder got the lock.
    next_holder_after: Option<Duration>,
}

/// What the arm's loop returns.
struct ClockFigures {
    steps: Vec<Step>,
    exposures: Vec<Exposure>,
    drift: Duration,
}

/// Clocks stepped within the assumptions never give two valid holders;
/// beyond them (a majority stepped forward past the drift allowance, one
/// node under a lock on a bare quorum) two valid holders are seen and
/// counted, and fencing still refuses every stale write.
#[test]
fn clock_steps_within_the_assumptions_never_overlap_and_fencing_holds_beyond() {
    let _serial = crate::serial();
    let label = "clock steps, quarantine ON";
    let servers = RedisServers::start_with_clock(NODES);
    let families = [
        (Family::Plain, PLAIN_CLIENTS),
        (Family::Fenced, FENCED_CLIENTS),
    ];
    let started = Instant::now();
    let secs = arm_secs(0);
    let (record, figures) = run_arm(label, (servers, secs), &families, true, step_clocks);
    let verdict = ArmVerdict::of(&record, &figures.exposures);
    report(&figures, started);
    verdict.print(label, &record, started);
    verdict.assert_safe(label);
    assert!(
        figures.steps.len() >= SCHEDULE.len(),
        "the schedule did not run to its end: {} steps",
        figures.steps.len()
    );
    assert!(
        verdict.beyond() > 0,
        "the steps beyond the assumptions never let a second holder in while the prober was \
         valid: the arm does not bite. {verdict:?}"
    );
    assert!(
        verdict.refused_explained > 0,
        "no fenced write of a holder that still thought itself valid was refused beyond the \
         assumptions. {verdict:?}"
    );
    assert!(
        record.acquisitions[Family::Plain.index()] >= 10
            && record.acquisitions[Family::Fenced.index()] >= 3,
        "too few acquisitions to mean anything: {:?}",
        record.acquisitions
    );
}

/// The arm's fault loop: [`SCHEDULE`] until the run's time is up (at
/// least once), then every clock back to the real time.
fn step_clocks(cx: &mut ArmContext<'_>) -> ClockFigures {
    let drift = cx.prober.drift_for(TTL);
    let mut offsets = [ClockOffset::ZERO; NODES];
    let mut steps = Vec::new();
    let mut exposures = Vec::new();
    for round in 0.. {
        if round > 0 && Instant::now() >= cx.deadline {
            break;
        }
        for plan in SCHEDULE {
            let step = episode(cx, plan, round, drift, &mut offsets);
            if !step.within {
                exposures.push(Exposure {
                    at: step.at,
                    until: step.at + TTL + drift,
                });
            }
            steps.push(step);
        }
    }
    cx.shared.open_gate();
    ClockFigures {
        steps,
        exposures,
        drift,
    }
}

/// One episode: quiet, the prober's locks, the step, the hold.
fn episode(
    cx: &mut ArmContext<'_>,
    plan: Plan,
    round: u64,
    drift: Duration,
    offsets: &mut [ClockOffset; NODES],
) -> Step {
    let shared = cx.shared;
    assert!(
        shared.quiet(LOCK_WAIT + Duration::from_secs(3)),
        "the clients did not let go before the step ({})",
        plan.what
    );
    // Two nodes kept busy while the prober locks (a bare quorum).
    let busy: Vec<usize> = if plan.bare_quorum {
        pick(&mut cx.rng, &(0..NODES).collect::<Vec<_>>(), 2)
    } else {
        Vec::new()
    };
    for &n in &busy {
        for key in [RESOURCE, FENCED_RESOURCE] {
            let set = redis::cmd("SET")
                .arg(key)
                .arg("foreign")
                .arg("PX")
                .arg(10_000)
                .clone();
            let _: redis::Value = cx.servers[n].cmd(&set);
        }
    }
    let (plain, fenced, held_on) = prober_locks(cx, plan);
    let plain = ProbeHold::new(plain);
    let fenced = ProbeHold::new(fenced);
    let fence = fenced
        .guard
        .fence()
        .expect("the prober's fenced lock has a fence");
    let mut register = Register::connect(cx.register_url);
    let (value, read_seq) = shared.read();
    let register_value = register.read(fence);

    // The step.
    let chosen = match plan.nodes {
        // Under a bare quorum, a node that holds: the one that hurts.
        Nodes::One => pick(&mut cx.rng, &held_on[0], 1),
        Nodes::Majority => pick(&mut cx.rng, &(0..NODES).collect::<Vec<_>>(), NODES / 2 + 1),
        Nodes::All => (0..NODES).collect(),
    };
    let mut moved = Vec::new();
    for &n in &chosen {
        let draw = |rng: &mut Rng, (lo, hi): (u64, u64)| rng.millis(lo, hi);
        let within = (1, (drift.as_millis() as u64 / 2).max(1));
        // How far this node's clocks move.
        let moves = match plan.amount {
            Amount::AheadWithin => ClockOffset::ahead(draw(&mut cx.rng, within)),
            Amount::BehindWithin => ClockOffset::behind(draw(&mut cx.rng, within)),
            Amount::AheadPastDrift if round.is_multiple_of(2) => {
                ClockOffset::ahead(draw(&mut cx.rng, PAST_DRIFT))
            }
            Amount::AheadPastDrift | Amount::AheadPastTtl => {
                ClockOffset::ahead(draw(&mut cx.rng, PAST_TTL))
            }
            Amount::BehindPastDrift => ClockOffset::behind(draw(&mut cx.rng, BEHIND_PAST_DRIFT)),
            Amount::Zero => offsets[n].step_to(ClockOffset::ZERO),
        };
        moved.push((n, offsets[n], offsets[n].plus(moves)));
    }
    // Nodes whose clocks jump forward by the drift allowance or more: the
    // keys set before expire that much early there.
    let jumped: Vec<usize> = moved
        .iter()
        .filter(|(_, from, to)| {
            let by = from.step_to(*to);
            by.is_ahead() && by.magnitude() >= drift
        })
        .map(|(n, _, _)| *n)
        .collect();
    let kept = held_on
        .iter()
        .map(|nodes| nodes.iter().filter(|n| !jumped.contains(n)).count())
        .min()
        .unwrap_or(0);
    let within = kept >= cx.prober.quorum();
    let at = Instant::now();
    for &(n, _, to) in &moved {
        cx.servers[n].set_clock_offset(to);
        offsets[n] = to;
    }
    for &n in &busy {
        let _: redis::Value =
            cx.servers[n].cmd(redis::cmd("DEL").arg(RESOURCE).arg(FENCED_RESOURCE));
    }
    let expected = match plan.expect {
        Expect::Within => Some(true),
        Expect::Beyond => Some(false),
        Expect::ByRule => None,
    };
    assert!(
        expected.is_none_or(|e| e == within),
        "episode \"{}\" was planned {:?} but the step is {} the assumptions: the prober held \
         on {held_on:?}, nodes jumped forward {jumped:?}",
        plan.what,
        plan.expect,
        if within { "within" } else { "beyond" },
    );
    shared.open_gate();

    // The hold.
    let hold_end = match plan.hold {
        ProberHold::ToTheEnd => None,
        ProberHold::Short | ProberHold::Forget => Some(Instant::now() + PROBER_HOLD),
    };
    let id = cx.prober_id;
    let mut holds = [plain, fenced];
    let mut written = [false; 2];
    let mut let_go = [None::<Instant>; 2];
    let bound = Instant::now() + TTL * 2;
    while let_go.iter().any(Option::is_none) && Instant::now() < bound {
        let now = Instant::now();
        let over = hold_end.is_some_and(|end| now >= end);
        for i in 0..2 {
            if let_go[i].is_some() {
                continue;
            }
            let Some(deadline) = holds[i].observe() else {
                let_go[i] = Some(Instant::now());
                continue;
            };
            if !written[i] && (over || deadline.saturating_duration_since(now) < WRITE_LEFT) {
                written[i] = true;
                if i == 0 {
                    shared.write(id, value, read_seq, deadline);
                } else if let Some(seen) = register_value {
                    let replaced = register.write(fence, seen + 1);
                    shared.fenced_writes.lock().unwrap().push(FencedWrite {
                        client: id,
                        fence,
                        seen,
                        replaced,
                        at: Instant::now(),
                        deadline,
                    });
                }
            }
            if over {
                let_go[i] = Some(Instant::now());
            }
        }
        thread::sleep(Duration::from_millis(2));
    }
    let now = Instant::now();
    let [plain, fenced] = holds;
    let plain_deadline = plain.claim;
    shared.windows.lock().unwrap().extend([
        plain.window(id, let_go[0].unwrap_or(now)),
        fenced.window(id, let_go[1].unwrap_or(now)),
    ]);
    let _ = fenced.guard.release();
    let plain_holds = || shared.counts.acquisitions[Family::Plain.index()].load(Ordering::SeqCst);
    let before = plain_holds();
    let forgot_at = Instant::now();
    let forgot = plan.hold == ProberHold::Forget;
    if forgot {
        plain.guard.forget();
    } else {
        let _ = plain.guard.release();
    }
    // After a forgotten hold: the next plain holder, when it comes (the
    // keys on the majority stepped back outlive the guard by the step).
    let next_holder_after = forgot.then(|| {
        let came = testkit::wait_until_with(
            TTL * 2 + Duration::from_millis(BEHIND_PAST_DRIFT.1) + LOCK_WAIT,
            Duration::from_millis(1),
            || false,
            || plain_holds() > before,
        );
        assert!(
            came,
            "no plain holder after the forgotten lock ({})",
            plan.what
        );
        // Its window is recorded when its hold ends: until then, the
        // clock now is an upper bound of its start.
        let next = shared
            .windows
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.fence.is_none() && w.start > forgot_at)
            .map(|w| w.start)
            .min()
            .unwrap_or_else(Instant::now);
        next.saturating_duration_since(plain_deadline)
    });
    nap(shared, FREE_TIME);
    Step {
        plan,
        at,
        moved,
        held_on,
        kept,
        within,
        next_holder_after,
    }
}

/// `n` distinct elements of `from`, at random.
fn pick(rng: &mut Rng, from: &[usize], n: usize) -> Vec<usize> {
    let mut pool = from.to_vec();
    let mut out = Vec::new();
    while out.len() < n && !pool.is_empty() {
        out.push(pool.swap_remove(rng.below(pool.len() as u64) as usize));
    }
    out.sort_unstable();
    out
}

/// The prober's two locks, settled on every node that grants them, and
/// the nodes that hold each. Unless the plan keeps two nodes busy, both
/// locks must be on every node: a lock left on fewer (a key of a round
/// that just failed) is released and taken again, for at most two TTLs.
fn prober_locks(cx: &ArmContext<'_>, plan: Plan) -> (LockGuard, LockGuard, [Vec<usize>; 2]) {
    let give_up = Instant::now() + TTL * 2;
    loop {
        let plain = cx
            .prober
            .lock_with(RESOURCE, &LockOptions::new().wait(PROBER_WAIT))
            .unwrap_or_else(|e| panic!("the prober cannot lock ({}): {e}", plan.what));
        let fenced = cx
            .prober
            .lock_with(
                FENCED_RESOURCE,
                &LockOptions::new().fencing(true).wait(PROBER_WAIT),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "the prober cannot lock the fenced resource ({}): {e}",
                    plan.what
                )
            });
        assert!(
            cx.prober.flush(Duration::from_secs(5)),
            "the prober's rounds never settled"
        );
        let holding = |key: &str, guard: &LockGuard| -> Vec<usize> {
            (0..NODES)
                .filter(|&n| {
                    cx.servers[n]
                        .get(key.as_bytes())
                        .is_some_and(|v| guard.token().matches_stored(&v))
                })
                .collect()
        };
        let held_on = [holding(RESOURCE, &plain), holding(FENCED_RESOURCE, &fenced)];
        if plan.bare_quorum || held_on.iter().all(|h| h.len() == NODES) || Instant::now() >= give_up
        {
            return (plain, fenced, held_on);
        }
        let _ = plain.release();
        let _ = fenced.release();
        thread::sleep(Duration::from_millis(20));
    }
}

/// Prints the steps and what they did.
fn report(figures: &ClockFigures, started: Instant) {
    let within = figures.steps.iter().filter(|s| s.within).count();
    eprintln!(
        "clock steps: {} ({} within the assumptions, {} beyond), drift allowance {:?}",
        figures.steps.len(),
        within,
        figures.steps.len() - within,
        figures.drift,
    );
    for s in &figures.steps {
        let moved: Vec<String> = s
            .moved
            .iter()
            .map(|(n, from, to)| format!("node {n} {from} -> {to}"))
            .collect();
        eprintln!(
            "  at {:.3?}: {} [{}]: {} (the prober's locks on {:?} and {:?}, {} left on nodes \
             that did not jump){}",
            s.at.saturating_duration_since(started),
            s.plan.what,
            moved.join(", "),
            if s.within { "within" } else { "BEYOND" },
            s.held_on[0],
            s.held_on[1],
            s.kept,
            s.next_holder_after
                .map(|d| format!("; next holder {d:.1?} after the expired guard's deadline"))
                .unwrap_or_default(),
        );
    }
}
