//! What the lock servers and a manager's locks are doing:
//! [`Health`], the snapshot that
//! [`LockManager::health`](crate::LockManager::health) takes, with each
//! node's [`NodeHealth`] and [`NodeState`] and the manager's
//! [`LockCounters`]. For people, health endpoints and readiness checks.

use std::fmt;
use std::time::Duration;

use crate::backend::{BackendError, BackendErrorKind};
use crate::words::human;

/// A snapshot of a manager's nodes and locks, from
/// [`LockManager::health`](crate::LockManager::health).
///
/// Taking one contacts no server and starts no thread: it reads what the
/// node workers and the rounds recorded (cheap enough to poll every second;
/// `cargo run --release --example health` measures it). `Display` prints one
/// screen.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use quorum_lock::backend::OpKind;
/// use quorum_lock::health::{LockOp, NodeState};
/// use quorum_lock::{LockManager, MemoryBackend};
///
/// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
/// let locks = LockManager::builder().nodes(nodes.iter().cloned()).build()?;
/// locks.try_lock("job")?.release()?;
/// let health = locks.health();
/// assert_eq!(health.locks.acquired, 1);
/// assert!(health.nodes.iter().all(|n| n.state == NodeState::Up));
/// println!("{health}");
///
/// // A node whose access rules refuse every extend and release (as an
/// // ACL user without scripts on Redis 7, where both are scripts): locks
/// // still work on the other two, but the node is not shown as up, nor
/// // counted as voting, and the readiness check names it.
/// nodes[2].set_denied(Some(Arc::new(|op| !matches!(op.kind, OpKind::Acquire { .. }))));
/// let mut guard = locks.try_lock("job")?;
/// guard.extend(Duration::from_secs(10))?; // two of three: a quorum
/// guard.release()?;
/// locks.flush(Duration::from_secs(5)); // every node's answer read and judged
/// let health = locks.health();
/// assert!(matches!(
///     &health.nodes[2].state,
///     NodeState::Refuses { ops, .. } if ops == &[LockOp::Extend, LockOp::Release]
/// ));
/// assert_eq!(health.voting(), 2);
/// assert!(health.has_quorum());
/// // "mem-2: refuses what locks need (extend, release), not voting: ..."
/// println!("{health}");
/// let not_ready = locks.check_ready().unwrap_err();
/// assert!(not_ready.is_degraded(), "{not_ready}");
///
/// // Fixed: the node's thread tries again every second, and it votes.
/// nodes[2].set_denied(None);
/// let up = (0..50).any(|_| {
///     std::thread::sleep(Duration::from_millis(100));
///     locks.health().nodes[2].state == NodeState::Up
/// });
/// assert!(up, "{}", locks.health());
/// assert_eq!(locks.check_ready_all()?.granted(), 3);
/// # Ok::<(), quorum_lock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Health {
    /// Votes a lock needs.
    pub quorum: usize,
    /// One entry per node, in configuration order.
    pub nodes: Vec<NodeHealth>,
    /// What happened to this manager's locks so far.
    pub locks: LockCounters,
}

impl Health {
    /// Nodes whose votes count right now: those [`NodeState::Up`]. A node
    /// that answers but refuses what locks need
    /// ([`NodeState::Refuses`]) is not one of them.
    pub fn voting(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.state == NodeState::Up)
            .count()
    }

    /// Whether enough nodes vote for a lock to be possible at all (and
    /// kept: a node that takes locks but refuses to extend or release
    /// them is not counted).
    pub fn has_quorum(&self) -> bool {
        self.voting() >= self.quorum
    }
}

