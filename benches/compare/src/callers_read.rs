//! A second design floor: the engine's rules with **no reader thread**.
//! Each node's batch on the wire is read by one caller thread, its owner,
//! which sleeps in `poll` on a socket it owns and on a doorbell of its
//! own (an eventfd); what the shared reader (`shared_reader.rs`) does in
//! one thread for every node, the callers do here in their own.
//!
//! The rules kept: one connection per node shared by every caller, one
//! batch in flight per node (the next is written only once the one
//! before is fully read), a caller that finds a node idle writes its
//! operation there itself and one that finds it busy queues it, and a
//! caller sleeps until its round can be decided (a quorum of grants or
//! too many refusals for the acquire, every answer for the release).
//!
//! Who reads a batch:
//! - the caller that wrote it to an idle node owns it; when that batch is
//!   read and commands were queued behind it, the owner writes them as
//!   the next batch and owns that one too;
//! - a caller whose round is decided does not wait for its stragglers: it
//!   hands each batch it still owns to a caller whose round waits on it
//!   (its ballot is in the batch or queued behind it, undecided), or,
//!   when no round waits on it, leaves it without an owner;
//! - a caller that queues at a node whose batch has no owner adopts it:
//!   it reads the stale answers, then writes what was queued.
//!
//! A hand-off goes only to a caller still in a round (a flag in the same
//! atomic word as the nodes it owns, so a caller that leaves its round
//! cannot miss a node handed to it), and every batch has one reader.
//!
//! No quorum-lock code runs here, as in the shared reader's floor: no
//! timeouts per node, no retries, no fencing, no health. It measures the
//! threading. A caller waits at most [`WAIT`] for its round, then fails.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::clients::{Locker, Service, Settings, Tokens, millis};
use crate::shared_reader::{Rule, command, open_stream, reply};

/// The longest a caller waits for its round to be decided.
const WAIT: Duration = Duration::from_secs(2);

/// In a caller's state word: the caller is in a round (it reads what it
/// owns and may be handed more). The bits below are the nodes it owns.
const IN_ROUND: u64 = 1 << 63;

/// The most nodes (one bit each in the state word).
const MAX_NODES: usize = 63;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bit(i: usize) -> u64 {
    1 << i
}

/// The nodes whose bits are set in `mask`.
fn nodes_of(mask: u64) -> impl Iterator<Item = usize> {
    (0..MAX_NODES).filter(move |&i| mask & bit(i) != 0)
}

/// One caller thread's doorbell and what it owns.
struct Waiter {
    /// An eventfd the caller polls beside its sockets.
    bell: File,
    /// Set while the caller is about to sleep or sleeps in `poll`: a ring
    /// writes the eventfd only then.
    sleeping: AtomicBool,
    /// [`IN_ROUND`], and bit `i` when node `i`'s batch on the wire is the
    /// caller's to read.
    state: AtomicU64,
}

impl Waiter {
    fn new() -> Result<Arc<Self>, String> {
        // SAFETY: `eventfd` takes no pointers; a negative result is an
        // error and is returned as one.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("callers read: eventfd: {e}"));
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let bell = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(Arc::new(Self {
            bell,
            sleeping: AtomicBool::new(false),
            state: AtomicU64::new(0),
        }))
    }

    /// Wakes the caller if it sleeps (or is about to: it checks again
    /// after saying so, see [`CallersReadLocker::round`]).
    fn ring(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let _ = (&self.bell).write(&1u64.to_ne_bytes());
        }
    }

    /// Empties the doorbell after `poll` saw it ring.
    fn hush(&self) {
        let mut count = [0u8; 8];
        let _ = (&self.bell).read(&mut count);
    }

    /// Gives node `i`'s batch to this caller if it is in a round.
    fn offer(&self, i: usize) -> bool {
        self.state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s & IN_ROUND != 0).then_some(s | bit(i))
            })
            .is_ok()
    }

    fn owned(&self) -> u64 {
        self.state.load(Ordering::SeqCst) & !IN_ROUND
    }
}

/// One round's votes, posted by whichever callers read the nodes; its
/// caller is rung once, when the round can be decided.
struct Ballot {
    /// Answers in the high 32 bits, grants in the low: one atomic add per
    /// answer, so two posters never see half of the other's.
    votes: AtomicU64,
    rule: Rule,
    decided: AtomicBool,
    caller: Arc<Waiter>,
}

impl Ballot {
    fn post(&self, grant: bool) {
        let add = (1 << 32) | u64::from(grant);
        let votes = self.votes.fetch_add(add, Ordering::AcqRel) + add;
        let (answered, granted) = ((votes >> 32) as u32, votes as u32);
        if self.rule.decided(granted, answered) && !self.decided.swap(true, Ordering::SeqCst) {
            self.caller.ring();
        }
    }

