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
//! The caller reads the nodes in the order it sent to them, except that
//! a node whose smoothed round trip is above the fastest's by more than
//! 100 us and a tenth of it is read after the others; it waits for
//! each at most a short slice before passing it over for the next, and
//! folds in the answers of the nodes it queued to as they come. (Read
//! fastest first by the smoothed round trip alone, the order fed on
//! itself: a node read later counts the reads before it into its round
//! trip and stays later, and with one order of three nodes on loopback a
//! process made 3.8 context switches per lock + `release()` for its
//! whole life, with another 2.7: counted in docs/benchmarks.md.)
//! Once the round is decided (a quorum of grants, or too few nodes left),
//! or its deadline has passed, the batches it has not read yet stay
//! parked in their nodes' states (`node/unread.rs`): the next caller that
//! drives the node reads the late answer first, or the node's thread does
//! within a short grace, and passes it on; nothing is sent to the node
//! before it is read, so a release queued later (say, of the acquire that
//! lost) runs after it.
//!
//! A node whose only business is such a parked batch is idle: the next
//! caller takes it, and when the late answer is not in yet, reads it as
//! one more answer of its own round (among the others, each in its turn)
//! and only then sends its operation there. Its round is never held up
//! for it: when the round is decided first, the caller sends there if the
//! late answer is in by then (and leaves its own answer parked), else
//! queues its operation for the node's thread, still holding the node so
//! that nothing overtakes it, and lets go. Queuing at once instead, as a
//! busy node's operation is, would hand the node to its thread: one
//! thread hand-off, and the node busy for the rounds that follow (counted
//! in docs/benchmarks.md).

use std::time::{Duration, Instant};

use super::ballots::Ballot;
use super::gate::Gate;
use super::node::jobs::{Job, NotQueued, ReplyTo, Work};
use super::node::queue::Driving;
use super::node::{self, Item, Sent, Vote};
use super::pending::{Pending, Slot, known_tally};
use super::{Engine, Gather, Node};
use crate::sync::MutexGuard;

/// The shortest wait for one node's answer before the others are looked
/// at again.
const MIN_SLICE: Duration = Duration::from_micros(500);

/// How much slower than the fastest driven node a node must be to be
/// read after the others, at least (ns): more than what reading the
/// answers before it adds to its measured round trip (a few microseconds
/// each on loopback), so that the order cannot feed on itself. A tenth of
/// the fastest's round trip is added on top, for the jitter of longer
/// ones.
const SLOWER_BY: u64 = 100_000;

/// Where a driven node is read, by its smoothed round trip and the
/// fastest driven node's (ns): 0, in send order (a stable sort keeps it),
/// unless it is above the fastest's by more than [`SLOWER_BY`] and a
/// tenth of it; then after the others, the slower later. (A node 50%
/// slower read first would hold a round of three up by that much, where
/// the two faster ones decide it.)
fn read_rank(latency: u64, fastest: u64) -> u64 {
    let slow_after = fastest
        .saturating_add(SLOWER_BY)
        .saturating_add(fastest / 10);
    if latency > slow_after { latency } else { 0 }
}

/// A node this caller drives: its state held, its batch sent (or to be
/// sent once the batch an earlier round left unread is read).
pub(super) struct Driven<'a> {
    pub(super) slot: usize,
    /// Declared before `driving`, so dropped first (on a panic too): the
    /// node's thread, woken by the driver's end, finds the state free.
    state: MutexGuard<'a, node::State>,
    /// This caller counted as the node's driver: operations queued
    /// meanwhile wake nobody and are this caller's to run (combining).
    driving: Driving<Job>,
    node: &'a Node,
    /// The caller's batch on the wire; `None` while an earlier round's
    /// batch, parked unread, waits for its answers: nothing is sent over
    /// it.
    sent: Option<Sent>,
}

impl Node {
    /// The node's state, if the node is idle and up: the caller may drive
    /// it ([`Driven::begin`]); `None` otherwise.
    pub(super) fn idle(&self) -> Option<MutexGuard<'_, node::State>> {
        let state = Gate::try_idle(&self.exec.gate)?;
        (!state.is_down()).then_some(state)
    }

    /// Tells the node's thread its next wake time, `at` (`None`: none);
    /// it is woken only if it sleeps past it (`node/queue.rs`).
    pub(super) fn wake_by(&self, at: Option<Instant>) {
        if let Some(at) = at {
            self.jobs.wake_by(at);
        }
    }
}

impl<'a> Driven<'a> {
    /// Drives `node`, whose idle state the caller holds: sends `item` now,
    /// unless an earlier round's batch is parked there with its answers
    /// not in yet: then it sends once they are ([`ready`](Self::ready)).
    pub(super) fn begin(
        slot: usize,
        node: &'a Node,
        mut state: MutexGuard<'a, node::State>,
        item: &Item,
    ) -> Self {
        let driving = node.jobs.drive();
        let sent = state
            .unread_answered(None)
            .then(|| state.begin(item.clone(), Instant::now()));
        Self {
            slot,
            state,
            driving,
            node,
            sent,
        }
    }

