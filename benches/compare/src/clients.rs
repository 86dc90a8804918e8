//! The clients under test, behind one small blocking interface, and the
//! settings they all share.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Settings shared by every client, so that they do the same work.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Lock TTL.
    pub ttl: Duration,
    /// quorum-lock's per-node timeout (the peers have their own: redsync
    /// uses 1% of the TTL to connect, redlock and rslock none).
    pub node_timeout: Duration,
    /// Contention: after a failed attempt every client pauses a random time
    /// with mean `retry_pause / 2` (see `docs/benchmarks.md` for each
    /// client's exact setting).
    pub retry_pause: Duration,
    /// The shared-reader design floor's batches in flight per node
    /// (`--in-flight`): 1, the engine's rule, unless a run asks what the
    /// rule costs.
    pub reader_in_flight: usize,
}

/// A client library (or the floor) under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Client {
    /// The round-trip floor (`floor.rs`).
    Floor,
    /// This crate, through `LockManager`, ending each lock with
    /// `guard.release()` (waits for every node's answer).
    Ours,
    /// This crate, ending each lock by dropping the guard (the release is
    /// queued, or the lock handed to a waiting thread of the same manager).
    OursDrop,
    /// Diagnostic: this crate's `RedisBackend` called directly, no engine
    /// (N=1 only): what the engine's thread hand-offs cost.
    Backend,
    /// `redlock` 2.0.0.
    Redlock,
    /// `redsync` 1.0.1.
    Redsync,
    /// `rslock` 0.10 (async, on tokio).
    Rslock,
    /// A design floor, not a library: blocking callers sharing one
    /// connection per node, one batch in flight per node, one reader
    /// thread polling every node (`shared_reader.rs`). Scaling only.
    SharedReader,
    /// A design floor, not a library: the same rules with no reader
    /// thread, each node's batch read by the caller that owns it
    /// (`callers_read.rs`). Scaling only.
    CallersRead,
}

impl Client {
    pub const ALL: [Client; 9] = [
        Client::Floor,
        Client::Ours,
        Client::OursDrop,
        Client::Backend,
        Client::Redlock,
        Client::Redsync,
        Client::Rslock,
        Client::SharedReader,
        Client::CallersRead,
    ];

    /// The name used by `--only`.
    pub fn key(self) -> &'static str {
        match self {
            Client::Floor => "floor",
            Client::Ours => "ours",
            Client::OursDrop => "ours-drop",
            Client::Backend => "backend",
            Client::Redlock => "redlock",
            Client::Redsync => "redsync",
            Client::Rslock => "rslock",
            Client::SharedReader => "shared-reader",
            Client::CallersRead => "callers-read",
        }
    }

    /// A short name, for chart legends.
    pub fn short(self) -> &'static str {
        match self {
            Client::Floor => "floor",
            Client::Ours => "quorum-lock release()",
            Client::OursDrop => "quorum-lock drop",
            Client::Backend => "RedisBackend direct",
            Client::Redlock => "redlock 2.0.0",
            Client::Redsync => "redsync 1.0.1",
            Client::Rslock => "rslock 0.10",
            Client::SharedReader => "shared reader (design floor)",
            Client::CallersRead => "callers read (design floor)",
        }
    }

    /// Whether each operation opens new TCP connections (and so is slow and
    /// gets fewer samples).
    pub fn connects_per_call(self) -> bool {
        matches!(self, Client::Redlock | Client::Redsync)
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Client::Floor => "floor (1 conn/node, write all, read all)",
            Client::Ours => "quorum-lock (release())",
            Client::OursDrop => "quorum-lock (drop)",
            Client::Backend => "quorum-lock RedisBackend direct (no engine)",
            Client::Redlock => "redlock 2.0.0",
            Client::Redsync => "redsync 1.0.1",
            Client::Rslock => "rslock 0.10",
            Client::SharedReader => "shared reader (design floor: one thread reads every node)",
            Client::CallersRead => "callers read (design floor: no reader thread)",
        })
    }
}

impl FromStr for Client {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Client::ALL
            .into_iter()
            .find(|c| c.key() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Client::ALL.iter().map(|c| c.key()).collect();
                format!("unknown client {s:?}; one of {}", names.join(", "))
            })
    }
}

/// One thread's handle on a lock service (blocking clients).
pub trait Locker {
    /// Uncontended: one attempt to acquire `key`, then release it.
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String>;

    /// Contended: wait for `key` (retrying with the client's own retry
    /// mechanism) until `deadline`, run `work` while holding it, release.
    fn critical_section(
        &mut self,
        _key: &[u8],
        _deadline: Instant,
        _work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        Err("not measured for this client".into())
    }
}

/// What the threads of a scenario share; hands each thread its [`Locker`].
pub trait Service: Sync {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String>;

    /// Called once the threads are done, before the clock stops: work the
    /// client still has queued (quorum-lock's background releases) counts.
    fn finish(&self) {}
}

/// Unique 20-byte lock tokens, cheaply (the floor must not pay for a
/// system call per token).
#[derive(Debug)]
pub struct Tokens {
    seed: u64,
    counter: u64,
}

impl Tokens {
    pub fn new() -> Self {
        Self {
            seed: RandomState::new().hash_one(Instant::now()),
            counter: 0,
        }
    }

    pub fn next(&mut self) -> [u8; 20] {
        self.counter += 1;
        let mut token = [0u8; 20];
        token[..8].copy_from_slice(&self.seed.to_le_bytes());
        token[8..16].copy_from_slice(&self.counter.to_le_bytes());
        token[16..].copy_from_slice(&(self.seed ^ self.counter).to_le_bytes()[..4]);
        token
    }
}

/// `ttl` in whole milliseconds, for the peers' integer-millisecond APIs.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
