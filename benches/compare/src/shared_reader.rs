//! A design floor for a blocking client that shares its connections: what
//! quorum-lock's engine could reach with the same rules and one change.
//!
//! The rules are the engine's: one connection per node shared by every
//! caller thread, one batch in flight per node (the next is written only
//! once the one before is fully read), a caller that finds a node idle
//! writes its operation there itself, one that finds it busy queues it,
//! and a caller sleeps once per round, woken when its round can be
//! decided (a quorum of grants or too many refusals for the acquire,
//! every answer for the release). The change: **one reader thread polls
//! every node's socket** and reads whatever batch has answers in, posts
//! the votes, and writes what was queued behind it. In the engine each
//! node's batches are read by a thread of that node, which sleeps in
//! each read: at 8 threads on N=3 that is about 1.2 sleeps per lock in
//! the node threads (docs/benchmarks.md, "What limits the misses"), where
//! one poll over every node sleeps about 0.3 times per lock.
//!
//! With `--in-flight K` (scaling only) it keeps up to K batches in flight
//! per node instead, each written under the line's lock so that wire
//! order stays the order of the answers it expects: what the rule of one
//! batch costs, or saves (docs/benchmarks.md, "What limits the misses").
//!
//! No quorum-lock code runs here: no timeouts per node, no retries, no
//! fencing, no health, no fault handling beyond reporting an error. It
//! measures the threading, not a lock library. The servers must answer:
//! a caller waits at most [`WAIT`] for its round, then fails.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::clients::{Locker, Service, Settings, Tokens, millis};
use crate::floor::connect_loaded;

/// The longest a caller waits for its round to be decided.
const WAIT: Duration = Duration::from_secs(2);

/// How often the reader looks whether it is to stop, at the least.
const STOP_LOOK_MS: i32 = 100;

/// One round's votes, posted by the reader; its caller is woken once,
/// when the round can be decided.
struct Ballot {
    granted: AtomicU32,
    answered: AtomicU32,
    rule: Rule,
    decided: AtomicBool,
    caller: Thread,
}

/// When a round is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// An acquire: `quorum` grants, or too many refusals to reach it.
    Quorum { quorum: u32, nodes: u32 },
    /// A release: every node's answer.
    All { nodes: u32 },
}

impl Rule {
    pub(crate) fn decided(self, granted: u32, answered: u32) -> bool {
        match self {
            Rule::Quorum { quorum, nodes } => {
                granted >= quorum || answered - granted > nodes - quorum
            }
            Rule::All { nodes } => answered >= nodes,
        }
    }
}

impl Ballot {
    fn new(rule: Rule) -> Arc<Self> {
        Arc::new(Self {
            granted: AtomicU32::new(0),
            answered: AtomicU32::new(0),
            rule,
            decided: AtomicBool::new(false),
            caller: thread::current(),
        })
    }

    /// One node's answer; wakes the caller if the round is now decided
    /// (once). Only the reader posts.
    fn post(&self, grant: bool) {
        let granted = self.granted.load(Ordering::Relaxed) + u32::from(grant);
        self.granted.store(granted, Ordering::Relaxed);
        let answered = self.answered.fetch_add(1, Ordering::AcqRel) + 1;
        if self.rule.decided(granted, answered) && !self.decided.swap(true, Ordering::AcqRel) {
            self.caller.unpark();
        }
    }

    /// Sleeps until the round is decided (or `WAIT` passed): the grants.
    fn wait(&self) -> Option<u32> {
        let deadline = Instant::now() + WAIT;
        while !self.decided.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            thread::park_timeout(left);
        }
        Some(self.granted.load(Ordering::Acquire))
    }
}

/// What is queued at a node and what is on its wire: short critical
/// sections, no system call under the lock (with one batch in flight).
#[derive(Default)]
struct Line {
    /// Written while the line was full: the next batch.
    queued_bytes: Vec<u8>,
    queued: Vec<Arc<Ballot>>,
    /// The batches in flight, one ballot per command, in wire order.
    in_flight: VecDeque<Arc<Ballot>>,
    /// How many commands each batch in flight holds, oldest first.
    batches: VecDeque<usize>,
}

impl Line {
    /// Whether a new batch may go on the wire now: fewer than `limit`
    /// batches are in flight.
    fn has_room(&self, limit: usize) -> bool {
        self.batches.len() < limit
    }

