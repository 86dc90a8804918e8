//! The read-write explorer's model (`mod.rs` explores it): three nodes
//! with a writer's key and the readers' entries, two readers and two
//! writers sending rounds, what each node does with each op (the protocol
//! or one canary's rule), restarts, clock steps, and the state's key up to
//! the model's symmetries.

use std::fmt;

use crate::engine::majority;

const NODES: usize = 3;
pub(super) const READERS: usize = 2;
const WRITERS: usize = 2;
pub(super) const CLIENTS: usize = READERS + WRITERS;
/// Every TTL, in ticks; also how long a restarted node's votes sit out.
const TTL: u8 = 3;
/// Ticks a client takes off its validity: a node's clock may run one fast.
const DRIFT: u8 = 1;
const MAX_RESTARTS: u8 = 1;
/// Clock jumps (one node's clock a tick ahead) per schedule.
const MAX_SKEWS: u8 = 1;
/// Rounds per schedule, all clients together.
const MAX_ROUNDS: u8 = 4;
const READER_ROUNDS: u8 = 2;
const WRITER_ROUNDS: u8 = 3;

/// The protocol, or one protection undone (a canary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Sound,
    /// a: one expiry for the whole reader set: any reader refreshes all.
    SharedReaderTtl,
    /// b: intent only once readers are drained (intent = admission).
    DrainFirst,
    /// b': ReadAcquire does not look at `W` at all.
    ReadersIgnoreW,
    /// c: ReadAcquire is refused only by a `W` admitted on that node.
    AdmittedOnly,
    /// d: a restarted node votes at once.
    NoQuarantine,
    /// e: validity claimed as send + TTL, no drift taken off.
    NoDrift,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Node {
    /// `W`: (the writer's client index, ticks left here, admitted mark).
    pub(super) w: Option<(u8, u8, bool)>,
    /// `R`: ticks left of each reader's entry (0: none).
    pub(super) r: [u8; READERS],
    /// Ticks until its yes votes count again after a restart.
    quarantine: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Acquire,
    ReadExtend,
    Intent,
    Extend,
    Admit,
}

