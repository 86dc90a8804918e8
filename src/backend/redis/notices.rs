//! The release notices of one Redis server: one subscriber connection per
//! listener (per manager and node), apart from the pool, that `SUBSCRIBE`s
//! to `quorum-lock:released:<key>` for the keys someone waits for.
//!
//! A connection in subscribed mode only carries pub/sub replies, so it can
//! never serve a lock operation: that is why it is not a pooled one. Its
//! replies are read with the same framing and size limits as any other;
//! between jobs the node thread reads only what has already arrived.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::backend::{BackendError, BackendErrorKind, RELEASE_CHANNEL_PREFIX, ReleaseListener};

use super::Inner;
use super::conn::Conn;
use super::transport::Fault;

/// Most replies read from the subscriber per [`receive`](ReleaseListener::receive):
/// one call never spends long on a flood of notices (the rest wait for
/// the next call, a few milliseconds later).
const MAX_NOTICES_PER_TAKE: usize = 256;

/// A subscriber to one server's release notices.
pub(super) struct Subscriber {
    inner: Arc<Inner>,
    conn: Option<Conn>,
    /// Keys whose channels this connection is subscribed to (confirmed).
    keys: HashSet<Vec<u8>>,
    /// Notices read while waiting for a confirmation, not yet taken.
    arrived: Vec<Vec<u8>>,
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

impl Subscriber {
    pub(super) fn new(inner: Arc<Inner>) -> Self {
        Self {
            inner,
            conn: None,
            keys: HashSet::new(),
            arrived: Vec::new(),
        }
    }

    /// Sends the changes from the current subscriptions to `wanted` on
    /// the open connection (opening one if needed) and waits for every new
    /// subscription's confirmation, by `deadline`.
    fn change(&mut self, wanted: &HashSet<Vec<u8>>, deadline: Instant) -> Result<(), Failure> {
        let fresh = self.conn.is_none();
        if fresh {
            self.keys.clear();
            let conn = Conn::open(&self.inner.target, &self.inner.setup, deadline)
                .map_err(|fault| Failure::Fault(fault, true))?;
            self.conn = Some(conn);
        }
        let Some(conn) = self.conn.as_mut() else {
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
        conn.send(&buf, deadline)
            .map_err(|fault| Failure::Fault(fault, fresh))?;
        let mut read = 0usize;
        while !pending.is_empty() {
            let reply = conn
                .read(deadline)
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
        self.conn = None;
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
}

impl ReleaseListener for Subscriber {
    fn listen(&mut self, keys: &[&[u8]]) -> Result<(), BackendError> {
        let deadline = self.inner.deadline();
        let wanted: HashSet<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        if wanted.is_empty() && self.conn.is_none() {
            self.keys.clear();
            return Ok(());
        }
        match self.change(&wanted, deadline) {
            Ok(()) => Ok(()),
            // A connection kept from an earlier wait that the server has
            // closed since: once more on a new one, within the deadline.
            Err(Failure::Fault(Fault::Closed { .. }, false)) => {
                self.conn = None;
                self.change(&wanted, deadline).map_err(|f| self.fail(f))
            }
            Err(failure) => Err(self.fail(failure)),
        }
    }

    /// What has arrived, at once: it reads only what is already on the
    /// socket and never waits for a notice (`until` is not used yet).
    fn receive(&mut self, _until: Instant) -> Result<Vec<Vec<u8>>, BackendError> {
        let mut arrived = std::mem::take(&mut self.arrived);
        let Some(conn) = self.conn.as_mut() else {
            return Ok(arrived);
        };
        let replies = match conn.read_ready(MAX_NOTICES_PER_TAKE) {
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
}

/// The channel that announces the releases of `key`.
fn channel(key: &[u8]) -> Vec<u8> {
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
