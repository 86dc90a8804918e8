//! An exhaustive check of the local line: every order of the line's steps
//! taken by three threads that want one key, run on the crate's own
//! [`LocalQueue`].
//!
//! Why this is complete: every step that reads or changes the line is one
//! critical section under the lines' lock (`join`, `look`, `leave_line`,
//! `Ticket::hold`, `pass_with`, `nudge`), and between them a thread only
//! blocks or takes a message from its own channel. So the interleavings of
//! those steps are all the interleavings there are. Each schedule is
//! replayed on a fresh queue (the queue's channels and `Arc`s cannot be
//! cloned), depth first, and states already seen are not explored again.
//!
//! A thread's program: join the line; while in line, look (when it has
//! just joined, was nudged, or its look-again timer is due on the manager
//! clock), take a message, or (an impatient thread only) leave at any
//! moment, as a deadline or a cancellation would make it. With the turn:
//! get the lock (when no other valid lock exists, as the servers would
//! decide) or fail to; with the lock: release, drop with a hand-over,
//! lose it (the line is nudged, as `Rounds::lose` does) or get stuck (never
//! act again). The clock steps to the next deadline of a held lock.
//!
//! Properties: at most one valid lock; a handed-over lock is what its
//! waiter asked for (same TTL, never to a fenced waiter); a thread gets
//! the turn only when every other thread holding a ticket holds an expired
//! or lost lock (the line never lets two contend at once); no patient
//! waiter is ever left waiting with nothing left to wake it (a lost turn);
//! and when every thread is done, the line is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::backend::KeySet;
use crate::canary::{self, Canary};
use crate::clock::{Clock, ManualClock};
use crate::error::Error;
use crate::redlock::lease::Lease;
use crate::redlock::support::Support;
use crate::redlock::turns::{Grant, Joined, LocalQueue, Look, Ticket, Turn, Want};
use crate::token::Token;

const SECOND: Duration = Duration::from_secs(1);
const PLAIN: Want = Want {
    ttl: SECOND,
    fenced: false,
};
const SHORT: Want = Want {
    ttl: Duration::from_millis(500),
    fenced: false,
};
const FENCED: Want = Want {
    ttl: SECOND,
    fenced: true,
};

/// One thread: what it asks for, and whether it may leave the line (a
/// deadline or a cancellation) at any moment.
#[derive(Debug, Clone, Copy)]
struct Spec {
    want: Want,
    patient: bool,
    /// How many times it waits for the lock (one after the other).
    rounds: u8,
}

/// A thread's place in its program.
enum Phase {
    Start,
    /// In line, about to look at it.
    Look {
        id: u64,
        grant: Receiver<Grant>,
    },
    /// In line, blocked until a message, its timer (the holder's deadline
    /// on the manager clock), or (if impatient) its deadline.
    Blocked {
        id: u64,
        grant: Receiver<Grant>,
        look_at: Option<Instant>,
    },
    /// Holds the turn, contending with the servers.
    Turn(Ticket),
    /// Holds the turn and the lock.
    Locked(Ticket, Arc<Lease>),
    /// Holds them and never acts again.
    Stuck(Ticket, Arc<Lease>),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Join,
    Look,
    Receive,
    Timer,
    Leave,
    GetLock,
    FailLock,
    Release,
    HandOver,
    /// `release()`: offers the lock to the next waiter; releases (and then
    /// passes the turn) when it is not taken.
    ReleaseOrHandOver,
    Lose,
    Stick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Thread(usize, Act),
    /// The clock steps to the next deadline of a held, valid lock.
    Tick,
}

struct World {
    clock: ManualClock,
    queue: Arc<LocalQueue>,
    key: KeySet,
    specs: Vec<Spec>,
    phases: Vec<Phase>,
    /// Rounds each thread has begun.
    begun: Vec<u8>,
    /// What the schedule went through: a lock handed over, a leaving
    /// thread that found its turn had come, a look-again timer that fired.
    seen: Seen,
}

