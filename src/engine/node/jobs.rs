//! What a node's thread is asked to do ([`Job`]), where its answers go
//! ([`ReplyTo`]), what a proclaim and an inspection carry and answer, the
//! batch a decided round leaves unread ([`Unread`]), and why a job was
//! not queued ([`NotQueued`], against the queue's bound). The thread that
//! runs them is `worker.rs`; the queue they travel in is `queue.rs`.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::{Item, Sent};
use crate::backend::{BackendError, BackendErrorKind, Holding, KeySet, Reply};
use crate::engine::ballots::Ballot;
use crate::report::NodeOutcome;

/// Most operations queued for one node and not yet run.
pub(crate) const MAX_QUEUED: usize = 100_000;

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotQueued {
    /// The node's thread has stopped.
    Gone,
    /// [`MAX_QUEUED`] operations are already waiting.
    Full,
}

impl NotQueued {
    /// The node's outcome in a round whose operation was not queued.
    pub(crate) fn outcome(self) -> NodeOutcome {
        NodeOutcome::Failed(match self {
            NotQueued::Gone => BackendError::new(
                BackendErrorKind::Panicked,
                "the node's worker thread has stopped",
            ),
            NotQueued::Full => BackendError::new(
                BackendErrorKind::Other,
                format!(
                    "{MAX_QUEUED} operations are already waiting for this node: it is too slow for the load"
                ),
            ),
        })
    }
}

/// Where a node sends the answer for one operation.
#[derive(Clone)]
pub(crate) struct ReplyTo {
    /// The round's ballot box.
    pub(crate) ballot: Ballot,
    /// This node's slot in it (its place in the configuration).
    pub(crate) slot: usize,
}

/// What a node's thread is asked to do: work, or one of three control
/// messages.
pub(crate) enum Job {
    /// Work for the node, run in queue order (per-node FIFO).
    Work(Work),
    /// Answered once every job queued before it has run. With `listen`,
    /// the thread first subscribes for the watched keys (the watch changed),
    /// before running any op of its batch.
    Barrier {
        listen: bool,
        done: crate::mailbox::Sender<()>,
    },
    /// Wakes the thread to look at its timers and notices now. With
    /// `probe`, it also probes the node now if it is marked down (its
    /// backend reported a recovery), so that the ops queued after it go to
    /// the node. (A wake time a driver moved earlier is told without a
    /// job: [`Sender::wake_by`](super::queue::Sender::wake_by).)
    Wake { probe: bool },
    /// Asks the thread to wake the other nodes' threads that sleep with
    /// work queued (sent quietly), before its own round trip: the second
    /// link of a wake chain (`../../scatter.rs`, `send_releases`).
    Nudge,
}

/// Work for a node's thread.
pub(crate) enum Work {
    /// A lock operation. `reply` is `None` for fire-and-forget releases.
    Op { item: Item, reply: Option<ReplyTo> },
    /// Read what a key holds ([`Inspect::inspect`](crate::backend::Inspect::inspect))
    /// and answer on `reply`, with this node's `slot`.
    Inspect {
        key: Arc<[u8]>,
        reply: Sender<Inspected>,
        slot: usize,
    },
    /// Write an election leader's record where its lock key holds its
    /// token ([`OpKind::Proclaim`](crate::backend::OpKind::Proclaim)),
    /// in line with the node's other work, and answer on `reply`.
    Proclaim {
        record: Arc<Record>,
        reply: Sender<Proclaimed>,
        slot: usize,
    },
}

/// What a proclaim writes, owned (its op borrows it).
pub(crate) struct Record {
    /// The election's lock key.
    pub(crate) lock: KeySet,
    /// The value the lock key holds while this leader leads.
    pub(crate) stored: Vec<u8>,
    /// The record's key and what it is set to.
    pub(crate) key: Vec<u8>,
    pub(crate) record: Vec<u8>,
}

/// One node's answer to a proclaim.
pub(crate) struct Proclaimed {
    /// The node's slot.
    pub(crate) slot: usize,
    /// Its answer: yes where the record was written.
    pub(crate) reply: Result<Reply, BackendError>,
}

/// One node's answer to an inspection.
pub(crate) struct Inspected {
    /// The node's slot (its place in the configuration).
    pub(crate) slot: usize,
    /// What the key holds there.
    pub(crate) holding: Result<Option<Holding>, BackendError>,
}

/// A batch nobody reads in place, parked in the node's state until it is
/// read: one a caller sent and no longer waits for (its round was
/// decided, [`State::park_unread`](super::State::park_unread)), or one
/// sent for queued operations and parked with the reader
/// ([`State::park_watched`](super::State::park_watched)).
pub(crate) struct Unread {
    pub(crate) sent: Sent,
    pub(crate) replies: Replies,
    /// Set when the reader watches it.
    pub(crate) watched: Option<Watched>,
}

/// Where a parked batch's answers go, one per item in order.
pub(crate) enum Replies {
    /// A caller's one operation.
    One(Option<ReplyTo>),
    /// Queued operations'.
    Many(Vec<Option<ReplyTo>>),
}

impl Replies {
    /// The `i`th item's.
    pub(crate) fn get(&self, i: usize) -> Option<&ReplyTo> {
        match self {
            Replies::One(reply) => reply.as_ref().filter(|_| i == 0),
            Replies::Many(replies) => replies.get(i).and_then(Option::as_ref),
        }
    }
}

/// What a batch parked with the reader carries: a driver count on the
/// node's queue (operations queued behind it wake nobody: the reader
/// sends them next), how many of its operations the gate still counts
/// (uncounted by whoever reads it), and the token its readiness comes
/// back with.
pub(crate) struct Watched {
    pub(crate) driving: super::queue::Driving<Job>,
    pub(crate) counted: usize,
    pub(crate) token: u64,
}
