//! The reader: one thread per engine that reads the batches nobody waits
//! on in a read, for every node at once.
//!
//! A batch sent for queued operations (by the node's thread, or by a
//! caller that drove the node and runs what was queued behind it) has no
//! caller waiting in its read: each of its operations' callers sleeps on
//! its round's ballot. Read by the node's thread, it costs that thread a
//! sleep per batch, one thread per node; here one thread sleeps in one
//! `epoll_wait` over every node's socket, and a wake-up reads whatever
//! answers are in (counted in docs/benchmarks.md: at 8 caller threads on
//! three nodes about 0.3 sleeps per lock instead of 1.2).
//!
//! Such a batch is parked in the node's state as a late answer is
//! (`node/unread.rs`: nothing is sent over it, whoever sends next reads
//! it first), with what makes it the reader's (`State::park_watched`):
//!
//! - its operations stay counted at the gate until they are read, so the
//!   node is busy and callers queue behind it (`gate.rs`);
//! - it carries a driver count on the node's queue, so what is queued
//!   behind it wakes nobody (`node/queue.rs`): the reader sends it next;
//! - its socket is armed in the reader's set once (`EPOLLONESHOT`), with a
//!   token naming the node and the batch, so a readiness that comes late,
//!   for a batch someone else has read, names a batch no longer parked
//!   and is dropped.
//!
//! On a readiness the reader takes the node's state, reads the batch if it
//! is still the one parked with that token, passes its votes on, and sends
//! the operations queued behind it as the next batch, parked with it
//! again; with nothing queued (or a job that is not an operation first,
//! which the node's thread runs) its driver count ends and the node is
//! idle again. The node's thread still reads such a batch when it falls
//! due ([`WATCH_GRACE`]) or before it sends anything itself: the reader
//! is a shortcut, never the only way a batch is read.
//!
//! Only a batch some caller waits on (a batch of detached releases alone
//! saves nobody a hop, and the reader is one thread for every node: see
//! `worker.rs`, `send_ops`), only where the backend hands out the
//! descriptor the answers arrive on (`InFlight::readable_fd`: a plain
//! connection of the Redis backend), and only on Linux; elsewhere the
//! node's thread reads the batch in place, as before.

use std::sync::{Arc, Weak};
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::node::jobs::Job;
use super::node::queue;
use super::node::worker::NodeExec;

/// How long a batch parked with the reader waits before the node's thread
/// reads it itself: only if the reader has not (it reads it when its
/// answers arrive); a bound, not a delay.
pub(crate) const WATCH_GRACE: Duration = Duration::from_millis(50);

/// The token of the wake-up that stops the reader.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
const STOP: u64 = u64::MAX;

/// A token for node `index`'s batch number `serial`.
pub(crate) fn token(index: usize, serial: u32) -> u64 {
    ((index as u64) << 32) | u64::from(serial)
}