#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    handed: bool,
    /// A `release()` handed its lock over.
    released_handed: bool,
    turn_on_leaving: bool,
    timer: bool,
}

impl World {
    fn new(specs: &[Spec]) -> Self {
        let clock = ManualClock::new();
        Self {
            queue: Arc::new(LocalQueue::new(Arc::new(clock.clone()))),
            clock,
            key: KeySet::one("r"),
            specs: specs.to_vec(),
            phases: specs.iter().map(|_| Phase::Start).collect(),
            begun: vec![0; specs.len()],
            seen: Seen::default(),
        }
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A lock nothing has ended: not lost, finished or expired.
    fn valid(&self, lease: &Lease) -> bool {
        let state = lease.state();
        !state.is_over() && self.now() < state.deadline()
    }

    fn leases(&self) -> impl Iterator<Item = (usize, &Arc<Lease>)> {
        self.phases.iter().enumerate().filter_map(|(i, p)| match p {
            Phase::Locked(_, lease) | Phase::Stuck(_, lease) => Some((i, lease)),
            _ => None,
        })
    }

    fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        for (i, phase) in self.phases.iter().enumerate() {
            let acts: &[Act] = match phase {
                Phase::Start => &[Act::Join],
                Phase::Look { .. } => &[Act::Look],
                Phase::Blocked { grant, look_at, .. } => {
                    if !grant.is_empty() {
                        steps.push(Step::Thread(i, Act::Receive));
                    }
                    if look_at.is_some_and(|at| self.now() >= at) {
                        steps.push(Step::Thread(i, Act::Timer));
                    }
                    if self.specs[i].patient {
                        &[]
                    } else {
                        &[Act::Leave]
                    }
                }
                Phase::Turn(_) => &[Act::GetLock, Act::FailLock],
                Phase::Locked(_, lease) if lease.state().lost().is_none() => &[
                    Act::Release,
                    Act::HandOver,
                    Act::ReleaseOrHandOver,
                    Act::Lose,
                    Act::Stick,
                ],
                Phase::Locked(..) => &[Act::Release, Act::HandOver, Act::ReleaseOrHandOver],
                Phase::Stuck(..) | Phase::Done => &[],
            };
            steps.extend(acts.iter().map(|&a| Step::Thread(i, a)));
        }
        if self.leases().any(|(_, l)| self.valid(l)) {
            steps.push(Step::Tick);
        }
        steps
    }

