//! An exhaustive check of a quorum read-write lock: two readers and two
//! writers over three nodes, each node applying each client's op at its
//! own moment (or never), with node restarts that forget, expiry on each
//! node's clock, clients that crash, and every order of all of it.
//!
//! The model. Per node, `W` (a writer's token, ticks left on the node's
//! clock, an `admitted` mark used by one canary only) and `R` (ticks left
//! per reader; each entry expires on its own). ReadAcquire is refused while
//! `W` is live, else sets `R[token]`; ReadExtend refreshes a live entry,
//! never recreates one. WriteIntent is a plain Redlock mutex on `W` (readers
//! are not consulted); Extend refreshes `W == token`; Admit refreshes
//! `W == token` only while `R` has no live entry. A round's validity is
//! `send + TTL - DRIFT`, and it needs [`majority`] yes votes; a node that
//! restarted keeps its yes votes out of the count for `TTL` (the max TTL)
//! ticks. A failed acquire or intent round is released everywhere; a failed
//! Admit keeps the intent, whose keep-alive is Extend.
//!
//! The bound. Time is whole ticks, [`TTL`] = 3, [`DRIFT`] = 1: each node's
//! clock may jump one tick ahead once ([`Event::Skew`]). An op reaches its
//! node within [`DELAY`] = 1 tick of its send or never (the client stops
//! waiting then). Each reader starts at most [`READER_ROUNDS`] rounds
//! (acquire, extend, or acquire again after a release: a stream), each
//! writer [`WRITER_ROUNDS`] (intent, extend, admit, retries), at most
//! [`MAX_RESTARTS`] restart; crashes and ticks are unbounded. Times are kept
//! relative to now, so the state space is finite and explored to its end
//! (breadth-first, states merged): every schedule within these budgets, of
//! any length, and the counterexamples printed are shortest.
//!
//! Properties, in every state: (1) no valid write lock beside any other
//! valid lock, crashed holders included (a crash may be a pause); (2) no
//! reader's entry outlives its own last send + `DELAY` + `TTL` on any node,
//! whatever the other reader does; (3) once a writer's intent is held on a
//! quorum, no reader whose acquire was sent after that becomes valid until
//! the writer releases, crashes or lets its validity lapse (a writer whose
//! intent round reached every node unopposed by another writer counts as
//! held: in the protocol that is the same thing, and it makes the
//! drain-first canary's starvation visible); (4) no `W` outlives its
//! writer's last send + `DELAY` + `TTL`. (2) and (4) are checked for live
//! clients too, and as the expiry set on a node, not only once it passes.
//!
//! Not modelled: an op that arrives after its client decided the round
//! (late ops only add entries, which only refuse others; the extra Admit
//! vote such an op could give is not explored), a release that reaches
//! some nodes only (it is one step that reaches all; a crash leaves every
//! key to expire), a reader cap (two readers never fill a cap of two),
//! extending an admitted write lock, fresh tokens per attempt (a token is
//! its client), and clock rates beyond one skipped tick per node.

use std::collections::{HashSet, VecDeque};
use std::fmt;

use crate::engine::majority;

const NODES: usize = 3;
const READERS: usize = 2;
const WRITERS: usize = 2;
const CLIENTS: usize = READERS + WRITERS;
/// Every lease's TTL in ticks; also the max TTL a restarted node sits out.
const TTL: u8 = 3;
/// Ticks a client takes off its validity: a node's clock may run one fast.
const DRIFT: u8 = 1;
/// Ticks an op may travel; the client gives up on it by then.
const DELAY: u8 = 1;
const MAX_RESTARTS: u8 = 1;
const READER_ROUNDS: u8 = 2;
const WRITER_ROUNDS: u8 = 3;
/// `since` stops here: nothing of a client may be left on a node by then.
const SINCE_CAP: u8 = TTL + DELAY + 1;

