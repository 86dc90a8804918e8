//! A wake chain, by loom (`../scatter.rs`, `send_releases`): a caller
//! queues work for two nodes without waking either, wakes the first that
//! sleeps, and, when the other sleeps too, queues a nudge for the first
//! one's thread, which wakes the other before its own work. Checked over
//! every interleaving with the nodes' threads falling asleep: once the
//! first node's thread has run what it was given, the other node is not
//! left asleep with work queued; and every job runs exactly once. The
//! canary (a nudge that wakes nobody) must be caught.

use loom::thread;

use super::queue::{self, Sender};
use crate::canary::Canary;
use crate::sync::{assert_caught, assert_clean};

/// The nudge job; the others are work.
const NUDGE: u32 = 0;

/// The caller's side, as `send_releases` does it, for nodes `a` (slot 0)
/// and `b`: work 1 and 2 queued quietly, then the wake-ups it owes.
fn send_releases(a: &Sender<u32>, b: &Sender<u32>) {
    let sleeping: Vec<&Sender<u32>> = [(a, 1), (b, 2)]
        .into_iter()
        .filter(|(node, work)| node.send_quietly(*work) == Ok(true))
        .map(|(node, _)| node)
        .collect();
    let Some((first, others)) = sleeping.split_first() else {
        return;
    };
    let chained = !others.is_empty() && first.send_quietly(NUDGE) == Ok(true);
    if !chained {
        for other in others {
            other.nudge();
        }
    }
    first.nudge();
}

fn explore(preemptions: Option<usize>) -> (usize, Option<String>) {
    crate::sync::explore(preemptions, || {
        let (a, queue_a) = queue::queue::<u32>();
        let (b, queue_b) = queue::queue::<u32>();
        let b_for_a = b.clone();
        // Node b's thread: sleeps until woken, runs what is queued, until
        // its queue is closed.
        let thread_b = thread::spawn(move || {
            let mut ran = Vec::new();
            while queue_b.wait_until(None).is_ok() {
                queue_b.take_queued(8, &mut ran);
            }
            ran
        });
        // Node a's thread: the same, and a nudge among what it takes wakes
        // node b's thread first (only a can carry the chain: it is the
        // first slot).
        let thread_a = thread::spawn(move || {
            let mut ran = Vec::new();
            while queue_a.wait_until(None).is_ok() {
                let from = ran.len();
                queue_a.take_queued(8, &mut ran);
                if ran[from..].contains(&NUDGE) {
                    b_for_a.nudge();
                }
            }
            drop(b_for_a);
            ran
        });
        send_releases(&a, &b);
        // Node a's queue closed: its thread runs what it has and ends.
        drop(a);
        let ran_a = thread_a.join().unwrap_or_default();
        let mut violation = b.left_asleep().then(|| {
            format!(
                "node a's thread ran {ran_a:?} and node b sleeps with work queued, \
                 nobody to wake it"
            )
        });
        drop(b);
        let ran_b = thread_b.join().unwrap_or_default();
        let work: Vec<u32> = ran_a
            .iter()
            .chain(&ran_b)
            .copied()
            .filter(|j| *j != NUDGE)
            .collect();
        if violation.is_none() && (work.len() != 2 || !work.contains(&1) || !work.contains(&2)) {
            violation = Some(format!("the work ran as {work:?}, not once each"));
        }
        violation
    })
}

#[test]
fn a_wake_chain_leaves_no_node_asleep_with_work() {
    assert_clean("wake chain", explore(Some(3)));
}

#[test]
fn the_canary_of_a_nudge_that_wakes_nobody_is_caught() {
    assert_caught(Canary::NudgeWakesNobody, || explore(Some(3)));
}