    /// Takes `step`; `Err` names a broken property.
    fn take(&mut self, step: Step) -> Result<(), String> {
        let Step::Thread(i, act) = step else {
            let next = self
                .leases()
                .filter(|(_, l)| self.valid(l))
                .map(|(_, l)| l.state().deadline())
                .min();
            if let Some(next) = next {
                self.clock.advance(next - self.now());
            }
            return Ok(());
        };
        let phase = std::mem::replace(&mut self.phases[i], Phase::Done);
        let queue = Arc::clone(&self.queue);
        let key = self.key.clone();
        let want = self.specs[i].want;
        self.phases[i] = match (phase, act) {
            (Phase::Start, Act::Join) => match self.begin(i, &queue, &key, want) {
                Joined::Mine(ticket) => self.got(i, Turn::Mine(ticket))?,
                Joined::Waiting { id, grant } => Phase::Look { id, grant },
            },
            (Phase::Look { id, grant }, Act::Look) => match queue.look(&key, id, &grant) {
                Look::Done(given) => self.got(i, queue.turn(&key, id, given))?,
                Look::Wait(at) => {
                    let look_at = at.map(|_| self.holders_deadline());
                    Phase::Blocked { id, grant, look_at }
                }
            },
            (Phase::Blocked { id, grant, .. }, Act::Receive) => match grant.try_recv() {
                Ok(Grant::Given(given)) => self.got(i, queue.turn(&key, id, given))?,
                Ok(Grant::Recheck) | Err(_) => Phase::Look { id, grant },
            },
            (Phase::Blocked { id, grant, .. }, Act::Timer) => {
                self.seen.timer = true;
                Phase::Look { id, grant }
            }
            (Phase::Blocked { id, grant, .. }, Act::Leave) => {
                match queue.leave_line(&key, id, &grant, Turn::TimedOut) {
                    Turn::TimedOut | Turn::Cancelled => Phase::Done,
                    turn => {
                        self.seen.turn_on_leaving = true;
                        self.got(i, turn)?
                    }
                }
            }
            (Phase::Turn(ticket), Act::GetLock) => {
                if self.leases().any(|(_, l)| self.valid(l)) {
                    Phase::Turn(ticket) // the servers refuse: try again or fail
                } else {
                    let fence = want.fenced.then_some(1);
                    let lease = self.lease(want.ttl, self.now() + want.ttl, fence);
                    ticket.hold(&lease);
                    Phase::Locked(ticket, lease)
                }
            }
            (Phase::Turn(ticket), Act::FailLock) => {
                drop(ticket);
                Phase::Done
            }
            (Phase::Locked(ticket, lease), Act::Release) => {
                lease.state().finish();
                drop(ticket);
                Phase::Done
            }
            (Phase::Locked(ticket, lease), Act::HandOver) => {
                self.hand_over(ticket, &lease);
                Phase::Done
            }
            (Phase::Locked(ticket, lease), Act::ReleaseOrHandOver) => {
                // As `Rounds::release_or_hand_over` does it: the release is
                // sent before the kept ticket passes the turn.
                match ticket.offer_lock(|want| self.handed(&lease, Some(want))) {
                    Some(kept) => {
                        lease.state().finish();
                        drop(kept);
                    }
                    None => self.seen.released_handed = true,
                }
                Phase::Done
            }
            (Phase::Locked(ticket, lease), Act::Lose) => {
                let lost = Error::Lost {
                    reason: "the model lost it".into(),
                    report: None,
                };
                lease.state().lose(&lost);
                queue.nudge(&key);
                Phase::Locked(ticket, lease)
            }
            (Phase::Locked(ticket, lease), Act::Stick) => Phase::Stuck(ticket, lease),
            (phase, _) => phase,
        };
        if matches!(self.phases[i], Phase::Done) && self.begun[i] < self.specs[i].rounds {
            self.phases[i] = Phase::Start;
        }
        self.check()
    }

    fn begin(&mut self, i: usize, queue: &Arc<LocalQueue>, key: &KeySet, want: Want) -> Joined {
        self.begun[i] += 1;
        queue.join(key, want)
    }

    fn lease(&self, ttl: Duration, deadline: Instant, fence: Option<u64>) -> Arc<Lease> {
        let token = Token::random().expect("random bytes");
        Arc::new(Lease::new(
            KeySet::one("r"),
            self.key.clone(),
            token,
            ttl,
            deadline,
            Support::default(),
            fence,
        ))
    }

    /// As `Rounds::hand_over` and `Rounds::handoff` do it.
    fn hand_over(&self, ticket: Ticket, lease: &Arc<Lease>) {
        ticket.pass_with(|want| {
            let handed = self.handed(lease, want);
            if handed.is_none() {
                lease.state().finish();
            }
            handed
        });
    }

    /// The lock renamed for a waiter that wants `want`, as
    /// `Rounds::handoff` decides it.
    fn handed(&self, lease: &Arc<Lease>, want: Option<&Want>) -> Option<Arc<Lease>> {
        want.filter(|w| !w.fenced && lease.fence().is_none())
            .and_then(|w| lease.state().hand_over(self.now(), w.ttl))
            .map(|h| self.lease(h.ttl, h.deadline, None))
    }

    /// The deadline of the line's holder's lock, on the manager clock: when
    /// a waiter's look-again timer is due.
    fn holders_deadline(&self) -> Instant {
        let lines = self.queue.lines.lock();
        lines
            .by_key
            .get(&self.key)
            .and_then(|line| line.holder.lease.as_ref())
            .and_then(Weak::upgrade)
            .map_or_else(|| self.now(), |lease| lease.state().deadline())
    }

