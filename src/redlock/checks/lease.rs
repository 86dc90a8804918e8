//! An exhaustive check of one lease's life: every interleaving of its
//! events up to [`DEPTH`] steps, explored breadth-first, against a model
//! of what each of three nodes holds.
//!
//! The lease is the crate's own [`LeaseState`], driven only through its
//! transitions, and every verdict is the crate's own pure function
//! ([`extend_verdict`], with [`begin_cap`] and [`sets_deadline`] inside
//! the transitions), so the check covers the code that ships.
//!
//! Events: an extend begun from two sources (the watchdog, on any lease it
//! watches; the holder, on its own lease, and then blocked until that
//! extend finishes) with a shorter and a longer TTL; an extend finished
//! (gathered) with the votes of the nodes that have applied it so far (so
//! a late or lost answer is a timeout); a node applying the next operation
//! of its FIFO queue (`PEXPIRE` only if the key is still held, which can
//! shorten it; a release deletes it); release or drop (the lease finishes,
//! a release is queued on every node); forget (finishes, nothing queued);
//! a drop that hands the lock to a waiting thread of the same manager
//! (once per schedule; a release when the hand-over is refused); the
//! watchdog noticing that the validity ran out (loses the lease); clock
//! steps (keys expire).
//!
//! Properties, checked in every state reached: a valid lease (not lost,
//! not finished, before its deadline) never claims a deadline later than
//! a quorum of nodes holds its key; no extend begins on a finished lease
//! and none is queued behind a release; lost is never cleared.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use crate::canary::{self, Canary};
use crate::error::Error;
use crate::redlock::lease::{CannotExtend, ExtendTicket, Handed, LeaseState};
use crate::redlock::support::Support;
use crate::redlock::validity::drift;
use crate::redlock::verdict::extend_verdict;

/// Steps explored from the initial state.
const DEPTH: usize = 8;
const NODES: usize = 3;
const QUORUM: usize = 2;
/// The TTLs an extend may ask for, in ms: the lock's own (also what a
/// waiting thread wants, so a hand-over is possible) and a shorter one.
const LONG: u64 = 3000;
const SHORT: u64 = 300;
const DRIFT_FACTOR: f64 = 0.01;
/// Clock steps, in ms: inside a short extend, and past it.
const TICKS_MS: [u64; 2] = [200, 1000];

/// Who begins an extend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Watchdog,
    Holder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Begin(Source, usize, u64),
    Finish(Source),
    Apply(usize),
    Release,
    Forget,
    HandOver,
    Expire(usize),
    Tick(u64),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Begin(s, lease, ttl) => {
                write!(f, "{s:?} begins a {ttl} ms extend of lease {lease}")
            }
            Self::Finish(s) => write!(f, "{s:?}'s extend finishes"),
            Self::Apply(node) => write!(f, "node {node} applies its next op"),
            Self::Release => f.write_str("release/drop"),
            Self::Forget => f.write_str("forget"),
            Self::HandOver => f.write_str("drop with a local waiter (hand-over)"),
            Self::Expire(lease) => write!(f, "the watchdog finds lease {lease} expired"),
            Self::Tick(ms) => write!(f, "+{ms} ms"),
        }
    }
}

/// An operation queued on a node: extend (of lease `lease`'s `seq`-th
/// extend) or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Extend { lease: usize, seq: u64, ttl: u64 },
    Release,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Node {
    /// When our key expires (ms); `None` once gone.
    expiry: Option<u64>,
    queue: VecDeque<Op>,
}

#[derive(Debug, Clone)]
struct InFlight {
    source: Source,
    lease: usize,
    ticket: ExtendTicket,
    /// The nodes that have applied it so far. (No node forgets here, so
    /// the support they make is never checked: the fingerprint keeps
    /// only their count.)
    granted: [bool; NODES],
}

/// One lease: the crate's state, and what the model knows of it.
#[derive(Clone)]
struct ModelLease {
    state: LeaseState,
    /// The model finished it (release, forget, hand-over).
    finished: bool,
    /// It has been seen lost.
    was_lost: bool,
}

