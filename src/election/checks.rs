//! An exhaustive check of leader election's proclaim and observe: two
//! leaders' lock keys and records on three nodes (the first granted
//! everywhere at the start, the second acquiring; each then proclaims a
//! value of its own), each node applying each op at its own moment,
//! lock keys that expire at any moment, and an
//! observer whose reads (each node's lock key, then its record) interleave
//! with all of it. The observer judges with the crate's own `view` and
//! `judge` (`src/election/observe.rs`) on records made by the crate's own
//! encoding.
//!
//! Properties, in every state reached:
//! - **records are tied to a holding**: a record is written on a node
//!   only while the node's lock key holds the record's token;
//! - **an observed leader is a quorum's**: `Some(leader)` only when a
//!   quorum of nodes, each when it was read, held that leader's lock key
//!   and beside it its record (token, term and value);
//! - **an observed value was proclaimed**: by the leader of that token,
//!   in that term;
//! - **`None` is a quorum's**: only when a quorum of nodes held no lock
//!   key when read.
//!
//! Canaries (the model's own rule choices): a proclaim that does not
//! compare the token, and an observer that trusts one node, must each be
//! caught.
//!
//! Not modelled: who may hold the lock (exclusion, validity, quarantine,
//! fences): that is the lock's, explored by `protocol.rs`; here the lock
//! keys expire at any moment, so two leaders may hold at once, which
//! only makes the observer's job harder.

use std::collections::{HashSet, VecDeque};

use super::observe::{Judged, View, judge, view};
use super::record::encode_raw;
use crate::backend::Holding;
use crate::token::TOKEN_LEN;

const NODES: usize = 3;
const QUORUM: usize = 2;
const LEADERS: usize = 2;

/// The model's rule choices: the crate's, or a canary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rules {
    /// The proclaim writes only while the lock key holds the token.
    proclaim_compares: bool,
    /// The quorum the observer judges with.
    observe_quorum: usize,
}

const CRATE: Rules = Rules {
    proclaim_compares: true,
    observe_quorum: QUORUM,
};

/// A leader: `token` is `leader + 1`, its term `leader + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    /// Sending its acquire: per node, whether it was applied.
    Acquiring([bool; NODES]),
    /// Proclaiming value `value`: per node, whether it was applied.
    Proclaiming { value: u8, done: [bool; NODES] },
    /// Done (released where it could, or never a leader).
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Node {
    /// The lock key's token (0: absent).
    lock: u8,
    /// The record: token, term, value (token 0: absent).
    record: (u8, u8, u8),
}

/// What the observer read on one node: the lock key's token, then the
/// record (`None`: not read yet).
type Read = (Option<u8>, Option<(u8, u8, u8)>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    nodes: [Node; NODES],
    leaders: [Phase; LEADERS],
    /// Whether each leader has proclaimed (on some node).
    proclaimed: [bool; LEADERS],
    reads: [Read; NODES],
    observed: bool,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Acquire { leader: usize, node: usize },
    Proclaim { leader: usize, node: usize },
    Expire { node: usize },
    ReadLock { node: usize },
    ReadRecord { node: usize },
    Judge,
}

fn token(leader: usize) -> u8 {
    u8::try_from(leader + 1).unwrap_or(u8::MAX)
}

/// The value each leader proclaims: its own, so that a value shown with
/// another leader's term is caught.
fn value_of(leader: usize) -> u8 {
    token(leader) * 10
}

fn events(s: &State) -> Vec<Event> {
    let mut out = Vec::new();
    for (leader, phase) in s.leaders.iter().enumerate() {
        let open = match phase {
            Phase::Acquiring(done) | Phase::Proclaiming { done, .. } => *done,
            Phase::Done => continue,
        };
        for node in (0..NODES).filter(|&n| !open[n]) {
            out.push(match phase {
                Phase::Acquiring(_) => Event::Acquire { leader, node },
                _ => Event::Proclaim { leader, node },
            });
        }
    }
    for node in 0..NODES {
        if s.nodes[node].lock != 0 {
            out.push(Event::Expire { node });
        }
    }
    // The observer reads the nodes one after the other (lock key, then
    // record), interleaved with everything else: the next unread one.
    if !s.observed
        && let Some(node) = s.reads.iter().position(|r| r.1.is_none())
    {
        out.push(match s.reads[node].0 {
            None => Event::ReadLock { node },
            Some(_) => Event::ReadRecord { node },
        });
    }
    if !s.observed && s.reads.iter().all(|r| r.1.is_some()) {
        out.push(Event::Judge);
    }
    out
}

/// The next phase of a leader whose current step reached every node.
fn advance(s: &mut State, leader: usize) {
    let granted = (0..NODES)
        .filter(|&n| s.nodes[n].lock == token(leader))
        .count();
    s.leaders[leader] = match s.leaders[leader] {
        Phase::Acquiring(done) if done.iter().all(|&d| d) => match granted >= QUORUM {
            true => Phase::Proclaiming {
                value: value_of(leader),
                done: [false; NODES],
            },
            false => Phase::Done,
        },
        Phase::Proclaiming { done, .. } if done.iter().all(|&d| d) => Phase::Done,
        other => other,
    };
}

