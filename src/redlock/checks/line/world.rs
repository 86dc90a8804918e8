//! The line explorer's model (`mod.rs` explores it): three threads that
//! want one key, each a small program of the line's steps run on the
//! crate's own `LocalQueue`, the clock, and the properties checked in
//! every state.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::backend::KeySet;
use crate::clock::{Clock, ManualClock};
use crate::engine::Hold;
use crate::error::Error;
use crate::redlock::lease::Lease;
use crate::redlock::line::{Grant, Want};
use crate::redlock::support::Support;
use crate::redlock::turns::{Joined, LocalQueue, Look, Ticket, Turn};
use crate::token::Token;

/// One thread: what it asks for, and whether it may leave the line (a
/// deadline or a cancellation) at any moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spec {
    pub(super) want: Want,
    pub(super) patient: bool,
    /// How many times it waits for the lock (one after the other).
    pub(super) rounds: u8,
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
pub(super) enum Act {
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
pub(super) enum Step {
    Thread(usize, Act),
    /// The clock steps to the next deadline of a held, valid lock.
    Tick,
}

pub(super) struct World {
    clock: ManualClock,
    queue: Arc<LocalQueue>,
    key: Hold,
    specs: Vec<Spec>,
    phases: Vec<Phase>,
    /// Rounds each thread has begun.
    begun: Vec<u8>,
    /// What the schedule went through: a lock handed over, a leaving
    /// thread that found its turn had come, a look-again timer that fired.
    pub(super) seen: Seen,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Seen {
    handed: bool,
    /// A `release()` handed its lock over.
    released_handed: bool,
    turn_on_leaving: bool,
    timer: bool,
}

impl Seen {
    /// Adds what `other` went through.
    pub(super) fn merge(&mut self, other: Self) {
        self.handed |= other.handed;
        self.released_handed |= other.released_handed;
        self.turn_on_leaving |= other.turn_on_leaving;
        self.timer |= other.timer;
    }

    /// Whether every ingredient was gone through.
    pub(super) fn all(&self) -> bool {
        self.handed && self.released_handed && self.turn_on_leaving && self.timer
    }
}

impl World {
    pub(super) fn new(specs: &[Spec]) -> Self {
        let clock = ManualClock::new();
        Self {
            queue: Arc::new(LocalQueue::new(Arc::new(clock.clone()))),
            clock,
            key: Hold::Lock(KeySet::one("r")),
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

    pub(super) fn steps(&self) -> Vec<Step> {
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
    pub(super) fn take(&mut self, step: Step) -> Result<(), String> {
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

    fn begin(&mut self, i: usize, queue: &Arc<LocalQueue>, key: &Hold, want: Want) -> Joined {
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
    pub(super) fn check_end(&mut self) -> Result<(), String> {
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
    pub(super) fn key(&self) -> String {
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