    /// Puts one batch of `ballots` in flight (the caller writes it).
    fn start(&mut self, ballots: impl IntoIterator<Item = Arc<Ballot>>) {
        let before = self.in_flight.len();
        self.in_flight.extend(ballots);
        self.batches.push_back(self.in_flight.len() - before);
    }

    /// The ballot of the oldest command in flight, now answered; a batch
    /// whose last command is answered leaves the line.
    fn answered(&mut self) -> Option<Arc<Ballot>> {
        let ballot = self.in_flight.pop_front()?;
        if let Some(left) = self.batches.front_mut() {
            *left -= 1;
            if *left == 0 {
                self.batches.pop_front();
            }
        }
        Some(ballot)
    }

    /// What was queued, as the next batch (its bytes swapped into
    /// `bytes`), when it may go now.
    fn take_queued(&mut self, limit: usize, bytes: &mut Vec<u8>) -> bool {
        if self.queued.is_empty() || !self.has_room(limit) {
            return false;
        }
        std::mem::swap(bytes, &mut self.queued_bytes);
        let next = std::mem::take(&mut self.queued);
        self.start(next);
        true
    }
}

/// One node: its connection, written only by whoever made the line busy
/// (a caller that found it idle, or the reader sending what was queued)
/// and read only by the reader.
struct Side {
    stream: TcpStream,
    line: Mutex<Line>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Side {
    /// Writes `command` now if fewer than `limit` batches are in flight,
    /// else queues it.
    fn submit(&self, command: &[u8], ballot: &Arc<Ballot>, limit: usize) -> Result<(), String> {
        let mut line = locked(&self.line);
        if !line.has_room(limit) {
            line.queued_bytes.extend_from_slice(command);
            line.queued.push(Arc::clone(ballot));
            return Ok(());
        }
        line.start([Arc::clone(ballot)]);
        // With one batch in flight nobody else writes until it is read:
        // the write goes outside the lock. With several, two writers
        // could swap their batches on the wire: it goes under it.
        let line = (limit > 1).then_some(line);
        let written = (&self.stream).write_all(command);
        drop(line);
        written.map_err(|e| format!("shared reader: write: {e}"))
    }
}

/// The reader's buffers for one node.
#[derive(Default)]
struct Inbound {
    bytes: Vec<u8>,
}

/// Everything the callers and the reader share.
struct Hub {
    sides: Vec<Side>,
    release_sha: String,
    stop: AtomicBool,
    /// Batches in flight per node at most (1: the engine's rule).
    in_flight: usize,
}

/// One whole reply at the front of `buf`: its length and whether it
/// grants (`+OK` to the `SET`, `:1` to the release). `None` until it is
/// all there; `Err` for a reply this client never expects.
pub(crate) fn reply(buf: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &buf[1..end];
    let after_line = end + 2;
    match buf[0] {
        b'+' => Ok(Some((after_line, line == b"OK"))),
        b':' => Ok(Some((after_line, line == b"1"))),
        b'-' => Ok(Some((after_line, false))),
        b'$' => {
            let len: i64 = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.parse().ok())
                .ok_or("shared reader: bad bulk length")?;
            let Ok(len) = usize::try_from(len) else {
                // `$-1`: the nil of a `SET NX` that did not set.
                return Ok(Some((after_line, false)));
            };
            let whole = after_line + len + 2;
            Ok((buf.len() >= whole).then_some((whole, false)))
        }
        other => Err(format!("shared reader: unexpected reply type {other:#x}")),
    }
}