    /// Thread `i` got `turn`: the turn-taking property, then its phase.
    fn got(&mut self, i: usize, turn: Turn) -> Result<Phase, String> {
        self.seen.handed |= matches!(turn, Turn::Handed(..));
        for (j, phase) in self.phases.iter().enumerate() {
            let contending = match phase {
                Phase::Turn(_) => true,
                Phase::Locked(_, lease) | Phase::Stuck(_, lease) => self.valid(lease),
                _ => false,
            };
            if j != i && contending {
                return Err(format!(
                    "thread {i} got the turn while thread {j} still holds it with a live claim"
                ));
            }
        }
        Ok(match turn {
            Turn::Mine(ticket) => Phase::Turn(ticket),
            Turn::Handed(lease, ticket) => {
                let want = self.specs[i].want;
                if want.fenced || lease.state().ttl() != want.ttl {
                    return Err(format!(
                        "thread {i} asked for {want:?} and was handed another lock"
                    ));
                }
                Phase::Locked(ticket, lease)
            }
            Turn::TimedOut | Turn::Cancelled => Phase::Done,
        })
    }

    fn check(&self) -> Result<(), String> {
        let valid: Vec<usize> = self
            .leases()
            .filter(|(_, l)| self.valid(l))
            .map(|(i, _)| i)
            .collect();
        if valid.len() > 1 {
            return Err(format!("threads {valid:?} all hold a valid lock"));
        }
        Ok(())
    }

    /// At a state where nothing can happen any more: nobody patient is
    /// left in line, and the line is gone once every thread is done.
    fn check_end(&mut self) -> Result<(), String> {
        for (i, phase) in self.phases.iter().enumerate() {
            if matches!(phase, Phase::Look { .. } | Phase::Blocked { .. }) {
                return Err(format!(
                    "thread {i} waits in line with nothing left to wake it (a lost turn)"
                ));
            }
        }
        // Stuck threads end with their process: their tickets go.
        for phase in &mut self.phases {
            *phase = Phase::Done;
        }
        if !self.queue.lines.lock().by_key.is_empty() {
            return Err("every thread is done and the line is still there".into());
        }
        Ok(())
    }

    /// What identifies the state (for not exploring it twice).
    fn key(&self) -> String {
        let now = self.now();
        let ms = |at: Instant| at.saturating_duration_since(now).as_millis();
        let mut out = String::new();
        for (phase, begun) in self.phases.iter().zip(&self.begun) {
            let _ = write!(out, "{begun}");
            let _ = match phase {
                Phase::Start => write!(out, "S|"),
                Phase::Look { id, grant } => write!(out, "L{id}:{}|", grant.len()),
                Phase::Blocked { id, grant, look_at } => {
                    write!(out, "B{id}:{}:{:?}|", grant.len(), look_at.map(ms))
                }
                Phase::Turn(t) => write!(out, "T{}|", t.id),
                Phase::Locked(t, l) | Phase::Stuck(t, l) => {
                    let s = l.state();
                    let tag = if matches!(phase, Phase::Stuck(..)) {
                        'X'
                    } else {
                        'H'
                    };
                    write!(out, "{tag}{}:{}:{}|", t.id, ms(s.deadline()), s.is_over())
                }
                Phase::Done => write!(out, "D|"),
            };
        }
        let lines = self.queue.lines.lock();
        if let Some(line) = lines.by_key.get(&self.key) {
            let lease = line.holder.lease.as_ref().and_then(Weak::upgrade);
            let lease = lease.map(|l| {
                let state = l.state();
                (ms(state.deadline()), state.is_over())
            });
            let waiting: Vec<(u64, bool)> =
                line.waiting.iter().map(|w| (w.id, w.want.fenced)).collect();
            let _ = write!(out, "line {} {lease:?} {waiting:?}", line.holder.ticket);
        }
        out
    }
}

