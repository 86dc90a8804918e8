//! An exhaustive check of locks on several resources at once
//! (`LockManager::lock_all`) for small bounds: three nodes, two clients
//! whose sets overlap (`{a, b}` and `{b, c}`), every order in
//! which their acquire scripts reach (or never reach) each node, their
//! decisions, releases and the passing of time.
//!
//! The protocol check (`protocol.rs`) takes a round as one step;
//! here each node applies each client's script at its own moment, so the
//! scripts of different clients interleave node by node, which is where
//! the per-node rule matters. The vote count ([`Tally`]) and the validity
//! ([`validity`], [`drift`]) are the crate's own.
//!
//! Property, checked in every state reached: no two clients whose sets
//! share a resource are both valid holders. With the crate's rule (a node
//! takes every key of a set or none, and votes for the set only then) it
//! holds; with a piecemeal rule (a node takes what keys it can and votes
//! for the set if it took any) the canary below finds two holders.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use crate::engine::Tally;
use crate::redlock::validity::{drift, validity};

const NODES: usize = 3;
const QUORUM: usize = 2;
const KEYS: usize = 3;
/// Each client's set, as a bit mask of the keys a, b, c.
const SETS: [u8; 2] = [0b011, 0b110];
const CLIENTS: usize = SETS.len();
const TTL_MS: u64 = 1000;
const DRIFT_FACTOR: f64 = 0.01;
const TICKS_MS: [u64; 2] = [300, 1100];
/// Time stops here: long enough for every key to expire once.
const MAX_NOW_MS: u64 = 2 * TTL_MS + 400;
const DEPTH: usize = 10;

/// How a node applies a set acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Every key or none, in one atomic step (the crate's scripts).
    AllOrNothing,
    /// Each free key is taken; a vote for the set if any was (broken).
    Piecemeal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Asking the nodes: each node's answer so far (`None`: not yet).
    Acquiring {
        token: u32,
        start: u64,
        answers: [Option<bool>; NODES],
    },
    Holding {
        token: u32,
        deadline: u64,
    },
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Start(usize),
    /// Node `.1` applies client `.0`'s script.
    Apply(usize, usize),
    /// Client `.0`'s script never reaches node `.1` (a timeout).
    Lose(usize, usize),
    Decide(usize),
    Release(usize),
    Tick(u64),
}

/// Per node and key: (holder's token, expiry in ms).
type Keys = [[Option<(u32, u64)>; KEYS]; NODES];

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    now: u64,
    keys: Keys,
    clients: [Phase; CLIENTS],
    next_token: u32,
}

fn live(slot: Option<(u32, u64)>, now: u64) -> Option<u32> {
    slot.filter(|(_, exp)| *exp > now).map(|(t, _)| t)
}

fn members(c: usize) -> impl Iterator<Item = usize> {
    (0..KEYS).filter(move |k| SETS[c] & (1 << k) != 0)
}

fn actions(s: &State) -> Vec<Action> {
    let mut out = Vec::new();
    for (c, phase) in s.clients.iter().enumerate() {
        match phase {
            Phase::Idle => out.push(Action::Start(c)),
            Phase::Acquiring { answers, .. } => {
                let open: Vec<usize> = (0..NODES).filter(|&i| answers[i].is_none()).collect();
                for &i in &open {
                    out.push(Action::Apply(c, i));
                    out.push(Action::Lose(c, i));
                }
                if open.is_empty() {
                    out.push(Action::Decide(c));
                }
            }
            Phase::Holding { .. } => out.push(Action::Release(c)),
            Phase::Done => {}
        }
    }
    out.extend(
        TICKS_MS
            .into_iter()
            .filter(|ms| s.now + ms <= MAX_NOW_MS)
            .map(Action::Tick),
    );
    out
}

/// Node `i` applies client `c`'s set acquire for `token`: its vote.
fn apply_acquire(keys: &mut Keys, i: usize, c: usize, token: u32, now: u64, rule: Rule) -> bool {
    let node = &mut keys[i];
    let expiry = now + TTL_MS;
    match rule {
        Rule::AllOrNothing => {
            if members(c).any(|k| live(node[k], now).is_some()) {
                return false;
            }
            for k in members(c) {
                node[k] = Some((token, expiry));
            }
            true
        }
        Rule::Piecemeal => {
            let mut took = false;
            for k in members(c) {
                if live(node[k], now).is_none() {
                    node[k] = Some((token, expiry));
                    took = true;
                }
            }
            took
        }
    }
}

