//! What reaches one node's wire, by loom, over every interleaving of a
//! node thread and two callers: the gate (`../gate.rs`), the line of the
//! batch left unread (`unread.rs`) and the job queue with its drivers and
//! wake times (`queue.rs`), as the engine uses them (`worker.rs`,
//! `../drive.rs`).
//!
//! A call drives the node itself when the gate says it is idle: it sends
//! its operation (reading what is parked first) and either leaves its
//! batch unread (a round decided before this node answered) and tells
//! the node's thread the batch's due time, or reads it and then runs what
//! was queued behind it as one batch (combining), or (a round decided
//! before an earlier round's parked answer came in) queues its operation
//! while it still drives the node and lets go; otherwise it queues the
//! operation for whoever holds the node next. Two models:
//!
//! - caller A sends an acquire left unread and then its undo, driven and
//!   combined; caller B queues one operation (as a detached release is)
//!   and then calls with another, left unread;
//! - caller A's undo is handed over (queued while it drives); caller B's
//!   call is driven and combined.
//!
//! Each runs twice: without the reader (every batch of queued operations
//! is read where it was sent) and with it (`../reader.rs`): such a batch
//! is parked with the reader, which holds a driver count while it is
//! parked, is told of it on a channel (the `epoll` set's readiness), reads
//! it if it is still the one parked under that token, sends what was
//! queued behind it the same way, and at its stop reads what is parked
//! with it; the node's thread reads such a batch before it sends, at its
//! due time, or when its queue closes. The first model runs a third time
//! with a reader that never reads (it died): the node's thread alone
//! must read those batches and send what queued behind them.
//!
//! Checked: nothing is sent while a batch is unread, every batch is read
//! exactly once, every operation is sent once, each caller's operations
//! reach the wire in its order; once both callers are done, no job is
//! queued while the node's thread sleeps with no wake-up on its way, and
//! the thread does not sleep past a parked batch's due time.

use std::time::Instant;

use loom::sync::Arc;
use loom::sync::mpsc;
use loom::thread;

use super::queue::{self, Driving, Empty, Handle, Receiver, Sender};
use super::unread::Line;
use crate::canary::{self, Canary};
use crate::engine::gate::Gate;
use crate::sync::{assert_caught, assert_clean};

/// What reached the node, in wire order: a batch's operations at its
/// send, and its read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wire {
    Sent(Vec<u32>),
    Read(Vec<u32>),
}

/// A batch in the line: its operations and, parked with the reader, its
/// driver count, how many of its operations the gate still counts, and
/// its token.
struct Parked {
    ops: Vec<u32>,
    watched: Option<(Driving<u32>, usize, u32)>,
}

/// What tells the reader of a batch parked with it (the `epoll` set).
enum Arm {
    Armed(u32),
    Stop,
}

/// The node as the model sees it: its line and its wire.
#[derive(Default)]
struct Node {
    line: Line<Parked>,
    wire: Vec<Wire>,
    /// Operations read in a batch parked with the reader, to uncount.
    read_counted: usize,
    serial: u32,
    /// The reader, while there is one and it has not stopped.
    arms: Option<mpsc::Sender<Arm>>,
}

impl Node {
    /// `State::begin`, then the read.
    fn send_and_read(&mut self, ops: Vec<u32>) {
        self.read_parked();
        self.wire.push(Wire::Sent(ops.clone()));
        self.wire.push(Wire::Read(ops));
    }

    /// `State::begin`, its answer left unread (a decided round).
    fn send_and_park(&mut self, ops: Vec<u32>) {
        self.read_parked();
        self.wire.push(Wire::Sent(ops.clone()));
        let parked = Parked { ops, watched: None };
        if canary::on(Canary::SendOverUnread) {
            // The broken take left the old batch parked: the model keeps
            // both, as two batches on the wire would be.
            if let Some(old) = self.line.park_over(parked, Instant::now()) {
                self.read(old);
            }
            return;
        }
        self.line.park(parked, Instant::now());
    }