/// What one exploration found.
struct Found {
    states: usize,
    schedules: usize,
    /// Whether some schedule went through each ingredient.
    seen: Seen,
    violation: Option<(String, Vec<Step>)>,
}

/// Explores every schedule of `specs`, with `broken` (a canary) on if set.
fn explore(specs: &[Spec], broken: Option<Canary>) -> Found {
    match broken {
        Some(broken) => canary::with(broken, || explore_all(specs)),
        None => explore_all(specs),
    }
}

/// Explores every schedule of `specs`, replaying each prefix on a fresh
/// world, breadth first (so a violation comes with a shortest schedule);
/// stops at the first violation.
fn explore_all(specs: &[Spec]) -> Found {
    let mut seen = HashSet::new();
    let mut found = Found {
        states: 0,
        schedules: 0,
        seen: Seen::default(),
        violation: None,
    };
    let mut queue = VecDeque::from([Vec::new()]);
    while let Some(path) = queue.pop_front() {
        let mut world = World::new(specs);
        let mut failed = None;
        for &step in &path {
            if let Err(why) = world.take(step) {
                failed = Some(why);
                break;
            }
        }
        if let Some(why) = failed {
            found.violation = Some((why, path));
            return found;
        }
        found.seen.handed |= world.seen.handed;
        found.seen.released_handed |= world.seen.released_handed;
        found.seen.turn_on_leaving |= world.seen.turn_on_leaving;
        found.seen.timer |= world.seen.timer;
        if !seen.insert(world.key()) {
            continue;
        }
        found.states += 1;
        let steps = world.steps();
        if steps.is_empty() {
            found.schedules += 1;
            if let Err(why) = world.check_end() {
                found.violation = Some((why, path));
                return found;
            }
        }
        for step in steps {
            let mut longer = path.clone();
            longer.push(step);
            queue.push_back(longer);
        }
    }
    found
}

/// The thread sets explored: a hand-over to a waiter that matches, one
/// that does not (another TTL, fenced), waiters that leave.
fn configurations() -> [Vec<Spec>; 2] {
    let spec = |want, patient, rounds| Spec {
        want,
        patient,
        rounds,
    };
    [
        vec![
            spec(PLAIN, true, 2),
            spec(PLAIN, false, 1),
            spec(PLAIN, true, 1),
        ],
        vec![
            spec(PLAIN, true, 1),
            spec(FENCED, true, 2),
            spec(SHORT, false, 1),
        ],
    ]
}

#[test]
fn the_line_keeps_its_promises_in_every_order() {
    let mut seen = Seen::default();
    for specs in configurations() {
        let found = explore(&specs, None);
        println!(
            "line {specs:?}: {} states, {} complete schedules, no violation",
            found.states, found.schedules
        );
        if let Some((why, path)) = found.violation {
            panic!("{why} after {path:?}");
        }
        seen.handed |= found.seen.handed;
        seen.released_handed |= found.seen.released_handed;
        seen.turn_on_leaving |= found.seen.turn_on_leaving;
        seen.timer |= found.seen.timer;
    }
    assert!(
        seen.handed && seen.released_handed && seen.turn_on_leaving && seen.timer,
        "an ingredient was never reached: {seen:?}"
    );
}

/// Each canary undoes one protection; the explorer must find a schedule
/// that breaks a property, and prints a shortest one.
#[test]
fn canaries_are_caught() {
    let canaries = [
        Canary::LeaveIgnoresTurns,
        Canary::IgnoreValidity,
        Canary::StaleTicketsPass,
    ];
    for broken in canaries {
        let caught = configurations()
            .iter()
            .find_map(|specs| explore(specs, Some(broken)).violation);
        let Some((why, path)) = caught else {
            panic!("canary {broken:?} was not caught");
        };
        println!(
            "canary {broken:?}: {why} after {} steps: {path:?}",
            path.len()
        );
    }
}
