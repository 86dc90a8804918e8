//! One connection to the server: its socket, the bytes received but not
//! yet parsed, and the identity of the server at the other end.
//!
//! Every exchange runs under one deadline (write, then every read), and a
//! reply is parsed only once [`frame::scan`] has found all of it within the
//! size limits: a peer can neither hold a call past its deadline nor make
//! the client allocate more than [`MAX_REPLY_BYTES`] per reply.
//!
//! The identity (`INFO`: `run_id`, `uptime_in_seconds`, and with them
//! `maxmemory`, `maxmemory_policy`, `role` and `master_replid`) belongs to
//! the connection: a pooled connection reads it when it opens, in a round
//! trip of its own before its first batch ([`Conn::read_identity`]), and
//! describes the server that answers everything sent on this connection (a
//! restarted server closes its connections, so a connection never outlives
//! the server incarnation it talks to). The settings that can change
//! without a restart (`INFO memory`, `INFO replication` and `INFO stats`,
//! small replies) are read again in the pipeline of the first batch sent
//! once they are `SETTINGS_MAX_AGE` old: a grant is never judged by
//! settings read longer ago than that before the batch was sent. What is
//! asked, and what the answers say, is `info.rs`.

use std::time::Instant;

use redis::Value;

use crate::backend::{ServerInfo, ServerVersion};
use crate::spare;

use super::asking;
use super::decode;
use super::fault::{Fault, Phase};
use super::frame::{self, MAX_REPLY_BYTES, Scan, describe_value};
use super::info::{Ask, Identity};
use super::transport::{Target, Transport};

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// What to send before a connection is used: credentials and database.
#[derive(Clone, Default)]
pub(super) struct Setup {
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) db: i64,
    /// Every command of every request after `ASKING` (`asking.rs`): a
    /// backend for one `ASK` redirect of a cluster.
    pub(super) asking: bool,
}

/// An open connection, ready for requests.
pub(super) struct Conn {
    io: Transport,
    /// Received bytes; `buf[start..]` are not parsed yet.
    buf: Vec<u8>,
    start: usize,
    /// Do not scan again before `buf[start..]` holds this many bytes.
    need: usize,
    /// Where a read from the socket lands before it joins `buf`: zeroed
    /// once, at the first read, not at every read (16 KiB of `memset`
    /// per read was a visible share of a lock's CPU).
    chunk: Vec<u8>,
    /// Kept for the connection's life: a parser made per reply
    /// allocates an 8 KiB buffer each time (six per lock + release at
    /// N = 3). It is only ever given whole replies (`frame::scan` says
    /// where one ends), so it holds nothing between two of them.
    parser: redis::Parser,
    identity: Identity,
    /// [`Setup::asking`].
    asking: bool,
    /// Empty between requests: the room the last batch's request was
    /// packed in ([`request_buf`](Self::request_buf)), kept so that a
    /// batch does not allocate its own.
    request: Vec<u8>,
    /// Empty between batches: the room the last batch's replies were
    /// read into ([`receive`](Self::receive)), handed back with
    /// [`keep_replies`](Self::keep_replies).
    replies: Vec<Value>,
}

/// The most room a connection keeps for the next request between two
/// batches: a larger one (a batch of many operations) is let go.
const KEPT_REQUEST: usize = 16 * 1024;

/// The most replies a connection keeps room for between two batches.
const KEPT_REPLIES: usize = 64;

impl Conn {
    /// Connects to `target` and runs `setup` (`AUTH`, `SELECT`), all by
    /// `deadline`.
    pub(super) fn open(target: &Target, setup: &Setup, deadline: Instant) -> Result<Self, Fault> {
        let io = Transport::connect(target, deadline)?;
        let mut conn = Self {
            io,
            buf: Vec::new(),
            start: 0,
            need: 0,
            chunk: Vec::new(),
            parser: redis::Parser::new(),
            identity: Identity::Unread,
            asking: setup.asking,
            request: Vec::new(),
            replies: Vec::new(),
        };
        conn.setup(setup, deadline)?;
        Ok(conn)
    }