#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
fn node_of(token: u64) -> usize {
    usize::try_from(token >> 32).unwrap_or(usize::MAX)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod set {
    use std::os::fd::BorrowedFd;

    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
    use nix::sys::eventfd::{EfdFlags, EventFd};

    use super::STOP;

    /// The reader's `epoll` set, and the `eventfd` that stops it.
    pub(super) struct Set {
        epoll: Epoll,
        stop: EventFd,
    }

    impl Set {
        pub(super) fn new() -> Option<Self> {
            let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).ok()?;
            let stop = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC).ok()?;
            epoll
                .add(&stop, EpollEvent::new(EpollFlags::EPOLLIN, STOP))
                .ok()?;
            Some(Self { epoll, stop })
        }

        /// Arms `fd` for one readiness, reported with `token`: its
        /// registration changed if it has one, else added.
        pub(super) fn arm(&self, fd: BorrowedFd<'_>, token: u64) -> bool {
            let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT;
            let mut event = EpollEvent::new(flags, token);
            self.epoll.modify(fd, &mut event).is_ok() || self.epoll.add(fd, event).is_ok()
        }

        /// Disarms `fd`: a readiness armed for a batch someone else read
        /// would otherwise report the next answers on the connection.
        pub(super) fn disarm(&self, fd: BorrowedFd<'_>) {
            let mut event = EpollEvent::new(EpollFlags::EPOLLONESHOT, 0);
            let _ = self.epoll.modify(fd, &mut event);
        }

        /// Waits for readiness: the tokens, into `into`.
        pub(super) fn wait(&self, into: &mut Vec<u64>) {
            let mut events = [EpollEvent::empty(); 16];
            if let Ok(n) = self.epoll.wait(&mut events, EpollTimeout::NONE) {
                into.extend(events.iter().take(n).map(EpollEvent::data));
            }
        }

        pub(super) fn ring_stop(&self) {
            let _ = self.stop.write(1);
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod set {
    /// No reader here: node threads read their batches in place.
    pub(super) struct Set;

    impl Set {
        pub(super) fn new() -> Option<Self> {
            None
        }
    }
}

/// The reader as the nodes see it: where a batch is parked with it. The
/// thread and its `epoll` set are started with the first batch parked
/// (a manager whose backends give no descriptor never starts them), and
/// stopped when the engine drops ([`Watcher::stop`]).
pub(crate) struct Watcher {
    /// The nodes, given once they exist; weakly, as the watcher is part of
    /// their state. The thread holds them strongly while it runs.
    nodes: Mutex<Vec<(Weak<NodeExec>, queue::Handle<Job>)>>,
    phase: Mutex<Phase>,
}

enum Phase {
    /// Nothing parked with it yet.
    Idle,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Running {
        set: Arc<set::Set>,
        thread: JoinHandle<()>,
    },
    /// Stopped, or could not start: batches are read in place.
    Off,
}

impl Watcher {
    /// The reader of an engine, if this platform has one.
    pub(crate) fn new() -> Option<Arc<Self>> {
        if !cfg!(any(target_os = "linux", target_os = "android")) {
            return None;
        }
        Some(Arc::new(Self {
            nodes: Mutex::new(Vec::new()),
            phase: Mutex::new(Phase::Idle),
        }))
    }

    /// The nodes it reads for, in configuration order, with their queues
    /// (handles only: they keep nothing open).
    pub(crate) fn set_nodes(&self, nodes: Vec<(Weak<NodeExec>, queue::Handle<Job>)>) {
        *self.nodes.lock() = nodes;
    }

    /// Arms `fd` for the batch `token` names (starting the reader with
    /// the first). `false` once it has stopped or could not start, or
    /// when the set refuses it: the batch is then read in place.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn arm(&self, fd: std::os::fd::BorrowedFd<'_>, token: u64) -> bool {
        let set = {
            let mut phase = self.phase.lock();
            if matches!(*phase, Phase::Idle) {
                *phase = self.start().unwrap_or(Phase::Off);
            }
            match &*phase {
                Phase::Running { set, .. } => Arc::clone(set),
                Phase::Idle | Phase::Off => return false,
            }
        };
        set.arm(fd, token)
    }

    /// Disarms `fd`, armed for a batch read by someone else.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn disarm(&self, fd: std::os::fd::BorrowedFd<'_>) {
        if let Phase::Running { set, .. } = &*self.phase.lock() {
            set.disarm(fd);
        }
    }

    /// The set and the thread, over the nodes given.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn start(&self) -> Option<Phase> {
        let nodes: Vec<(Arc<NodeExec>, queue::Handle<Job>)> = self
            .nodes
            .lock()
            .iter()
            .map(|(exec, queue)| Some((exec.upgrade()?, queue.clone())))
            .collect::<Option<_>>()?;
        let set = Arc::new(set::Set::new()?);
        let shared = Arc::clone(&set);
        let thread = std::thread::Builder::new()
            .name("quorum-lock-reader".into())
            .spawn(move || run(&shared, &nodes))
            .ok()?;
        Some(Phase::Running { set, thread })
    }

    /// Stops the reader, if it runs, and waits for it: it reads what is
    /// parked with it, and nothing is parked with it after this.
    pub(crate) fn stop(&self) {
        let phase = std::mem::replace(&mut *self.phase.lock(), Phase::Off);
        // The lock is let go first: the reader arms batches through it
        // until it sees the stop.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Phase::Running { set, thread } = phase {
            set.ring_stop();
            let _ = thread.join();
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        drop(phase);
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn run(set: &set::Set, nodes: &[(Arc<NodeExec>, queue::Handle<Job>)]) {
    let mut ready = Vec::new();
    loop {
        ready.clear();
        set.wait(&mut ready);
        for &token in &ready {
            if token == STOP {
                // What is parked with it now is read here, and what is
                // queued behind it left to the node's thread; a batch
                // parked after this look is read by the node's thread
                // (before it sends anything, at its due time, or when its
                // queue closes): none is lost.
                for (exec, queue) in nodes {
                    exec.read_watched(None, queue, false);
                }
                return;
            }
            if let Some((exec, queue)) = nodes.get(node_of(token)) {
                exec.read_watched(Some(token), queue, true);
            }
        }
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
#[path = "reader_tests.rs"]
mod tests;
