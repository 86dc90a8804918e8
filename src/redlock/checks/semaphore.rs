//! An exhaustive check of quorum semaphores: every order in which three
//! clients' acquires reach (or never reach) three nodes, for permits K = 2.
//!
//! Three rules are explored. The naive one (each node counts at most K
//! holders, a holder needs a majority) must fail: the check prints the
//! schedule that gives three holders. Per-node counts with the larger
//! quorum q such that (K+1)·q > K·N must hold, and so must the crate's
//! design, K slot locks (each an ordinary Redlock lock: a node grants a
//! slot when it is free there, a holder needs a majority of that slot),
//! with every slot choice explored. Holders never release: that is the
//! worst case for the bound.
//!
//! Not modelled here: expiry, restarts and clock arithmetic, which are the
//! single lock's business and are explored by `protocol.rs` (a slot
//! is one such lock).

use std::collections::{HashSet, VecDeque};

use crate::engine::majority;

const NODES: usize = 3;
const CLIENTS: usize = 3;
const PERMITS: usize = 2;

/// How a node decides, and how many grants make a holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Count at most `PERMITS` per node; a majority makes a holder.
    NaiveCount,
    /// Count at most `PERMITS` per node; `quorum` grants make a holder.
    Count { quorum: usize },
    /// One lock per slot; a majority of the slot's nodes makes a holder.
    Slots,
}

/// One client's acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    /// Not begun yet.
    Idle,
    /// Sent to every node for `slot` (0 for the counting rules); per node
    /// whether it still has to answer, and whether it granted.
    Asking {
        slot: usize,
        open: [bool; NODES],
        granted: [bool; NODES],
    },
    /// Holds a permit (on `slot`).
    Holds { slot: usize },
    /// Failed, and released where it was granted.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    clients: [Client; CLIENTS],
    /// Per node and slot, the clients it counts (a lock is a set of one).
    held: [[Vec<usize>; PERMITS]; NODES],
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Begin { client: usize, slot: usize },
    Reach { client: usize, node: usize },
    Lose { client: usize, node: usize },
}

/// What an exploration found: states seen, and the first violation with
/// the shortest schedule that leads to it.
struct Found {
    states: usize,
    violation: Option<(String, Vec<Event>)>,
}

fn explore(rule: Rule) -> Found {
    let slots = if rule == Rule::Slots { PERMITS } else { 1 };
    let start = State {
        clients: [Client::Idle; CLIENTS],
        held: Default::default(),
    };
    let mut seen = HashSet::from([start.clone()]);
    let mut queue = VecDeque::from([(start, Vec::new())]);
    while let Some((state, path)) = queue.pop_front() {
        if let Some(why) = violation(&state) {
            return Found {
                states: seen.len(),
                violation: Some((why, path)),
            };
        }
        for event in events(&state, slots) {
            let next = step(&state, event, rule);
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(event);
                queue.push_back((next, longer));
            }
        }
    }
    Found {
        states: seen.len(),
        violation: None,
    }
}

fn events(state: &State, slots: usize) -> Vec<Event> {
    let mut out = Vec::new();
    for (client, c) in state.clients.iter().enumerate() {
        match c {
            Client::Idle => {
                out.extend((0..slots).map(|slot| Event::Begin { client, slot }));
            }
            Client::Asking { open, .. } => {
                for node in (0..NODES).filter(|&n| open[n]) {
                    out.push(Event::Reach { client, node });
                    out.push(Event::Lose { client, node });
                }
            }
            Client::Holds { .. } | Client::Failed => {}
        }
    }
    out
}

fn step(state: &State, event: Event, rule: Rule) -> State {
    let mut next = state.clone();
    match event {
        Event::Begin { client, slot } => {
            next.clients[client] = Client::Asking {
                slot,
                open: [true; NODES],
                granted: [false; NODES],
            };
        }
        Event::Reach { client, node } | Event::Lose { client, node } => {
            let Client::Asking {
                slot,
                mut open,
                mut granted,
            } = next.clients[client]
            else {
                return next;
            };
            open[node] = false;
            if matches!(event, Event::Reach { .. }) {
                let here = &mut next.held[node][slot];
                let room = match rule {
                    Rule::Slots => here.is_empty(),
                    Rule::NaiveCount | Rule::Count { .. } => here.len() < PERMITS,
                };
                if room {
                    here.push(client);
                    granted[node] = true;
                }
            }
            next.clients[client] = Client::Asking {
                slot,
                open,
                granted,
            };
            if open.iter().all(|o| !o) {
                let quorum = match rule {
                    Rule::Count { quorum } => quorum,
                    Rule::NaiveCount | Rule::Slots => majority(NODES),
                };
                let votes = granted.iter().filter(|g| **g).count();
                next.clients[client] = if votes >= quorum {
                    Client::Holds { slot }
                } else {
                    // Released everywhere it was granted.
                    for held in &mut next.held {
                        held[slot].retain(|&c| c != client);
                    }
                    Client::Failed
                };
            }
        }
    }
    next
}

fn violation(state: &State) -> Option<String> {
    let holders: Vec<(usize, usize)> = (0..CLIENTS)
        .filter_map(|c| match state.clients[c] {
            Client::Holds { slot } => Some((c, slot)),
            _ => None,
        })
        .collect();
    if holders.len() > PERMITS {
        return Some(format!(
            "{} holders of a {PERMITS}-permit semaphore: {holders:?} (client, slot); \
             nodes count {:?}",
            holders.len(),
            state.held
        ));
    }
    None
}

/// The safe quorum for per-node counts: the least q with (K+1)·q > K·N.
fn safe_count_quorum() -> usize {
    (1..=NODES)
        .find(|q| (PERMITS + 1) * q > PERMITS * NODES)
        .unwrap_or(NODES)
}

#[test]
fn the_naive_quorum_semaphore_gives_more_holders_than_permits() {
    let found = explore(Rule::NaiveCount);
    let Some((why, path)) = found.violation else {
        panic!(
            "the naive rule held in {} states: the model is too weak",
            found.states
        );
    };
    println!(
        "naive per-node count, majority: {why} after {} events: {path:?}",
        path.len()
    );
}

#[test]
fn per_node_counts_with_the_larger_quorum_never_exceed_the_permits() {
    let quorum = safe_count_quorum();
    let found = explore(Rule::Count { quorum });
    println!(
        "per-node count, quorum {quorum} of {NODES}: {} states, no violation",
        found.states
    );
    assert!(found.violation.is_none(), "{:?}", found.violation);
}

#[test]
fn slot_locks_never_exceed_the_permits() {
    let found = explore(Rule::Slots);
    println!(
        "{PERMITS} slot locks: {} states, no violation",
        found.states
    );
    assert!(found.violation.is_none(), "{:?}", found.violation);
}