    /// `AUTH` and `SELECT` in one round trip, before anything else is sent
    /// (never pipelined with requests: a request must not run as another
    /// user or on another database when one of them is refused).
    fn setup(&mut self, setup: &Setup, deadline: Instant) -> Result<(), Fault> {
        let mut buf = Vec::new();
        let mut commands = Vec::new();
        if let Some(password) = &setup.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &setup.username {
                auth.arg(user);
            }
            auth.arg(password).write_packed_command(&mut buf);
            commands.push("AUTH");
        }
        if setup.db != 0 {
            redis::cmd("SELECT")
                .arg(setup.db)
                .write_packed_command(&mut buf);
            commands.push("SELECT");
        }
        if commands.is_empty() {
            return Ok(());
        }
        let replies = self
            .exchange_in(&buf, commands.len(), deadline, Phase::Setup)
            .map_err(|(fault, _)| fault)?;
        for (command, reply) in commands.into_iter().zip(replies) {
            match reply {
                Value::Okay => {}
                Value::ServerError(error) => return Err(Fault::ErrorReply { command, error }),
                other => {
                    return Err(Fault::Protocol(format!(
                        "unexpected reply to {command}: {}",
                        describe_value(&other)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Writes `request` (`n` packed commands) and reads `n` replies, all by
    /// `deadline`. Server error replies are `Value::ServerError`s. On
    /// failure, also says how many replies were read before it.
    pub(super) fn exchange(
        &mut self,
        request: &[u8],
        n: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, (Fault, usize)> {
        self.exchange_in(request, n, deadline, Phase::Request)
    }

    fn exchange_in(
        &mut self,
        request: &[u8],
        n: usize,
        deadline: Instant,
        phase: Phase,
    ) -> Result<Vec<Value>, (Fault, usize)> {
        if self.asking && phase == Phase::Request {
            self.send(request, deadline).map_err(|fault| (fault, 0))?;
            return self.receive(n, deadline);
        }
        self.io
            .write_all(request, deadline, phase)
            .map_err(|fault| (fault, 0))?;
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            let reply = self
                .read_reply(deadline, phase)
                .map_err(|fault| (fault, replies.len()))?;
            replies.push(reply);
        }
        Ok(replies)
    }

    /// Reads `n` replies by `deadline` (those of a request sent with
    /// [`send`](Self::send)). On failure, also says how many were read.
    pub(super) fn receive(
        &mut self,
        n: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, (Fault, usize)> {
        let asked = if self.asking { 2 } else { 1 };
        // The room of the last batch's replies, if it was handed back.
        let mut replies = std::mem::take(&mut self.replies);
        replies.reserve(n * asked);
        while replies.len() < n * asked {
            let reply = self
                .read_reply(deadline, Phase::Request)
                .map_err(|fault| (fault, replies.len() / asked))?;
            replies.push(reply);
        }
        Ok(if self.asking {
            asking::answers_only(replies)
        } else {
            replies
        })
    }

    /// An empty buffer to pack a request in, with the room the last one
    /// had; handed back with [`keep_request_buf`](Self::keep_request_buf).
    pub(super) fn request_buf(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.request)
    }

    /// Keeps the room of `replies` (a list [`receive`](Self::receive)
    /// gave, emptied here) for the next batch's, if it is not too large.
    pub(super) fn keep_replies(&mut self, replies: Vec<Value>) {
        spare::keep(&mut self.replies, replies, KEPT_REPLIES);
    }

    /// Keeps `buf`'s room for the next request, if it is not too large.
    pub(super) fn keep_request_buf(&mut self, buf: Vec<u8>) {
        spare::keep(&mut self.request, buf, KEPT_REQUEST);
    }

    /// Writes `request` by `deadline`, without reading anything (the
    /// subscriber's commands, whose confirmations come among notices).
    pub(super) fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), Fault> {
        if self.asking {
            let asked = asking::each_asked(request).ok_or_else(|| {
                Fault::Protocol("a request quorum-lock cannot prefix with ASKING".into())
            })?;
            return self.io.write_all(&asked, deadline, Phase::Request);
        }
        self.io.write_all(request, deadline, Phase::Request)
    }

    /// A handle to write on this connection while another thread reads it
    /// (see [`Transport::try_clone`]); `None` over TLS.
    pub(super) fn writer(&self) -> Option<std::io::Result<Transport>> {
        self.io.try_clone()
    }

    /// Reads one whole reply (within the size limits) by `deadline`.
    pub(super) fn read(&mut self, deadline: Instant) -> Result<Value, Fault> {
        self.read_reply(deadline, Phase::Request)
    }

    /// The socket the replies arrive on, for a plain connection (not
    /// TLS, whose session may have read from the socket what it has not
    /// handed out yet).
    #[cfg(unix)]
    pub(super) fn readable_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.io.plain_fd()
    }

    /// Waits until a whole reply is buffered, or `until` passes (reading
    /// what has arrived even then). Whether one is, or the connection
    /// failed (the next read reports how): the caller may read now
    /// without waiting long.
    pub(super) fn wait_reply(&mut self, until: Instant) -> bool {
        loop {
            let pending = &self.buf[self.start..];
            if !matches!(frame::scan(pending), Scan::Incomplete { .. }) {
                return true; // complete, or invalid (the read says so)
            }
            let Ok(room) = self.room() else {
                return true;
            };
            let chunk = read_area(&mut self.chunk, room);
            let n = match self.io.read_some(chunk, until, Phase::Request) {
                Ok(n) => n,
                Err(Fault::Timeout { .. }) => match self.io.read_now(chunk, Phase::Request) {
                    Ok(Some(n)) => n,
                    Ok(None) => return false,
                    Err(_) => return true,
                },
                Err(_) => return true,
            };
            if n == 0 {
                return true;
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }

    /// The whole replies that have already arrived, at most `max`, without
    /// waiting for more (the size limits apply as for [`read`](Self::read)).
    pub(super) fn read_ready(&mut self, max: usize) -> Result<Vec<Value>, Fault> {
        let mut replies = Vec::new();
        while replies.len() < max {
            if let Some(reply) = self.buffered()? {
                replies.push(reply);
                continue;
            }
            let room = self.room()?;
            let chunk = read_area(&mut self.chunk, room);
            match self.io.read_now(chunk, Phase::Request)? {
                None => break,
                Some(0) => {
                    return Err(Fault::Closed {
                        phase: Phase::Request,
                    });
                }
                Some(n) => self.buf.extend_from_slice(&self.chunk[..n]),
            }
        }
        Ok(replies)
    }

    /// Reads one whole reply (within the size limits) by `deadline`.
    fn read_reply(&mut self, deadline: Instant, phase: Phase) -> Result<Value, Fault> {
        loop {
            if let Some(reply) = self.buffered()? {
                return Ok(reply);
            }
            let room = self.room()?;
            let received = self.buf.len() - self.start;
            let chunk = read_area(&mut self.chunk, room);
            let n = match self.io.read_some(chunk, deadline, phase) {
                Ok(n) => n,
                // What arrived by now still counts: a caller that reads
                // several nodes one after the other may come to this one
                // after its deadline, with the reply waiting in the socket.
                Err(Fault::Timeout { phase, .. }) => match self.io.read_now(chunk, phase)? {
                    Some(n) => n,
                    None => return Err(Fault::Timeout { phase, received }),
                },
                Err(other) => return Err(other),
            };
            if n == 0 {
                return Err(Fault::Closed { phase });
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }

    /// The next whole reply in the buffer, if one is there.
    fn buffered(&mut self) -> Result<Option<Value>, Fault> {
        let pending = &self.buf[self.start..];
        if pending.len() < self.need {
            return Ok(None);
        }
        if let Some((value, len)) = decode::common(pending) {
            self.consumed(len);
            return Ok(Some(value));
        }
        match frame::scan(pending) {
            Scan::Complete(len) => {
                let frame = &pending[..len];
                let value = match decode::decode(frame) {
                    Some(value) => value,
                    None => self.parser.parse_value(frame).map_err(|e| {
                        // Whatever it kept of a reply it could not read goes.
                        self.parser = redis::Parser::new();
                        Fault::Protocol(format!("unparsable reply: {e}"))
                    })?,
                };
                self.consumed(len);
                Ok(Some(value))
            }
            Scan::Incomplete { need } => {
                self.need = need;
                Ok(None)
            }
            Scan::Invalid(why) => Err(Fault::Protocol(why)),
        }
    }

    /// Moves past a reply of `len` bytes at the head of the buffer.
    fn consumed(&mut self, len: usize) {
        self.start += len;
        self.need = 0;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Makes room for the rest of an incomplete reply: drops the parsed
    /// bytes and returns how many may still be read, or an error once the
    /// reply is beyond the size limit.
    fn room(&mut self) -> Result<usize, Fault> {
        // Everything pending belongs to one (incomplete) reply.
        let received = self.buf.len() - self.start;
        if received > MAX_REPLY_BYTES {
            return Err(Fault::Protocol(format!(
                "reply larger than {MAX_REPLY_BYTES} bytes, cut off"
            )));
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.need -= self.start.min(self.need);
            self.start = 0;
        }
        Ok((MAX_REPLY_BYTES + 1 - received).min(READ_CHUNK))
    }

    /// Whether bytes arrived beyond the replies read: a peer out of step
    /// with its requests, whose connection must not be reused.
    pub(super) fn has_unread_bytes(&self) -> bool {
        self.start < self.buf.len()
    }

    /// What the next batch on this connection, sent at `now`, must ask
    /// first.
    pub(super) fn ask(&self, now: Instant) -> Ask {
        self.identity.ask(now)
    }

    /// What a look at the server asks on this connection ([`Identity::look`]).
    pub(super) fn look(&self) -> Ask {
        self.identity.look()
    }

    /// Records the replies to what `ask` asked (in order).
    pub(super) fn learn(&mut self, ask: Ask, replies: &mut impl Iterator<Item = Value>) {
        self.identity.learn(ask, replies);
    }

    /// The server at the other end, its uptime as of `at`; `None` when
    /// unknown.
    pub(super) fn server(&self, at: Instant) -> Option<ServerInfo> {
        self.identity.server(at)
    }

    /// Which server and version is at the other end (without cloning the
    /// rest of the identity): what decides, per connection, whether an op
    /// goes as a script or as the server's own command.
    pub(super) fn version(&self) -> Option<ServerVersion> {
        self.identity.version()
    }

    /// Asks `INFO` now, in a round trip of its own, unless the identity
    /// is already known: a new pooled connection does it before its first
    /// batch is packed, so that the batch can use the commands its server
    /// has in place of scripts. A refusal (`NOPERM`) leaves the identity
    /// unknown for the connection's life, as in a batch.
    pub(super) fn read_identity(&mut self, deadline: Instant) -> Result<(), Fault> {
        let ask = self.look();
        if ask != Ask::Identity {
            return Ok(());
        }
        let mut buf = Vec::new();
        ask.pack(&mut buf);
        let replies = self
            .exchange(&buf, ask.replies(), deadline)
            .map_err(|(fault, _)| fault)?;
        self.learn(ask, &mut replies.into_iter());
        Ok(())
    }
}

/// The first `room` bytes (at most [`READ_CHUNK`]) of a connection's read
/// area, which is allocated and zeroed at the first use only.
fn read_area(chunk: &mut Vec<u8>, room: usize) -> &mut [u8] {
    if chunk.is_empty() {
        chunk.resize(READ_CHUNK, 0);
    }
    &mut chunk[..room.min(READ_CHUNK)]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// What a connection's one parser relies on: given whole replies one
    /// at a time (of every shape a batch reads), it keeps nothing of one
    /// for the next.
    #[test]
    fn one_parser_reads_whole_replies_one_after_another() {
        let mut parser = redis::Parser::new();
        let replies: [(&[u8], Value); 6] = [
            (b"+OK\r\n", Value::Okay),
            (b":1\r\n", Value::Int(1)),
            (b"$-1\r\n", Value::Nil),
            (b"$3\r\nabc\r\n", Value::BulkString(b"abc".to_vec())),
            (
                b"*2\r\n:7\r\n$1\r\nx\r\n",
                Value::Array(vec![Value::Int(7), Value::BulkString(b"x".to_vec())]),
            ),
            (b":-2\r\n", Value::Int(-2)),
        ];
        for _ in 0..2 {
            for (bytes, expected) in &replies {
                assert_eq!(frame::scan(bytes), Scan::Complete(bytes.len()));
                assert_eq!(&parser.parse_value(*bytes).unwrap(), expected);
            }
        }
        assert!(matches!(
            parser.parse_value(&b"-ERR no\r\n"[..]).unwrap(),
            Value::ServerError(_)
        ));
        assert_eq!(parser.parse_value(&b":3\r\n"[..]).unwrap(), Value::Int(3));
    }
}
