//! Rounds the caller drives: the caller sends its operation to every idle
//! node itself, then reads the answers, so a round costs one round trip
//! and no thread hand-off (the node threads stay for what no caller waits
//! for).
//!
//! A node is driven only when its gate says it is idle (nothing queued,
//! nothing running; `gate.rs`, checked by loom), and only while the caller
//! holds its state: every operation queued for it afterwards waits behind
//! this one (per-node FIFO). Gates are taken with `try_lock` only, so a
//! caller never blocks on one node while holding another.
//!
//! The caller reads the nodes fastest first (by smoothed round trip),
//! waiting for each at most a short slice before passing it over for the
//! next, and folds in the answers of the nodes it queued to as they come.
//! Once the round is decided (a quorum of grants, or too few nodes left),
//! or its deadline has passed, the batches it has not read yet stay
//! parked in their nodes' states (`node/unread.rs`): the next caller that
//! drives the node reads the late answer first (when it is in: a caller
//! never waits for a straggler), or the node's thread does within a short
//! grace, and passes it on; nothing is sent to the node before it is
//! read, so a release queued later (say, of the acquire that lost) runs
//! after it.

use std::time::{Duration, Instant};

use super::ballots::Ballot;
use super::gate::Gate;
use super::node::queue::Driving;
use super::node::worker::{Job, NodeExec, ReplyTo, came_earlier};
use super::node::{self, Item, Sent, Vote};
use super::pending::{Pending, known_tally};
use super::{Engine, Gather, Node};
use crate::sync::MutexGuard;

/// The shortest wait for one node's answer before the others are looked
/// at again.
const MIN_SLICE: Duration = Duration::from_micros(500);

/// A node this caller drives: its state held, its batch sent.
pub(super) struct Driven<'a> {
    pub(super) slot: usize,
    /// Declared before `driving`, so dropped first (on a panic too): the
    /// node's thread, woken by the driver's end, finds the state free.
    state: MutexGuard<'a, node::State>,
    /// This caller counted as the node's driver: operations queued
    /// meanwhile wake nobody and are this caller's to run (combining).
    driving: Driving<'a, Job>,
    exec: &'a NodeExec,
    sent: Sent,
    /// When the node's thread had to wake before: a changed wake time
    /// (a probe, a release to retry) must be told to it.
    wake_before: Option<Instant>,
}

impl Node {
    /// The node's state, if the node is idle and up: the caller may drive
    /// it ([`Driven::begin`]); `None` otherwise.
    pub(super) fn idle(&self) -> Option<MutexGuard<'_, node::State>> {
        let mut state = Gate::try_idle(&self.exec.gate)?;
        (!state.is_down() && state.unread_answered()).then_some(state)
    }
}

impl<'a> Driven<'a> {
    /// Sends `item` to `node`, whose idle state the caller holds.
    pub(super) fn begin(
        slot: usize,
        node: &'a Node,
        mut state: MutexGuard<'a, node::State>,
        item: &Item,
    ) -> Self {
        let driving = node.jobs.drive();
        let wake_before = state.poll_timeout();
        let sent = state.begin(item.clone(), Instant::now());
        Self {
            slot,
            state,
            driving,
            exec: &node.exec,
            sent,
            wake_before,
        }
    }

    /// Reads the answer, then runs what was queued behind it
    /// ([`NodeExec::leave_driven`]). The flag says whether the node's
    /// thread must be woken ([`Job::Wake`]) to act on its own.
    fn finish(self) -> (Option<Vote>, bool) {
        let Self {
            mut state,
            driving,
            exec,
            sent,
            wake_before,
            ..
        } = self;
        let arrived = sent.read();
        // One item: its vote is the last (and only) one.
        let mut last = None;
        state.answers_arrived(arrived, Instant::now(), |vote| last = Some(vote));
        let wake = exec.leave_driven(state, driving, true);
        (last, came_earlier(wake, wake_before))
    }
}