    fn is_decided(&self) -> bool {
        self.decided.load(Ordering::SeqCst)
    }

    fn granted(&self) -> u32 {
        self.votes.load(Ordering::Acquire) as u32
    }
}

/// A node's queue and its batch on the wire.
#[derive(Default)]
struct Line {
    /// The batch on the wire, one ballot per command, oldest first;
    /// empty when the node is idle.
    in_flight: VecDeque<Arc<Ballot>>,
    /// Written while a batch was on the wire: the next batch.
    queued_bytes: Vec<u8>,
    queued: Vec<Arc<Ballot>>,
    /// Who reads the batch on the wire; `None` when no round waits on it
    /// (the next caller to queue here adopts it).
    owner: Option<Arc<Waiter>>,
}

/// One node: its connection, written by whoever made the line busy and
/// read only by the line's owner.
struct Side {
    stream: TcpStream,
    line: Mutex<Line>,
    /// Answers read but not yet whole; only the owner touches it.
    inbound: Mutex<Vec<u8>>,
}

struct Hub {
    sides: Vec<Side>,
    release_sha: String,
    /// How often a batch changed reader: for the tests and the docs.
    moves: Moves,
}

/// Counts of the ways a batch on the wire changes reader.
#[derive(Default)]
struct Moves {
    /// Handed by a caller whose round was decided to one whose round waits.
    handed: AtomicU64,
    /// Left without an owner: no round waited on it.
    left: AtomicU64,
    /// Taken without an owner by a caller that queued behind it.
    adopted: AtomicU64,
}

impl Moves {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Hub {
    /// Writes `command` at node `i` if it is idle (and `me` owns the
    /// batch), else queues it (adopting the batch if it has no owner).
    fn submit(
        &self,
        i: usize,
        command: &[u8],
        ballot: &Arc<Ballot>,
        me: &Arc<Waiter>,
    ) -> Result<(), String> {
        let side = &self.sides[i];
        let mut line = locked(&side.line);
        if line.in_flight.is_empty() {
            line.in_flight.push_back(Arc::clone(ballot));
            line.owner = Some(Arc::clone(me));
            me.state.fetch_or(bit(i), Ordering::SeqCst);
            // Nobody else writes while a batch is on the wire: outside
            // the lock.
            drop(line);
            return (&side.stream)
                .write_all(command)
                .map_err(|e| format!("callers read: node {i}: write: {e}"));
        }
        line.queued_bytes.extend_from_slice(command);
        line.queued.push(Arc::clone(ballot));
        if line.owner.is_none() {
            line.owner = Some(Arc::clone(me));
            me.state.fetch_or(bit(i), Ordering::SeqCst);
            Moves::count(&self.moves.adopted);
        }
        Ok(())
    }

    /// Reads node `i`'s answers that are in (`me` owns its batch), posts
    /// them, and writes what was queued once the batch is fully read.
    fn serve(&self, i: usize, me: &Waiter, next: &mut Vec<u8>) -> Result<(), String> {
        let side = &self.sides[i];
        let mut votes = Vec::new();
        {
            let mut inbound = locked(&side.inbound);
            let mut chunk = [0u8; 4096];
            loop {
                match (&side.stream).read(&mut chunk) {
                    Ok(0) => return Err(format!("callers read: node {i} closed the connection")),
                    Ok(k) => inbound.extend_from_slice(&chunk[..k]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("callers read: node {i}: read: {e}")),
                }
            }
            let mut at = 0;
            while let Some((len, grant)) = reply(&inbound[at..])? {
                at += len;
                votes.push(grant);
            }
            inbound.drain(..at);
        }
        if votes.is_empty() {
            return Ok(());
        }
        let mut line = locked(&side.line);
        let mut answered = Vec::with_capacity(votes.len());
        for grant in votes {
            let ballot = line
                .in_flight
                .pop_front()
                .ok_or_else(|| format!("callers read: node {i}: an answer nobody asked for"))?;
            answered.push((ballot, grant));
        }
        let write = line.in_flight.is_empty() && !line.queued.is_empty();
        if write {
            // The owner of the batch read owns the next one.
            std::mem::swap(next, &mut line.queued_bytes);
            let queued = std::mem::take(&mut line.queued);
            line.in_flight.extend(queued);
        } else if line.in_flight.is_empty() {
            line.owner = None;
            me.state.fetch_and(!bit(i), Ordering::SeqCst);
        }
        drop(line);
        // Posted before the write: a woken caller submits its next round
        // at once.
        for (ballot, grant) in answered {
            ballot.post(grant);
        }
        if write {
            let sent = (&side.stream).write_all(next);
            next.clear();
            sent.map_err(|e| format!("callers read: node {i}: write: {e}"))?;
        }
        Ok(())
    }