fn release(keys: &mut Keys, token: u32, now: u64) {
    for node in keys.iter_mut() {
        for slot in node.iter_mut() {
            if live(*slot, now) == Some(token) {
                *slot = None;
            }
        }
    }
}

fn apply(s: &State, action: Action, rule: Rule) -> State {
    let mut s = s.clone();
    let now = s.now;
    match action {
        Action::Tick(ms) => s.now += ms,
        Action::Start(c) => {
            s.clients[c] = Phase::Acquiring {
                token: s.next_token,
                start: now,
                answers: [None; NODES],
            };
            s.next_token += 1;
        }
        Action::Apply(c, i) | Action::Lose(c, i) => {
            if let Phase::Acquiring {
                token, mut answers, ..
            } = s.clients[c]
            {
                let applied = matches!(action, Action::Apply(..));
                answers[i] = Some(applied && apply_acquire(&mut s.keys, i, c, token, now, rule));
                if let Phase::Acquiring { answers: a, .. } = &mut s.clients[c] {
                    *a = answers;
                }
            }
        }
        Action::Decide(c) => {
            if let Phase::Acquiring {
                token,
                start,
                answers,
            } = s.clients[c]
            {
                let mut tally = Tally::new(NODES, QUORUM);
                for vote in answers.iter().flatten() {
                    tally.record(*vote);
                }
                let ttl = Duration::from_millis(TTL_MS);
                let elapsed = Duration::from_millis(now - start);
                let drift = drift(ttl, DRIFT_FACTOR);
                let valid = validity(ttl, elapsed, drift);
                s.clients[c] = match valid.filter(|_| tally.reached()) {
                    Some(left) => Phase::Holding {
                        token,
                        deadline: now + u64::try_from(left.as_millis()).unwrap_or(0),
                    },
                    None => {
                        release(&mut s.keys, token, now);
                        Phase::Done
                    }
                };
            }
        }
        Action::Release(c) => {
            if let Phase::Holding { token, .. } = s.clients[c] {
                release(&mut s.keys, token, now);
                s.clients[c] = Phase::Done;
            }
        }
    }
    s
}

/// Two valid holders of one resource, if `s` has them.
fn broken(s: &State) -> Option<String> {
    let valid: Vec<usize> = (0..CLIENTS)
        .filter(|&c| matches!(s.clients[c], Phase::Holding { deadline, .. } if s.now < deadline))
        .collect();
    for (n, &a) in valid.iter().enumerate() {
        for &b in &valid[n + 1..] {
            if SETS[a] & SETS[b] != 0 {
                return Some(format!(
                    "clients {a} (set {:03b}) and {b} (set {:03b}) both hold at {} ms",
                    SETS[a], SETS[b], s.now
                ));
            }
        }
    }
    None
}

/// Every schedule up to [`DEPTH`] steps: the states visited, or the first
/// counterexample with its steps.
fn explore(rule: Rule) -> Result<usize, String> {
    let initial = State {
        now: 0,
        keys: [[None; KEYS]; NODES],
        clients: [Phase::Idle; CLIENTS],
        next_token: 1,
    };
    let mut seen = HashSet::from([initial.clone()]);
    let mut queue = VecDeque::from([(initial, Vec::<Action>::new())]);
    while let Some((state, path)) = queue.pop_front() {
        if path.len() == DEPTH {
            continue;
        }
        for action in actions(&state) {
            let next = apply(&state, action, rule);
            let mut steps = path.clone();
            steps.push(action);
            if let Some(why) = broken(&next) {
                return Err(format!("{why}; steps: {steps:?}"));
            }
            if seen.insert(next.clone()) {
                queue.push_back((next, steps));
            }
        }
    }
    Ok(seen.len())
}

#[test]
fn overlapping_sets_never_have_two_holders_in_any_order() {
    let states = explore(Rule::AllOrNothing).unwrap_or_else(|e| panic!("{e}"));
    println!("set check: {states} states, every schedule of {DEPTH} steps");
    assert!(states > 10_000, "the exploration is too small: {states}");
}

/// Canary: nodes that take a set's keys piecemeal let two sets in.
#[test]
fn taking_a_set_piecemeal_is_found() {
    let found = explore(Rule::Piecemeal).expect_err("a counterexample");
    println!("piecemeal sets: {found}");
    assert!(found.contains("both hold"), "{found}");
}
