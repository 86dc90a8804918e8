//! [`LockManager`]: the public entry point, its settings and its views
//! (health, nodes, flush). How a call takes a lock is in `take.rs`; the
//! Redlock rounds, the lease, local turns and the watchdog are below it,
//! in [`redlock`](crate::redlock).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::take::measured;
use crate::backend::KeySet;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::health::Health;
use crate::options::{DEFAULT_WAIT, LockOptions, RetryPolicy};
use crate::redlock::{Core, Lease, drift};
use crate::resource::invalid_resource;
use crate::trace::Call;

pub(crate) mod take;

/// Acquires, extends and releases locks over a quorum of nodes.
///
/// Cheap to clone (an `Arc`): clones share the node workers.
///
/// # When the last handle goes
///
/// When the last clone and the last [`LockGuard`] are dropped, the drop
/// sends what is still queued (the releases of dropped guards and of failed
/// attempts) and waits for it, at most two per-node timeouts, before the
/// worker threads stop. So a program that drops its guard and returns from
/// `main` leaves no lock behind on a healthy node. A node that does not
/// answer within that time keeps the key until its TTL runs out; use
/// [`flush`](LockManager::flush) to wait longer or to learn the outcome.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::{LockManager, MemoryBackend};
///
/// let locks = LockManager::builder()
///     .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
///     .ttl(Duration::from_secs(5))
///     .build()?;
///
/// let guard = locks.try_lock("orders:42")?;
/// assert!(guard.is_valid());
/// assert!(locks.try_lock("orders:42").unwrap_err().is_contended());
/// guard.release()?;
/// # Ok::<(), quorum_lock::Error>(())
/// ```
#[derive(Clone)]
pub struct LockManager {
    core: Arc<Core>,
    /// The default retry policy of [`lock`](Self::lock).
    retry: RetryPolicy,
}

impl LockManager {
    pub(crate) fn new(core: Core, retry: RetryPolicy) -> Self {
        Self {
            core: Arc::new(core),
            retry,
        }
    }

    /// The shared core (the inspection reads through it).
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// The default retry policy (the semaphore waits by it too).
    pub(crate) fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// How long a call waits when neither its options nor its retry
    /// policy set a limit: `max_ttl` plus its drift allowance plus
    /// 2 s (for the jitter and one more attempt), and at least 60 seconds (62.6 s with the
    /// default `max_ttl` of 60 s). So a default [`lock`](Self::lock)
    /// outlasts both a lock whose holder crashed (it has expired by then)
    /// and a restart quarantine (servers started a moment before the call
    /// vote again before it gives up), with time for the jitter and one
    /// more attempt.
    pub fn default_wait(&self) -> Duration {
        let config = self.core.rounds().config();
        let longest = config
            .max_ttl
            .saturating_add(drift(config.max_ttl, config.drift_factor))
            .saturating_add(DEFAULT_WAIT_MARGIN);
        longest.max(DEFAULT_WAIT)
    }

    /// Acquires `resource` with the default TTL, waiting for it as
    /// `Mutex::lock` does: as long as someone else holds it, up to the
    /// manager's [`RetryPolicy`] limit, by default the manager's
    /// [`default_wait`](Self::default_wait) (**62.6 seconds** with the
    /// default `max_ttl` of 60 s) with no cap on the number of attempts:
    /// a lock whose holder crashed has expired by then, and servers that
    /// started a moment before the call have left their restart
    /// quarantine. While the nodes that answer are quarantined, the wait
    /// makes one attempt when enough of them vote again (plus the
    /// policy's jitter), not one per retry delay; a quarantine that ends
    /// after the wait's budget ends the call at once, with the report
    /// that says when the nodes vote again. For one attempt, use
    /// [`try_lock`](Self::try_lock); for another limit or a way to cancel,
    /// [`lock_with`](Self::lock_with) with [`LockOptions::wait`] and
    /// [`LockOptions::cancellation`].
    ///
    /// Threads of this manager waiting for the same resource queue locally
    /// (only the first contends with the servers), for no longer than the
    /// current holder's lock is valid: a holder that is stuck past its
    /// validity does not hold the line.
    ///
    /// Locks are **not reentrant**: a thread that holds a valid guard for
    /// `resource` from this manager and waits for it again gets
    /// [`Error::Deadlock`] at once, rather than waiting for itself
    /// ([`try_lock`](Self::try_lock), which does not wait, reports it as
    /// [`Error::Contended`], as `Mutex::try_lock` does). A guard counts
    /// for the thread that took it, even if moved elsewhere; one whose
    /// validity ran out, or that is lost, holds nothing to wait for and
    /// does not count. A reentrant lock would need a count shared by guards
    /// that can each be released, extended or lost on their own, and would
    /// let an inner guard's release free the lock under the outer one.
    /// Another thread of the same manager simply waits its turn.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::NoQuorum`] (of the last attempt)
    /// once the wait is spent; [`Error::ValidityExpired`] when the last
    /// attempt got a quorum too slowly; [`Error::Deadlock`] when this
    /// thread already holds it (no node contacted);
    /// [`Error::InvalidArgument`] for an empty resource, one over
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes, or one that
    /// contains `{quorum-lock}` (which marks the crate's own keys), before
    /// any node is contacted.
    pub fn lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard> {
        self.lock_with(resource, &LockOptions::new())
    }