    /// Sends `ops`, operations taken from the queue (still counted at the
    /// gate), as one batch: parked with the reader where there is one
    /// (`State::arm`, `State::park_watched`), else read at once. How many
    /// stay counted.
    fn send_queued(&mut self, ops: Vec<u32>, queue: &Handle<u32>) -> usize {
        if ops.is_empty() {
            return 0;
        }
        let Some(arms) = self.arms.clone() else {
            self.send_and_read(ops);
            return 0;
        };
        self.read_parked();
        self.wire.push(Wire::Sent(ops.clone()));
        self.serial += 1;
        let _ = arms.send(Arm::Armed(self.serial));
        let counted = ops.len();
        let watched = Some((queue.drive(), counted, self.serial));
        let parked = Parked { ops, watched };
        if canary::on(Canary::SendOverUnread) {
            // As in `send_and_park`.
            if let Some(old) = self.line.park_over(parked, Instant::now()) {
                drop(self.read(old));
            }
            return counted;
        }
        self.line.park(parked, Instant::now());
        counted
    }

    /// Reads `parked`: a batch parked with the reader has its operations
    /// added to those to uncount and gives its driver count back.
    fn read(&mut self, parked: Parked) -> Option<Driving<u32>> {
        self.wire.push(Wire::Read(parked.ops));
        let (driving, counted, _) = parked.watched?;
        self.read_counted += counted;
        Some(driving)
    }

    fn read_parked(&mut self) {
        if let Some(old) = self.line.take() {
            // Its driver count, if it was the reader's, ends here.
            drop(self.read(old));
        }
    }

    /// The reader's read (`State::read_watched`): the batch parked with it
    /// under `token` (`None`: whichever is), if still parked.
    fn read_watched(&mut self, token: Option<u32>) -> Option<Driving<u32>> {
        let (_, _, parked_as) = self.line.parked()?.watched.as_ref()?;
        if token.is_some_and(|token| token != *parked_as) {
            return None;
        }
        let parked = self.line.take()?;
        self.read(parked)
    }
}

/// Lets go of the node, uncounting `ran` and what was read for the reader.
fn finish(gate: &Gate<Node>, mut node: crate::sync::MutexGuard<'_, Node>, ran: usize) {
    let read = std::mem::take(&mut node.read_counted);
    gate.finish(node, ran + read);
}

/// The node's thread, as worker.rs runs it: wait for a job or the parked
/// batch's due time (its timer), take the state, take what is queued
/// under it, read what is parked, run; the next wake time read under the
/// state. (loom does not model time: a wait with a deadline ends when the
/// thread is woken, or at the close.)
fn node_thread(gate: &Gate<Node>, queue: &Receiver<u32>) {
    let handle = queue.handle();
    let mut batch = Vec::new();
    let mut wake = None;
    loop {
        match queue.wait_until(wake) {
            Ok(()) => {}
            Err(Empty::Timeout) => {
                let mut node = gate.lock();
                node.read_parked();
                wake = node.line.due();
                finish(gate, node, 0);
                continue;
            }
            Err(Empty::Closed) => {
                let mut node = gate.lock();
                node.read_parked();
                finish(gate, node, 0);
                return;
            }
        }
        let mut node = gate.lock();
        queue.take_queued(16, &mut batch);
        if batch.is_empty() {
            wake = node.line.due();
            finish(gate, node, 0);
            continue;
        }
        node.read_parked();
        let ran = batch.len();
        let kept = node.send_queued(std::mem::take(&mut batch), &handle);
        wake = node.line.due();
        finish(gate, node, ran - kept);
    }
}

/// The reader, as reader.rs and `NodeExec::read_watched` run it: on each
/// readiness, takes the state, reads the batch if it is still the one
/// parked under that token, sends what was queued behind it (parked with
/// it again), lets its driver count go and tells the node's thread its
/// wake time. At its stop, reads what is parked with it.
fn reader(gate: &Gate<Node>, queue: &Handle<u32>, arms: &mpsc::Receiver<Arm>) {
    loop {
        let token = match arms.recv() {
            Ok(Arm::Armed(token)) => Some(token),
            Ok(Arm::Stop) | Err(_) => None,
        };
        let mut node = gate.lock();
        let driving = node.read_watched(token);
        if token.is_some()
            && let Some(driving) = &driving
        {
            let mut queued = Vec::new();
            driving.take_front(16, |_| true, |_| false, &mut queued);
            // Sent, parked with the reader: counted until read.
            node.send_queued(queued, queue);
        }
        let wake = node.line.due();
        finish(gate, node, 0);
        drop(driving);
        if let Some(at) = wake {
            queue.wake_by(at);
        }
        if token.is_none() {
            return;
        }
    }
}