#[derive(Debug, Clone, Copy)]
struct Round {
    op: Op,
    pending: [bool; NODES],
    /// Yes votes that count.
    yes: u8,
    /// An intent round that met no other writer's `W` and no quarantine.
    clean: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Stage {
    #[default]
    Idle,
    Reading,
    Intent,
    Admitted,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Client {
    pub(super) stage: Stage,
    /// Ticks of validity left (0: not valid).
    pub(super) valid: u8,
    round: Option<Round>,
    /// Rounds it may still start.
    budget: u8,
    /// A writer: property 3's window is open.
    ahead: bool,
    /// A reader: its acquire was sent while writer `w` was ahead.
    behind: [bool; WRITERS],
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct State {
    pub(super) nodes: [Node; NODES],
    pub(super) clients: [Client; CLIENTS],
    restarts: u8,
    skews: u8,
    /// Rounds any client may still start.
    rounds: u8,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    Send(usize, Op),
    /// Node `.1` applies client `.0`'s op.
    Apply(usize, usize),
    /// The client stops waiting: the answers not in are lost.
    Timeout(usize),
    Release(usize),
    Restart(usize),
    /// Node `.0`'s clock jumps a tick ahead.
    Skew(usize),
    Tick,
}

/// Clients 0 and 1 are the readers r0, r1; 2 and 3 the writers w0, w1.
pub(super) fn name(c: usize) -> String {
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
            Event::Restart(n) => write!(f, "n{n}:restart"),
            Event::Skew(n) => write!(f, "n{n}:skew"),
            Event::Tick => write!(f, "tick"),
        }
    }
}

pub(super) fn initial() -> State {
    let mut s = State {
        rounds: MAX_ROUNDS,
        ..State::default()
    };
    for (c, cl) in s.clients.iter_mut().enumerate() {
        cl.budget = if c < READERS {
            READER_ROUNDS
        } else {
            WRITER_ROUNDS
        };
    }
    s
}

pub(super) fn events(s: &State) -> Vec<Event> {
    let mut out = Vec::new();
    for (c, cl) in s.clients.iter().enumerate() {
        if let Some(round) = cl.round {
            let open = (0..NODES).filter(|&n| round.pending[n]);
            out.extend(open.map(|n| Event::Apply(c, n)));
            out.push(Event::Timeout(c));
            continue;
        }
        let sends: &[Op] = match cl.stage {
            Stage::Idle if c >= READERS => &[Op::Intent],
            Stage::Idle => &[Op::Acquire],
            Stage::Reading => &[Op::ReadExtend],
            Stage::Intent => &[Op::Extend, Op::Admit],
            Stage::Admitted => &[],
        };
        if cl.budget > 0 && s.rounds > 0 {
            out.extend(sends.iter().map(|&op| Event::Send(c, op)));
        }
        if cl.stage != Stage::Idle {
            out.push(Event::Release(c));
        }
    }
    if s.restarts < MAX_RESTARTS {
        out.extend((0..NODES).map(Event::Restart));
    }
    if s.skews < MAX_SKEWS {
        out.extend((0..NODES).map(Event::Skew));
    }
    // Every round is decided within the tick it was sent in.
    if s.clients.iter().all(|cl| cl.round.is_none()) {
        out.push(Event::Tick);
    }
    out
}

/// The node applies client `c`'s op: (yes, met no other writer's `W`).
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

/// Client `c` deletes what it holds on every node and is idle again.
fn drop_keys(s: &mut State, c: usize) {
    for node in &mut s.nodes {
        if c >= READERS {
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
    let held = usize::from(round.yes) >= majority(NODES);
    let fresh = TTL - DRIFT * u8::from(rule != Rule::NoDrift);
    let cl = &mut s.clients[c];
    match (round.op, held) {
        (Op::Acquire, true) => {
            (cl.stage, cl.valid) = (Stage::Reading, fresh);
            let behind = std::mem::take(&mut cl.behind);
            let overtaken = (0..WRITERS).find(|&w| behind[w] && s.clients[READERS + w].ahead)?;
            let w = name(READERS + overtaken);
            return Some(format!(
                "{} valid on an acquire sent after {w}'s intent held",
                name(c)
            ));
        }
        (Op::ReadExtend | Op::Extend, true) => {
            cl.valid = cl.valid.max(fresh);
            cl.ahead |= c >= READERS;
        }
        (Op::Intent, true) => (cl.stage, cl.valid, cl.ahead) = (Stage::Intent, fresh, true),
        (Op::Admit, true) => (cl.stage, cl.valid, cl.ahead) = (Stage::Admitted, fresh, true),
        (Op::Acquire, false) => {
            s.clients[c].behind = [false; WRITERS];
            drop_keys(s, c);
        }
        (Op::Intent, false) => {
            // Released everywhere; a writer that met only readers (the
            // drain-first canary) is still ahead of later readers.
            let ahead = cl.ahead || round.clean;
            drop_keys(s, c);
            s.clients[c].ahead = ahead;
        }
        (Op::ReadExtend | Op::Extend | Op::Admit, false) => {}
    }
    None
}

/// The state after `e`, and the property-3 violation `e` made, if any.
pub(super) fn step(s: &State, e: Event, rule: Rule) -> (State, Option<String>) {
    let mut s = *s;
    let mut overtaken = None;
    match e {
        Event::Send(c, op) => {
            let behind = std::array::from_fn(|w| s.clients[READERS + w].ahead);
            let cl = &mut s.clients[c];
            cl.budget -= 1;
            s.rounds -= 1;
            let clean = op == Op::Intent;
            cl.round = Some(Round {
                op,
                pending: [true; NODES],
                yes: 0,
                clean,
            });
            if op == Op::Acquire {
                cl.behind = behind;
            }
        }
        Event::Apply(c, n) => {
            let node = &mut s.nodes[n];
            let counts = node.quarantine == 0;
            if let Some(round) = s.clients[c].round.as_mut() {
                let (yes, unopposed) = apply(node, c, round.op, rule);
                round.pending[n] = false;
                round.yes += u8::from(yes && counts);
                round.clean &= unopposed && counts;
                // Property 3's moment: the intent is held on a quorum.
                let held = usize::from(round.yes) >= majority(NODES);
                s.clients[c].ahead |= round.op == Op::Intent && held;
                if !round.pending.contains(&true) {
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
            if c >= READERS {
                close(&mut s, c);
            }
        }
        Event::Restart(n) => {
            let quarantine = if rule == Rule::NoQuarantine { 0 } else { TTL };
            s.nodes[n] = Node::default();
            s.nodes[n].quarantine = quarantine;
            s.restarts += 1;
        }
        Event::Skew(_) | Event::Tick => {
            let nodes = match e {
                Event::Skew(n) => n..n + 1,
                _ => 0..NODES,
            };
            for node in &mut s.nodes[nodes] {
                node.w = node
                    .w
                    .map(|(t, left, m)| (t, left - 1, m))
                    .filter(|w| w.1 > 0);
                node.r.iter_mut().for_each(|e| *e = e.saturating_sub(1));
            }
            if let Event::Skew(_) = e {
                s.skews += 1;
                return (s, None);
            }
            for node in &mut s.nodes {
                node.quarantine = node.quarantine.saturating_sub(1);
            }
            for c in 0..CLIENTS {
                let cl = &mut s.clients[c];
                cl.valid = cl.valid.saturating_sub(1);
                if cl.ahead && cl.valid == 0 && cl.stage != Stage::Idle {
                    close(&mut s, c);
                }
            }
        }
    }
    (s, overtaken)
}

/// `s` as a number, the same for states that differ only by a renaming
/// of the nodes, of the two readers or of the two writers (the model's
/// symmetries, which cut the states explored about twentyfold): the least
/// over the client renamings, with the nodes in sorted order.
pub(super) fn key(s: &State) -> u128 {
    let mut best = u128::MAX;
    for swap in 0..4 {
        // A renaming is its own inverse: client `c` renamed is `rename(c)`.
        let wc = |w: usize| w ^ (swap >> 1);
        let rename = |c: usize| match c.checked_sub(READERS) {
            Some(w) => READERS + wc(w),
            None => c ^ (swap & 1),
        };
        let bit = |b: bool| u32::from(b);
        // A node and the ops pending to it (15 bits): renaming the nodes
        // reorders these columns.
        let mut columns: [u32; NODES] = std::array::from_fn(|n| {
            let node = &s.nodes[n];
            let mut v = node.w.map_or(0, |(t, left, mark)| {
                let w = wc(usize::from(t) - READERS) as u32 + 1;
                w << 3 | u32::from(left) << 1 | bit(mark)
            });
            for c in 0..READERS {
                v = v << 2 | u32::from(node.r[rename(c)]);
            }
            v = v << 2 | u32::from(node.quarantine);
            for c in 0..CLIENTS {
                v = v << 1 | bit(s.clients[rename(c)].round.is_some_and(|r| r.pending[n]));
            }
            v
        });
        columns.sort_unstable();
        let mut k = u128::from(s.restarts) << 4 | u128::from(s.skews) << 3 | u128::from(s.rounds);
        for column in columns {
            k = k << 15 | u128::from(column);
        }
        for c in 0..CLIENTS {
            let cl = &s.clients[rename(c)];
            let round = cl.round.map_or(0, |r| {
                (8 | r.op as u32) << 3 | u32::from(r.yes) << 1 | bit(r.clean)
            });
            let mut v = (cl.stage as u32) << 2 | u32::from(cl.valid);
            v = v << 7 | round;
            v = v << 2 | u32::from(cl.budget);
            v = v << 1 | bit(cl.ahead);
            for w in 0..WRITERS {
                v = v << 1 | bit(cl.behind[wc(w)]);
            }
            k = k << 16 | u128::from(v);
        }
        best = best.min(k);
    }
    best
}

// Every field fits the width `key` gives it: 5 + 3 * 15 + 4 * 16 bits.
const _: () = assert!(TTL <= 3 && MAX_RESTARTS <= 1 && MAX_SKEWS <= 1);
const _: () = assert!(MAX_ROUNDS <= 7 && READER_ROUNDS <= 3 && WRITER_ROUNDS <= 3);