    /// One attempt to acquire `resource` with the default TTL, no retries,
    /// no waiting in the local line. On a resource this thread already
    /// holds, it fails as [`Error::Contended`] (it cannot deadlock).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), after a single attempt.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard> {
        let once = LockOptions::new().retry(RetryPolicy::none());
        self.lock_as(Call::TryLock, resource.as_ref(), &once)
    }

    /// Acquires `resource` with per-call options.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
    /// let opts = LockOptions::new()
    ///     .ttl(Duration::from_secs(2))
    ///     .wait(Duration::from_millis(300));
    /// let guard = locks.lock_with("report:daily", &opts)?;
    /// assert!(guard.validity() <= Duration::from_secs(2));
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); also [`Error::InvalidArgument`] for a TTL
    /// that is zero, above `max_ttl`, or not above the drift allowance, and
    /// [`Error::Cancelled`] once the [`cancellation`](LockOptions::cancellation)
    /// token is cancelled.
    pub fn lock_with(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        self.lock_as(Call::Lock, resource.as_ref(), options)
    }

    /// [`lock_with`](Self::lock_with), in the span of `call` (a
    /// semaphore's scan tries each slot as a `try_lock`).
    pub(crate) fn lock_as(
        &self,
        call: Call,
        resource: &[u8],
        options: &LockOptions,
    ) -> Result<LockGuard> {
        measured(call, self.quorum(), |rounds| {
            self.take(resource, options, rounds)
        })
    }

    /// A guard for a fresh `lease`, sharing this manager's core.
    pub(crate) fn guard(&self, lease: Arc<Lease>) -> LockGuard {
        LockGuard::new(Arc::clone(&self.core), lease)
    }

    /// Waits until every node has processed the operations queued so far
    /// (including background releases from dropped guards), for at most
    /// `timeout`. Returns whether every node got there in time.
    ///
    /// Useful before a process exits, and in tests: an acquire or extend
    /// returns once a quorum has answered, and leaves the other nodes'
    /// part to their threads, so a test that reads a node's state (its
    /// key, its TTL, [`health`](Self::health)) after such a call flushes
    /// first. [`inspect`](Self::inspect) through the same manager needs no
    /// flush (each node runs it after what was queued before it); through
    /// another manager it does.
    ///
    /// On an injected clock ([`ManualClock`](crate::ManualClock)), it
    /// first waits until the auto-extension thread has run every extend
    /// due at the clock's current time: after an `advance` past a guard's
    /// extend time, `flush` returns once that extend was sent and
    /// answered (auto-extension runs on its own thread, so without it the
    /// extend happens a moment later, and a second `advance` may come
    /// first).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now().checked_add(timeout);
        let renewed = self.core.settle_renewals(timeout);
        let left = deadline.map_or(timeout, |d| {
            d.saturating_duration_since(std::time::Instant::now())
        });
        renewed & self.core.rounds().engine().flush(left)
    }

    /// Threads of this manager waiting in [`lock`](Self::lock) /
    /// [`lock_with`](Self::lock_with) for `resource` behind the one whose
    /// turn it is: a measure of local contention.
    pub fn local_waiters(&self, resource: impl AsRef<[u8]>) -> usize {
        let rounds = self.core.rounds();
        let lock = rounds.lock_on(&KeySet::one(resource));
        rounds.local().waiting(&lock)
    }

    /// A snapshot of the nodes (state, round-trip time, last error,
    /// counters) and of this manager's locks (acquired, contended, lost,
    /// extends, hand-overs, ...). Contacts no server and starts no thread;
    /// see [`Health`] for an example.
    ///
    /// # Node state lags a round decided at a quorum
    ///
    /// An acquire or an extend returns as soon as a quorum has answered:
    /// the other nodes run their part afterwards, on their own threads,
    /// and only then record its outcome (a failure, a mark-down, a
    /// restart seen). So right after such a call a node's entry here, like
    /// the key on the server itself, may not show that round yet. Call
    /// [`flush`](Self::flush) first when the snapshot must include every
    /// round made so far (in tests, before reading any node's state).
    ///
    /// # Readiness
    ///
    /// [`Health::has_quorum`] is false while too few nodes vote: down,
    /// unusable (refusing every operation: a wrong password, a database
    /// the server does not have, not a Redis server), quarantined, and so
    /// on. It knows only what the operations so far showed, and nothing of
    /// failures tied to keys (an ACL key pattern that misses the prefix):
    /// [`check_ready`](Self::check_ready) asks the servers.
    pub fn health(&self) -> Health {
        let rounds = self.core.rounds();
        Health {
            quorum: rounds.config().quorum,
            nodes: rounds.engine().health(rounds.now()),
            locks: rounds.counters().snapshot(),
        }
    }

    /// The nodes' names, in configuration order.
    pub fn nodes(&self) -> Vec<String> {
        self.core
            .rounds()
            .engine()
            .node_names()
            .map(str::to_owned)
            .collect()
    }

    /// Votes needed for a lock.
    pub fn quorum(&self) -> usize {
        self.core.rounds().config().quorum
    }

    /// The owner label stored with this manager's locks (see
    /// [`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner));
    /// empty when none is stored.
    pub fn owner(&self) -> &str {
        &self.core.rounds().config().owner
    }

    /// The default TTL of [`lock`](Self::lock).
    pub fn ttl(&self) -> Duration {
        self.core.rounds().config().ttl
    }

    /// The clock-drift allowance for a lock of `ttl`.
    pub fn drift_for(&self, ttl: Duration) -> Duration {
        drift(ttl, self.core.rounds().config().drift_factor)
    }

    /// The key stored on the nodes for `resource`: the prefix (if any)
    /// followed by the resource bytes.
    pub fn key_for(&self, resource: impl AsRef<[u8]>) -> Vec<u8> {
        self.core.rounds().key_for(resource.as_ref())
    }

    /// Refuses a resource no lock can have (see [`crate::MAX_RESOURCE_LEN`]),
    /// before any node is contacted.
    pub(crate) fn check_resource(&self, resource: &[u8]) -> Result<()> {
        match invalid_resource(resource) {
            Some(reason) => Err(Error::InvalidArgument { reason }),
            None => Ok(()),
        }
    }
}

/// What the default wait allows past the end of a restart quarantine
/// (`max_ttl` plus drift after the first contact): the policy's jitter
/// and one more attempt.
pub(crate) const DEFAULT_WAIT_MARGIN: Duration = Duration::from_secs(2);

/// Bytes shown of a prefix in `Debug` output.
const SHOWN_PREFIX_BYTES: usize = 64;

/// A prefix for `Debug`: lossy UTF-8, cut after [`SHOWN_PREFIX_BYTES`].
fn shorten(bytes: &[u8]) -> String {
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN_PREFIX_BYTES)]);
    if bytes.len() > SHOWN_PREFIX_BYTES {
        format!("{shown}... ({} bytes)", bytes.len())
    } else {
        shown.into_owned()
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.core.rounds().config();
        f.debug_struct("LockManager")
            .field("nodes", self.core.rounds().engine())
            .field("quorum", &c.quorum)
            .field("ttl", &c.ttl)
            .field("node_timeout", &c.node_timeout)
            .field("drift_factor", &c.drift_factor)
            .field("prefix", &shorten(&c.prefix))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}
