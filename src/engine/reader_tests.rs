//! The reader on nodes whose answers arrive on a descriptor it can wait
//! on: many callers, so that operations queue behind a batch in flight
//! and the batches sent for them are parked with the reader. Checked on
//! every node: no batch is sent while another is unread, each is read
//! once, in the order sent, and the reader read some of them; every
//! lock was granted and released.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use parking_lot::Mutex;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Answers, InFlight, Op, run};
use crate::engine::*;
use crate::report::NodeOutcome;
use crate::token::Token;

/// A memory node behind a socket pair: a batch's answers "arrive" as one
/// byte on the client's end, written `delay` after the send by a thread
/// of the wire (the server).
#[derive(Clone)]
struct Socket {
    node: MemoryBackend,
    delay: Duration,
    /// Whether a batch is on the wire unread (set at its send, cleared at
    /// its read): a send that finds it set breaks the rule.
    unread: Arc<AtomicBool>,
    /// Sends that found a batch unread.
    over_unread: Arc<AtomicUsize>,
    /// Batches sent and read, by serial number; when the last was sent.
    sent: Arc<AtomicUsize>,
    last_sent: Arc<Mutex<Option<Instant>>>,
    read: Arc<Mutex<Vec<usize>>>,
    /// The thread that read each batch.
    readers: Arc<Mutex<Vec<String>>>,
}

struct Flight {
    socket: Socket,
    serial: usize,
    client: UnixStream,
    answers: Answers,
}

impl InFlight for Flight {
    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.client.as_fd())
    }

    fn finish(mut self: Box<Self>, _ops: &[Op<'_>]) -> Answers {
        let mut byte = [0u8];
        self.client.read_exact(&mut byte).unwrap();
        let name = thread::current().name().unwrap_or_default().to_owned();
        self.socket.readers.lock().push(name);
        self.socket.read.lock().push(self.serial);
        self.socket.unread.store(false, Ordering::SeqCst);
        self.answers
    }
}

impl Backend for Socket {
    fn describe(&self) -> String {
        self.node.describe()
    }

    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        if self.unread.swap(true, Ordering::SeqCst) {
            self.over_unread.fetch_add(1, Ordering::SeqCst);
        }
        let serial = self.sent.fetch_add(1, Ordering::SeqCst);
        *self.last_sent.lock() = Some(Instant::now());
        let (client, mut server) = UnixStream::pair().unwrap();
        let delay = self.delay;
        thread::spawn(move || {
            thread::sleep(delay);
            let _ = server.write_all(b"!");
        });
        Box::new(Flight {
            socket: self.clone(),
            serial,
            client,
            answers: run(&self.node, ops),
        })
    }

    fn call_timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(5))
    }
}

fn sockets(n: usize, delay: Duration) -> Vec<Socket> {
    (0..n)
        .map(|i| Socket {
            node: MemoryBackend::new(format!("socket-{i}")),
            delay,
            unread: Arc::default(),
            over_unread: Arc::default(),
            sent: Arc::default(),
            last_sent: Arc::default(),
            read: Arc::default(),
            readers: Arc::default(),
        })
        .collect()
}

fn engine(sockets: &[Socket]) -> Engine {
    let backends = sockets
        .iter()
        .map(|s| Arc::new(s.clone()) as Arc<dyn Backend>)
        .collect();
    crate::engine::tests::engine_of(backends, majority(sockets.len()))
}

fn request<'a>(action: Action, hold: &'a Hold, token: Token) -> Request<'a> {
    Request {
        action,
        hold,
        token,
    }
}

const THREADS: usize = 6;
const LOCKS: usize = 20;

/// `THREADS` callers each take and release `LOCKS` locks of their own
/// on `sockets` through `engine`; every round is decided as asked.
fn take_turns(engine: &Engine, sockets: &[Socket]) {
    thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..LOCKS {
                    let hold = Hold::Lock(KeySet::one(format!("t{t}:{i}")));
                    let token = Token::random().unwrap();
                    let ttl = Duration::from_secs(30);
                    let wait = Duration::from_secs(10);
                    let acquire = request(Action::Acquire { ttl }, &hold, token);
                    let quorum = majority(sockets.len());
                    let gather = Gather::UntilDecided { quorum };
                    let got = engine.round(&acquire, gather, wait, Direct::IdleNodes);
                    let grants = got.iter().filter(|o| o.is_granted()).count();
                    assert!(grants >= quorum, "t{t}:{i}: {got:?}");
                    let release = request(Action::Release, &hold, token);
                    let gone = engine.round(&release, Gather::All, wait, Direct::IdleNodes);
                    assert!(
                        gone.iter().all(|o| !matches!(o, NodeOutcome::Failed(_))),
                        "t{t}:{i}: {gone:?}"
                    );
                }
            });
        }
    });
}