/// One node in a [`Health`] snapshot.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeHealth {
    /// The node's name, without credentials.
    pub name: String,
    /// Whether its votes count, and if not, why.
    pub state: NodeState,
    /// Smoothed round-trip time (`None` before the first round trip).
    pub round_trip: Option<Duration>,
    /// The last error it gave, if any.
    pub last_error: Option<BackendError>,
    /// Operations sent to it (each op of a batch counts).
    pub operations: u64,
    /// Operations that got no definite answer (errors, timeouts included).
    pub failures: u64,
    /// Operations that timed out.
    pub timeouts: u64,
    /// Releases waiting for it to come back (parked while it is down, or
    /// left to retry after a failure).
    pub releases_waiting: usize,
    /// Releases given up on (the retry window or the bound passed): their
    /// keys expire with their TTL.
    pub releases_abandoned: u64,
    /// The settings that let its server evict lock keys (such as
    /// `maxmemory 4194304, maxmemory-policy volatile-lru`), when it has
    /// them: shown whether or not the manager accepts that risk (see
    /// [`LockManagerBuilder::accept_eviction_risk`](crate::LockManagerBuilder::accept_eviction_risk)).
    pub eviction: Option<String>,
    /// On a node whose holds are confirmed by replicas (a cluster, a
    /// Sentinel-managed master set), how many replicas the last hold
    /// waited for (the fewest of a cluster's shards): `Some(0)` says the
    /// master has no replica, so its holds are only as safe as a plain
    /// server's. `None` on a plain server, or before the first hold.
    pub confirming_replicas: Option<usize>,
}

/// Whether a node's votes count.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// Its votes count.
    Up,
    /// Marked down after failed round trips: skipped, probed in the
    /// background.
    Down {
        /// How long ago it was marked down.
        since: Duration,
        /// When the next probe is due.
        next_probe_in: Duration,
    },
    /// It may have forgotten locks that are still held: its server
    /// started or restarted, evicted keys or allowed eviction until now,
    /// or took a new replication history, less than `max_ttl` + drift ago.
    /// Its grants do not count yet.
    Quarantined {
        /// Time left.
        remaining: Duration,
    },
    /// The same server as another configured node: only that one votes.
    DuplicateOf(String),
    /// With quarantine on, its last answer came without a server identity:
    /// its grants do not count.
    Unidentified,
    /// Its server may evict lock keys under memory pressure (`maxmemory`
    /// with an evicting `maxmemory-policy`), and the manager does not
    /// accept that risk: its grants do not count.
    MayEvict {
        /// The settings, in words.
        setting: String,
    },
    /// Its server is a replica now (`role` in `INFO replication`): its
    /// keys are its master's, and its grants do not count.
    Replica,
    /// It answers, but refused every operation of its last round trip for
    /// a reason that holds for any key: authentication, a database it does
    /// not have, TLS, a peer that is not a Redis server. No lock can get
    /// its vote until that is fixed. It is asked again every second while
    /// no operation goes to it, and votes again once it serves. (A failure
    /// tied to one key, such as an ACL key pattern's `NOPERM`, does not
    /// make a node unusable; one that covers the manager's own keys makes
    /// it [`Refuses`](Self::Refuses).)
    Unusable {
        /// What kind of failure.
        kind: BackendErrorKind,
        /// Why, in one line naming the node (its last refusal).
        reason: String,
    },
    /// It answers, but its access rules refuse operations that every
    /// lock needs (`BackendErrorKind::Denied`, Redis' `NOPERM`): an ACL
    /// user without the scripting commands (on Redis 7 every extend and
    /// release is a script, so each lock rests on the other nodes after
    /// its first extend, and its release leaves the key here until its
    /// TTL), or whose key pattern misses the manager's prefix (every
    /// operation refused). It does not count as voting.
    ///
    /// How it is judged: an operation refused with `Denied` makes the
    /// node's thread try the three operations of a plain lock (acquire,
    /// extend, release) on a key of the crate's own under the manager's
    /// prefix (`<prefix>{quorum-lock}:probe:<random>`, a new name and
    /// token each time, a TTL of one millisecond). A refusal there holds for
    /// every lock of this manager: it is no resource's, so it is the
    /// node's. A refusal tied to one resource's key (a key pattern that
    /// covers the prefix but not that name) leaves the try clean, and the
    /// node up. While it refuses, the node is tried again every second
    /// (whether or not locks use it), and it is up again at the first try
    /// that its server lets through.
    Refuses {
        /// The operations it refused at the last try, in the order
        /// acquire, extend, release.
        ops: Vec<LockOp>,
        /// Why, in the server's words, without the node's name or any
        /// credential.
        reason: String,
    },
}