impl Engine {
    /// Reads the answers of the `driven` nodes (each taken out as it is
    /// read or left; see the module's text) into `round`, with the queued
    /// nodes' answers that arrive meanwhile (the node threads answer on
    /// `reply`, the round's box when it has one).
    pub(super) fn drive(
        &self,
        driven: &mut [Option<Driven<'_>>],
        gather: Gather,
        reply: Option<&Ballot>,
        round: &mut Pending,
    ) {
        let Pending {
            slots,
            answers,
            deadline,
        } = round;
        let deadline = *deadline;
        let mut tally = known_tally(gather, slots);
        let trace = |slot, vote: &Vote| {
            if let Some(reply) = reply {
                reply.trace().vote(slot, &vote.outcome);
            }
        };
        let latency = |node: &Driven<'_>| self.nodes[node.slot].health.latency();
        driven.sort_by_key(|node| node.as_ref().map(latency));
        let len = driven.len();
        let mut next = 0;
        loop {
            while let Some((slot, vote)) = answers.as_ref().and_then(|a| a.try_take()) {
                tally.record(vote.outcome.is_granted());
                slots[slot].vote = Some(vote);
            }
            let now = Instant::now();
            let decided = gather != Gather::All && tally.decided();
            if decided || deadline.is_some_and(|d| now >= d) {
                // An answer already in costs nothing to read (and spares
                // the node's thread a wake-up); the others go to it.
                for mut node in driven.iter_mut().filter_map(Option::take) {
                    if node.sent.ready(now) {
                        let slot = node.slot;
                        let (vote, wake) = node.finish();
                        self.wake_if(slot, wake);
                        if let Some(vote) = vote {
                            trace(slot, &vote);
                            slots[slot].vote = Some(vote);
                        }
                    } else {
                        self.leave_unread(node, reply);
                    }
                }
                break;
            }
            // The next node not read yet, from `next` on, round robin.
            let mut unread = (next..next + len).map(|i| i % len);
            let Some(pos) = unread.find(|&i| driven[i].is_some()) else {
                break;
            };
            let Some(node) = &mut driven[pos] else {
                break;
            };
            // Wait a little for it (fastest first: they were all sent at
            // once, so the next answer is usually in and the read returns
            // at once); a node whose answer is not in by then is passed
            // over for now, so a node that stalls does not hold up a
            // round the others decide.
            let slice = Duration::from_nanos(latency(node).saturating_mul(2)).max(MIN_SLICE);
            let until = deadline.map_or(now + slice, |d| d.min(now + slice));
            next = pos + 1;
            if !node.sent.ready(until) {
                continue;
            }
            let Some(node) = driven[pos].take() else {
                break;
            };
            let slot = node.slot;
            let (vote, wake) = node.finish();
            self.wake_if(slot, wake);
            let Some(vote) = vote else {
                continue;
            };
            trace(slot, &vote);
            tally.record(vote.outcome.is_granted());
            slots[slot].vote = Some(vote);
        }
    }

    /// Tells node `slot`'s thread, if `wake`, that it has something to
    /// do on its own now (a probe, a release to retry).
    fn wake_if(&self, slot: usize, wake: bool) {
        if wake {
            let _ = self.nodes[slot].enqueue(Job::Wake { probe: false });
        }
    }

    /// Parks a driven node's unread batch in its state (`node/unread.rs`):
    /// the next caller that drives the node, or the node's thread within
    /// a short grace, reads the answer (and posts it in `reply`, the
    /// round's box if it has one, where the round may still count it)
    /// before anything else is sent there. The node's thread is woken only
    /// when its next wake time came earlier.
    fn leave_unread(&self, driven: Driven<'_>, reply: Option<&Ballot>) {
        let Driven {
            slot,
            mut state,
            driving,
            exec,
            sent,
            wake_before,
        } = driven;
        let reply = reply.map(|ballot| ReplyTo {
            ballot: ballot.clone(),
            slot,
        });
        state.park_unread(sent, reply, Instant::now());
        // Nothing queued behind it can be sent before the parked batch is
        // read: the node's thread runs it (woken by the driver's end).
        let wake = exec.leave_driven(state, driving, false);
        self.wake_if(slot, came_earlier(wake, wake_before));
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