    /// Whether the caller's answer is in, waiting at most until `until`:
    /// first for the parked batch's answers, if its own batch is not sent
    /// yet, then (sent) for its own.
    fn ready(&mut self, item: &Item, until: Instant) -> bool {
        if self.sent.is_none() {
            if !self.state.unread_answered(Some(until)) {
                return false;
            }
            // In: `begin` reads it, without waiting, before it sends.
            self.sent = Some(self.state.begin(item.clone(), Instant::now()));
        }
        self.sent.as_mut().is_some_and(|sent| sent.ready(until))
    }

    /// Reads the answer, then runs what was queued behind it
    /// ([`NodeExec::leave_driven`](super::node::worker::NodeExec::leave_driven))
    /// and tells the node's thread its next wake time. Returns the vote.
    fn finish(self) -> Option<Vote> {
        let Self {
            mut state,
            driving,
            node,
            sent,
            ..
        } = self;
        let mut last = None;
        if let Some(sent) = sent {
            let arrived = sent.read();
            // One item: its vote is the last (and only) one.
            state.answers_arrived(arrived, Instant::now(), |vote| last = Some(vote));
        }
        let wake = node.exec.leave_driven(state, driving, true);
        node.wake_by(wake);
        last
    }
}

impl Engine {
    /// Reads the answers of the `driven` nodes (each taken out as it is
    /// read or left; see the module's text) into `round`, with the queued
    /// nodes' answers that arrive meanwhile (the node threads answer on
    /// `reply`, the round's box when it has one). `item` is the round's
    /// operation, for the nodes it is not sent to yet.
    pub(super) fn drive(
        &self,
        driven: &mut [Option<Driven<'_>>],
        item: &Item,
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
        // Send order (a stable sort keeps it), the clearly slower nodes
        // last: see the module's doc.
        let fastest = driven.iter().flatten().map(latency).min().unwrap_or(0);
        driven.sort_by_key(|node| node.as_ref().map_or(0, |n| read_rank(latency(n), fastest)));
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
                // the node's thread a wake-up), nor does a send behind a
                // late answer already in; the others go to the node's
                // thread.
                for mut node in driven.iter_mut().filter_map(Option::take) {
                    let slot = node.slot;
                    if node.ready(item, now) {
                        if let Some(vote) = node.finish() {
                            trace(slot, &vote);
                            slots[slot].vote = Some(vote);
                        }
                    } else if node.sent.is_some() {
                        self.leave_unread(node, reply);
                    } else if let Err(refused) = self.hand_over(node, item, reply) {
                        slots[slot] = Slot {
                            vote: Some(Vote::of(refused.outcome())),
                            reached: false,
                        };
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
            // Wait a little for it (in send order: they were all sent at
            // once, so the next answer is usually in and the read returns
            // at once); a node whose answer is not in by then is passed
            // over for now, so a node that stalls does not hold up a
            // round the others decide.
            let slice = Duration::from_nanos(latency(node).saturating_mul(2)).max(MIN_SLICE);
            let until = deadline.map_or(now + slice, |d| d.min(now + slice));
            next = pos + 1;
            if !node.ready(item, until) {
                continue;
            }
            let Some(node) = driven[pos].take() else {
                break;
            };
            let slot = node.slot;
            let Some(vote) = node.finish() else {
                continue;
            };
            trace(slot, &vote);
            tally.record(vote.outcome.is_granted());
            slots[slot].vote = Some(vote);
        }
    }

    /// Parks a driven node's unread batch in its state (`node/unread.rs`):
    /// the next caller that drives the node, or the node's thread within
    /// a short grace, reads the answer (and posts it in `reply`, the
    /// round's box if it has one, where the round may still count it)
    /// before anything else is sent there. The node's thread is told its
    /// new wake time, which wakes it only if it sleeps past it.
    fn leave_unread(&self, driven: Driven<'_>, reply: Option<&Ballot>) {
        let Driven {
            slot,
            mut state,
            driving,
            node,
            sent,
        } = driven;
        if let Some(sent) = sent {
            let reply = reply.map(|ballot| ReplyTo {
                ballot: ballot.clone(),
                slot,
            });
            state.park_unread(sent, reply, Instant::now());
        }
        // Nothing queued behind it can be sent before the parked batch is
        // read: the node's thread runs it (woken by the driver's end).
        let wake = node.exec.leave_driven(state, driving, false);
        node.wake_by(wake);
    }

    /// Queues `item` for the thread of a driven node that the round was
    /// decided on before the caller could send it there (an earlier
    /// round's batch is still unread): queued while the caller still
    /// holds the node, so nothing sent there overtakes it, and without a
    /// wake-up until the driver's end (`node/queue.rs`). The node's thread
    /// reads the parked batch first. Its answer goes to `reply`, if any.
    fn hand_over(
        &self,
        driven: Driven<'_>,
        item: &Item,
        reply: Option<&Ballot>,
    ) -> Result<(), NotQueued> {
        let Driven {
            slot,
            state,
            driving,
            node,
            ..
        } = driven;
        let reply = reply.map(|ballot| ReplyTo {
            ballot: ballot.clone(),
            slot,
        });
        let queued = node.enqueue(Job::Work(Work::Op {
            item: item.clone(),
            reply,
        }));
        let wake = node.exec.leave_driven(state, driving, false);
        node.wake_by(wake);
        queued
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
