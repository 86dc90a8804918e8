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
//! the connection: it is read in the connection's first pipeline, and
//! describes the server that answers everything sent on this connection (a
//! restarted server closes its connections, so a connection never outlives
//! the server incarnation it talks to). The settings that can change
//! without a restart (`INFO memory`, `INFO replication` and `INFO stats`,
//! small replies)
//! are read again in the pipeline of the first batch sent once they are
//! [`SETTINGS_MAX_AGE`] old: a grant is never judged by settings read
//! longer ago than that before the batch was sent.

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{SETTINGS_MAX_AGE, ServerInfo};

use super::frame::{self, MAX_REPLY_BYTES, Scan};
use super::transport::{Fault, Phase, Target, Transport};

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// What a batch on this connection must ask about the server first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// Nothing: the identity is known and its settings are fresh (or the
    /// server refuses `INFO`).
    Nothing,
    /// `INFO` (a new connection): the identity and every setting.
    Identity,
    /// `INFO memory`, `INFO replication` and `INFO stats`: the settings
    /// again.
    Settings,
}

impl Ask {
    /// The `INFO` sections read again for [`Ask::Settings`]: eviction
    /// (`memory`), the role and history (`replication`), `evicted_keys`
    /// (`stats`). One command and one reply each.
    const SETTINGS_SECTIONS: [&'static str; 3] = ["memory", "replication", "stats"];

    /// How many replies the asking adds to a pipeline.
    pub(super) fn replies(self) -> usize {
        match self {
            Self::Nothing => 0,
            Self::Identity => 1,
            Self::Settings => Self::SETTINGS_SECTIONS.len(),
        }
    }

    /// Packs the asking into `buf`: exactly [`replies`](Self::replies)
    /// commands.
    pub(super) fn pack(self, buf: &mut Vec<u8>) {
        match self {
            Self::Nothing => {}
            Self::Identity => pack_info(buf),
            Self::Settings => {
                for section in Self::SETTINGS_SECTIONS {
                    redis::cmd("INFO").arg(section).write_packed_command(buf);
                }
            }
        }
    }
}

/// What to send before a connection is used: credentials and database.
#[derive(Clone, Default)]
pub(super) struct Setup {
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) db: i64,
}

/// What this connection knows about the server at its other end.
enum Identity {
    /// `INFO server` not asked yet.
    Unread,
    /// The server's answer, when it was read, and when its settings were
    /// last read.
    Known {
        info: ServerInfo,
        read_at: Instant,
        settings_at: Instant,
    },
    /// The server refused `INFO` (e.g. `NOPERM`) or its reply was not
    /// readable: unknown for this connection's life; never asked again.
    Unavailable,
}

