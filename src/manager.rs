//! [`LockManager`]: the public entry point. Options and retries here; the
//! Redlock rounds, the lease, local turns and the watchdog below it, in
//! [`redlock`](crate::redlock).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::KeySet;
use crate::engine::Hold;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::health::Health;
use crate::options::{DEFAULT_MAX_HOLD, DEFAULT_WAIT, LockOptions, RetryPolicy};
use crate::redlock::{Core, Lease, RenewalPlan, Turn, Want, check_ttl, drift};
use crate::resource::invalid_resource;
use crate::waiting::{Tried, Waiting};

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
        self.lock_with(resource, &LockOptions::new().retry(RetryPolicy::none()))
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
        let started = Instant::now();
        let mut rounds = 0;
        let taken = self.take(resource.as_ref(), options, &mut rounds);
        crate::metrics::acquire(outcome(&taken), started.elapsed(), rounds);
        taken
    }

    /// [`lock_with`](Self::lock_with), counting the acquire rounds it
    /// makes in `made` (for the metrics).
    fn take(&self, resource: &[u8], options: &LockOptions, made: &mut u32) -> Result<LockGuard> {
        self.check_resource(resource)?;
        // A single lock is a set of one, built here once.
        let resources = KeySet::one(resource);
        self.take_keys(&resources, options, made)
    }

    /// [`take`](Self::take) of checked `resources` (one, or a set of them,
    /// see `lock_all.rs`).
    pub(crate) fn take_keys(
        &self,
        resources: &KeySet,
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        let lock = self.core.rounds().lock_on(resources);
        self.take_as(resources, &lock, options, made)
    }

    /// The TTL a call with `options` asks for, checked: not zero, not over
    /// `max_ttl`, above the drift and above the node timeout.
    pub(crate) fn checked_ttl(&self, options: &LockOptions) -> Result<Duration> {
        let config = &self.core.rounds().config();
        let ttl = options.ttl.unwrap_or(config.ttl);
        check_ttl(ttl, config.max_ttl, config.drift_factor)
            .map_err(|reason| Error::InvalidArgument { reason })?;
        if ttl <= config.node_timeout {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "the TTL {ttl:?} is not above the node timeout {:?}: one slow node \
                     would use up the whole validity",
                    config.node_timeout
                ),
            });
        }
        Ok(ttl)
    }

    /// [`take_keys`](Self::take_keys) of `hold` (a lock on its keys, or a
    /// read-write lock's writer, which takes its writer's key as a lock),
    /// named `resources` in its reports and guard (the writer: under the
    /// read-write lock's name).
    pub(crate) fn take_as(
        &self,
        resources: &KeySet,
        hold: &Hold,
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        let config = &self.core.rounds().config();
        let ttl = self.checked_ttl(options)?;
        let mut waiting = Waiting::new(options, &self.retry, self.default_wait(), made);
        let rounds = self.core.rounds();
        let fenced = options.fencing.unwrap_or(config.fencing);
        waiting.check_cancelled()?;
        if waiting.single_attempt() {
            waiting.attempt();
            let lease = match rounds.acquire_once(resources, hold, ttl, fenced) {
                // As `Mutex::try_lock` on a mutex this thread holds: the
                // answer stays `Contended`, but it says who holds it.
                Err(Error::Contended { mut report })
                    if rounds.owners().held_by_me(hold, rounds.now()) =>
                {
                    report.held_here = true;
                    return Err(Error::Contended { report });
                }
                taken => taken?,
            };
            let guard = self.guard(lease);
            return self.deliver(guard, ttl, options, &waiting);
        }
        // A call that would wait for a lock this thread holds would wait
        // for itself. (One attempt cannot deadlock: it reports what the
        // servers say, as `Mutex::try_lock` does on a mutex its thread holds.)
        if rounds.owners().held_by_me(hold, rounds.now()) {
            return Err(Error::Deadlock {
                resource: resources.to_string(),
            });
        }
        // Threads of this manager that want the same key take turns: only
        // the turn-holder contends with the servers. (`None`: no deadline
        // can be expressed, the caller waits as long as it takes.)
        let want = Want { ttl, fenced };
        // The turn is a ticket: every return below that does not move it
        // into a guard drops it, which passes the turn to the next waiter.
        let line = rounds
            .local()
            .wait_turn(hold, want, waiting.deadline(), waiting.alarm());
        let turn = match line {
            Turn::Mine(turn) => turn,
            Turn::Handed(lease, turn) => {
                let guard = self.guard(lease).with_turn(turn);
                return self.deliver(guard, ttl, options, &waiting);
            }
            Turn::TimedOut => {
                // One honest attempt, so the error carries a real report.
                waiting.attempt();
                let guard = self.guard(rounds.acquire_once(resources, hold, ttl, fenced)?);
                return self.deliver(guard, ttl, options, &waiting);
            }
            Turn::Cancelled => return Err(waiting.cancelled()),
        };
        if turn.streak().yield_first {
            // This process has had the lock many times in a row: leave the
            // others a window before contending again.
            if let Some(pause) = waiting.next_delay() {
                waiting.alarm().sleep(pause);
            }
        }
        // Wake-ups: when this manager's last release of the key was heard
        // by waiting processes, they go first.
        let alarm = waiting.alarm().receiver();
        let watch = waiting
            .next_delay()
            .and_then(|pause| rounds.yield_to_waiters(hold, pause, Some(alarm)));
        let mut turn = Some(turn);
        // Wake-ups: the release of what it waits for.
        let listen = || Some(hold.announced_on().clone());
        waiting.until_done(rounds, listen, watch, |waiting| {
            let lease = match Tried::of(rounds.acquire_once(resources, hold, ttl, fenced))? {
                Tried::Done(lease) => lease,
                Tried::Again(error, at_most) => return Ok(Tried::Again(error, at_most)),
            };
            let guard = match turn.take() {
                Some(turn) => self.guard(lease).with_turn(turn),
                None => self.guard(lease),
            };
            self.deliver(guard, ttl, options, waiting).map(Tried::Done)
        })
    }

    /// Hands a fresh guard to the caller, unless the call was cancelled
    /// meanwhile (a round in flight is not cut off): the guard is then
    /// dropped, which releases the lock (or hands it to the next local
    /// waiter), and the call fails as cancelled.
    pub(crate) fn deliver(
        &self,
        guard: LockGuard,
        ttl: Duration,
        options: &LockOptions,
        waiting: &Waiting<'_>,
    ) -> Result<LockGuard> {
        if let Err(cancelled) = waiting.check_cancelled() {
            drop(guard);
            return Err(cancelled);
        }
        self.start_auto_extend(guard, ttl, options)
    }
    /// Registers a fresh guard with the watchdog when asked to.
    pub(crate) fn start_auto_extend(
        &self,
        guard: LockGuard,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        if !options.auto_extend {
            return Ok(guard);
        }
        let plan = RenewalPlan {
            ttl,
            max_hold: options.max_hold.unwrap_or(DEFAULT_MAX_HOLD),
            max_extensions: options.max_extensions,
            acquired_at: self.core.rounds().now(),
        };
        // On failure the guard is dropped here, which releases the lock.
        self.core.auto_extend(guard.lease(), plan)?;
        Ok(guard)
    }

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

/// The outcome label of a call that takes a lock, for the metrics.
pub(crate) fn outcome(taken: &Result<LockGuard>) -> &'static str {
    match taken {
        Ok(_) => "acquired",
        Err(Error::Contended { .. }) => "contended",
        Err(Error::NoQuorum { .. }) => "no_quorum",
        Err(Error::ValidityExpired { .. }) => "validity_expired",
        Err(Error::Cancelled { .. }) => "cancelled",
        Err(Error::Deadlock { .. }) => "deadlock",
        Err(Error::InvalidArgument { .. }) => "invalid",
        Err(_) => "error",
    }
}

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
