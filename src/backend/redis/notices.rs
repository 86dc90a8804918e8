//! The release notices of one Redis server: one subscriber connection per
//! listener (per manager and node), apart from the pool, that `SUBSCRIBE`s
//! to `quorum-lock:released:<key>` for the keys someone waits for.
//!
//! A connection in subscribed mode only carries pub/sub replies, so it can
//! never serve a lock operation: that is why it is not a pooled one. Its
//! replies are read with the same framing and size limits as any other.
//!
//! Over TCP and Unix sockets a thread of the subscriber's own blocks on
//! the connection and hands each reply over as it arrives, waking the node
//! thread ([`ReleaseListener::wake_on_arrival`]): a process whose threads
//! wait for a lock sleeps until a release. The node thread writes the
//! `SUBSCRIBE`s on a second handle of the same socket. Over TLS, whose one
//! session cannot be read and written by two threads, the node thread
//! reads what has arrived between jobs (it polls while someone waits).

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{
    BackendError, BackendErrorKind, NoticeWaker, RELEASE_CHANNEL_PREFIX, ReleaseListener,
};

use super::Inner;
use super::conn::Conn;
use super::fault::{Fault, Phase};
#[cfg(feature = "tls")]
use super::transport::Target;
use super::transport::Transport;
use crate::mailbox;

/// Most replies read from the subscriber per [`receive`](ReleaseListener::receive):
/// one call never spends long on a flood of notices (the rest wait for
/// the next call, a moment later).
const MAX_NOTICES_PER_TAKE: usize = 256;

/// How long the reader thread blocks in one read before it reads again:
/// long, since nothing is due when nothing arrives (the thread ends when
/// the connection is shut down or lost).
const READER_WAIT: Duration = Duration::from_secs(3600);

/// The reader thread's stack: it reads one reply at a time into a 16 KiB
/// chunk and parses it (nesting is bounded by the framing's limits).
const READER_STACK: usize = 256 * 1024;

/// A subscriber to one server's release notices.
pub(super) struct Subscriber {
    inner: Arc<Inner>,
    link: Option<Link>,
    /// Keys whose channels this connection is subscribed to (confirmed).
    keys: HashSet<Vec<u8>>,
    /// Notices read while waiting for a confirmation, not yet taken.
    arrived: Vec<Vec<u8>>,
    /// Set when the owner sleeps until notices arrive: each new connection
    /// then gets a reader thread that wakes it.
    waker: Option<NoticeWaker>,
}

/// What one pub/sub reply says.
enum Push {
    /// A release notice for this key.
    Released(Vec<u8>),
    /// A `SUBSCRIBE` confirmed for this key.
    Subscribed(Vec<u8>),
    /// Anything else a subscriber may see (an `UNSUBSCRIBE` confirmed, a
    /// message on a channel that is not ours).
    Other,
}

/// An open subscriber connection.
enum Link {
    /// Read by a thread of its own, which passes each reply (or the
    /// connection's end) on `replies` and rings the waker; the node thread
    /// writes on `writer`.
    Evented {
        writer: Writer,
        replies: mailbox::Receiver<Result<Value, Fault>>,
    },
    /// Read by the owner, between jobs (TLS). Boxed: a connection is
    /// larger than the evented link.
    Polled(Box<Conn>),
}

/// The writing handle of an evented link. Dropping it shuts the socket
/// down, which ends the reader thread's blocking read, and the thread.
struct Writer(Transport);

impl Drop for Writer {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl Link {
    /// Opens a connection to the server, read by a thread of its own when
    /// there is a `waker` to ring.
    fn open(
        inner: &Inner,
        waker: Option<&NoticeWaker>,
        deadline: Instant,
    ) -> Result<Self, Failure> {
        let conn = Conn::open(&inner.target, &inner.setup, deadline)
            .map_err(|fault| Failure::Fault(fault, true))?;
        let Some(waker) = waker else {
            return Ok(Self::Polled(Box::new(conn)));
        };
        let writer = match conn.writer() {
            Some(Ok(writer)) => Writer(writer),
            Some(Err(e)) => return Err(Failure::NoReader(e.to_string())),
            // Never asked: `wake_on_arrival` declines over TLS.
            None => return Ok(Self::Polled(Box::new(conn))),
        };
        // Not a `crossbeam_channel`: the node thread waits here for
        // each SUBSCRIBE's confirmation, and that channel's receive
        // yields the CPU before it sleeps (`mailbox.rs`).
        let (sender, replies) = mailbox::channel();
        let waker = waker.clone();
        thread::Builder::new()
            .name("quorum-lock-notices".into())
            .stack_size(READER_STACK)
            .spawn(move || read_replies(conn, &sender, &waker))
            .map_err(|e| Failure::NoReader(e.to_string()))?;
        Ok(Self::Evented { writer, replies })
    }

    fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), Fault> {
        match self {
            Self::Evented { writer, .. } => writer.0.write_all(request, deadline, Phase::Request),
            Self::Polled(conn) => conn.send(request, deadline),
        }
    }

    /// The next reply, waiting for it until `deadline`.
    fn next(&mut self, deadline: Instant) -> Result<Value, Fault> {
        match self {
            Self::Evented { replies, .. } => match replies.recv_until(Some(deadline)) {
                Ok(reply) => reply,
                Err(mailbox::Empty::Waiting) => Err(Fault::Timeout {
                    phase: Phase::Request,
                    received: 0,
                }),
                Err(mailbox::Empty::Closed) => Err(ended()),
            },
            Self::Polled(conn) => conn.read(deadline),
        }
    }

    /// The replies that have arrived, at most `max`, without waiting.
    fn ready(&mut self, max: usize) -> Result<Vec<Value>, Fault> {
        match self {
            Self::Evented { replies, .. } => {
                let mut ready = Vec::new();
                while ready.len() < max {
                    match replies.try_recv() {
                        Ok(reply) => ready.push(reply?),
                        Err(mailbox::Empty::Waiting) => break,
                        Err(mailbox::Empty::Closed) => return Err(ended()),
                    }
                }
                Ok(ready)
            }
            Self::Polled(conn) => conn.read_ready(max),
        }
    }
}

/// The reader thread's failure to report once its channel is gone (it
/// reports its own failure before it ends, so this is seen only if it
/// could not).
fn ended() -> Fault {
    Fault::Closed {
        phase: Phase::Request,
    }
}

/// The reader thread of an evented link: blocks on the connection, passes
/// each reply on and rings the waker, until the connection ends (the
/// subscriber shut it down, or it was lost: that is passed on too) or the
/// subscriber is gone.
fn read_replies(
    mut conn: Conn,
    replies: &mailbox::Sender<Result<Value, Fault>>,
    waker: &NoticeWaker,
) {
    loop {
        let reply = match conn.read(Instant::now() + READER_WAIT) {
            // Nothing (or part of a reply, kept) arrived: read on.
            Err(Fault::Timeout { .. }) => continue,
            reply => reply,
        };
        let last = reply.is_err();
        if replies.send(reply).is_err() {
            return;
        }
        waker.wake();
        if last {
            return;
        }
    }
}

impl Subscriber {
    pub(super) fn new(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            link: None,
            keys: HashSet::new(),
            arrived: Vec::new(),
            waker: None,
        }
    }

    /// Sends the changes from the current subscriptions to `wanted` on
    /// the open connection (opening one if needed) and waits for every new
    /// subscription's confirmation, by `deadline`.
    fn change(&mut self, wanted: &HashSet<Vec<u8>>, deadline: Instant) -> Result<(), Failure> {
        let fresh = self.link.is_none();
        if fresh {
            self.keys.clear();
            self.link = Some(Link::open(&self.inner, self.waker.as_ref(), deadline)?);
        }
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        let gone: Vec<&Vec<u8>> = self.keys.difference(wanted).collect();
        let mut pending: HashSet<Vec<u8>> = wanted.difference(&self.keys).cloned().collect();
        let mut buf = Vec::new();
        if !gone.is_empty() {
            let mut cmd = redis::cmd("UNSUBSCRIBE");
            for key in &gone {
                cmd.arg(channel(key));
            }
            cmd.write_packed_command(&mut buf);
        }
        if !pending.is_empty() {
            let mut cmd = redis::cmd("SUBSCRIBE");
            for key in &pending {
                cmd.arg(channel(key));
            }
            cmd.write_packed_command(&mut buf);
        }
        if buf.is_empty() {
            return Ok(());
        }
        // From here on the server may have dropped some subscriptions and
        // not confirmed others: until this completes, none counts.
        self.keys.clear();
        link.send(&buf, deadline)
            .map_err(|fault| Failure::Fault(fault, fresh))?;
        let mut read = 0usize;
        while !pending.is_empty() {
            let reply = link
                .next(deadline)
                .map_err(|fault| Failure::Fault(fault, fresh && read == 0))?;
            read += 1;
            match classify(reply) {
                Ok(Push::Subscribed(key)) => {
                    pending.remove(&key);
                }
                Ok(Push::Released(key)) => self.arrived.push(key),
                Ok(Push::Other) => {}
                Err(refused) => return Err(refused),
            }
        }
        self.keys = wanted.clone();
        Ok(())
    }

    /// The error for `failure`, with the connection dropped.
    fn fail(&mut self, failure: Failure) -> BackendError {
        self.link = None;
        self.keys.clear();
        match failure {
            Failure::Fault(fault, _) => self.inner.fault_error(&fault),
            // A refusal is for good (an ACL without the pub/sub commands
            // or channels, a proxy without pub/sub): say so by the kind.
            Failure::ErrorReply(e) => {
                let error = self.inner.server_error(&e, None);
                if error.kind().is_permanent() {
                    error
                } else {
                    BackendError::new(BackendErrorKind::Config, error.message())
                }
            }
            Failure::Unexpected(value) => self.inner.protocol_error("SUBSCRIBE", &value),
            Failure::NoReader(why) => self.inner.node_error(
                BackendErrorKind::Other,
                &format!("cannot start the release notices' reader thread: {why}"),
                None,
            ),
        }
    }
}