#[derive(Clone)]
struct World {
    now: u64,
    /// The lease acquired at time 0 and, after a hand-over, the next one.
    leases: Vec<ModelLease>,
    nodes: [Node; NODES],
    in_flight: Vec<InFlight>,
}

/// A world up to the order of its nodes (they are interchangeable: the
/// properties count nodes, and every event is offered on each of them).
type Fingerprint = (
    u64,
    Vec<(Instant, Duration, bool, bool, bool, u64)>,
    [Node; NODES],
    Vec<(Source, usize, ExtendTicket, usize)>,
);

struct Explorer {
    base: Instant,
}

impl Explorer {
    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    fn drift(ttl: u64) -> Duration {
        drift(Duration::from_millis(ttl), DRIFT_FACTOR)
    }

    /// Acquired at time 0 on every node, with the acquire's deadline.
    fn initial(&self) -> World {
        let deadline = self.at(0) + (Duration::from_millis(LONG) - Self::drift(LONG));
        let node = Node {
            expiry: Some(LONG),
            queue: VecDeque::new(),
        };
        World {
            now: 0,
            leases: vec![ModelLease {
                state: LeaseState::for_test(
                    Duration::from_millis(LONG),
                    deadline,
                    Support::of_grants(&[0; NODES], [true; NODES]),
                ),
                finished: false,
                was_lost: false,
            }],
            nodes: [node.clone(), node.clone(), node],
            in_flight: Vec::new(),
        }
    }

    fn fingerprint(w: &World) -> Fingerprint {
        let leases = w
            .leases
            .iter()
            .map(|l| {
                let s = &l.state;
                let lost = s.lost().is_some();
                (
                    s.deadline(),
                    s.ttl(),
                    lost,
                    s.is_finished(),
                    l.finished,
                    s.extends_begun(),
                )
            })
            .collect();
        let in_flight = w
            .in_flight
            .iter()
            .map(|f| {
                let granted = f.granted.iter().filter(|g| **g).count();
                (f.source, f.lease, f.ticket.clone(), granted)
            })
            .collect();
        let mut nodes = w.nodes.clone();
        nodes.sort_by(|a, b| (a.expiry, &a.queue).cmp(&(b.expiry, &b.queue)));
        (w.now, leases, nodes, in_flight)
    }

    fn events(w: &World) -> Vec<Event> {
        let mut events = Vec::new();
        let busy = |s: Source| w.in_flight.iter().any(|f| f.source == s);
        let holder = w.leases.len() - 1;
        let holder_free = !busy(Source::Holder) && !w.leases[holder].finished;
        for ttl in [SHORT, LONG] {
            if holder_free {
                events.push(Event::Begin(Source::Holder, holder, ttl));
            }
            if !busy(Source::Watchdog) {
                // (On a lease that is over, `check` tries it in every state.)
                for (i, lease) in w.leases.iter().enumerate() {
                    if !lease.state.is_over() {
                        events.push(Event::Begin(Source::Watchdog, i, ttl));
                    }
                }
            }
        }
        for source in [Source::Watchdog, Source::Holder] {
            if busy(source) {
                events.push(Event::Finish(source));
            }
        }
        for (i, node) in w.nodes.iter().enumerate() {
            if !node.queue.is_empty() {
                events.push(Event::Apply(i));
            }
        }
        if holder_free {
            events.extend([Event::Release, Event::Forget]);
            if w.leases.len() == 1 {
                events.push(Event::HandOver);
            }
        }
        for (i, lease) in w.leases.iter().enumerate() {
            if !lease.state.is_over() {
                events.push(Event::Expire(i));
            }
        }
        events.extend(TICKS_MS.map(Event::Tick));
        events
    }