/// Applies `e`; the violation it shows, if any.
fn step(s: &mut State, e: Event, rules: Rules) -> Option<String> {
    match e {
        Event::Acquire { leader, node } => {
            let t = token(leader);
            let n = &mut s.nodes[node];
            if n.lock == 0 {
                n.lock = t;
            }
            if let Phase::Acquiring(done) = &mut s.leaders[leader] {
                done[node] = true;
            }
            advance(s, leader);
        }
        Event::Proclaim { leader, node } => {
            let t = token(leader);
            if let Phase::Proclaiming { value, done } = &mut s.leaders[leader] {
                let n = &mut s.nodes[node];
                if n.lock == t || !rules.proclaim_compares {
                    if n.lock != t {
                        return Some(format!(
                            "node {node} got a record of token {t} while its lock key held {}",
                            n.lock
                        ));
                    }
                    n.record = (t, t, *value);
                }
                s.proclaimed[leader] = true;
                done[node] = true;
            }
            advance(s, leader);
        }
        Event::Expire { node } => s.nodes[node].lock = 0,
        Event::ReadLock { node } => s.reads[node].0 = Some(s.nodes[node].lock),
        Event::ReadRecord { node } => s.reads[node].1 = Some(s.nodes[node].record),
        Event::Judge => {
            s.observed = true;
            return judged(s, rules);
        }
    }
    None
}

/// The observer's verdict from its reads, and whether it is true of them.
fn judged(s: &State, rules: Rules) -> Option<String> {
    let holding = |bytes: &[u8], ttl| Holding::new(bytes, bytes.len(), ttl);
    let views: Vec<Result<View, ()>> = s
        .reads
        .iter()
        .map(|&(lock, record)| {
            let lock = lock.unwrap_or(0);
            let lock = (lock != 0)
                .then(|| holding(&[lock; TOKEN_LEN], Some(std::time::Duration::from_secs(1))));
            let (t, term, value) = record.unwrap_or_default();
            let record = (t != 0).then(|| {
                holding(
                    &encode_raw(u64::from(term), &[t; TOKEN_LEN], &[value]),
                    None,
                )
            });
            view(Ok(lock), Ok(record)).map_err(|_| ())
        })
        .collect();
    match judge(&views, rules.observe_quorum) {
        Judged::Leads { term, value, .. } => {
            let t = u8::try_from(term).unwrap_or(0);
            let backed = s
                .reads
                .iter()
                .filter(|r| r.0 == Some(t) && r.1.is_some_and(|rec| rec.0 == t))
                .count();
            if backed < QUORUM {
                return Some(format!("observed leader {t} read on {backed} node(s) only"));
            }
            let leader = usize::from(t).saturating_sub(1);
            let v = value.first().copied().unwrap_or(0);
            if !s.proclaimed.get(leader).copied().unwrap_or(false) || v != value_of(leader) {
                return Some(format!(
                    "observed value {v} that leader {t} never proclaimed"
                ));
            }
            None
        }
        Judged::Nobody { .. } => {
            let free = s.reads.iter().filter(|r| r.0 == Some(0)).count();
            (free < QUORUM).then(|| format!("observed no leader, {free} node(s) free"))
        }
        Judged::Unknown => None,
    }
}

/// Explores every schedule; the number of states and the first violation
/// with the state it was found in.
fn explore(rules: Rules) -> (usize, Option<(String, State)>) {
    // The first leader has just been granted on every node (its keys
    // expire at any moment from here, so it may hold on fewer); the
    // second still has to acquire.
    let start = State {
        nodes: [Node {
            lock: token(0),
            record: (0, 0, 0),
        }; NODES],
        leaders: [
            Phase::Proclaiming {
                value: value_of(0),
                done: [false; NODES],
            },
            Phase::Acquiring([false; NODES]),
        ],
        proclaimed: [false; LEADERS],
        reads: [(None, None); NODES],
        observed: false,
    };
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([start.clone()]);
    seen.insert(start);
    while let Some(state) = queue.pop_front() {
        for e in events(&state) {
            let mut next = state.clone();
            if let Some(violation) = step(&mut next, e, rules) {
                return (
                    seen.len(),
                    Some((format!("{violation} (after {e:?})"), state)),
                );
            }
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
    }
    (seen.len(), None)
}

#[test]
fn observe_and_proclaim_hold_in_every_schedule() {
    let (states, violation) = explore(CRATE);
    println!("election: {states} states");
    assert!(violation.is_none(), "{violation:?}");
    assert!(states > 10_000, "the model explored too little: {states}");
}

#[test]
fn a_proclaim_that_does_not_compare_the_token_is_found() {
    let rules = Rules {
        proclaim_compares: false,
        ..CRATE
    };
    let (_, violation) = explore(rules);
    let (why, state) = violation.expect("caught");
    println!("{why}: {state:?}");
    assert!(why.contains("while its lock key held"), "{why}");
}

#[test]
fn an_observer_that_trusts_one_node_is_found() {
    let rules = Rules {
        observe_quorum: 1,
        ..CRATE
    };
    let (_, violation) = explore(rules);
    let (why, state) = violation.expect("caught");
    println!("{why}: {state:?}");
    assert!(why.contains("node(s)"), "{why}");
}
