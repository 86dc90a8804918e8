//! The one batch a node may have on the wire unread: a round that was
//! decided before this node answered leaves its batch here, in the node's
//! state, instead of waking the node's thread to read it.
//!
//! Whoever next takes the node's state reads it first: the next caller
//! that drives the node (when its answer is already in: a caller never
//! waits for a straggler), the node's thread before any job or timer work,
//! or, when nobody comes, the node's thread at the batch's due time
//! ([`UNREAD_GRACE`] after it was parked; part of the state's poll
//! timeout). Nothing is sent to the node while a batch is parked: every
//! send first takes the parked batch ([`Line::take`]) and reads it, so a
//! node's next batch is written only after the previous one is read
//! (per-node FIFO on the wire, whatever connection each batch uses), and a
//! batch is read exactly once (it is moved out of the line by the one
//! reader that takes it).
//!
//! The rule is checked by loom over every interleaving of a node thread
//! and two callers (the `loom_checks` module below), with canaries that
//! break it (src/canary.rs).

use std::time::{Duration, Instant};

use crate::canary::{self, Canary};

/// How long a parked batch waits for a caller before the node's thread
/// reads it. While callers keep coming, they read it (no thread hand-off)
/// and the thread wakes about once per grace to find nothing due; when
/// they stop, its answer is read (and its votes, liveness and release
/// retries acted on) at most this much after the round left it.
pub(crate) const UNREAD_GRACE: Duration = Duration::from_millis(5);

/// A node's parked batch, if any, and when the node's thread must read it.
#[derive(Debug)]
pub(crate) struct Line<B> {
    parked: Option<(B, Instant)>,
}

impl<B> Default for Line<B> {
    fn default() -> Self {
        Self { parked: None }
    }
}

impl<B> Line<B> {
    /// Parks `batch`, left unread at `now`: due at `now` + grace. The line
    /// must be empty (every send takes the parked batch first).
    pub(crate) fn park(&mut self, batch: B, now: Instant) {
        debug_assert!(self.parked.is_none(), "a batch parked over another");
        self.parked = Some((batch, now + UNREAD_GRACE));
    }

    /// Takes the parked batch, to read it before anything else is sent.
    pub(crate) fn take(&mut self) -> Option<B> {
        if canary::on(Canary::SendOverUnread) {
            // Broken: the sender goes on without reading what is parked.
            return None;
        }
        self.parked.take().map(|(batch, _)| batch)
    }

    /// The parked batch, if any (to see whether its answer is in).
    pub(crate) fn parked_mut(&mut self) -> Option<&mut B> {
        self.parked.as_mut().map(|(batch, _)| batch)
    }

    /// When the node's thread must read the parked batch, if one is.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.parked.as_ref().map(|(_, due)| *due)
    }
}

/// Every interleaving, by loom, of a node thread and two callers over one
/// node: the gate (src/engine/gate.rs) and the line above, as the engine
/// uses them. Caller A sends an acquire and then its undo; caller B queues
/// one operation for the node's thread (as a detached release or a
/// watchdog's extend is) and then sends another. A call drives the node
/// itself when the gate says it is idle (reading what is parked first,
/// then parking its own batch unread, as a decided round leaves a
/// straggler), and queues to the node's thread otherwise. Checked: nothing is sent while a batch is unread, every
/// batch is read exactly once, every operation is sent, and each caller's
/// operations reach the wire in its order.
#[cfg(all(test, loom))]
mod loom_checks {
    use std::sync::{Arc as StdArc, Mutex as StdMutex};
    use std::time::Instant;

    use loom::sync::Arc;
    use loom::sync::mpsc::{Receiver, channel};
    use loom::thread;

    use super::Line;
    use crate::canary::{self, Canary};
    use crate::engine::gate::Gate;