/// An open connection, ready for requests.
pub(super) struct Conn {
    io: Transport,
    /// Received bytes; `buf[start..]` are not parsed yet.
    buf: Vec<u8>,
    start: usize,
    /// Do not scan again before `buf[start..]` holds this many bytes.
    need: usize,
    identity: Identity,
}

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
            identity: Identity::Unread,
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
                Value::ServerError(error) => return Err(Fault::Refused { command, error }),
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
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            let reply = self
                .read_reply(deadline, Phase::Request)
                .map_err(|fault| (fault, replies.len()))?;
            replies.push(reply);
        }
        Ok(replies)
    }

    /// Writes `request` by `deadline`, without reading anything (the
    /// subscriber's commands, whose confirmations come among notices).
    pub(super) fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), Fault> {
        self.io.write_all(request, deadline, Phase::Request)
    }

    /// Reads one whole reply (within the size limits) by `deadline`.
    pub(super) fn read(&mut self, deadline: Instant) -> Result<Value, Fault> {
        self.read_reply(deadline, Phase::Request)
    }

    /// Waits until a whole reply is buffered, or `until` passes (reading
    /// what has arrived even then). Whether one is, or the connection
    /// failed (the next read reports how): the caller may read now
    /// without waiting long.
    pub(super) fn wait_reply(&mut self, until: Instant) -> bool {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let pending = &self.buf[self.start..];
            if !matches!(frame::scan(pending), Scan::Incomplete { .. }) {
                return true; // complete, or invalid (the read says so)
            }
            let Ok(room) = self.room() else {
                return true;
            };
            let n = match self.io.read_some(&mut chunk[..room], until, Phase::Request) {
                Ok(n) => n,
                Err(Fault::Timeout { .. }) => {
                    match self.io.read_now(&mut chunk[..room], Phase::Request) {
                        Ok(Some(n)) => n,
                        Ok(None) => return false,
                        Err(_) => return true,
                    }
                }
                Err(_) => return true,
            };
            if n == 0 {
                return true;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The whole replies that have already arrived, at most `max`, without
    /// waiting for more (the size limits apply as for [`read`](Self::read)).
    pub(super) fn read_ready(&mut self, max: usize) -> Result<Vec<Value>, Fault> {
        let mut replies = Vec::new();
        let mut chunk = [0u8; READ_CHUNK];
        while replies.len() < max {
            if let Some(reply) = self.buffered()? {
                replies.push(reply);
                continue;
            }
            let room = self.room()?;
            match self.io.read_now(&mut chunk[..room], Phase::Request)? {
                None => break,
                Some(0) => {
                    return Err(Fault::Closed {
                        phase: Phase::Request,
                    });
                }
                Some(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        Ok(replies)
    }

    /// Reads one whole reply (within the size limits) by `deadline`.
    fn read_reply(&mut self, deadline: Instant, phase: Phase) -> Result<Value, Fault> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            if let Some(reply) = self.buffered()? {
                return Ok(reply);
            }
            let room = self.room()?;
            let received = self.buf.len() - self.start;
            let n = match self.io.read_some(&mut chunk[..room], deadline, phase) {
                Ok(n) => n,
                // What arrived by now still counts: a caller that reads
                // several nodes one after the other may come to this one
                // after its deadline, with the reply waiting in the socket.
                Err(Fault::Timeout { phase, .. }) => {
                    match self.io.read_now(&mut chunk[..room], phase)? {
                        Some(n) => n,
                        None => return Err(Fault::Timeout { phase, received }),
                    }
                }
                Err(other) => return Err(other),
            };
            if n == 0 {
                return Err(Fault::Closed { phase });
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next whole reply in the buffer, if one is there.
    fn buffered(&mut self) -> Result<Option<Value>, Fault> {
        let pending = &self.buf[self.start..];
        if pending.len() < self.need {
            return Ok(None);
        }
        match frame::scan(pending) {
            Scan::Complete(len) => {
                let value = redis::parse_redis_value(&pending[..len])
                    .map_err(|e| Fault::Protocol(format!("unparsable reply: {e}")))?;
                self.start += len;
                self.need = 0;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                Ok(Some(value))
            }
            Scan::Incomplete { need } => {
                self.need = need;
                Ok(None)
            }
            Scan::Invalid(why) => Err(Fault::Protocol(why)),
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

    /// What the next batch on this connection must ask first.
    pub(super) fn ask(&self) -> Ask {
        match &self.identity {
            Identity::Unread => Ask::Identity,
            Identity::Known { settings_at, .. } if settings_at.elapsed() >= SETTINGS_MAX_AGE => {
                Ask::Settings
            }
            Identity::Known { .. } | Identity::Unavailable => Ask::Nothing,
        }
    }

    /// Records the replies to what `ask` asked (in order). An error reply
    /// or one that is not text leaves the identity unknown for good: a
    /// server whose settings cannot be read again cannot be vouched for.
    pub(super) fn learn(&mut self, ask: Ask, replies: &mut impl Iterator<Item = Value>) {
        let texts: Vec<Option<String>> = (0..ask.replies())
            .map(|_| replies.next().as_ref().and_then(value_text))
            .collect();
        if ask == Ask::Nothing {
            return;
        }
        let Some(texts) = texts.into_iter().collect::<Option<Vec<String>>>() else {
            self.identity = Identity::Unavailable;
            return;
        };
        let now = Instant::now();
        match (ask, &mut self.identity) {
            (
                Ask::Settings,
                Identity::Known {
                    info, settings_at, ..
                },
            ) => {
                let mut fresh = ServerInfo::default();
                for text in &texts {
                    parse_into(&mut fresh, text);
                }
                info.maxmemory = fresh.maxmemory;
                info.maxmemory_policy = fresh.maxmemory_policy;
                info.replica = fresh.replica;
                info.replication_id = fresh.replication_id;
                info.evicted_keys = fresh.evicted_keys;
                *settings_at = now;
            }
            _ => {
                self.identity = Identity::Known {
                    info: parse_info(&texts.concat()),
                    read_at: now,
                    settings_at: now,
                };
            }
        }
    }

    /// The server at the other end, with its uptime advanced by the time
    /// since `INFO` was read; `None` when unknown.
    pub(super) fn server(&self) -> Option<ServerInfo> {
        match &self.identity {
            Identity::Known { info, read_at, .. } => {
                let mut info = info.clone();
                info.uptime = info.uptime.map(|u| u.saturating_add(read_at.elapsed()));
                Some(info)
            }
            Identity::Unread | Identity::Unavailable => None,
        }
    }
}

/// `INFO` with its default sections: `server` (the identity) and `memory`
/// (whether the server may evict lock keys) among them, in one reply that
/// every Redis and Valkey version answers.
pub(super) fn pack_info(buf: &mut Vec<u8>) {
    redis::cmd("INFO").write_packed_command(buf);
}

/// The text of a status or bulk reply.
pub(super) fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_owned()),
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A reply's shape for messages, without its content.
pub(super) fn describe_value(value: &Value) -> String {
    match value {
        Value::Nil => "nil".to_owned(),
        Value::Int(n) => format!("integer {n}"),
        Value::Okay => "OK".to_owned(),
        Value::SimpleString(_) => "a status reply".to_owned(),
        Value::BulkString(b) => format!("a {}-byte string", b.len()),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::ServerError(e) => format!("error {}", e.code()),
        _ => "an unexpected reply type".to_owned(),
    }
}

/// `run_id`, `uptime_in_seconds`, `maxmemory`, `maxmemory_policy`, `role`,
/// `master_replid` and `evicted_keys` from an `INFO` reply (Redis and Valkey spell them
/// alike).
pub(super) fn parse_info(text: &str) -> ServerInfo {
    let mut info = ServerInfo::default();
    parse_into(&mut info, text);
    info
}

/// The fields of [`parse_info`] found in `text`, written into `info`.
fn parse_into(info: &mut ServerInfo, text: &str) {
    for line in text.lines() {
        let Some((name, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        match name {
            "run_id" => info.run_id = Some(value.to_owned()).filter(|id| !id.is_empty()),
            "uptime_in_seconds" => {
                info.uptime = value.parse::<u64>().ok().map(Duration::from_secs);
            }
            "maxmemory" => info.maxmemory = value.parse::<u64>().ok(),
            "maxmemory_policy" => info.maxmemory_policy = Some(value.to_owned()),
            "role" => info.replica = Some(value != "master"),
            "evicted_keys" => info.evicted_keys = value.parse::<u64>().ok(),
            "master_replid" => {
                info.replication_id = Some(value.to_owned()).filter(|id| !id.is_empty());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn every_ask_packs_as_many_commands_as_it_expects_replies() {
        for ask in [Ask::Nothing, Ask::Identity, Ask::Settings] {
            let mut buf = Vec::new();
            ask.pack(&mut buf);
            // Each packed command is a RESP array: it starts with `*`.
            let commands = buf.windows(2).filter(|w| w == b"\n*").count()
                + usize::from(buf.first() == Some(&b'*'));
            assert_eq!(commands, ask.replies(), "{ask:?}");
        }
    }

    #[test]
    fn info_parsing() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n\
                    # Memory\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n\
                    maxmemory_policy:volatile-lru\r\n";
        let info = parse_info(text);
        assert_eq!(info.run_id.as_deref(), Some("abc123"));
        assert_eq!(info.uptime, Some(Duration::from_secs(42)));
        assert_eq!(
            info.eviction().as_deref(),
            Some("maxmemory 4194304, maxmemory-policy volatile-lru")
        );
        assert_eq!(parse_info(""), ServerInfo::default());
    }
}