    /// `me` (whose round is decided) gives up node `i`'s batch: to a
    /// caller whose undecided round waits on it, or to nobody.
    fn hand_off(&self, i: usize, me: &Arc<Waiter>) {
        let mut line = locked(&self.sides[i].line);
        if line.in_flight.is_empty() {
            line.owner = None;
            return;
        }
        let heir = line
            .in_flight
            .iter()
            .chain(&line.queued)
            .filter(|b| !b.is_decided() && !Arc::ptr_eq(&b.caller, me))
            .map(|b| &b.caller)
            .find(|w| w.offer(i))
            .cloned();
        line.owner.clone_from(&heir);
        drop(line);
        match heir {
            Some(heir) => {
                Moves::count(&self.moves.handed);
                heir.ring();
            }
            None => Moves::count(&self.moves.left),
        }
    }
}

/// The shared connections; [`Service`] for the scaling runs,
/// [`CallersRead::locker`] for the `--wakes` blocks.
pub struct CallersRead {
    hub: Arc<Hub>,
    ttl_ms: u64,
}

impl CallersRead {
    /// One connection per node (script loaded on each).
    pub fn connect(urls: &[String], settings: &Settings) -> Result<Self, String> {
        if urls.len() > MAX_NODES {
            return Err(format!("callers read: at most {MAX_NODES} nodes"));
        }
        let mut sides = Vec::with_capacity(urls.len());
        let mut release_sha = String::new();
        for url in urls {
            let stream;
            (stream, release_sha) = open_stream(url, "callers read")?;
            sides.push(Side {
                stream,
                line: Mutex::new(Line::default()),
                inbound: Mutex::new(Vec::new()),
            });
        }
        Ok(Self {
            hub: Arc::new(Hub {
                sides,
                release_sha,
                moves: Moves::default(),
            }),
            ttl_ms: millis(settings.ttl),
        })
    }

    /// A caller thread's handle.
    pub fn locker(&self) -> Result<CallersReadLocker, String> {
        Ok(CallersReadLocker {
            hub: Arc::clone(&self.hub),
            me: Waiter::new()?,
            tokens: Tokens::new(),
            ttl: self.ttl_ms.to_string(),
            buf: Vec::new(),
            next: Vec::new(),
            fds: Vec::new(),
        })
    }
}

impl Service for CallersRead {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(CallersRead::locker(self)?))
    }
}

/// One caller thread's side of a [`CallersRead`].
pub struct CallersReadLocker {
    hub: Arc<Hub>,
    me: Arc<Waiter>,
    tokens: Tokens,
    ttl: String,
    buf: Vec<u8>,
    /// The next batch a served node writes.
    next: Vec<u8>,
    fds: Vec<libc::pollfd>,
}

impl CallersReadLocker {
    /// Sends `self.buf` to every node (or queues it), reads what this
    /// caller owns until the round is decided, then hands off what it
    /// still owns: the grants.
    fn round(&mut self, rule: Rule) -> Result<u32, String> {
        let ballot = Arc::new(Ballot {
            votes: AtomicU64::new(0),
            rule,
            decided: AtomicBool::new(false),
            caller: Arc::clone(&self.me),
        });
        self.me.state.fetch_or(IN_ROUND, Ordering::SeqCst);
        let mut result = Ok(());
        for i in 0..self.hub.sides.len() {
            result = self.hub.submit(i, &self.buf, &ballot, &self.me);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = self.wait(&ballot);
        }
        // Leaving the round: nothing is handed to this caller from here
        // on, and what it owns goes on.
        let left = self.me.state.swap(0, Ordering::SeqCst) & !IN_ROUND;
        for i in nodes_of(left) {
            self.hub.hand_off(i, &self.me);
        }
        result.map(|()| ballot.granted())
    }