/// Appends one command in the protocol's array form.
pub(crate) fn command(buf: &mut Vec<u8>, args: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

impl Hub {
    /// Reads node `i`'s answers that are in, posts them, and writes what
    /// was queued once the batch in flight is fully read.
    fn serve(&self, i: usize, inbound: &mut Inbound, scratch: &mut Vec<u8>) -> Result<(), String> {
        let side = &self.sides[i];
        let mut chunk = [0u8; 4096];
        loop {
            match (&side.stream).read(&mut chunk) {
                Ok(0) => return Err(format!("shared reader: node {i} closed the connection")),
                Ok(k) => inbound.bytes.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("shared reader: node {i}: read: {e}")),
            }
        }
        let mut votes = Vec::new();
        let mut at = 0;
        while let Some((len, grant)) = reply(&inbound.bytes[at..])? {
            at += len;
            votes.push(grant);
        }
        inbound.bytes.drain(..at);
        if votes.is_empty() {
            return Ok(());
        }
        let mut line = locked(&side.line);
        let mut answered = Vec::with_capacity(votes.len());
        for grant in votes {
            let ballot = line
                .answered()
                .ok_or_else(|| format!("shared reader: node {i}: an answer nobody asked for"))?;
            answered.push((ballot, grant));
        }
        let next = line.take_queued(self.in_flight, scratch);
        // With several batches in flight a caller may write meanwhile:
        // the next batch goes on the wire under the lock (see `submit`);
        // with one, nobody writes before it is read, so after the posts.
        let write = |scratch: &mut Vec<u8>| {
            let sent = (&side.stream).write_all(scratch);
            scratch.clear();
            sent
        };
        let under_lock = (next && self.in_flight > 1).then(|| write(scratch));
        drop(line);
        // Posted outside the line's lock: a woken caller submits its next
        // round at once.
        for (ballot, grant) in answered {
            ballot.post(grant);
        }
        let sent = match under_lock {
            Some(sent) => sent,
            None if next => write(scratch),
            None => Ok(()),
        };
        sent.map_err(|e| format!("shared reader: node {i}: write: {e}"))
    }

    /// The reader's loop: one `poll` over every node's socket.
    fn read_all(&self) {
        let mut fds: Vec<libc::pollfd> = self
            .sides
            .iter()
            .map(|side| libc::pollfd {
                fd: side.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut inbound: Vec<Inbound> = self.sides.iter().map(|_| Inbound::default()).collect();
        let mut scratch = Vec::new();
        let Ok(count) = libc::nfds_t::try_from(fds.len()) else {
            return;
        };
        while !self.stop.load(Ordering::Acquire) {
            // SAFETY: `fds` is a live, exclusively borrowed array of
            // `count` initialized `pollfd`s for the duration of the call,
            // and every descriptor in it stays open (the hub owns the
            // streams and outlives this thread).
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, STOP_LOOK_MS) };
            if ready <= 0 {
                continue;
            }
            for (i, fd) in fds.iter_mut().enumerate() {
                if std::mem::take(&mut fd.revents) == 0 {
                    continue;
                }
                if let Err(e) = self.serve(i, &mut inbound[i], &mut scratch) {
                    // The callers waiting time out (`WAIT`) and say so.
                    eprintln!("{e}");
                    return;
                }
            }
        }
    }
}

/// A non-blocking socket of our own to the server at `url` (read without
/// the `redis` crate: a design floor polls it), and the release script's
/// SHA, loaded there first.
pub(crate) fn open_stream(url: &str, who: &str) -> Result<(TcpStream, String), String> {
    let sha = connect_loaded(url, who)?.1;
    let address = url
        .strip_prefix("redis://")
        .and_then(|rest| rest.split('/').next())
        .ok_or_else(|| format!("{who}: {url}: not a redis:// URL"))?;
    let stream = TcpStream::connect(address)
        .and_then(|s| s.set_nodelay(true).map(|()| s))
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .map_err(|e| format!("{who}: {address}: {e}"))?;
    Ok((stream, sha))
}

/// The shared connections and their reader; [`Service`] for the scaling
/// runs, [`SharedReader::locker`] for the `--wakes` blocks.
pub struct SharedReader {
    hub: Arc<Hub>,
    reader: Option<JoinHandle<()>>,
    ttl_ms: u64,
}

impl SharedReader {
    /// One connection per node (script loaded on each), and the reader.
    pub fn connect(urls: &[String], settings: &Settings) -> Result<Self, String> {
        let mut sides = Vec::with_capacity(urls.len());
        let mut release_sha = String::new();
        for url in urls {
            let stream;
            (stream, release_sha) = open_stream(url, "shared reader")?;
            sides.push(Side {
                stream,
                line: Mutex::new(Line::default()),
            });
        }
        let hub = Arc::new(Hub {
            sides,
            release_sha,
            stop: AtomicBool::new(false),
            in_flight: settings.reader_in_flight.max(1),
        });
        let shared = Arc::clone(&hub);
        let reader = thread::Builder::new()
            .name("shared-reader".into())
            .spawn(move || shared.read_all())
            .map_err(|e| format!("shared reader: spawn: {e}"))?;
        Ok(Self {
            hub,
            reader: Some(reader),
            ttl_ms: millis(settings.ttl),
        })
    }

    /// A caller thread's handle.
    pub fn locker(&self) -> SharedLocker {
        SharedLocker {
            hub: Arc::clone(&self.hub),
            tokens: Tokens::new(),
            ttl: self.ttl_ms.to_string(),
            buf: Vec::new(),
        }
    }
}

