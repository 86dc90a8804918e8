//! Rounds the caller drives, on nodes whose answers come late: the round
//! is decided without a slow node, a caller gives up at its deadline, and
//! the node threads read what the caller left (per-node FIFO kept).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;

use parking_lot::Mutex;

use super::read_rank;
use crate::backend::memory::MemoryBackend;
use crate::backend::{Answers, InFlight, Op, run};
use crate::engine::*;
use crate::report::NodeOutcome;
use crate::token::Token;

/// A memory node behind a slow wire: it promises answers within `bound`
/// (so callers drive it), but answers `delay` after a batch is sent. With
/// `apply_late`, the node also applies the batch only then, as a frozen
/// server that reads its socket when it wakes up.
#[derive(Clone)]
struct Wire {
    node: MemoryBackend,
    delay: Duration,
    bound: Duration,
    apply_late: bool,
    /// The thread that read each answer.
    readers: Arc<Mutex<Vec<String>>>,
}

struct Flight {
    wire: Wire,
    ready: Instant,
    answers: Option<Answers>,
}

impl InFlight for Flight {
    fn wait(&mut self, until: Instant) -> bool {
        thread::sleep(
            until
                .min(self.ready)
                .saturating_duration_since(Instant::now()),
        );
        Instant::now() >= self.ready
    }

    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        thread::sleep(self.ready.saturating_duration_since(Instant::now()));
        let name = thread::current().name().unwrap_or_default().to_owned();
        let reader = if name.starts_with("quorum-lock-node") {
            name
        } else {
            "a caller".to_owned()
        };
        self.wire.readers.lock().push(reader);
        self.answers.unwrap_or_else(|| run(&self.wire.node, ops))
    }
}

impl Backend for Wire {
    fn describe(&self) -> String {
        self.node.describe()
    }
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        Box::new(Flight {
            wire: self.clone(),
            ready: Instant::now() + self.delay,
            answers: (!self.apply_late).then(|| run(&self.node, ops)),
        })
    }
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.bound)
    }
}

fn wires(delays: impl AsRef<[Duration]>, bound: Duration, apply_late: bool) -> Vec<Wire> {
    delays
        .as_ref()
        .iter()
        .enumerate()
        .map(|(i, &delay)| Wire {
            node: MemoryBackend::new(format!("wire-{i}")),
            delay,
            bound,
            apply_late,
            readers: Arc::default(),
        })
        .collect()
}

fn engine(wires: &[Wire], quorum: usize) -> Engine {
    let backends = wires
        .iter()
        .map(|w| Arc::new(w.clone()) as Arc<dyn Backend>)
        .collect();
    crate::engine::tests::engine_of(backends, quorum)
}

fn acquire<'a>(hold: &'a Hold, token: Token) -> Request<'a> {
    Request {
        action: Action::Acquire {
            ttl: Duration::from_secs(30),
        },
        hold,
        token,
    }
}

const SLOW: Duration = Duration::from_millis(1500);

/// A round the fast nodes decided: the first (slow) node's answer was
/// not awaited, the others granted.
fn decided_without_the_first(outcomes: &[NodeOutcome]) {
    assert!(
        matches!(outcomes[0], NodeOutcome::NotAwaited),
        "{outcomes:?}"
    );
    assert!(
        outcomes[1..].iter().all(NodeOutcome::is_granted),
        "{outcomes:?}"
    );
}

/// The caller reads every node it drives exactly once, whether it keeps
/// them on its stack (up to five) or in a list (more), and however their
/// answers come in: here the later a node's slot, the sooner it answers,
/// so the caller passes over the first ones and comes back to them.
#[test]
fn a_caller_reads_every_node_it_drives_once_on_the_stack_or_in_a_list() {
    for n in [1, 3, 5, 6, 7] {
        let delays: Vec<Duration> = (0..n)
            .map(|i| Duration::from_millis(2 * (n - i) as u64))
            .collect();
        let wires = wires(delays, Duration::from_secs(5), false);
        let engine = engine(&wires, majority(n));
        let key = Hold::Lock(KeySet::one("k"));
        let outcomes = engine.round(
            &acquire(&key, Token::random().unwrap()),
            Gather::All,
            Duration::from_secs(5),
            Direct::IdleNodes,
        );
        assert_eq!(outcomes.len(), n);
        assert!(
            outcomes.iter().all(NodeOutcome::is_granted),
            "n={n}: {outcomes:?}"
        );
        for (i, wire) in wires.iter().enumerate() {
            assert_eq!(*wire.readers.lock(), ["a caller"], "n={n}, node {i}");
        }
        assert!(engine.flush(Duration::from_secs(30)));
    }
}