/// Why a change of subscriptions failed.
enum Failure {
    /// The connection failed; `true` when nothing had been read on a
    /// connection reused from before (it may simply have gone stale: one
    /// more try on a new one is worth it).
    Fault(Fault, bool),
    /// The server answered with an error (e.g. `NOPERM` for a channel the ACL does not
    /// allow, or a proxy without pub/sub).
    ErrorReply(redis::ServerError),
    /// A reply a subscriber should never see.
    Unexpected(Value),
    /// The connection's reader thread (or the socket handle it needs)
    /// could not be had.
    NoReader(String),
}

impl ReleaseListener for Subscriber {
    fn listen(&mut self, keys: &[&[u8]]) -> Result<(), BackendError> {
        let deadline = self.inner.deadline();
        let wanted: HashSet<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        if wanted.is_empty() && self.link.is_none() {
            self.keys.clear();
            return Ok(());
        }
        match self.change(&wanted, deadline) {
            Ok(()) => Ok(()),
            // A connection kept from an earlier wait that the server has
            // closed since: once more on a new one, within the deadline.
            Err(Failure::Fault(Fault::Closed { .. }, false)) => {
                self.link = None;
                self.change(&wanted, deadline).map_err(|f| self.fail(f))
            }
            Err(failure) => Err(self.fail(failure)),
        }
    }

    fn receive(&mut self) -> Result<Vec<Vec<u8>>, BackendError> {
        let mut arrived = std::mem::take(&mut self.arrived);
        let Some(link) = self.link.as_mut() else {
            return Ok(arrived);
        };
        let replies = match link.ready(MAX_NOTICES_PER_TAKE) {
            Ok(replies) => replies,
            Err(fault) => return Err(self.fail(Failure::Fault(fault, false))),
        };
        for reply in replies {
            match classify(reply) {
                Ok(Push::Released(key)) => arrived.push(key),
                Ok(Push::Subscribed(_) | Push::Other) => {}
                Err(failure) => return Err(self.fail(failure)),
            }
        }
        Ok(arrived)
    }

    /// Yes over TCP and Unix sockets (a reader thread per connection); no
    /// over TLS (the owner polls).
    fn wake_on_arrival(&mut self, waker: NoticeWaker) -> bool {
        #[cfg(feature = "tls")]
        if matches!(self.inner.target, Target::Tls { .. }) {
            return false;
        }
        self.waker = Some(waker);
        true
    }

    /// Yes: the reader thread rings with nothing locked (it has passed the
    /// reply on its channel, which `receive` empties without waiting).
    fn may_receive_in_wake(&self) -> bool {
        true
    }
}

/// The channel that announces the releases of `key`.
pub(super) fn channel(key: &[u8]) -> Vec<u8> {
    let mut channel = RELEASE_CHANNEL_PREFIX.as_bytes().to_vec();
    channel.extend_from_slice(key);
    channel
}

/// The key a channel of ours announces, `None` for any other channel.
fn key_of(channel: &[u8]) -> Option<Vec<u8>> {
    channel
        .strip_prefix(RELEASE_CHANNEL_PREFIX.as_bytes())
        .map(<[u8]>::to_vec)
}

/// What a reply on the subscriber connection says.
fn classify(reply: Value) -> Result<Push, Failure> {
    let items = match reply {
        Value::Array(items) => items,
        Value::ServerError(e) => return Err(Failure::ErrorReply(e)),
        other => return Err(Failure::Unexpected(other)),
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    let (kind, name) = (text(items.first()), text(items.get(1)));
    Ok(match (kind.as_deref(), name.as_deref().and_then(key_of)) {
        (Some(b"message"), Some(key)) => Push::Released(key),
        (Some(b"subscribe"), Some(key)) => Push::Subscribed(key),
        (Some(b"message" | b"subscribe" | b"unsubscribe"), _) => Push::Other,
        _ => return Err(Failure::Unexpected(Value::Array(items))),
    })
}
