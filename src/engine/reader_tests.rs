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
use crate::clock::MonotonicClock;
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
    /// Batches sent and read, by serial number.
    sent: Arc<AtomicUsize>,
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
    let settings = Settings {
        quorum: majority(sockets.len()),
        quarantine: None,
        max_ttl: Duration::from_secs(60),
        forget_window: Duration::from_secs(60),
        drain_wait: Duration::from_secs(10),
        clock: Arc::new(MonotonicClock),
        fence_counters: b"{quorum-lock}:fences".to_vec(),
        rights_key: b"{quorum-lock}:probe".to_vec(),
        accept_eviction: false,
        value_suffix: Box::default(),
    };
    Engine::start(backends, settings).unwrap()
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
        assert!(
            socket
                .readers
                .lock()
                .iter()
                .any(|r| r == "quorum-lock-reader"),
            "node {i}: the reader read none of {sent} batches: {:?}",
            socket.readers.lock()
        );
        assert_eq!(socket.node.key_count(), 0, "node {i}: every lock released");
    }
}

/// Dropping the engine while batches are parked with the reader: they
/// are read, and what was queued behind them still goes out.
#[test]
fn an_engine_dropped_with_batches_parked_still_sends_what_was_queued() {
    let sockets = sockets(3, Duration::from_millis(200));
    let engine = engine(&sockets);
    let holds: Vec<Hold> = (0..THREADS * 4)
        .map(|i| Hold::Lock(KeySet::one(format!("k{i}"))))
        .collect();
    let token = Token::random().unwrap();
    // The first release goes out on every node (its answer 200 ms away);
    // the rest queue behind it, for the reader to send once it has read
    // the first, and the engine is dropped before that.
    engine.release_detached(&holds[0], token);
    let on_the_wire = || sockets.iter().all(|s| s.sent.load(Ordering::SeqCst) >= 1);
    let given_up = Instant::now() + Duration::from_secs(10);
    while !on_the_wire() && Instant::now() < given_up {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(on_the_wire(), "the first release never went out");
    for hold in &holds[1..] {
        engine.release_detached(hold, token);
    }
    drop(engine);
    for (i, socket) in sockets.iter().enumerate() {
        let sent = socket.sent.load(Ordering::SeqCst);
        assert_eq!(socket.read.lock().len(), sent, "node {i}: every batch read");
        assert_eq!(socket.over_unread.load(Ordering::SeqCst), 0, "node {i}");
        let ops = usize::try_from(socket.node.operations()).unwrap();
        assert_eq!(ops, holds.len(), "node {i}: every release sent");
        assert!(sent > 1, "node {i}: the releases queued behind the first");
    }
}
