//! What reaches one node's wire, by loom, over every interleaving of a
//! node thread and two callers: the gate (`../gate.rs`), the line of the
//! batch left unread (`unread.rs`) and the job queue with its drivers
//! (`queue.rs`), as the engine uses them (`worker.rs`, `../drive.rs`).
//!
//! A call drives the node itself when the gate says it is idle: it sends
//! its operation (reading what is parked first) and either leaves its
//! batch unread (a round decided before this node answered) or reads it
//! and then runs what was queued behind it as one batch (combining);
//! otherwise it queues the operation for whoever holds the node next.
//! Caller A sends an acquire and then its undo; caller B queues one
//! operation (as a detached release is) and then calls with another.
//! Checked: nothing is sent while a batch is unread, every batch is read
//! exactly once, every operation is sent once, each caller's operations
//! reach the wire in its order, and once both callers are done no job is
//! queued while the node's thread sleeps with no wake-up on its way.

use std::time::Instant;

use loom::sync::Arc;
use loom::thread;

use super::queue::{self, Empty, Receiver, Sender};
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

/// The node as the model sees it: its line and its wire.
#[derive(Default)]
struct Node {
    line: Line<Vec<u32>>,
    wire: Vec<Wire>,
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
        if canary::on(Canary::SendOverUnread) {
            // The broken take left the old batch parked: the model keeps
            // both, as two batches on the wire would be.
            if let Some(old) = self.line.park_over(ops, Instant::now()) {
                self.wire.push(Wire::Read(old));
            }
            return;
        }
        self.line.park(ops, Instant::now());
    }

    fn read_parked(&mut self) {
        if let Some(old) = self.line.take() {
            self.wire.push(Wire::Read(old));
        }
    }
}

/// Runs `ops` as one batch.
fn run(node: &mut Node, ops: Vec<u32>) {
    if !ops.is_empty() {
        node.send_and_read(ops);
    }
}

/// The node's thread, as worker.rs runs it: wait for a job, take the
/// state, take what is queued under it, read what is parked, run.
fn node_thread(gate: &Gate<Node>, queue: &Receiver<u32>) {
    let mut batch = Vec::new();
    loop {
        match queue.wait_until(None) {
            Ok(()) => {}
            Err(Empty::Timeout) => continue,
            Err(Empty::Closed) => {
                gate.lock().read_parked();
                return;
            }
        }
        let mut node = gate.lock();
        queue.take_queued(16, &mut batch);
        if batch.is_empty() {
            continue;
        }
        node.read_parked();
        let ran = batch.len();
        run(&mut node, std::mem::take(&mut batch));
        gate.finish(node, ran);
    }
}

/// A caller's operation: driven on an idle node (left unread with
/// `park`, else read and followed by what was queued behind it), or
/// queued.
fn call(gate: &Gate<Node>, jobs: &Sender<u32>, op: u32, park: bool) {
    let Some(mut node) = gate.try_idle() else {
        let _ = gate.admit(|| jobs.send(op));
        return;
    };
    let driving = jobs.drive();
    let mut ran = 0;
    if park {
        node.send_and_park(vec![op]);
    } else {
        node.send_and_read(vec![op]);
        let mut queued = Vec::new();
        driving.take_front(16, |_| true, &mut queued);
        ran = queued.len();
        run(&mut node, queued);
    }
    gate.finish(node, ran);
    drop(driving);
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

/// Explores every interleaving (with at most `preemptions`, if set;
/// `sync::explore`): how many executions, and the first violation.
fn explore(preemptions: Option<usize>) -> (usize, Option<String>) {
    crate::sync::explore(preemptions, || {
        let gate = Arc::new(Gate::new(Node::default()));
        let (jobs, queue) = queue::queue::<u32>();
        let node = {
            let gate = Arc::clone(&gate);
            thread::spawn(move || node_thread(&gate, &queue))
        };
        let b = {
            let (gate, jobs) = (Arc::clone(&gate), jobs.clone());
            thread::spawn(move || {
                let _ = gate.admit(|| jobs.send(3));
                call(&gate, &jobs, 4, false);
            })
        };
        // Caller A: an acquire left unread, then its undo.
        call(&gate, &jobs, 1, true);
        call(&gate, &jobs, 2, false);
        let _ = b.join();
        let mut violation = jobs.left_asleep().then(|| {
            "both callers are done and a job is queued with the node's thread asleep, \
             nobody to wake it"
                .to_string()
        });
        // The last sender gone: the node's thread runs what is queued,
        // reads what is parked and ends.
        drop(jobs);
        let _ = node.join();
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
    assert_clean("wire order", explore(Some(3)));
}

/// Each canary breaks one rule, and must be found: sending without
/// reading what is parked, driving a node whose queue is not empty, and a
/// driver's end that does not look at the queue (a job queued while it
/// drove woke nobody).
#[test]
fn canaries_breaking_the_line_the_gate_or_the_driver_s_end_are_caught() {
    for broken in [
        Canary::SendOverUnread,
        Canary::GateIgnoresCount,
        Canary::DriverEndLooksAway,
    ] {
        assert_caught(broken, || explore(Some(2)));
    }
}