    /// What reached the node, in wire order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Wire {
        Sent(u32),
        Read(u32),
    }

    /// The node as the model sees it: its line and its wire.
    #[derive(Default)]
    struct Node {
        line: Line<u32>,
        wire: Vec<Wire>,
    }

    impl Node {
        /// `State::begin` then the read: the parked batch first.
        fn send_and_read(&mut self, op: u32) {
            self.read_parked();
            self.wire.push(Wire::Sent(op));
            self.wire.push(Wire::Read(op));
        }

        /// `State::begin`, its answer left unread (a decided round).
        fn send_and_park(&mut self, op: u32) {
            self.read_parked();
            self.wire.push(Wire::Sent(op));
            if canary::on(Canary::SendOverUnread) {
                // The broken take left the old batch parked: the model
                // keeps both, as two batches on the wire would be.
                if let Some((old, due)) = self.line.parked.take() {
                    self.wire.push(Wire::Read(old));
                    self.line.parked = Some((op, due));
                    return;
                }
            }
            self.line.park(op, Instant::now());
        }

        fn read_parked(&mut self) {
            if let Some(old) = self.line.take() {
                self.wire.push(Wire::Read(old));
            }
        }
    }

    enum Msg {
        Op(u32),
        Stop,
    }

    /// The node's thread, as worker.rs runs it: a batch of jobs under the
    /// gate, the parked batch read first; at the end, what is parked.
    fn node_thread(gate: &Gate<Node>, queue: &Receiver<Msg>) {
        loop {
            let Ok(first) = queue.recv() else { return };
            let mut node = gate.lock();
            let mut batch = vec![first];
            while let Ok(more) = queue.try_recv() {
                batch.push(more);
            }
            let mut stop = false;
            for msg in &batch {
                match msg {
                    Msg::Op(op) => node.send_and_read(*op),
                    Msg::Stop => stop = true,
                }
            }
            if stop {
                node.read_parked();
            }
            gate.finish(node, batch.len());
            if stop {
                return;
            }
        }
    }

    /// A caller's operation: driven on an idle node (its batch parked
    /// unread), else queued.
    fn call(gate: &Gate<Node>, jobs: &loom::sync::mpsc::Sender<Msg>, op: u32) {
        match gate.try_idle() {
            Some(mut node) => node.send_and_park(op),
            None => {
                let _ = gate.admit(|| jobs.send(Msg::Op(op)));
            }
        }
    }

    /// The first rule the wire breaks, if any.
    fn judge(wire: &[Wire]) -> Option<String> {
        let mut unread: Option<u32> = None;
        let mut reads = [0u32; 5];
        let mut sent = Vec::new();
        for event in wire {
            match *event {
                Wire::Sent(op) => {
                    if let Some(old) = unread {
                        return Some(format!("{op} sent while {old} was unread: {wire:?}"));
                    }
                    unread = Some(op);
                    sent.push(op);
                }
                Wire::Read(op) => {
                    reads[op as usize] += 1;
                    if unread != Some(op) {
                        return Some(format!(
                            "{op} read when not the batch on the wire: {wire:?}"
                        ));
                    }
                    unread = None;
                }
            }
        }
        if let Some(op) = unread {
            return Some(format!("{op} never read: {wire:?}"));
        }
        for op in 1..=4 {
            if !sent.contains(&op) {
                return Some(format!("{op} never sent: {wire:?}"));
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

    fn explore(preemptions: Option<usize>) -> (usize, Option<String>) {
        let seen: StdArc<StdMutex<(usize, Option<String>)>> = StdArc::default();
        let record = StdArc::clone(&seen);
        let mut model = loom::model::Builder::new();
        model.preemption_bound = preemptions;
        model.check(move || {
            let gate = Arc::new(Gate::new(Node::default()));
            let (jobs, queue) = channel();
            let node = {
                let gate = Arc::clone(&gate);
                thread::spawn(move || node_thread(&gate, &queue))
            };
            let b = {
                let (gate, jobs) = (Arc::clone(&gate), jobs.clone());
                thread::spawn(move || {
                    let _ = gate.admit(|| jobs.send(Msg::Op(3)));
                    call(&gate, &jobs, 4);
                })
            };
            // Caller A: an acquire, then its undo.
            call(&gate, &jobs, 1);
            call(&gate, &jobs, 2);
            let _ = b.join();
            let _ = gate.admit(|| jobs.send(Msg::Stop));
            let _ = node.join();
            let violation = judge(&gate.lock().wire);
            let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
            seen.0 += 1;
            if seen.1.is_none() {
                seen.1 = violation;
            }
        });
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        (seen.0, seen.1.clone())
    }

    /// Four preemptions (loom advises two or three for bugs found in practice);
    /// unbounded, the two callers' four calls take hours to explore.
    #[test]
    fn a_parked_batch_is_read_once_before_anything_else_is_sent() {
        let (executions, violation) = explore(Some(4));
        println!("unread line: loom explored {executions} executions, no violation");
        assert_eq!(violation, None, "after {executions} executions");
    }

    /// Each canary breaks one half of the rule: sending without reading
    /// what is parked, and driving a node whose queue is not empty.
    #[test]
    fn canaries_breaking_the_line_or_the_gate_are_caught() {
        for broken in [Canary::SendOverUnread, Canary::GateIgnoresCount] {
            let (executions, violation) = canary::with(broken, || explore(Some(2)));
            let Some(violation) = violation else {
                panic!("canary {broken:?}: no violation in {executions} executions");
            };
            println!("canary {broken:?} caught: {violation}");
        }
    }
}