    /// `w` after `event`, or `None` when the event cannot happen there.
    fn apply(&self, w: &World, event: Event) -> Option<World> {
        let mut w = w.clone();
        let now = self.at(w.now);
        match event {
            Event::Begin(source, i, ttl) => {
                let lease = &mut w.leases[i];
                let drift = Self::drift(ttl);
                match lease.state.begin_extend(
                    now,
                    Duration::from_millis(ttl),
                    drift,
                    vec![0; NODES].into(),
                ) {
                    Ok(ticket) => {
                        let seq = lease.state.extends_begun();
                        for node in &mut w.nodes {
                            node.queue.push_back(Op::Extend { lease: i, seq, ttl });
                        }
                        w.in_flight.push(InFlight {
                            source,
                            lease: i,
                            ticket,
                            granted: [false; NODES],
                        });
                    }
                    Err(CannotExtend::Expired) => {
                        lease.state.lose(&lost("expired before the extend"));
                    }
                    Err(_) => return None,
                }
            }
            Event::Finish(source) => {
                let at = w.in_flight.iter().position(|f| f.source == source)?;
                let f = w.in_flight.remove(at);
                let t = &f.ticket;
                let granted = f.granted.iter().filter(|g| **g).count();
                let verdict = extend_verdict(
                    granted,
                    QUORUM,
                    t.ttl(),
                    t.drift(),
                    t.start(),
                    t.old_deadline(),
                    now,
                );
                let state = &mut w.leases[f.lease].state;
                let _ = state.finish_extend(f.ticket, verdict, f.granted, |reason| lost(&reason));
            }
            Event::Apply(i) => {
                let node = &mut w.nodes[i];
                match node.queue.pop_front()? {
                    Op::Extend { lease, seq, ttl } => {
                        if node.expiry.is_some() {
                            node.expiry = Some(w.now + ttl);
                            let vote = w
                                .in_flight
                                .iter_mut()
                                .find(|f| f.lease == lease && f.ticket.seq() == seq);
                            if let Some(f) = vote {
                                f.granted[i] = true;
                            }
                        }
                    }
                    Op::Release => node.expiry = None,
                }
            }
            Event::Release | Event::HandOver => {
                let i = w.leases.len() - 1;
                let lease = &mut w.leases[i];
                let handed = match event {
                    Event::HandOver => lease.state.hand_over(now, Duration::from_millis(LONG)),
                    _ => None,
                };
                lease.state.finish();
                lease.finished = true;
                match handed {
                    Some(Handed {
                        ttl,
                        deadline,
                        support,
                    }) => w.leases.push(ModelLease {
                        state: LeaseState::for_test(ttl, deadline, support),
                        finished: false,
                        was_lost: false,
                    }),
                    None => {
                        for node in &mut w.nodes {
                            node.queue.push_back(Op::Release);
                        }
                    }
                }
            }
            Event::Forget => {
                let i = w.leases.len() - 1;
                w.leases[i].state.finish();
                w.leases[i].finished = true;
            }
            Event::Expire(i) => {
                let state = &mut w.leases[i].state;
                if state.is_over() || state.deadline() > now {
                    return None;
                }
                state.lose(&lost("the validity ran out"));
            }
            Event::Tick(ms) => {
                w.now += ms;
                for node in &mut w.nodes {
                    if node.expiry.is_some_and(|e| e <= w.now) {
                        node.expiry = None;
                    }
                }
            }
        }
        Some(w)
    }