/// The protocol, or one protection undone (a canary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Sound,
    /// a: one expiry for the whole reader set; any reader refreshes all.
    SharedReaderTtl,
    /// b: intent only once readers are drained (intent = admission).
    DrainFirst,
    /// b': ReadAcquire does not look at `W` at all.
    ReadersIgnoreW,
    /// c: ReadAcquire is refused only by a `W` admitted on that node.
    AdmittedOnly,
    /// d: a restarted node votes at once.
    NoQuarantine,
    /// e: validity claimed as `send + TTL`, no drift taken off.
    NoDrift,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    Exclusion,
    OwnExpiry,
    NoOvertaking,
    WriterExpiry,
}
use Property::{Exclusion, NoOvertaking, OwnExpiry, WriterExpiry};
const ALL: [Property; 4] = [Exclusion, OwnExpiry, NoOvertaking, WriterExpiry];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Node {
    /// `W`: (writer's client index, ticks left here, admitted mark).
    w: Option<(u8, u8, bool)>,
    /// `R`: ticks left of each reader's entry (0: none).
    r: [u8; READERS],
    /// Ticks until its yes votes count again after a restart.
    quarantine: u8,
    /// Its clock has jumped its one tick ahead.
    skewed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Acquire,
    ReadExtend,
    Intent,
    Extend,
    Admit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Round {
    op: Op,
    /// Ticks since it was sent.
    ago: u8,
    pending: [bool; NODES],
    /// Yes votes that count (not from a quarantined node).
    yes: u8,
    /// Every node so far applied it with no other writer's `W` in the way
    /// and out of quarantine (property 3's "unopposed").
    clean: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Stage {
    Idle,
    Reading,
    Intent,
    Admitted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Client {
    stage: Stage,
    /// Ticks of validity left (0: not valid).
    valid: u8,
    round: Option<Round>,
    /// Ticks since its last acquire, extend, intent or admit was sent.
    since: u8,
    /// Rounds it may still start.
    budget: u8,
    crashed: bool,
    /// A writer: property 3's window is open.
    ahead: bool,
    /// A reader: its acquire was sent while writer `w` was ahead.
    behind: [bool; WRITERS],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct State {
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
    restarts: u8,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Send(usize, Op),
    Apply(usize, usize),
    /// The client decides with the answers it has; the rest are lost.
    Timeout(usize),
    Release(usize),
    Crash(usize),
    Restart(usize),
    Skew(usize),
    Tick,
}

fn name(c: usize) -> String {
    match c.checked_sub(READERS) {
        None => format!("r{c}"),
        Some(w) => format!("w{w}"),
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::Send(c, op) => write!(f, "{}:{op:?}", name(c)),
            Event::Apply(c, n) => write!(f, "{}>n{n}", name(c)),
            Event::Timeout(c) => write!(f, "{}:timeout", name(c)),
            Event::Release(c) => write!(f, "{}:release", name(c)),
            Event::Crash(c) => write!(f, "{}:crash", name(c)),
            Event::Restart(n) => write!(f, "n{n}:restart"),
            Event::Skew(n) => write!(f, "n{n}:skew"),
            Event::Tick => write!(f, "tick"),
        }
    }
}

fn is_writer(c: usize) -> bool {
    c >= READERS
}

fn initial() -> State {
    let client = |budget| Client {
        stage: Stage::Idle,
        valid: 0,
        round: None,
        since: SINCE_CAP,
        budget,
        crashed: false,
        ahead: false,
        behind: [false; WRITERS],
    };
    State {
        nodes: [Node::default(); NODES],
        clients: std::array::from_fn(|c| {
            client(if is_writer(c) {
                WRITER_ROUNDS
            } else {
                READER_ROUNDS
            })
        }),
        restarts: 0,
    }
}

fn events(s: &State) -> Vec<Event> {
    let mut out = Vec::new();
    for (c, cl) in s.clients.iter().enumerate().filter(|(_, cl)| !cl.crashed) {
        if let Some(round) = cl.round {
            out.extend(
                (0..NODES)
                    .filter(|&n| round.pending[n])
                    .map(|n| Event::Apply(c, n)),
            );
            out.push(Event::Timeout(c));
        } else {
            let sends: &[Op] = match cl.stage {
                Stage::Idle if is_writer(c) => &[Op::Intent],
                Stage::Idle => &[Op::Acquire],
                Stage::Reading => &[Op::ReadExtend],
                Stage::Intent => &[Op::Extend, Op::Admit],
                Stage::Admitted => &[],
            };
            if cl.budget > 0 {
                out.extend(sends.iter().map(|&op| Event::Send(c, op)));
            }
            if cl.stage != Stage::Idle {
                out.push(Event::Release(c));
            }
        }
        out.push(Event::Crash(c));
    }
    if s.restarts < MAX_RESTARTS {
        out.extend((0..NODES).map(Event::Restart));
    }
    out.extend((0..NODES).filter(|&n| !s.nodes[n].skewed).map(Event::Skew));
    // A client gives up on its ops DELAY ticks after sending them.
    if s.clients
        .iter()
        .all(|cl| cl.round.is_none_or(|r| r.ago < DELAY))
    {
        out.push(Event::Tick);
    }
    out
}

/// Node applies client `c`'s op: (yes, unopposed by another writer).
fn apply(node: &mut Node, c: usize, op: Op, rule: Rule) -> (bool, bool) {
    let token = c as u8;
    let readers_live = node.r.iter().any(|&e| e > 0);
    let refresh = |node: &mut Node| {
        if rule == Rule::SharedReaderTtl {
            node.r.iter_mut().filter(|e| **e > 0).for_each(|e| *e = TTL);
        }
        node.r[c] = TTL;
    };
    match op {
        Op::Acquire => {
            let blocked = match rule {
                Rule::ReadersIgnoreW => false,
                Rule::AdmittedOnly => node.w.is_some_and(|w| w.2),
                _ => node.w.is_some(),
            };
            if !blocked {
                refresh(node);
            }
            (!blocked, true)
        }
        Op::ReadExtend => {
            let live = node.r[c] > 0;
            if live {
                refresh(node);
            }
            (live, true)
        }
        Op::Intent => {
            let other = node.w.is_some_and(|w| w.0 != token);
            if other || (rule == Rule::DrainFirst && readers_live) {
                return (false, !other);
            }
            let mark = node.w.is_some_and(|w| w.2);
            node.w = Some((token, TTL, mark));
            (true, true)
        }
        Op::Extend | Op::Admit => match &mut node.w {
            Some((t, left, mark)) if *t == token && (op == Op::Extend || !readers_live) => {
                *left = TTL;
                *mark |= op == Op::Admit && rule == Rule::AdmittedOnly;
                (true, true)
            }
            _ => (false, true),
        },
    }
}

/// Deletes what client `c` holds on every node (one step: see the header).
fn drop_keys(s: &mut State, c: usize) {
    for node in &mut s.nodes {
        if is_writer(c) {
            node.w = node.w.filter(|w| usize::from(w.0) != c);
        } else {
            node.r[c] = 0;
        }
    }
    s.clients[c].stage = Stage::Idle;
    s.clients[c].valid = 0;
}

/// Writer `c` is no longer ahead: property 3's window closes.
fn close(s: &mut State, c: usize) {
    s.clients[c].ahead = false;
    for reader in &mut s.clients[..READERS] {
        reader.behind[c - READERS] = false;
    }
}

/// Client `c` decides its round; `Some` if a reader overtook a writer.
fn decide(s: &mut State, c: usize, rule: Rule) -> Option<String> {
    let round = s.clients[c].round.take()?;
    let quorum = usize::from(round.yes) >= majority(NODES);
    let drift = if rule == Rule::NoDrift { 0 } else { DRIFT };
    let fresh = (TTL - drift).saturating_sub(round.ago);
    let cl = &mut s.clients[c];
    match (round.op, quorum) {
        (Op::Acquire, true) => {
            cl.stage = Stage::Reading;
            cl.valid = fresh;
            let behind = cl.behind;
            let ahead = |w: usize| behind[w] && s.clients[READERS + w].ahead;
            if let Some(w) = (0..WRITERS).find(|&w| ahead(w)) {
                return Some(format!(
                    "{} is valid, acquired after w{w} was ahead",
                    name(c)
                ));
            }
        }
        (Op::Acquire, false) => drop_keys(s, c),
        (Op::ReadExtend | Op::Extend, true) => {
            cl.valid = cl.valid.max(fresh);
            cl.ahead |= is_writer(c);
        }
        (Op::Intent | Op::Admit, true) => {
            cl.stage = if round.op == Op::Admit {
                Stage::Admitted
            } else {
                Stage::Intent
            };
            cl.valid = fresh;
            cl.ahead = true;
        }
        (Op::Intent, false) => {
            // Released everywhere; an unopposed round still puts it ahead.
            let ahead = cl.ahead || round.clean;
            drop_keys(s, c);
            s.clients[c].ahead = ahead;
        }
        (Op::ReadExtend | Op::Extend | Op::Admit, false) => {}
    }
    None
}

/// The state after `e`, and a property-3 violation `e` caused, if any.
fn step(s: &State, e: Event, rule: Rule) -> (State, Option<String>) {
    let mut s = *s;
    let mut overtaken = None;
    match e {
        Event::Send(c, op) => {
            let behind = std::array::from_fn(|w| s.clients[READERS + w].ahead);
            let cl = &mut s.clients[c];
            cl.budget -= 1;
            cl.since = 0;
            cl.round = Some(Round {
                op,
                ago: 0,
                pending: [true; NODES],
                yes: 0,
                clean: true,
            });
            if op == Op::Acquire {
                cl.behind = behind;
            }
        }
        Event::Apply(c, n) => {
            let node = &mut s.nodes[n];
            let counts = node.quarantine == 0;
            if let Some(round) = s.clients[c].round.as_mut() {
                let (yes, clean) = apply(node, c, round.op, rule);
                round.pending[n] = false;
                round.yes += u8::from(yes && counts);
                round.clean &= clean && counts;
                if round.pending.iter().all(|p| !p) {
                    overtaken = decide(&mut s, c, rule);
                }
            }
        }
        Event::Timeout(c) => {
            if let Some(round) = s.clients[c].round.as_mut() {
                round.clean = false;
            }
            overtaken = decide(&mut s, c, rule);
        }
        Event::Release(c) => {
            drop_keys(&mut s, c);
            if is_writer(c) {
                close(&mut s, c);
            }
        }
        Event::Crash(c) => {
            let cl = &mut s.clients[c];
            (cl.crashed, cl.round, cl.budget) = (true, None, 0);
            if is_writer(c) {
                close(&mut s, c);
            }
        }
        Event::Restart(n) => {
            let quarantine = if rule == Rule::NoQuarantine { 0 } else { TTL };
            s.nodes[n] = Node {
                quarantine,
                ..Node::default()
            };
            s.restarts += 1;
        }
        Event::Skew(n) | Event::Tick => {
            let nodes = if let Event::Skew(n) = e {
                n..n + 1
            } else {
                0..NODES
            };
            for node in &mut s.nodes[nodes] {
                node.w = node
                    .w
                    .map(|(t, left, m)| (t, left - 1, m))
                    .filter(|w| w.1 > 0);
                node.r.iter_mut().for_each(|e| *e = e.saturating_sub(1));
                node.skewed |= matches!(e, Event::Skew(_));
                if let Event::Tick = e {
                    node.quarantine = node.quarantine.saturating_sub(1);
                }
            }
            if let Event::Tick = e {
                for c in 0..CLIENTS {
                    let cl = &mut s.clients[c];
                    cl.valid = cl.valid.saturating_sub(1);
                    cl.since = (cl.since + 1).min(SINCE_CAP);
                    if let Some(round) = cl.round.as_mut() {
                        round.ago += 1;
                    }
                    if cl.ahead && cl.valid == 0 && cl.stage != Stage::Idle {
                        close(&mut s, c);
                    }
                }
            }
        }
    }
    (s, overtaken)
}

/// The first property among `watch` that state `s` breaks.
fn broken(s: &State, watch: &[Property]) -> Option<(Property, String)> {
    let valid = |c: usize, stage| s.clients[c].stage == stage && s.clients[c].valid > 0;
    let writing: Vec<String> = (READERS..CLIENTS)
        .filter(|&c| valid(c, Stage::Admitted))
        .map(name)
        .collect();
    let reading: Vec<String> = (0..READERS)
        .filter(|&c| valid(c, Stage::Reading))
        .map(name)
        .collect();
    if watch.contains(&Exclusion) && !writing.is_empty() && writing.len() + reading.len() > 1 {
        return Some((
            Exclusion,
            format!("valid writers {writing:?} with readers {reading:?}"),
        ));
    }
    // How long client `c`'s own ops may keep a key of it alive.
    let bound = |c: usize| i16::from(TTL + DELAY) - i16::from(s.clients[c].since);
    for (n, node) in s.nodes.iter().enumerate() {
        for (c, &left) in node.r.iter().enumerate() {
            if watch.contains(&OwnExpiry) && i16::from(left) > bound(c) {
                let since = s.clients[c].since;
                return Some((
                    OwnExpiry,
                    format!(
                        "r{c}'s entry on n{n} has {left} ticks left, {since} after its last send"
                    ),
                ));
            }
        }
        if let Some((t, left, _)) = node.w {
            let c = usize::from(t);
            if watch.contains(&WriterExpiry) && i16::from(left) > bound(c) {
                return Some((
                    WriterExpiry,
                    format!("{}'s W on n{n} outlives its last send", name(c)),
                ));
            }
        }
    }
    None
}

/// What an exploration found: states, the longest of the shortest
/// schedules to them, and the first violation with its shortest schedule.
#[derive(Debug)]
struct Found {
    states: usize,
    depth: usize,
    violation: Option<(Property, String, String)>,
}

/// Breadth-first over every schedule; violations outside `watch` ignored.
fn explore(rule: Rule, watch: &[Property]) -> Found {
    let start = initial();
    let mut seen = HashSet::from([start]);
    // Per state id: (the state it was reached from, by which event, depth).
    let mut trail: Vec<(usize, Option<Event>, usize)> = vec![(0, None, 0)];
    let mut queue = VecDeque::from([(start, 0)]);
    while let Some((state, id)) = queue.pop_front() {
        for e in events(&state) {
            let (next, overtaken) = step(&state, e, rule);
            let overtaken = overtaken.filter(|_| watch.contains(&NoOvertaking));
            let problem = overtaken
                .map(|why| (NoOvertaking, why))
                .or_else(|| broken(&next, watch));
            if let Some((property, why)) = problem {
                let mut path = vec![e.to_string()];
                let mut at = id;
                while let (from, Some(e), _) = trail[at] {
                    path.push(e.to_string());
                    at = from;
                }
                path.reverse();
                let schedule = format!("{} steps: {}", path.len(), path.join(" "));
                let violation = Some((property, why, schedule));
                return Found {
                    states: seen.len(),
                    depth: trail[id].2 + 1,
                    violation,
                };
            }
            if seen.insert(next) {
                trail.push((id, Some(e), trail[id].2 + 1));
                queue.push_back((next, trail.len() - 1));
            }
        }
    }
    let depth = trail.last().map_or(0, |t| t.2);
    Found {
        states: seen.len(),
        depth,
        violation: None,
    }
}

#[test]
fn no_schedule_breaks_the_read_write_lock_within_the_budgets() {
    let found = explore(Rule::Sound, &ALL);
    println!(
        "rw check: {} states, the farthest {} steps out, no violation",
        found.states, found.depth
    );
    assert!(found.violation.is_none(), "{:?}", found.violation);
    assert!(
        found.states > 100_000,
        "the exploration is too small: {found:?}"
    );
}

/// Runs canary `rule`, prints its shortest counterexample, and checks that
/// it breaks `expected`.
fn caught(rule: Rule, watch: &[Property], expected: Property) {
    let found = explore(rule, watch);
    let Some((property, why, schedule)) = found.violation else {
        panic!(
            "{rule:?} held in {} states: the model is too weak",
            found.states
        );
    };
    println!(
        "{rule:?}: {property:?} after {} states: {why}; {schedule}",
        found.states
    );
    assert_eq!(property, expected, "{why}; {schedule}");
}

#[test]
fn a_shared_reader_ttl_is_found() {
    caught(Rule::SharedReaderTtl, &ALL, OwnExpiry);
}

#[test]
fn a_writer_that_waits_for_drained_readers_is_found() {
    caught(Rule::DrainFirst, &ALL, NoOvertaking);
}

/// Property 3 would fire first (as in canary c); exclusion is the point.
#[test]
fn readers_that_ignore_the_writer_are_found() {
    caught(Rule::ReadersIgnoreW, &[Exclusion], Exclusion);
}

#[test]
fn readers_that_see_only_an_admitted_writer_are_found() {
    caught(Rule::AdmittedOnly, &ALL, NoOvertaking);
}

/// Property 3 would fire first (a reader in on the restarted node while
/// the writer holds only its intent); exclusion is the point.
#[test]
fn no_restart_quarantine_is_found() {
    caught(Rule::NoQuarantine, &[Exclusion], Exclusion);
}

#[test]
fn claiming_validity_without_drift_is_found() {
    caught(Rule::NoDrift, &[Exclusion], Exclusion);
}
