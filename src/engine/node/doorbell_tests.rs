//! The doorbell a node's release listener rings: the ringing thread takes
//! the notices itself when the node's state is free, and queues a wake-up
//! for the node's thread when it is not. No thread is started: the test
//! plays the node's thread.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::super::tests::{acquire, node_state, release, round_trip, shared, token};
use super::*;
use crate::backend::KeySet;
use crate::backend::memory::MemoryBackend;
use crate::clock::ManualClock;

/// A release on the node, by another client of the same server.
fn released_elsewhere(node: &MemoryBackend, key: &str) {
    let clock = ManualClock::new();
    let now = Instant::now();
    let (mut other, _) = node_state(node, shared(&clock, None), now);
    let t = token();
    round_trip(&mut other, vec![acquire(key, t)], now);
    round_trip(&mut other, vec![release(key, t)], now);
}

/// Whether a job is queued for the node's thread (without waiting).
fn queued(jobs: &queue::Receiver<Job>) -> bool {
    jobs.wait_until(Some(Instant::now())).is_ok()
}

/// A node whose listener rings its doorbell, with its queue (the test
/// plays its thread) and a waiter of key `k` it listens for.
struct Ringing {
    node: MemoryBackend,
    exec: Arc<NodeExec>,
    sender: queue::Sender<Job>,
    jobs: queue::Receiver<Job>,
    watch: crate::engine::Watch,
    /// Where the doorbell finds the node: bound by the test, or the rings
    /// find nobody.
    _peers: Peers,
}

fn ringing_node() -> Ringing {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let shared = shared(&clock, None);
    let now = Instant::now();
    let peers: Peers = Arc::default();
    let bell = doorbell(0, &peers);
    let (state, _) = node_state(&node, Arc::clone(&shared), now);
    let exec = Arc::new(NodeExec::new(state.ringing(bell.clone()), None, bell));
    let (sender, jobs) = queue::queue();
    peers.lock().push((sender.clone(), Arc::clone(&exec)));
    let watch = shared.waiters.register(&KeySet::one("k"));
    let _ = exec.gate.lock().listen(now);
    assert_eq!(node.listened_keys(), 1, "subscribed");
    Ringing {
        node,
        exec,
        sender,
        jobs,
        watch,
        _peers: peers,
    }
}

#[test]
fn a_ring_takes_the_notices_on_the_ringing_thread_unless_the_node_is_held() {
    let Ringing {
        node,
        exec,
        jobs,
        watch,
        _peers,
        ..
    } = ringing_node();
    let now = Instant::now();

    // Nobody holds the node: the release's own thread (a memory node rings
    // from the release) hands the notice to the waiter, before the
    // release returns, and the node's thread is left asleep.
    released_elsewhere(&node, "k");
    assert!(
        watch.notices().try_recv().is_ok(),
        "the waiter heard of the release on the ringing thread"
    );
    assert!(!queued(&jobs), "the node's thread was woken for nothing");

    // The node's state is held (its thread, or a caller driving it): the
    // ring only queues a wake-up, and the holder's thread takes the
    // notice when it looks.
    let mut held = exec.gate.lock();
    released_elsewhere(&node, "k");
    assert!(queued(&jobs), "no wake-up queued for the node's thread");
    assert!(
        watch.notices().try_recv().is_err(),
        "taken under a held state"
    );
    let _ = held.timer_fired(now);
    drop(held);
    assert!(
        watch.notices().try_recv().is_ok(),
        "the node's thread handed the notice out"
    );
}

/// A ring while a caller drives the node (it holds the state for its
/// round trip) queues a wake-up that woke nobody; the caller, as it lets
/// go of the node, takes the notices itself and drops that wake-up, so
/// the node's thread is not woken for it (counted with 4 processes on one
/// key: 4.3 such wake-ups per lock before), and the gate's count is back
/// to zero (the node is idle for the next caller).
#[test]
fn a_ring_while_a_caller_drives_the_node_is_taken_by_that_caller() {
    let Ringing {
        node,
        exec,
        sender,
        jobs,
        watch,
        _peers,
        ..
    } = ringing_node();
    let driving = sender.drive();
    let state = exec.gate.try_idle().expect("the node is idle");
    released_elsewhere(&node, "k");
    assert_eq!(exec.gate.queued(), 1, "the ring queued its wake-up");
    assert!(
        watch.notices().try_recv().is_err(),
        "taken under a held state"
    );
    let _ = exec.leave_driven(state, driving, true);
    assert!(
        watch.notices().try_recv().is_ok(),
        "the driver did not hand the notice out"
    );
    assert_eq!(exec.gate.queued(), 0, "the wake-up is still counted");
    assert!(!queued(&jobs), "the node's thread still has the wake-up");
}