/// What a caller that drives the node does after it sent its operation.
#[derive(Clone, Copy)]
enum Then {
    /// Leaves its batch unread (its round was decided without it).
    Park,
    /// Reads its answer, then runs what was queued behind it.
    ReadAndCombine,
    /// Its round was decided before the parked answer came in: it queues
    /// its operation, still driving the node, instead of sending it.
    HandOver,
}

/// A caller's operation: driven on an idle node (`then` says how), or
/// queued. A driver that leaves tells the node's thread its wake time.
fn call(gate: &Gate<Node>, jobs: &Sender<u32>, op: u32, then: Then) {
    let Some(mut node) = gate.try_idle() else {
        let _ = gate.admit(|| jobs.send(op));
        return;
    };
    let driving = jobs.drive();
    let mut ran = 0;
    match then {
        Then::Park => node.send_and_park(vec![op]),
        Then::ReadAndCombine => {
            node.send_and_read(vec![op]);
            let mut queued = Vec::new();
            driving.take_front(16, |_| true, |_| false, &mut queued);
            ran = queued.len();
            ran -= node.send_queued(queued, driving.queue());
        }
        Then::HandOver => {
            let _ = gate.admit(|| jobs.send(op));
        }
    }
    let wake = node.line.due();
    finish(gate, node, ran);
    drop(driving);
    if let Some(at) = wake {
        jobs.wake_by(at);
    }
}

/// The first rule the wire breaks, if any.
fn judge(wire: &[Wire]) -> Option<String> {
    let mut unread: Option<&Vec<u32>> = None;
    let mut reads = [0u32; 5];
    let mut sent = Vec::new();
    for event in wire {
        match event {
            Wire::Sent(ops) => {
                if let Some(old) = unread {
                    return Some(format!("{ops:?} sent while {old:?} was unread: {wire:?}"));
                }
                unread = Some(ops);
                sent.extend(ops.iter().copied());
            }
            Wire::Read(ops) => {
                if unread != Some(ops) {
                    return Some(format!(
                        "{ops:?} read when not the batch on the wire: {wire:?}"
                    ));
                }
                for &op in ops {
                    reads[op as usize] += 1;
                }
                unread = None;
            }
        }
    }
    if let Some(ops) = unread {
        return Some(format!("{ops:?} never read: {wire:?}"));
    }
    for op in 1..=4 {
        let times = sent.iter().filter(|&&s| s == op).count();
        if times != 1 {
            return Some(format!("{op} sent {times} times: {wire:?}"));
        }
        if reads[op as usize] != 1 {
            return Some(format!("{op} read {} times: {wire:?}", reads[op as usize]));
        }
    }
    let at = |op| sent.iter().position(|&s| s == op);
    if at(1) > at(2) {
        return Some(format!(
            "A's undo (2) went before its acquire (1): {wire:?}"
        ));
    }
    if at(3) > at(4) {
        return Some(format!("B's 4 went before its 3: {wire:?}"));
    }
    None
}

/// The two models (see the module's text): how caller A's undo and
/// caller B's second call end.
#[derive(Clone, Copy)]
enum Model {
    /// A's undo is driven and combined; B's call is left unread.
    BLeavesUnread,
    /// A's undo is handed over; B's call is driven and combined.
    AHandsOver,
}

/// Explores every interleaving of `model` (with at most `preemptions`, if
/// set; `sync::explore`): how many executions, and the first violation.
/// Who reads the batches of queued operations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Whoever sent them, at once (no reader).
    InPlace,
    /// The reader, or the node's thread.
    Reader,
    /// Parked for a reader that never reads (it died): the node's thread
    /// only, at their due time or at the close.
    DeadReader,
}