/// Two fast nodes decide the round: the caller read them itself and left
/// the slow node's answer to that node's thread.
#[test]
fn a_round_decided_without_a_slow_node_leaves_its_answer_to_the_node_thread() {
    let wires = wires([SLOW, Duration::ZERO, Duration::ZERO], SLOW * 2, false);
    let engine = engine(&wires, 2);
    let key = Hold::Lock(KeySet::one("k"));
    let gather = Gather::UntilDecided { quorum: 2 };
    let outcomes = engine.round(
        &acquire(&key, Token::random().unwrap()),
        gather,
        SLOW * 2,
        Direct::IdleNodes,
    );
    decided_without_the_first(&outcomes);
    assert!(engine.flush(Duration::from_secs(30)));
    let readers = |i: usize| wires[i].readers.lock().clone();
    assert_eq!(readers(1), ["a caller"], "the caller drove the fast nodes");
    assert_eq!(readers(2), ["a caller"]);
    assert_eq!(
        readers(0),
        ["quorum-lock-node0"],
        "the node thread read the late answer"
    );
}

/// A release of `hold` under `token`.
fn release<'a>(hold: &'a Hold, token: Token) -> Request<'a> {
    Request {
        action: Action::Release,
        hold,
        token,
    }
}

/// A late answer left parked by one round is read by the caller of the
/// next, as one more answer of its own round, when it finds the node
/// otherwise idle; it then sends its own operation there and reads that
/// too. Its operation is not handed to the node's thread (which would
/// then read both batches).
#[test]
fn the_next_round_reads_a_late_answer_itself_and_then_drives_the_node() {
    let late = Duration::from_millis(50);
    let wires = wires([late, Duration::ZERO, Duration::ZERO], SLOW, false);
    let engine = engine(&wires, 2);
    let key = Hold::Lock(KeySet::one("k"));
    let token = Token::random().unwrap();
    let gather = Gather::UntilDecided { quorum: 2 };
    let first = engine.round(&acquire(&key, token), gather, SLOW, Direct::IdleNodes);
    let left = Instant::now();
    decided_without_the_first(&first);
    let second = engine.round(&release(&key, token), Gather::All, SLOW, Direct::IdleNodes);
    // Within the grace, the node's thread cannot have read the parked
    // batch before this round began (the test thread may be held up
    // longer on a busy machine: then only the second read is certain).
    let within_grace = left.elapsed() < crate::engine::node::UNREAD_GRACE;
    assert!(second.iter().all(NodeOutcome::is_granted), "{second:?}");
    assert!(engine.flush(Duration::from_secs(30)));
    let readers = wires[0].readers.lock().clone();
    assert_eq!(readers.len(), 2, "{readers:?}");
    assert_eq!(readers[1], "a caller", "the caller drove the release");
    if within_grace {
        assert_eq!(readers[0], "a caller", "the caller read the late answer");
    }
    assert_eq!(wires[0].node.holder(key.keys().first()), None);
}

