//! An exhaustive check of a quorum read-write lock: two readers and two
//! writers over three nodes, each node applying each op at its own moment
//! (or never), node restarts that forget, keys expiring on each node's
//! clock, and every order of all of it.
//!
//! The model. Per node, `W` (a writer's token and its ticks left on that
//! node's clock) and `R` (ticks left per reader: each entry expires on its
//! own). An op is one atomic step at one node. ReadAcquire is refused while
//! `W` is live, else sets `R[token]`; ReadExtend refreshes a live entry,
//! never recreates one. WriteIntent is a Redlock mutex on `W` (readers are
//! not consulted); Extend refreshes `W == token`; Admit does too, but only
//! while `R` has no live entry. A client sends a round (its op to every
//! node) and decides once all answered or when it stops waiting (the rest
//! are lost). A round holds with [`majority`](crate::engine::majority) yes votes, a node restarted
//! less than [`TTL`](world::TTL) (the max TTL) ago not counting its own, and is valid
//! for `TTL - DRIFT` ticks from its send. A failed acquire or intent round
//! is released everywhere; a failed Admit keeps the intent for a retry.
//!
//! The bound. Whole ticks, [`TTL`](world::TTL) 3, [`DRIFT`](world::DRIFT) 1 (one node's clock may
//! jump a tick ahead once, [`Event::Skew`](world::Event::Skew)). A round's ops land in the tick
//! it is sent in, interleaved with everything else (slow rounds are the
//! validity arithmetic's business, as in `protocol.rs`). At most
//! [`MAX_ROUNDS`](world::MAX_ROUNDS) = 4 rounds per schedule, 2 per reader (acquire and extend,
//! or acquire, release, acquire: a stream), 3 per writer, one restart;
//! ticks unbounded. Times are relative to now, so the states are finite;
//! all are explored, breadth-first, merged up to renaming the nodes, the
//! readers or the writers: every schedule within the budgets, of any length,
//! and each counterexample printed is a shortest one.
//!
//! Properties, at every step: (1) a valid write lock is never valid beside
//! another valid lock; (2) only a reader's own op on a node makes its entry
//! there live longer (setting it to TTL), so a stopped reader holds nothing
//! past its last send + TTL, whatever the other reader does; (3) from the
//! moment a writer's intent is held on a quorum until it releases or its
//! validity lapses, no reader whose acquire was sent after that moment
//! becomes valid (an intent round applied on every node without meeting
//! another writer's `W` or a quarantine counts as held: in the protocol it
//! is, and so the drain-first canary's starvation shows); (4) likewise for
//! `W`: a stopped writer blocks readers at most TTL after its last send.
//!
//! Crashes need no event: a crashed (or paused) client takes no further
//! step, every such schedule is explored, and its validity still counts
//! until it lapses (property 3's window stays open as long: stricter).
//! Not modelled: an op landing after its round was decided (more keys,
//! which only refuse others, but maybe one more Admit yes), a release
//! reaching some nodes only (one step reaches all), a reader cap (two
//! readers never fill a cap of two), extending an admitted write lock, a
//! fresh token per attempt (a token is its client), slow clocks.

use std::collections::{HashSet, VecDeque};

use self::world::{CLIENTS, Event, READERS, Rule, Stage, State, events, initial, key, name, step};

mod world;

/// The properties (1) to (4) of the header, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    Exclusion,
    OwnExpiry,
    NoOvertaking,
    WriterExpiry,
}
use Property::{Exclusion, NoOvertaking, OwnExpiry, WriterExpiry};
const ALL: [Property; 4] = [Exclusion, OwnExpiry, NoOvertaking, WriterExpiry];

/// The first property among `watch` that step `e`, from `before` to `s`,
/// breaks (all but property 3, which `world::decide` reports).
fn broken(before: &State, e: Event, s: &State, watch: &[Property]) -> Option<(Property, String)> {
    let valid = |c: usize| {
        let cl = &s.clients[c];
        cl.valid > 0 && matches!(cl.stage, Stage::Reading | Stage::Admitted)
    };
    let writing = (READERS..CLIENTS).filter(|&c| valid(c)).count();
    if watch.contains(&Exclusion) && writing > 0 && (0..CLIENTS).filter(|&c| valid(c)).count() > 1 {
        let holders: Vec<String> = (0..CLIENTS).filter(|&c| valid(c)).map(name).collect();
        return Some((Exclusion, format!("{holders:?} valid at once")));
    }
    // Properties 2 and 4, as steps: only a client's own op on a node makes
    // its key there live longer (and that op sets it to TTL).
    for (n, (old, new)) in before.nodes.iter().zip(&s.nodes).enumerate() {
        let own = |c: usize| matches!(e, Event::Apply(o, m) if o == c && m == n);
        let pushed = (0..READERS).find(|&c| new.r[c] > old.r[c] && !own(c));
        if let Some(c) = pushed.filter(|_| watch.contains(&OwnExpiry)) {
            let why = format!("{e} pushed r{c}'s entry on n{n} to {} ticks", new.r[c]);
            return Some((OwnExpiry, why));
        }
        if let Some((t, left, _)) = new.w {
            let longer = old.w.is_none_or(|(o, was, _)| o != t || was < left);
            if longer && !own(usize::from(t)) && watch.contains(&WriterExpiry) {
                let why = format!("{e} pushed {}'s W on n{n} to {left} ticks", name(t.into()));
                return Some((WriterExpiry, why));
            }
        }
    }
    None
}