    /// Reads the nodes this caller owns, and sleeps in `poll` on the first
    /// of them and its doorbell, until `ballot` is decided.
    fn wait(&mut self, ballot: &Ballot) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        while !ballot.is_decided() {
            let owned = self.me.owned();
            self.fds.clear();
            self.fds.push(libc::pollfd {
                fd: self.me.bell.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            // One socket at a time, like the floor's reads in order: the
            // answers that come in on the others meanwhile are read when
            // this one wakes the caller. Polling every owned socket made
            // a few more switches, within the noise (`--wakes 1
            // 3:8:callers-read`, five blocks each: 3.11-3.45 per lock,
            // median 3.37, against 3.18-3.24, median 3.21).
            //
            // Every owned node is read after the wake, the others
            // without waiting (a read that finds nothing costs one
            // system call).
            if let Some(i) = nodes_of(owned).next() {
                self.fds.push(libc::pollfd {
                    fd: self.hub.sides[i].stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // Say so, then look again: a ring or a hand-off after this
            // either is seen here or writes the doorbell.
            self.me.sleeping.store(true, Ordering::SeqCst);
            if ballot.is_decided() || self.me.owned() != owned {
                self.me.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.me.sleeping.store(false, Ordering::SeqCst);
                return Err(format!("callers read: no decision within {WAIT:?}"));
            }
            let timeout = i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX);
            let count = libc::nfds_t::try_from(self.fds.len()).unwrap_or(0);
            // SAFETY: `fds` is a live, exclusively borrowed array of
            // `count` initialized `pollfd`s for the duration of the call,
            // and every descriptor in it stays open (the hub owns the
            // streams and this caller its doorbell).
            let ready = unsafe { libc::poll(self.fds.as_mut_ptr(), count, timeout) };
            self.me.sleeping.store(false, Ordering::SeqCst);
            if ready <= 0 {
                continue;
            }
            if self.fds[0].revents != 0 {
                self.me.hush();
            }
            for i in nodes_of(self.me.owned()) {
                self.hub.serve(i, &self.me, &mut self.next)?;
            }
        }
        Ok(())
    }
}

impl Locker for CallersReadLocker {
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
            Err(format!("callers read: {granted} of {nodes} granted"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::RedisServer;

    /// `threads` callers, `locks` lock + release each on keys of their
    /// own, over `n` real servers: every round is decided (none strands
    /// behind a batch nobody reads, which would fail it after [`WAIT`]);
    /// the batch moves, (handed, left, adopted).
    fn run(n: usize, threads: usize, locks: usize) -> (u64, u64, u64) {
        let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let settings = Settings {
            ttl: Duration::from_secs(10),
            node_timeout: Duration::from_secs(1),
            retry_pause: Duration::from_millis(4),
            reader_in_flight: 1,
        };
        let floor = CallersRead::connect(&urls, &settings).unwrap();
        std::thread::scope(|s| {
            for t in 0..threads {
                let mut locker = floor.locker().unwrap();
                s.spawn(move || {
                    for i in 0..locks {
                        let key = format!("callers-read:{t}:{}", i % 8);
                        locker.lock_release(key.as_bytes()).unwrap();
                    }
                });
            }
        });
        let m = &floor.hub.moves;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (load(&m.handed), load(&m.left), load(&m.adopted))
    }

    #[test]
    fn one_caller_leaves_its_straggler_and_its_next_round_adopts_it() {
        let (handed, left, adopted) = run(3, 1, 200);
        assert_eq!(handed, 0, "no other caller to hand to");
        assert!(left > 0 && adopted > 0, "left {left}, adopted {adopted}");
    }

    #[test]
    fn many_callers_hand_batches_on_and_every_round_is_decided() {
        let (handed, left, adopted) = run(3, 12, 300);
        assert!(
            handed > 0,
            "handed {handed}, left {left}, adopted {adopted}"
        );
    }

    #[test]
    fn a_node_is_handed_only_to_a_caller_in_a_round() {
        let w = Waiter::new().unwrap();
        assert!(!w.offer(2), "not in a round");
        assert_eq!(w.owned(), 0);
        w.state.fetch_or(IN_ROUND, Ordering::SeqCst);
        assert!(w.offer(2) && w.offer(0));
        assert_eq!(w.owned(), 0b101);
        assert_eq!(nodes_of(w.owned()).collect::<Vec<_>>(), [0, 2]);
        // Leaving takes everything at once: no later offer succeeds.
        assert_eq!(w.state.swap(0, Ordering::SeqCst) & !IN_ROUND, 0b101);
        assert!(!w.offer(1));
    }

    #[test]
    fn a_ballot_rings_its_caller_once_when_decided() {
        let w = Waiter::new().unwrap();
        let ballot = Ballot {
            votes: AtomicU64::new(0),
            rule: Rule::Quorum {
                quorum: 2,
                nodes: 3,
            },
            decided: AtomicBool::new(false),
            caller: Arc::clone(&w),
        };
        w.sleeping.store(true, Ordering::SeqCst);
        ballot.post(true);
        assert!(!ballot.is_decided() && w.sleeping.load(Ordering::SeqCst));
        ballot.post(true);
        assert!(ballot.is_decided() && !w.sleeping.load(Ordering::SeqCst));
        let mut count = [0u8; 8];
        assert_eq!((&w.bell).read(&mut count).unwrap(), 8);
        assert_eq!(u64::from_ne_bytes(count), 1);
        w.sleeping.store(true, Ordering::SeqCst);
        ballot.post(false);
        assert!(w.sleeping.load(Ordering::SeqCst), "rung once");
        assert_eq!(ballot.granted(), 2);
    }
}