/// A round decided before the late answer it waits for on a node came
/// in: the caller queues its operation for the node's thread, which
/// reads the late answer and then runs it. Nothing is lost and nothing
/// overtakes: the node holds both keys once it has answered.
#[test]
fn a_round_decided_before_a_late_answer_hands_its_operation_to_the_node_thread() {
    let late = Duration::from_millis(50);
    let wires = wires([late, Duration::ZERO, Duration::ZERO], SLOW, false);
    let engine = engine(&wires, 2);
    let gather = Gather::UntilDecided { quorum: 2 };
    let (one, two) = (
        Hold::Lock(KeySet::one("one")),
        Hold::Lock(KeySet::one("two")),
    );
    let (t1, t2) = (Token::random().unwrap(), Token::random().unwrap());
    let first = engine.round(&acquire(&one, t1), gather, SLOW, Direct::IdleNodes);
    let second = engine.scatter(&acquire(&two, t2), SLOW, Direct::IdleNodes, gather);
    let gathered = second.gather(gather);
    let reached: Vec<bool> = gathered.reached().map(|(reached, _)| reached).collect();
    let outcomes: Vec<_> = gathered.into_outcomes().collect();
    decided_without_the_first(&first);
    decided_without_the_first(&outcomes);
    assert_eq!(reached, [true; 3], "the slow node gets the acquire");
    assert!(engine.flush(Duration::from_secs(30)));
    let slow = &wires[0].node;
    assert!(slow.holder(one.keys().first()).is_some());
    assert!(slow.holder(two.keys().first()).is_some());
    assert_eq!(
        *wires[0].readers.lock(),
        ["quorum-lock-node0", "quorum-lock-node0"],
        "the node's thread read both"
    );
}

/// The deadline passes with every answer still out: the caller returns
/// (all timed out), the node threads read the answers, and a frozen
/// server that applies the acquire late still gets the release queued
/// after it, after it (per-node FIFO): no key is left.
#[test]
fn a_caller_that_gives_up_at_its_deadline_leaves_no_key_behind() {
    let wait = Duration::from_millis(100);
    let wires = wires([SLOW; 3], wait, true);
    let engine = engine(&wires, 2);
    let key = Hold::Lock(KeySet::one("k"));
    let token = Token::random().unwrap();
    let gather = Gather::UntilDecided { quorum: 2 };
    let pending = engine.scatter(&acquire(&key, token), wait, Direct::IdleNodes, gather);
    let gathered = pending.gather(gather);
    let reached: Vec<bool> = gathered.reached().map(|(reached, _)| reached).collect();
    let outcomes: Vec<_> = gathered.into_outcomes().collect();
    assert!(outcomes.iter().all(|o| !o.is_granted()), "{outcomes:?}");
    assert!(reached.iter().all(|r| *r), "every node got the acquire");
    // The failed attempt's release, as the rounds queue it.
    engine.release_detached_where(&key, token, &reached);
    assert!(engine.flush(Duration::from_secs(30)));
    for (i, wire) in wires.iter().enumerate() {
        assert_eq!(
            wire.node.holder(key.keys().first()),
            None,
            "node {i} kept the key: its release overtook the late acquire"
        );
        assert_eq!(wire.readers.lock()[0], format!("quorum-lock-node{i}"));
    }
}

/// The read order's rule: nodes whose round trips are close (loopback:
/// tens of microseconds apart, and a node read later counts the reads
/// before it into its own) keep the order they were sent in, whatever
/// their smoothed round trips say; a node clearly slower than the fastest
/// is read after the others, the slower later.
#[test]
fn nodes_are_read_in_send_order_unless_one_is_clearly_slower() {
    let ranks = |latencies: &[u64]| -> Vec<u64> {
        let fastest = latencies.iter().copied().min().unwrap_or(0);
        latencies.iter().map(|&l| read_rank(l, fastest)).collect()
    };
    // Loopback: tens of microseconds apart.
    assert_eq!(ranks(&[90_000, 60_000, 75_000]), [0, 0, 0]);
    assert_eq!(
        ranks(&[166_000, 60_000, 75_000]),
        [0, 0, 0],
        "100 us + 6 us"
    );
    assert_eq!(ranks(&[167_000, 60_000, 75_000]), [167_000, 0, 0]);
    // A LAN: 1.0 and 1.5 ms; 1.19 ms is within 100 us and a tenth.
    assert_eq!(ranks(&[1_500_000, 1_000_000, 1_000_000]), [1_500_000, 0, 0]);
    assert_eq!(ranks(&[1_190_000, 1_000_000, 1_010_000]), [0, 0, 0]);
    assert_eq!(
        ranks(&[5_000_000, 300_000, 9_000_000]),
        [5_000_000, 0, 9_000_000],
        "a distant node after the near one, the farther last"
    );
    assert_eq!(
        ranks(&[0, 80_000, 150_000]),
        [0, 0, 150_000],
        "not measured yet: 0"
    );
}