#[test]
fn batches_queued_behind_a_busy_node_are_read_by_the_reader_once_each_in_order() {
    let sockets = sockets(3, Duration::from_millis(2));
    let engine = engine(&sockets);
    take_turns(&engine, &sockets);
    assert!(engine.flush(Duration::from_secs(30)));
    for (i, socket) in sockets.iter().enumerate() {
        assert_eq!(socket.over_unread.load(Ordering::SeqCst), 0, "node {i}");
        let sent = socket.sent.load(Ordering::SeqCst);
        let read = socket.read.lock().clone();
        assert_eq!(
            read,
            (0..sent).collect::<Vec<_>>(),
            "node {i}: read once each, in order"
        );
        let readers = socket.readers.lock().clone();
        assert!(
            readers.iter().any(|r| r == "quorum-lock-reader"),
            "node {i}: the reader read none of {sent} batches: {readers:?}"
        );
        assert_eq!(socket.node.key_count(), 0, "node {i}: every lock released");
        // Every operation read was uncounted, whoever read it: the node
        // is idle again. (The node's thread answers the flush's barrier
        // before it uncounts the batch that held it: the count is read
        // once it has settled, within a bound.)
        let gate = &engine.nodes[i].exec.gate;
        let settled = Instant::now() + Duration::from_secs(10);
        while gate.queued() != 0 && Instant::now() < settled {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(gate.queued(), 0, "node {i}: counted");
    }
}

/// Dropping the engine while a batch a caller waited on is parked with
/// the reader: the reader reads it as it stops, and the releases queued
/// behind it still go out.
#[test]
fn an_engine_dropped_with_a_batch_parked_reads_it_and_sends_what_queued_behind() {
    let sockets = sockets(3, Duration::from_millis(200));
    let engine = engine(&sockets);
    let gather = Gather::UntilDecided { quorum: 2 };
    let wait = Duration::from_millis(20);
    let ttl = Duration::from_secs(30);
    let token = Token::random().unwrap();
    let (a, b) = (Hold::Lock(KeySet::one("a")), Hold::Lock(KeySet::one("b")));
    // A's round gives up before its answers (200 ms away): its batches
    // stay parked unread. B's round finds them there, gives up too and
    // hands its acquire to the nodes' threads, which read A's batches and
    // then send B's: a batch a caller waited on, parked with the reader.
    for hold in [&a, &b] {
        let acquire = request(Action::Acquire { ttl }, hold, token);
        let got = engine.round(&acquire, gather, wait, Direct::IdleNodes);
        assert!(got.iter().all(|o| !o.is_granted()), "{got:?}");
    }
    let on_the_wire = || sockets.iter().all(|s| s.sent.load(Ordering::SeqCst) >= 2);
    let given_up = Instant::now() + Duration::from_secs(10);
    while !on_the_wire() && Instant::now() < given_up {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(on_the_wire(), "B's acquire never went out");
    // Queued behind B's batch, for whoever reads it.
    engine.release_detached(&a, token);
    engine.release_detached(&b, token);
    let parked_for = sockets[0].last_sent.lock().map(|at| at.elapsed());
    drop(engine);
    for (i, socket) in sockets.iter().enumerate() {
        let sent = socket.sent.load(Ordering::SeqCst);
        assert_eq!(socket.read.lock().len(), sent, "node {i}: every batch read");
        assert_eq!(socket.over_unread.load(Ordering::SeqCst), 0, "node {i}");
        let ops = socket.node.operations();
        assert_eq!(ops, 4, "node {i}: both acquires and both releases");
        assert_eq!(socket.node.key_count(), 0, "node {i}: both keys released");
    }
    // The reader's stop reads the nodes' batches one after the other,
    // each up to its answer, and a node's thread may read its own first,
    // at its due time (50 ms after it was parked): the first node's is
    // the reader's when the drop came well before that (a precondition
    // measured, as a loaded machine may hold this thread longer).
    if parked_for.is_some_and(|parked| parked < Duration::from_millis(10)) {
        let first = sockets[0].readers.lock().clone();
        assert!(
            first.iter().any(|r| r == "quorum-lock-reader"),
            "B's batch on the first node was not read by the reader: {first:?}"
        );
    }
}