fn explore(model: Model, reading: Reading, preemptions: Option<usize>) -> (usize, Option<String>) {
    let watch = reading != Reading::InPlace;
    let (undo, b_call) = match model {
        Model::BLeavesUnread => (Then::ReadAndCombine, Then::Park),
        Model::AHandsOver => (Then::HandOver, Then::ReadAndCombine),
    };
    crate::sync::explore(preemptions, move || {
        let (arms, armed) = mpsc::channel();
        let gate = Arc::new(Gate::new(Node {
            arms: watch.then(|| arms.clone()),
            ..Node::default()
        }));
        let (jobs, queue) = queue::queue::<u32>();
        let (reader, dead) = if reading == Reading::Reader {
            let (gate, handle) = (Arc::clone(&gate), jobs.handle());
            let reader = thread::spawn(move || reader(&gate, &handle, &armed));
            (Some(reader), None)
        } else {
            (None, Some(armed))
        };
        let node = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || node_thread(&gate, &queue))
        };
        let b = {
            let (gate, jobs) = (Arc::clone(&gate), jobs.clone());
            thread::spawn(move || {
                let _ = gate.admit(|| jobs.send(3));
                call(&gate, &jobs, 4, b_call);
            })
        };
        // Caller A: an acquire left unread, then its undo.
        call(&gate, &jobs, 1, Then::Park);
        call(&gate, &jobs, 2, undo);
        let _ = b.join();
        let mut violation = jobs.left_asleep().then(|| {
            "both callers are done and a job is queued with the node's thread asleep, \
             nobody to wake it"
                .to_string()
        });
        if violation.is_none()
            && let Some(due) = gate.lock().line.due()
            && jobs.sleeps_past(due)
        {
            violation = Some(
                "both callers are done and a batch is parked unread while the node's \
                 thread sleeps past its due time"
                    .to_string(),
            );
        }
        // The engine's drop: the reader stops first (nothing is parked
        // with it after that), then the last sender goes: the node's
        // thread runs what is queued, reads what is parked and ends.
        if let Some(reader) = reader {
            gate.lock().arms = None;
            let _ = arms.send(Arm::Stop);
            let _ = reader.join();
        }
        drop(jobs);
        let _ = node.join();
        drop(dead);
        if violation.is_none() {
            violation = judge(&gate.lock().wire);
        }
        violation
    })
}

/// Three preemptions (loom advises two or three for bugs found in
/// practice); unbounded, the two callers' calls take hours to explore.
#[test]
fn a_node_s_wire_keeps_every_caller_s_order_and_reads_each_batch_once() {
    assert_clean(
        "wire order, B leaves its batch unread",
        explore(Model::BLeavesUnread, Reading::InPlace, Some(3)),
    );
    assert_clean(
        "wire order, A hands its undo over",
        explore(Model::AHandsOver, Reading::InPlace, Some(3)),
    );
}

/// The same with the reader: the batches of queued operations are parked
/// with it and read by it, or by the node's thread.
#[test]
fn with_the_reader_a_node_s_wire_keeps_every_caller_s_order_and_reads_each_batch_once() {
    assert_clean(
        "wire order with the reader, B leaves its batch unread",
        explore(Model::BLeavesUnread, Reading::Reader, Some(2)),
    );
    assert_clean(
        "wire order with the reader, A hands its undo over",
        explore(Model::AHandsOver, Reading::Reader, Some(2)),
    );
    assert_clean(
        "wire order with a reader that died, B leaves its batch unread",
        explore(Model::BLeavesUnread, Reading::DeadReader, Some(3)),
    );
}

/// Each canary breaks one rule, and must be found: sending without
/// reading what is parked, driving a node whose queue is not empty, a
/// driver's end that does not look at the queue (a job queued while it
/// drove woke nobody), a wake time that wakes nobody, and a thread that
/// sleeps past a wake time sent while it was awake.
#[test]
fn canaries_breaking_the_line_the_gate_the_driver_s_end_or_the_wake_time_are_caught() {
    for (broken, model) in [
        (Canary::SendOverUnread, Model::BLeavesUnread),
        (Canary::GateIgnoresCount, Model::BLeavesUnread),
        (Canary::DriverEndLooksAway, Model::BLeavesUnread),
        (Canary::DriverEndLooksAway, Model::AHandsOver),
        (Canary::WakeByWakesNobody, Model::BLeavesUnread),
        (Canary::SleepIgnoresWakeBy, Model::BLeavesUnread),
    ] {
        assert_caught(broken, || explore(model, Reading::InPlace, Some(2)));
    }
}

/// With the reader: sending over a batch parked with it, a driver's end
/// (the reader's among them) that does not look at the queue, and a
/// node's thread that ends with operations queued behind a batch parked
/// with a reader that died.
#[test]
fn with_the_reader_canaries_breaking_the_line_the_driver_s_end_or_the_close_are_caught() {
    for (broken, reading) in [
        (Canary::SendOverUnread, Reading::Reader),
        (Canary::DriverEndLooksAway, Reading::Reader),
        (Canary::ClosedLeavesDrivenJobs, Reading::DeadReader),
    ] {
        assert_caught(broken, || explore(Model::BLeavesUnread, reading, Some(2)));
    }
}