impl Drop for SharedReader {
    fn drop(&mut self) {
        self.hub.stop.store(true, Ordering::Release);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Service for SharedReader {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(SharedReader::locker(self)))
    }
}

/// One caller thread's side of a [`SharedReader`].
pub struct SharedLocker {
    hub: Arc<Hub>,
    tokens: Tokens,
    ttl: String,
    buf: Vec<u8>,
}

impl SharedLocker {
    /// Sends `self.buf` to every node (or queues it) and sleeps until the
    /// round is decided: the grants.
    fn round(&self, rule: Rule) -> Result<u32, String> {
        let ballot = Ballot::new(rule);
        for side in &self.hub.sides {
            side.submit(&self.buf, &ballot, self.hub.in_flight)?;
        }
        ballot
            .wait()
            .ok_or_else(|| format!("shared reader: no decision within {WAIT:?}"))
    }
}

impl Locker for SharedLocker {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let token = self.tokens.next();
        let nodes = u32::try_from(self.hub.sides.len()).unwrap_or(u32::MAX);
        let quorum = nodes / 2 + 1;
        self.buf.clear();
        let ttl = self.ttl.as_bytes();
        command(&mut self.buf, &[b"SET", key, &token, b"NX", b"PX", ttl]);
        let granted = self.round(Rule::Quorum { quorum, nodes })?;
        self.buf.clear();
        let sha = self.hub.release_sha.as_bytes();
        command(&mut self.buf, &[b"EVALSHA", sha, b"1", key, &token]);
        self.round(Rule::All { nodes })?;
        if granted >= quorum {
            Ok(())
        } else {
            Err(format!("shared reader: {granted} of {nodes} granted"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_whole_and_grant_only_ok_or_one() {
        assert_eq!(reply(b"+OK\r\n"), Ok(Some((5, true))));
        assert_eq!(reply(b":1\r\n:0\r\n"), Ok(Some((4, true))));
        assert_eq!(reply(b":0\r\n"), Ok(Some((4, false))));
        assert_eq!(reply(b"$-1\r\n"), Ok(Some((5, false))));
        assert_eq!(reply(b"-NOSCRIPT x\r\n"), Ok(Some((13, false))));
        assert_eq!(reply(b"$3\r\nab"), Ok(None));
        assert_eq!(reply(b"$3\r\nabc\r\n"), Ok(Some((9, false))));
        assert_eq!(reply(b"+O"), Ok(None));
        assert!(reply(b"*1\r\n").is_err());
    }

    #[test]
    fn a_round_is_decided_at_a_quorum_or_when_it_cannot_be_reached() {
        let acquire = Rule::Quorum {
            quorum: 2,
            nodes: 3,
        };
        assert!(!acquire.decided(1, 1));
        assert!(acquire.decided(2, 2));
        assert!(!acquire.decided(1, 2));
        assert!(acquire.decided(0, 2));
        let release = Rule::All { nodes: 3 };
        assert!(!release.decided(2, 2));
        assert!(release.decided(0, 3));
    }

    #[test]
    fn a_line_keeps_at_most_its_limit_of_batches_in_flight_and_answers_in_wire_order() {
        let ballot = || Ballot::new(Rule::All { nodes: 1 });
        let (a, b, c) = (ballot(), ballot(), ballot());
        let mut line = Line::default();
        assert!(line.has_room(2));
        line.start([Arc::clone(&a)]);
        assert!(line.has_room(2) && !line.has_room(1));
        line.start([Arc::clone(&b)]);
        assert!(!line.has_room(2));
        // Full: what comes now is queued, and goes as one batch once the
        // oldest batch is answered.
        line.queued_bytes.extend_from_slice(b"c");
        line.queued.push(Arc::clone(&c));
        let mut next = Vec::new();
        assert!(!line.take_queued(2, &mut next));
        assert!(line.answered().is_some_and(|x| Arc::ptr_eq(&x, &a)));
        assert!(line.take_queued(2, &mut next));
        assert_eq!(next, b"c");
        assert!(line.queued.is_empty() && !line.has_room(2));
        assert!(line.answered().is_some_and(|x| Arc::ptr_eq(&x, &b)));
        assert!(line.answered().is_some_and(|x| Arc::ptr_eq(&x, &c)));
        assert!(line.answered().is_none());
        assert!(line.batches.is_empty() && line.has_room(1));
    }

    #[test]
    fn commands_are_written_as_arrays_of_bulk_strings() {
        let mut buf = Vec::new();
        command(&mut buf, &[b"GET", b"k"]);
        assert_eq!(buf, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