    /// The first property `w` breaks, if any (and notes losses seen).
    fn check(&self, w: &mut World) -> Option<String> {
        let now = self.at(w.now);
        for (i, lease) in w.leases.iter_mut().enumerate() {
            let state = &lease.state;
            if lease.was_lost && state.lost().is_none() {
                return Some(format!("lease {i}'s loss was cleared"));
            }
            lease.was_lost = state.lost().is_some();
            if lease.finished && !state.is_finished() {
                return Some(format!("lease {i} is no longer finished"));
            }
            if lease.finished {
                let mut probe = state.clone();
                let ttl = Duration::from_millis(SHORT);
                if probe
                    .begin_extend(now, ttl, Self::drift(SHORT), vec![0; NODES].into())
                    .is_ok()
                {
                    return Some(format!(
                        "an extend of lease {i} may begin after it finished"
                    ));
                }
            }
            if state.is_over() || state.deadline() <= now {
                continue;
            }
            let holding = w
                .nodes
                .iter()
                .filter(|n| n.expiry.is_some_and(|e| self.at(e) >= state.deadline()))
                .count();
            if holding < QUORUM {
                return Some(format!(
                    "lease {i} claims {:?} more but only {holding} nodes hold it that long \
                     (expiries {:?} at t = {} ms)",
                    state.deadline() - now,
                    w.nodes.iter().map(|n| n.expiry).collect::<Vec<_>>(),
                    w.now
                ));
            }
        }
        for (i, node) in w.nodes.iter().enumerate() {
            let released = node.queue.iter().position(|op| *op == Op::Release);
            if let Some(r) = released
                && node
                    .queue
                    .iter()
                    .skip(r)
                    .any(|op| matches!(op, Op::Extend { .. }))
            {
                return Some(format!("node {i} has an extend queued behind a release"));
            }
        }
        None
    }

    /// Explores every schedule up to [`DEPTH`] steps; returns the states
    /// visited and the transitions taken, or the first (shortest)
    /// counterexample.
    fn explore(&self) -> Result<(usize, usize), String> {
        let initial = self.initial();
        let mut seen: HashSet<Fingerprint> = HashSet::new();
        seen.insert(Self::fingerprint(&initial));
        let mut transitions = 0;
        let mut queue = VecDeque::from([(initial, Vec::<Event>::new())]);
        while let Some((world, path)) = queue.pop_front() {
            if path.len() == DEPTH {
                continue;
            }
            for event in Self::events(&world) {
                let Some(mut next) = self.apply(&world, event) else {
                    continue;
                };
                transitions += 1;
                let mut steps = path.clone();
                steps.push(event);
                if let Some(broken) = self.check(&mut next) {
                    let steps: Vec<String> = steps.iter().map(ToString::to_string).collect();
                    return Err(format!("{broken}; steps: {}", steps.join(", ")));
                }
                if seen.insert(Self::fingerprint(&next)) {
                    queue.push_back((next, steps));
                }
            }
        }
        Ok((seen.len(), transitions))
    }
}

fn lost(reason: &str) -> Error {
    Error::Lost {
        reason: reason.into(),
        report: None,
    }
}

/// Explores every schedule, with `broken` (a canary) on if set.
fn explore(broken: Option<Canary>) -> Result<(usize, usize), String> {
    let explorer = Explorer {
        base: Instant::now(),
    };
    match broken {
        Some(broken) => canary::with(broken, || explorer.explore()),
        None => explorer.explore(),
    }
}

#[test]
fn no_interleaving_of_the_lease_overstates_its_validity() {
    let started = Instant::now();
    let (states, transitions) = explore(None).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "lease check: {states} states, {transitions} transitions, every schedule of {DEPTH} \
         events, in {:?}",
        started.elapsed()
    );
    assert!(states > 10_000, "the exploration is too small: {states}");
}

/// Canary: when any finishing extend may set the deadline (not only the
/// one begun last), a longer extend finishing after a shorter one begun
/// later overstates the validity.
#[test]
fn undoing_the_extend_ordering_is_found() {
    let found = explore(Some(Canary::AnyExtendSetsDeadline)).expect_err("a counterexample");
    println!("extend ordering undone: {found}");
    assert!(found.contains("nodes hold it that long"), "{found}");
}

/// Canary: without the cap when an extend begins, a shorter extend applied
/// by the nodes leaves the lease claiming the older, longer deadline.
#[test]
fn removing_the_begin_cap_is_found() {
    let found = explore(Some(Canary::NoBeginCap)).expect_err("a counterexample");
    println!("begin cap removed: {found}");
    assert!(found.contains("nodes hold it that long"), "{found}");
}