/// An operation every lock needs of a node, as
/// [`NodeState::Refuses`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockOp {
    /// Take the lock's key (`SET NX PX`).
    Acquire,
    /// Prolong it while it holds the lock's token (compare-and-pexpire).
    Extend,
    /// Delete it while it holds the lock's token (compare-and-delete).
    Release,
}

impl fmt::Display for LockOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
        })
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Up => f.write_str("up"),
            Self::Down {
                since,
                next_probe_in,
            } => write!(
                f,
                "down for {} (next probe in {})",
                human(*since),
                human(*next_probe_in)
            ),
            Self::Quarantined { remaining } => {
                write!(f, "quarantined ({} left)", human(*remaining))
            }
            Self::DuplicateOf(other) => write!(f, "duplicate of {other}"),
            Self::Unidentified => f.write_str("no server identity (grants do not count)"),
            Self::MayEvict { setting } => {
                write!(f, "may evict lock keys ({setting}; grants do not count)")
            }
            Self::Replica => f.write_str("a replica now (grants do not count)"),
            Self::Unusable { reason, .. } => write!(f, "unusable: {reason}"),
            Self::Refuses { ops, reason } => {
                f.write_str("refuses what locks need (")?;
                for (i, op) in ops.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{op}")?;
                }
                write!(f, "), not voting: {reason}")
            }
        }
    }
}

/// What happened to a manager's locks since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockCounters {
    /// Locks acquired from the servers.
    pub acquired: u64,
    /// Attempts refused: held elsewhere.
    pub contended: u64,
    /// Attempts without a quorum of healthy nodes.
    pub no_quorum: u64,
    /// Attempts that got a quorum too slowly.
    pub validity_expired: u64,
    /// Locks lost (an extend failed, or the validity ran out).
    pub lost: u64,
    /// Extends a quorum confirmed.
    pub extends_ok: u64,
    /// Extends that failed.
    pub extends_failed: u64,
    /// Locks handed to the next thread of this manager on drop.
    pub hand_overs: u64,
    /// Waits between attempts that a release notice ended before the
    /// retry delay (wake-ups from other processes' releases).
    pub woken: u64,
    /// Locks whose first attempt waited for the processes that were
    /// already waiting: this manager had just released the same lock and
    /// they had heard it (the fairness rule of the wake-ups).
    pub yielded: u64,
    /// Waits between attempts that heard a release notice but went on to
    /// their retry delay, because the wait's early wake-ups were spent:
    /// notices that did not lead to a change of holder (forged, or
    /// repeated for a lock that stayed held). See the wake-ups in
    /// docs/safety.md.
    pub held_back: u64,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} of {} nodes voting, {} needed{}",
            self.voting(),
            self.nodes.len(),
            self.quorum,
            if self.has_quorum() { "" } else { ": NO QUORUM" }
        )?;
        for n in &self.nodes {
            let rtt = n.round_trip.map_or_else(|| "-".to_owned(), human);
            write!(
                f,
                "  {}: {}, rtt {rtt}, {} ops, {} failed, {} timed out",
                n.name, n.state, n.operations, n.failures, n.timeouts
            )?;
            if n.releases_waiting > 0 || n.releases_abandoned > 0 {
                write!(
                    f,
                    ", releases waiting {} / abandoned {}",
                    n.releases_waiting, n.releases_abandoned
                )?;
            }
            if let (Some(setting), false) =
                (&n.eviction, matches!(n.state, NodeState::MayEvict { .. }))
            {
                write!(f, "; may evict lock keys ({setting}), risk accepted")?;
            }
            if n.confirming_replicas == Some(0) {
                write!(f, "; no replica confirms its holds (a plain server)")?;
            }
            if let Some(e) = &n.last_error {
                write!(f, "; last error: {e}")?;
            }
            writeln!(f)?;
        }
        let c = &self.locks;
        write!(
            f,
            "locks: {} acquired, {} contended, {} no quorum, {} too slow, {} lost; \
             extends {} ok / {} failed; {} hand-overs; {} woken, {} yielded, {} held back",
            c.acquired,
            c.contended,
            c.no_quorum,
            c.validity_expired,
            c.lost,
            c.extends_ok,
            c.extends_failed,
            c.hand_overs,
            c.woken,
            c.yielded,
            c.held_back
        )
    }
}
