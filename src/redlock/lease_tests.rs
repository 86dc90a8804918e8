//! Unit tests of the lease state's support: what it is after each
//! transition that sets or moves the deadline, and the check that loses a
//! lease only when fewer than a quorum of its supporting nodes still hold
//! it. No engine: the epochs are plain numbers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::{Duration, Instant};

use super::lease::{LeaseState, NotExtended};
use super::support::Support;
use super::verdict::ExtendVerdict;
use crate::error::Error;

const TTL: Duration = Duration::from_secs(3);
const DRIFT: Duration = Duration::from_millis(32);
const QUORUM: usize = 2;

fn nodes(support: &Support) -> Vec<usize> {
    support.nodes().collect()
}

/// A lease acquired at `now` whose round counted the grants of `granted`
/// (3 nodes), with the epochs `epochs` read before it was sent.
fn acquired(now: Instant, epochs: [u64; 3], granted: [bool; 3]) -> LeaseState {
    LeaseState::for_test(TTL, now + TTL - DRIFT, Support::of_grants(&epochs, granted))
}

fn confirmed(at: Instant) -> ExtendVerdict {
    ExtendVerdict::Confirmed {
        deadline: at + TTL - DRIFT,
    }
}

fn lost(reason: String) -> Error {
    Error::Lost {
        reason,
        report: None,
    }
}

/// `check_support` with the epochs `now` and a reason naming what moved.
fn check(state: &mut LeaseState, now: [u64; 3]) -> Option<Error> {
    state.check_support(
        |node| now[node],
        QUORUM,
        |moved, holding| format!("moved {moved:?}, {holding} hold it"),
    )
}

#[test]
fn an_acquire_is_supported_by_the_nodes_that_granted_it() {
    let state = acquired(Instant::now(), [0, 3, 1], [true, false, true]);
    assert_eq!(nodes(state.support()), [0, 2]);
}

#[test]
fn the_extend_begun_last_sets_the_support_with_its_own_epochs() {
    let now = Instant::now();
    let mut state = acquired(now, [0, 0, 0], [true, true, true]);
    let first = state
        .begin_extend(now, TTL, DRIFT, vec![0, 0, 0].into())
        .unwrap();
    // Node 0 forgot between the two extends: its epoch is 1 from here on.
    let last = state
        .begin_extend(now, TTL, DRIFT, vec![1, 0, 0].into())
        .unwrap();
    state
        .finish_extend(last, confirmed(now), [true, true, false], lost)
        .unwrap();
    assert_eq!(nodes(state.support()), [0, 1]);
    assert!(check(&mut state, [1, 0, 0]).is_none(), "epochs as read");
    // The earlier extend finishes later: it counts, but sets nothing.
    state
        .finish_extend(first, confirmed(now), [false, true, true], lost)
        .unwrap();
    assert_eq!(nodes(state.support()), [0, 1]);
    assert_eq!(state.extensions(), 2);
}

#[test]
fn a_failed_extend_leaves_the_support_and_loses_the_lease() {
    let now = Instant::now();
    let mut state = acquired(now, [0, 0, 0], [true, true, false]);
    let ticket = state
        .begin_extend(now, TTL, DRIFT, vec![0, 0, 0].into())
        .unwrap();
    let failed = ExtendVerdict::TooFewVotes {
        granted: 1,
        quorum: QUORUM,
    };
    let outcome = state.finish_extend(ticket, failed, [false, false, true], lost);
    assert!(matches!(
        outcome,
        Err(NotExtended::Failed { first: true, .. })
    ));
    assert_eq!(nodes(state.support()), [0, 1]);
}

#[test]
fn a_hand_over_passes_the_support_on() {
    let now = Instant::now();
    let mut state = acquired(now, [2, 0, 5], [true, false, true]);
    let handed = state.hand_over(now, TTL).unwrap();
    assert_eq!(&handed.support, state.support());
    assert!(state.is_finished());
    let mut next = LeaseState::for_test(handed.ttl, handed.deadline, handed.support);
    assert!(check(&mut next, [2, 0, 5]).is_none());
    let error = check(&mut next, [2, 0, 6]).expect("lost below the quorum");
    assert!(
        error.to_string().contains("moved [2], 1 hold it"),
        "{error}"
    );
}

#[test]
fn a_forget_loses_the_lease_only_below_the_quorum() {
    let now = Instant::now();
    let mut state = acquired(now, [0, 0, 0], [true, true, true]);
    let (tx, signal) = crossbeam_channel::bounded(1);
    state.subscribe(tx);
    // A node that forgot before the round was sent was read at its epoch.
    assert!(check(&mut state, [0, 0, 0]).is_none());
    assert!(
        check(&mut state, [1, 0, 0]).is_none(),
        "2 of 3 still hold it"
    );
    assert!(state.lost().is_none());
    assert!(signal.try_recv().is_err(), "not told");
    assert_eq!(state.validity(now), TTL - DRIFT);
    let error = check(&mut state, [1, 0, 4]).expect("1 of 3 hold it");
    assert!(
        error.to_string().contains("moved [0, 2], 1 hold it"),
        "{error}"
    );
    assert!(signal.try_recv().unwrap().is_lost(), "told at once");
    assert_eq!(state.validity(now), Duration::ZERO);
}

#[test]
fn a_check_never_replaces_a_loss_nor_loses_a_finished_lease() {
    let now = Instant::now();
    let mut state = acquired(now, [0, 0, 0], [true, true, false]);
    state.lose(&lost("first".into()));
    assert!(check(&mut state, [1, 1, 0]).is_none(), "already lost");
    assert!(state.lost().unwrap().to_string().contains("first"));
    let mut done = acquired(now, [0, 0, 0], [true, true, false]);
    done.finish();
    assert!(check(&mut done, [1, 1, 0]).is_none());
    assert!(done.lost().is_none());
}

#[test]
fn a_lease_without_support_is_lost_at_its_first_check() {
    // What an acquire that counted no node would give: never a quorum.
    let now = Instant::now();
    let mut state = acquired(now, [0, 0, 0], [false, false, false]);
    assert!(check(&mut state, [0, 0, 0]).is_some());
}