/// What an exploration found: states, how many steps the farthest is
/// from the start, and the first violation (property, why, schedule).
type Found = (usize, usize, Option<(Property, String, String)>);

/// Breadth-first over every schedule; violations outside `watch` ignored.
fn explore(rule: Rule, watch: &[Property]) -> Found {
    let start = initial();
    let mut seen = HashSet::from([key(&start)]);
    // Per state reached: (the one it was reached from, by what, depth).
    let mut trail: Vec<(usize, Option<Event>, usize)> = vec![(0, None, 0)];
    let mut queue = VecDeque::from([(start, 0)]);
    while let Some((state, id)) = queue.pop_front() {
        for e in events(&state) {
            let (next, overtaken) = step(&state, e, rule);
            let overtaken = overtaken.filter(|_| watch.contains(&NoOvertaking));
            let problem = overtaken.map(|why| (NoOvertaking, why));
            if let Some((property, why)) = problem.or_else(|| broken(&state, e, &next, watch)) {
                let mut path = vec![e.to_string()];
                let mut at = id;
                while let (from, Some(e), _) = trail[at] {
                    path.push(e.to_string());
                    at = from;
                }
                path.reverse();
                let schedule = format!("{} steps: {}", path.len(), path.join(" "));
                return (seen.len(), path.len(), Some((property, why, schedule)));
            }
            if seen.insert(key(&next)) {
                trail.push((id, Some(e), trail[id].2 + 1));
                queue.push_back((next, trail.len() - 1));
            }
        }
    }
    (seen.len(), trail.last().map_or(0, |t| t.2), None)
}

#[test]
fn no_schedule_breaks_the_read_write_lock_within_the_budgets() {
    let (states, depth, violation) = explore(Rule::Sound, &ALL);
    println!("rw check: {states} states, the farthest {depth} steps out");
    assert!(violation.is_none(), "{violation:?}");
    assert!(states > 1_000_000, "the exploration is too small: {states}");
}

/// Explores canary `rule`, prints its shortest counterexample, and checks
/// that it breaks `expected`.
fn caught(rule: Rule, watch: &[Property], expected: Property) {
    let (states, _, violation) = explore(rule, watch);
    let Some((property, why, schedule)) = violation else {
        panic!("{rule:?} held in {states} states: the model is too weak");
    };
    println!("{rule:?}: {property:?} after {states} states: {why}; {schedule}");
    assert_eq!(property, expected, "{why}; {schedule}");
}

#[test]
fn a_shared_reader_ttl_is_found() {
    caught(Rule::SharedReaderTtl, &ALL, OwnExpiry);
}

/// Readers keep coming while the writer waits for them to drain.
#[test]
fn a_writer_that_waits_for_drained_readers_is_found() {
    caught(Rule::DrainFirst, &ALL, NoOvertaking);
}

/// Property 3 breaks first (as in canary c); exclusion is the point.
#[test]
fn readers_that_ignore_the_writer_are_found() {
    caught(Rule::ReadersIgnoreW, &[Exclusion], Exclusion);
}

#[test]
fn readers_that_see_only_an_admitted_writer_are_found() {
    caught(Rule::AdmittedOnly, &ALL, NoOvertaking);
}

/// Property 3 breaks first (a reader in through the restarted node while
/// the writer holds its intent); exclusion is the point.
#[test]
fn no_restart_quarantine_is_found() {
    caught(Rule::NoQuarantine, &[Exclusion], Exclusion);
}

/// Canary e: the drift taken off every validity is what one node's fast
/// clock needs.
#[test]
fn claiming_validity_without_drift_is_found() {
    caught(Rule::NoDrift, &[Exclusion], Exclusion);
}
