//! The engine's own tests: the node queue's bound and what it never
//! refuses (releases).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::backend::Op;
use crate::backend::memory::MemoryBackend;
use crate::clock::MonotonicClock;
use crate::engine::node::jobs::MAX_QUEUED;
use crate::engine::*;
use crate::report::NodeOutcome;
use crate::token::Token;

/// Holds every call to `node` (its thread stays inside its first call,
/// so its queue only grows) until the returned sender is dropped, also by
/// a failing test's unwinding. Not [`MemoryBackend::pause`]: a pause
/// ends by itself after a minute, and filling the queue on a loaded
/// machine in a debug build can take longer (the test then found the
/// queue drained and "never filled").
fn stall(node: &MemoryBackend) -> crossbeam_channel::Sender<()> {
    let (hold, held) = crossbeam_channel::bounded::<()>(0);
    node.set_hook(Some(Arc::new(move |_: &Op<'_>| {
        // Returns once `hold` is dropped: nothing is ever sent.
        let _ = held.recv();
    })));
    hold
}

/// An engine over `backends` with a quorum of `quorum`, as the engine's
/// tests on backends of their own start it (`drive_tests.rs`,
/// `reader_tests.rs`): no quarantine, a minute's TTL bound, ten
/// seconds to drain.
pub(super) fn engine_of(backends: Vec<Arc<dyn Backend>>, quorum: usize) -> Engine {
    let settings = Settings {
        quorum,
        max_ttl: Duration::from_secs(60),
        forget_window: Duration::from_secs(60),
        drain_wait: Duration::from_secs(10),
        ..settings(Duration::from_secs(60))
    };
    Engine::start(backends, settings).unwrap()
}

fn settings(wait: Duration) -> Settings {
    Settings {
        quorum: 1,
        quarantine: None,
        max_ttl: wait,
        forget_window: wait,
        drain_wait: wait,
        clock: Arc::new(MonotonicClock),
        fence_counters: b"{quorum-lock}:fences".to_vec(),
        rights_key: b"{quorum-lock}:probe".to_vec(),
        accept_eviction: false,
        value_suffix: Box::default(),
    }
}

/// A node that does not keep up does not grow its queue without bound;
/// it refuses, and says why.
#[test]
fn a_stalled_node_refuses_past_the_queue_bound() {
    let node = MemoryBackend::new("slow");
    let hold = stall(&node);
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(node.clone())];
    let wait = Duration::from_millis(50);
    let engine = Engine::start(backends, settings(wait)).unwrap();
    let key = Hold::Lock(KeySet::one("k"));
    let token = Token::random().unwrap();
    // One job is taken by the (stalled) node thread, the rest wait.
    for _ in 0..=MAX_QUEUED {
        engine.release_detached(&key, token);
    }
    let acquire = Request {
        action: Action::Acquire {
            ttl: Duration::from_secs(1),
        },
        hold: &key,
        token,
    };
    let outcomes = engine.round(&acquire, Gather::All, wait, Direct::Never);
    let NodeOutcome::Failed(e) = &outcomes[0] else {
        panic!("expected a refusal, got {:?}", outcomes[0]);
    };
    assert!(e.message().contains("already waiting"), "{e}");
    drop(hold);
    assert!(engine.flush(Duration::from_secs(30)));
}

/// Regression: a full queue refused the release of an acquire queued before
/// it: the stalled node later applied the acquire and kept the key for its
/// TTL. A release is never refused while the acquire it undoes may still
/// run.
#[test]
fn a_full_queue_never_drops_the_release_of_a_queued_acquire() {
    let node = MemoryBackend::new("slow");
    let hold = stall(&node);
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(node.clone())];
    let wait = Duration::from_millis(50);
    let engine = Engine::start(backends, settings(wait)).unwrap();
    let (key, filler) = (Hold::Lock(KeySet::one("k")), Hold::Lock(KeySet::one("f")));
    let token = Token::random().unwrap();
    let acquire = |key| Request {
        action: Action::Acquire {
            ttl: Duration::from_secs(60),
        },
        hold: key,
        token,
    };
    drop(engine.scatter(&acquire(&key), wait, Direct::Never, Gather::All));
    // Fill the queue behind it until the node refuses.
    let mut full = false;
    for _ in 0..=MAX_QUEUED + 1 {
        let outcomes = engine
            .scatter(
                &acquire(&filler),
                Duration::ZERO,
                Direct::Never,
                Gather::All,
            )
            .gather(Gather::All)
            .into_outcomes()
            .collect::<Vec<_>>();
        if matches!(&outcomes[0], NodeOutcome::Failed(e) if e.message().contains("already waiting"))
        {
            full = true;
            break;
        }
    }
    assert!(full, "the queue never filled");
    engine.release_detached(&key, token);
    drop(hold);
    assert!(engine.flush(Duration::from_secs(60)));
    assert_eq!(
        node.holder(b"k"),
        None,
        "the release was dropped: the queued acquire's key stays for its TTL"
    );
}

/// A watch of keys that every idle node already listens for (a
/// subscription kept for an earlier waiter of the same key) asks no
/// node's thread: the barrier is answered on the caller's thread, at
/// once, and no listener is asked to change its subscription (a node's
/// thread that answered would have: the registry changed). Keys no node
/// listens for still go through the nodes' threads, which subscribe.
/// (A node's thread may wake for its own timer at any moment and hold
/// the node for a while: then the barrier goes to the threads, which
/// call their listeners, and the test tries again.)
#[test]
fn a_watch_of_keys_the_idle_nodes_listen_for_asks_no_node_thread() {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("n{i}")))
        .collect();
    let backends = nodes
        .iter()
        .map(|n| Arc::new(n.clone()) as Arc<dyn Backend>)
        .collect();
    let engine = engine_of(backends, 2);
    let keys = KeySet::one("k");
    let _first = engine.watch(&keys, Duration::from_secs(10));
    let listens = |nodes: &[MemoryBackend]| -> Vec<u64> {
        nodes.iter().map(MemoryBackend::listen_calls).collect()
    };
    let subscribed = listens(&nodes);
    assert!(subscribed.iter().all(|&n| n >= 1), "{subscribed:?}");
    let mut watches = Vec::new();
    let answered_here = (0..50).any(|_| {
        // A barrier's job is uncounted just after it is answered.
        let idle = Instant::now() + Duration::from_secs(10);
        while engine
            .nodes
            .iter()
            .any(|n| n.exec.gate.try_idle().is_none())
        {
            assert!(Instant::now() < idle, "the nodes never became idle");
            std::thread::yield_now();
        }
        let before = listens(&nodes);
        watches.push(engine.shared.waiters.register(&keys));
        engine.barrier(Some(&keys), Duration::ZERO) && listens(&nodes) == before
    });
    assert!(
        answered_here,
        "50 watches of a key every node listens for, none answered without the nodes' threads"
    );
    let other = KeySet::one("other");
    let before = listens(&nodes);
    let _other = engine.shared.waiters.register(&other);
    assert!(engine.barrier(Some(&other), Duration::from_secs(10)));
    let after = listens(&nodes);
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "a new key was not subscribed: {after:?}"
    );
}
