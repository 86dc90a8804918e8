//! [`LockManager`]: the public entry point, its builder, per-call
//! [`LockOptions`] and the [`RetryPolicy`].

use std::fmt;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use crate::backend::Backend;
#[cfg(feature = "redis")]
use crate::backend::redis::RedisBackend;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::Pending;
use crate::engine::validity::{drift, validity};
use crate::engine::{Direct, Engine, Gather, Request, majority};
use crate::error::{Error, NodeOutcome, Operation, Report, Result};
use crate::guard::{Lease, LockGuard};
use crate::local_queue::{Handoff, LocalQueue, Streak, Turn};
use crate::token::{Token, random_u64};
use crate::watchdog::{RenewalPlan, Watchdog};

/// Default lock TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default per-node timeout.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default clock-drift factor (the drift allowance is `ttl * factor + 2 ms`).
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default longest TTL (or extension) a lock may ask for.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);
/// The largest `max_ttl` the builder accepts (30 days): far below what the
/// servers' millisecond expiry arithmetic can express.
pub const MAX_TTL_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default longest hold of an auto-extended lock.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(600);

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
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    config: Config,
    /// The auto-extension timer, started by the first auto-extended lock.
    watchdog: Mutex<Option<Watchdog>>,
    /// Local turns for threads waiting on the same key.
    local: LocalQueue,
}

/// A weak handle for the watchdog thread, so it never keeps the manager
/// (and its node workers) alive.
pub(crate) struct ManagerRef(Weak<Inner>);

impl ManagerRef {
    pub(crate) fn upgrade(&self) -> Option<LockManager> {
        self.0.upgrade().map(|inner| LockManager { inner })
    }
}

#[derive(Debug, Clone)]
struct Config {
    ttl: Duration,
    max_ttl: Duration,
    node_timeout: Duration,
    drift_factor: f64,
    quorum: usize,
    prefix: Vec<u8>,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
}

impl LockManager {
    /// A builder with every setting at its default and no nodes.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }

    /// Acquires `resource` with the default TTL, retrying per the manager's
    /// [`RetryPolicy`].
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::NoQuorum`] (of the last attempt)
    /// once the retries are spent; [`Error::ValidityExpired`] when the last
    /// attempt got a quorum too slowly; [`Error::InvalidArgument`] for an
    /// empty resource (before any node is contacted).
    pub fn lock(&self, resource: impl AsRef<[u8]>) -> Result<LockGuard> {
        self.lock_with(resource, &LockOptions::new())
    }

    /// One attempt to acquire `resource` with the default TTL, no retries.
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
    /// that is zero, above `max_ttl`, or not above the drift allowance.
    pub fn lock_with(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        let resource = resource.as_ref();
        let config = &self.inner.config;
        let ttl = options.ttl.unwrap_or(config.ttl);
        self.check_resource(resource)?;
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
        let retry = options
            .retry
            .clone()
            .unwrap_or_else(|| config.retry.clone());
        let retry = match options.wait {
            Some(wait) => retry.max_wait(wait),
            None => retry,
        };
        let key: Arc<[u8]> = self.key_for(resource);
        let started = Instant::now();
        if retry.single_attempt() {
            let guard = self.acquire_once(resource, &key, ttl)?;
            return self.start_auto_extend(guard, ttl, options);
        }
        // Threads of this manager that want the same key take turns: only
        // the turn-holder contends with the servers. (`None`: no deadline
        // can be expressed, the caller waits as long as it takes.)
        let line_deadline = started.checked_add(retry.budget());
        let streak = match self.inner.local.wait_turn(&key, ttl, line_deadline) {
            Turn::Mine(streak) => streak,
            Turn::Handed(handoff) => {
                let guard = LockGuard::new(self.clone(), handoff.lease).with_turn(handoff.streak);
                return self.start_auto_extend(guard, ttl, options);
            }
            Turn::TimedOut => {
                // One honest attempt, so the error carries a real report.
                let guard = self.acquire_once(resource, &key, ttl)?;
                return self.start_auto_extend(guard, ttl, options);
            }
        };
        if streak.yield_first {
            // This process has had the lock many times in a row: leave the
            // others a window before contending again.
            if let Some(pause) = retry.next_delay(1, started.elapsed()) {
                std::thread::sleep(pause);
            }
        }
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let error = match self.acquire_once(resource, &key, ttl) {
                Ok(guard) => return self.start_auto_extend(guard.with_turn(streak), ttl, options),
                Err(e) if e.is_retryable() => e,
                Err(e) => {
                    self.inner.local.pass(&key, streak);
                    return Err(e);
                }
            };
            let delay = retry.next_delay(attempts, started.elapsed());
            let Some(delay) = delay else {
                self.inner.local.pass(&key, streak);
                return Err(with_attempts(error, attempts));
            };
            std::thread::sleep(delay);
        }
    }

    /// Runs `work` while holding `resource` under auto-extension, then
    /// releases it, also when `work` panics (the panic then continues).
    /// Returns what `work` returned.
    ///
    /// `work` gets the guard: call [`LockGuard::check`] before any step
    /// that must not run without the lock (an extend can fail), or watch
    /// [`LockGuard::lost_signal`].
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
    /// let total = locks.with_lock("ledger", &LockOptions::new(), |guard| {
    ///     guard.check()?;
    ///     Ok::<_, quorum_lock::Error>(40 + 2)
    /// })??;
    /// assert_eq!(total, 42);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Self::lock_with), when the lock cannot be taken;
    /// `work` does not run then. A failing release after `work` is not an
    /// error: the keys expire with their TTL.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<T> {
        let guard = self.lock_with(resource, &options.clone().auto_extend(true))?;
        // On a panic in `work`, unwinding drops the guard, which queues the
        // release on every node.
        let value = work(&guard);
        // The work is done; a release that no quorum confirmed leaves keys
        // that expire by themselves, so there is nothing for the caller to do.
        let _ = guard.release();
        Ok(value)
    }

    /// Registers a fresh guard with the watchdog when asked to.
    fn start_auto_extend(
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
            acquired_at: self.now(),
        };
        let mut watchdog = self.inner.watchdog.lock();
        if watchdog.is_none() {
            let started =
                Watchdog::start(ManagerRef(Arc::downgrade(&self.inner))).map_err(|e| {
                    Error::Config {
                        reason: format!("cannot start the auto-extension thread: {e}"),
                    }
                })?;
            *watchdog = Some(started);
        }
        if let Some(watchdog) = watchdog.as_ref() {
            watchdog.watch(guard.lease(), plan);
        }
        Ok(guard)
    }

    /// Waits until every node has processed the operations queued so far
    /// (including background releases from dropped guards), for at most
    /// `timeout`. Returns whether every node got there in time.
    ///
    /// Useful before a process exits, and in tests.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.inner.engine.flush(timeout)
    }

    /// Threads of this manager waiting in [`lock`](Self::lock) /
    /// [`lock_with`](Self::lock_with) for `resource` behind the one whose
    /// turn it is: a measure of local contention.
    pub fn local_waiters(&self, resource: impl AsRef<[u8]>) -> usize {
        self.inner.local.waiting(&self.key_for(resource))
    }

    /// The nodes' names, in configuration order.
    pub fn nodes(&self) -> Vec<String> {
        self.inner.engine.node_names().map(str::to_owned).collect()
    }

    /// Votes needed for a lock.
    pub fn quorum(&self) -> usize {
        self.inner.config.quorum
    }

    /// The default TTL of [`lock`](Self::lock).
    pub fn ttl(&self) -> Duration {
        self.inner.config.ttl
    }

    /// The clock-drift allowance for a lock of `ttl`.
    pub fn drift_for(&self, ttl: Duration) -> Duration {
        drift(ttl, self.inner.config.drift_factor)
    }

    /// The key stored on the nodes for `resource`: the prefix (if any)
    /// followed by the resource bytes.
    pub fn key_for(&self, resource: impl AsRef<[u8]>) -> Arc<[u8]> {
        let prefix = &self.inner.config.prefix;
        let resource = resource.as_ref();
        let mut key = Vec::with_capacity(prefix.len() + resource.len());
        key.extend_from_slice(prefix);
        key.extend_from_slice(resource);
        key.into()
    }

    pub(crate) fn now(&self) -> Instant {
        self.inner.config.clock.now()
    }

    fn check_resource(&self, resource: &[u8]) -> Result<()> {
        if resource.is_empty() {
            return Err(Error::InvalidArgument {
                reason: "the resource name is empty".into(),
            });
        }
        Ok(())
    }

    /// One Redlock attempt: vote, then keep the lock only with a quorum and
    /// a positive validity; otherwise release on every node.
    fn acquire_once(&self, resource: &[u8], key: &Arc<[u8]>, ttl: Duration) -> Result<LockGuard> {
        let config = &self.inner.config;
        let token = Token::random()?;
        let start = self.now();
        let request = Request {
            op: Operation::Acquire,
            key,
            token,
            ttl,
        };
        // Running a node on this thread costs the early decision while that
        // node answers; only worth it when every node must grant anyway.
        // (Measured for N = 3 and 5 with quorum N/2+1: no gain beyond the
        // noise, see docs/benchmarks.md.)
        let direct = if config.quorum == self.inner.engine.len() {
            Direct::FastestNode
        } else {
            Direct::Never
        };
        let outcomes = self.inner.engine.round(
            &request,
            Gather::UntilDecided {
                quorum: config.quorum,
            },
            config.node_timeout,
            direct,
        );
        let elapsed = self.now().saturating_duration_since(start);
        let drift = drift(ttl, config.drift_factor);
        let report = self.report(Operation::Acquire, resource, outcomes, elapsed);
        let granted = report.granted();
        if granted >= config.quorum && validity(ttl, elapsed, drift).is_some() {
            // Conservative: measured from before the first send.
            let deadline = start + (ttl - drift);
            let lease = Lease::new(resource, Arc::clone(key), token, ttl, deadline);
            return Ok(LockGuard::new(self.clone(), Arc::new(lease)));
        }
        // Give up on this attempt everywhere, including the nodes that said
        // no, failed or have not answered: any of them may hold our token.
        self.inner.engine.release_detached(key, token);
        let n = report.nodes.len();
        Err(if granted >= config.quorum {
            Error::ValidityExpired { report }
        } else if report.refused() > n - config.quorum {
            Error::Contended { report }
        } else {
            Error::NoQuorum { report }
        })
    }

    /// Extends a held lock: a quorum must confirm within the remaining
    /// validity. On success the lease's deadline moves to
    /// `extend_start + ttl - drift`; on failure the lease is marked lost.
    pub(crate) fn extend(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let in_flight = self.begin_extend(lease, ttl)?;
        self.finish_extend(lease, in_flight)
    }

    /// The first half of an extend: checks the lease and sends the extend
    /// to every node, under the lease's lock so that no extend is ever sent
    /// after a release. Returns at once.
    pub(crate) fn begin_extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendInFlight> {
        let config = &self.inner.config;
        check_ttl(ttl, config.max_ttl, config.drift_factor)
            .map_err(|reason| Error::InvalidArgument { reason })?;
        let mut state = lease.state();
        if let Some(lost) = &state.lost {
            return Err(lost.clone());
        }
        if state.finished {
            return Err(Error::Lost {
                reason: "the lock was released".into(),
                report: None,
            });
        }
        let start = self.now();
        let remaining = state.deadline.saturating_duration_since(start);
        if remaining.is_zero() {
            let error = Error::Lost {
                reason: "the lock's validity ran out before the extend".into(),
                report: None,
            };
            state.mark_lost(&error);
            return Err(error);
        }
        let request = Request {
            op: Operation::Extend,
            key: &lease.key,
            token: lease.token,
            ttl,
        };
        let pending =
            self.inner
                .engine
                .scatter(&request, config.node_timeout.min(remaining), Direct::Never);
        // From here on a node may apply this extend at any moment, and
        // `PEXPIRE` can shorten a key: until it is confirmed, the lease may
        // claim no more than this extend would give (sent under the lease's
        // lock, so a hand-over sees the capped deadline).
        let old_deadline = state.deadline;
        let bound = start + (ttl - drift(ttl, config.drift_factor));
        state.deadline = state.deadline.min(bound);
        state.extends_begun += 1;
        Ok(ExtendInFlight {
            pending,
            start,
            old_deadline,
            ttl,
            seq: state.extends_begun,
        })
    }

    /// The second half of an extend: gathers the votes and updates the
    /// lease.
    pub(crate) fn finish_extend(&self, lease: &Lease, in_flight: ExtendInFlight) -> Result<()> {
        let config = &self.inner.config;
        let ExtendInFlight {
            pending,
            start,
            old_deadline,
            ttl,
            seq,
        } = in_flight;
        let outcomes = pending.gather(Gather::UntilDecided {
            quorum: config.quorum,
        });
        let end = self.now();
        let elapsed = end.saturating_duration_since(start);
        let drift = drift(ttl, config.drift_factor);
        let report = self.report(Operation::Extend, &lease.resource, outcomes, elapsed);
        let failure = if report.granted() < config.quorum {
            Some(format!(
                "only {} of the {} needed nodes confirmed the extend",
                report.granted(),
                config.quorum
            ))
        } else if end >= old_deadline || validity(ttl, elapsed, drift).is_none() {
            Some("the extend was confirmed only after the lock's validity ran out".into())
        } else {
            None
        };
        let mut state = lease.state();
        if let Some(reason) = failure {
            let error = Error::Lost {
                reason,
                report: Some(report),
            };
            state.mark_lost(&error);
            return Err(error);
        }
        if let Some(lost) = &state.lost {
            return Err(lost.clone());
        }
        // Only the extend begun last sets the deadline: the nodes apply the
        // later one after this one, so whichever finishes last, the later
        // one's expiry is what the keys end with. (Its start already capped
        // the deadline; it sets the deadline when it finishes.)
        if seq == state.extends_begun {
            state.deadline = start + (ttl - drift);
            state.ttl = ttl;
        }
        state.extensions = state.extensions.saturating_add(1);
        Ok(())
    }

    /// Releases on every node and waits for their answers (at most the
    /// per-node timeout). Marks the lease finished first, under its lock, so
    /// the watchdog sends no extend after this release: an extend it sent
    /// earlier is queued ahead of this release on every node.
    pub(crate) fn release(&self, lease: &Lease, turn: Option<Streak>) -> Result<Report> {
        let config = &self.inner.config;
        let start = self.now();
        let request = Request {
            op: Operation::Release,
            key: &lease.key,
            token: lease.token,
            ttl: Duration::ZERO,
        };
        lease.state().finished = true;
        let pending = self
            .inner
            .engine
            .scatter(&request, config.node_timeout, Direct::FastestNode);
        if let Some(streak) = turn {
            // The next local waiter's acquire now queues behind this release.
            self.inner.local.pass(&lease.key, streak);
        }
        let outcomes = pending.gather(Gather::All);
        let elapsed = self.now().saturating_duration_since(start);
        let report = self.report(Operation::Release, &lease.resource, outcomes, elapsed);
        // Once a quorum has answered, no quorum can still hold our token.
        if report.granted() + report.refused() >= config.quorum {
            Ok(report)
        } else {
            Err(Error::NoQuorum { report })
        }
    }

    /// Queues the release on every node and returns at once (guard drop).
    pub(crate) fn release_detached(&self, lease: &Lease) {
        let mut state = lease.state();
        state.finished = true;
        self.inner.engine.release_detached(&lease.key, lease.token);
    }

    /// A dropped guard that holds the local turn: hands the lock itself to
    /// the next thread waiting for it when that is safe and fair (no round
    /// trip at all), otherwise releases on every node and passes the turn.
    pub(crate) fn hand_over(&self, lease: &Lease, streak: Streak) {
        self.inner
            .local
            .pass_with(&lease.key, streak, |waiter_ttl| {
                let handoff = waiter_ttl.and_then(|ttl| self.handoff(lease, ttl, streak));
                if handoff.is_none() {
                    // Queued before the next waiter gets the turn, so its
                    // acquire runs after this release on every node.
                    self.release_detached(lease);
                }
                handoff
            });
    }

    /// The lock renamed for the next holder, if it may be handed over: the
    /// waiter asks for the same TTL, at least half of it is still valid,
    /// nothing marked it lost, and the streak of local turns is not at its
    /// bound (then it is released and the next turn yields first, so other
    /// processes get their chance).
    fn handoff(&self, lease: &Lease, waiter_ttl: Duration, streak: Streak) -> Option<Handoff> {
        let next = streak.next();
        if next.yield_first {
            return None;
        }
        let mut state = lease.state();
        let validity = state.deadline.saturating_duration_since(self.now());
        if state.lost.is_some()
            || state.finished
            || state.ttl != waiter_ttl
            || validity < state.ttl / 2
        {
            return None;
        }
        // The old guard's lease is done: its auto-extension stops.
        state.finished = true;
        let renamed = Lease::new(
            &lease.resource,
            Arc::clone(&lease.key),
            lease.token,
            state.ttl,
            state.deadline,
        );
        Some(Handoff {
            lease: Arc::new(renamed),
            streak: next,
        })
    }

    /// Ends a local turn without releasing (the guard forgot its lock).
    pub(crate) fn pass_turn(&self, key: &[u8], streak: Streak) {
        self.inner.local.pass(key, streak);
    }

    fn report(
        &self,
        operation: Operation,
        resource: &[u8],
        outcomes: Vec<NodeOutcome>,
        elapsed: Duration,
    ) -> Report {
        Report {
            operation,
            resource: String::from_utf8_lossy(resource).into_owned(),
            quorum: self.inner.config.quorum,
            nodes: self
                .inner
                .engine
                .node_names()
                .zip(outcomes)
                .map(|(node, outcome)| crate::error::NodeReport {
                    node: node.to_owned(),
                    outcome,
                })
                .collect(),
            elapsed,
            attempts: 1,
        }
    }
}

/// An extend that has been sent and not yet gathered.
pub(crate) struct ExtendInFlight {
    pending: Pending,
    start: Instant,
    old_deadline: Instant,
    ttl: Duration,
    /// Its place among the lease's extends (see `LeaseState::extends_begun`).
    seq: u64,
}

fn with_attempts(mut error: Error, attempts: u32) -> Error {
    if let Error::Contended { report }
    | Error::NoQuorum { report }
    | Error::ValidityExpired { report } = &mut error
    {
        report.attempts = attempts;
    }
    error
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

/// Checks a TTL before any node is contacted.
fn check_ttl(
    ttl: Duration,
    max_ttl: Duration,
    drift_factor: f64,
) -> std::result::Result<(), String> {
    if ttl.is_zero() {
        return Err("the TTL is zero".into());
    }
    if ttl > max_ttl {
        return Err(format!("the TTL {ttl:?} is above max_ttl {max_ttl:?}"));
    }
    let drift = drift(ttl, drift_factor);
    if ttl <= drift {
        return Err(format!(
            "the TTL {ttl:?} is not above the clock-drift allowance {drift:?}"
        ));
    }
    Ok(())
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.inner.config;
        f.debug_struct("LockManager")
            .field("nodes", &self.inner.engine)
            .field("quorum", &c.quorum)
            .field("ttl", &c.ttl)
            .field("node_timeout", &c.node_timeout)
            .field("drift_factor", &c.drift_factor)
            .field("prefix", &shorten(&c.prefix))
            .field("retry", &c.retry)
            .finish_non_exhaustive()
    }
}

/// How [`LockManager::lock`] retries a contended or failed attempt.
///
/// Between attempts it sleeps `delay` plus a random jitter in
/// `[0, jitter)`, so clients that collided do not collide again in step.
/// Retrying stops at `attempts` attempts or when the next sleep would end
/// after `max_wait`, whichever comes first: it never retries forever
/// unless asked to. A time limit without an explicit attempt count means
/// "retry until the time is spent"; without either, 10 attempts.
/// Failures that retrying cannot fix (see [`Error::is_retryable`]) end the
/// retries at once.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::RetryPolicy;
///
/// // Up to 30 s, however many attempts that takes.
/// let patient = RetryPolicy::new()
///     .max_wait(Duration::from_secs(30))
///     .delay(Duration::from_millis(50))
///     .jitter(Duration::from_millis(50));
/// # let _ = patient;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// `None`: not set (10, or no count limit when `max_wait` is set).
    attempts: Option<u32>,
    max_wait: Option<Duration>,
    delay: Duration,
    jitter: Duration,
}

/// Attempts when neither an attempt count nor a time limit is set.
const DEFAULT_ATTEMPTS: u32 = 10;

impl RetryPolicy {
    /// The default policy: 10 attempts, 100 ms delay, 100 ms jitter, no
    /// time limit beyond the attempts.
    pub fn new() -> Self {
        Self {
            attempts: None,
            max_wait: None,
            delay: Duration::from_millis(100),
            jitter: Duration::from_millis(100),
        }
    }

    /// One attempt, no retries.
    pub fn none() -> Self {
        Self::new().attempts(1)
    }

    /// Most attempts, the first included (at least 1). Default: 10, or no
    /// count limit when [`max_wait`](Self::max_wait) is set.
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts.max(1));
        self
    }

    /// Stop retrying once the next attempt would start after `max_wait`
    /// from the first; `Duration::MAX` waits as long as it takes. Without
    /// an explicit [`attempts`](Self::attempts), the count is then
    /// unlimited. Default: no time limit (10 attempts bound it).
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Fixed part of the pause between attempts. Default: 100 ms.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Upper bound of the random part of the pause. Default: 100 ms.
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// The attempt limit in force.
    fn max_attempts(&self) -> u32 {
        match (self.attempts, self.max_wait) {
            (Some(n), _) => n,
            (None, Some(_)) => u32::MAX,
            (None, None) => DEFAULT_ATTEMPTS,
        }
    }

    /// Whether the policy allows one attempt only (no waiting in line).
    fn single_attempt(&self) -> bool {
        self.max_attempts() == 1
    }

    /// The longest the policy can keep a caller waiting: `max_wait`, or
    /// what the attempts can take at most (saturating).
    fn budget(&self) -> Duration {
        self.max_wait.unwrap_or_else(|| {
            self.delay
                .saturating_add(self.jitter)
                .saturating_mul(self.max_attempts().saturating_sub(1))
        })
    }

    /// The pause before attempt `made + 1`, or `None` when the policy is
    /// spent after `made` attempts and `waited` time.
    fn next_delay(&self, made: u32, waited: Duration) -> Option<Duration> {
        if made >= self.max_attempts() {
            return None;
        }
        let jitter_nanos = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let jitter = match jitter_nanos {
            0 => Duration::ZERO,
            j => Duration::from_nanos(random_u64() % j),
        };
        let delay = self.delay.saturating_add(jitter);
        match self.max_wait {
            Some(max) if waited.saturating_add(delay) > max => None,
            _ => Some(delay),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

/// Per-call options for [`LockManager::lock_with`].
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    ttl: Option<Duration>,
    wait: Option<Duration>,
    retry: Option<RetryPolicy>,
    auto_extend: bool,
    max_hold: Option<Duration>,
    max_extensions: Option<u32>,
}

impl LockOptions {
    /// Options that use the manager's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lock's TTL. Default: the manager's TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Give up once retrying would go past `wait` in total. Default: the
    /// retry policy's own limit.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The retry policy for this call. Default: the manager's policy.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Keep the lock alive in the background: it is extended at about a
    /// third of its TTL (each extend a full quorum vote), until the guard is
    /// released or dropped, an extend fails (the guard is then lost and
    /// [`LockGuard::lost_signal`] fires), or a bound is reached
    /// ([`max_hold`](Self::max_hold), [`max_extensions`](Self::max_extensions)).
    /// One timer thread per manager serves every such lock. Default: off.
    #[must_use]
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }

    /// With auto-extension: stop extending once the lock has been held this
    /// long; it then expires within one TTL. Default: 10 minutes.
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// With auto-extension: stop after this many automatic extends.
    /// Default: no count limit (the hold time bounds it).
    #[must_use]
    pub fn max_extensions(mut self, max: u32) -> Self {
        self.max_extensions = Some(max);
        self
    }
}

/// Builds a [`LockManager`]; [`build`](Self::build) validates everything.
#[derive(Default)]
pub struct LockManagerBuilder {
    nodes: Vec<NodeSpec>,
    ttl: Option<Duration>,
    max_ttl: Option<Duration>,
    node_timeout: Option<Duration>,
    drift_factor: Option<f64>,
    quorum: Option<usize>,
    prefix: Vec<u8>,
    retry: Option<RetryPolicy>,
    clock: Option<Arc<dyn Clock>>,
    restart_quarantine: Option<bool>,
}

/// A configured node, opened at `build` (Redis URLs then get the final
/// per-node timeout).
enum NodeSpec {
    Backend(Arc<dyn Backend>),
    #[cfg(feature = "redis")]
    Redis {
        url: String,
        name: String,
    },
}

impl NodeSpec {
    fn name(&self) -> String {
        match self {
            Self::Backend(b) => b.describe(),
            #[cfg(feature = "redis")]
            Self::Redis { name, .. } => name.clone(),
        }
    }

    // Only Redis URLs need the timeout; without the feature it goes unused.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    fn open(self, timeout: Duration) -> Result<Arc<dyn Backend>> {
        match self {
            Self::Backend(b) => Ok(b),
            #[cfg(feature = "redis")]
            Self::Redis { url, .. } => RedisBackend::open(&url, timeout)
                .map(|b| Arc::new(b) as Arc<dyn Backend>)
                .map_err(|e| Error::Config {
                    reason: e.to_string(),
                }),
        }
    }
}

impl LockManagerBuilder {
    /// Adds one lock server. Order is kept in reports.
    #[must_use]
    pub fn node(mut self, backend: impl Backend) -> Self {
        self.nodes.push(NodeSpec::Backend(Arc::new(backend)));
        self
    }

    /// Adds several lock servers.
    #[must_use]
    pub fn nodes<B: Backend>(mut self, backends: impl IntoIterator<Item = B>) -> Self {
        for b in backends {
            self.nodes.push(NodeSpec::Backend(Arc::new(b)));
        }
        self
    }

    /// Adds one Redis master per URL (`redis://[user[:password]@]host[:port][/db]`,
    /// or `rediss://...` with the `tls` feature). Nothing connects yet: a
    /// node that is down makes its first operations fail, not the build.
    /// Each node's connect, read and write timeouts are the per-node timeout.
    ///
    /// ```no_run
    /// use quorum_lock::LockManager;
    ///
    /// let locks = LockManager::builder()
    ///     .redis_nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?
    ///     .build()?;
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL (named with its password
    /// replaced by `***`), or a `rediss://` URL without the `tls` feature.
    #[cfg(feature = "redis")]
    pub fn redis_nodes<I>(mut self, urls: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for url in urls {
            let url = url.as_ref();
            let node = NodeSpec::Redis {
                url: url.to_owned(),
                name: String::new(),
            };
            let name = node.open(DEFAULT_NODE_TIMEOUT)?.describe();
            self.nodes.push(NodeSpec::Redis {
                url: url.to_owned(),
                name,
            });
        }
        Ok(self)
    }

    /// Default TTL of [`LockManager::lock`]. Default: 10 s.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Longest TTL or extension any lock may ask for. Default: 60 s; at
    /// most 30 days.
    #[must_use]
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = Some(max_ttl);
        self
    }

    /// How long a round waits for each node's answer; keep it small next to
    /// the TTL. Must be below the TTL. Default: 100 ms.
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Clock-drift factor: the validity is `ttl - elapsed - (ttl * factor +
    /// 2 ms)`. In `[0, 1)`. Default: 0.01.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = Some(factor);
        self
    }

    /// Votes needed: at least a majority (N/2 + 1), at most N. Default:
    /// N/2 + 1.
    #[must_use]
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// Prepended to every resource to form the key. Default: none, so keys
    /// interoperate with other Redlock clients.
    #[must_use]
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// Retry policy of [`LockManager::lock`]. Default: [`RetryPolicy::new`].
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Restart quarantine: a node whose server restarted, or has been up
    /// for less than `max_ttl` plus drift, does not count towards a quorum
    /// until that much time has passed since its start (it may have
    /// forgotten locks it held). Needs a backend that reports its identity
    /// ([`Backend::server_info`]; Redis does). Switching it off is safe only
    /// when every node persists its keys durably (`appendfsync always`), or
    /// restarts are always delayed by `max_ttl` by the operator. Default: on.
    #[must_use]
    pub fn restart_quarantine(mut self, on: bool) -> Self {
        self.restart_quarantine = Some(on);
        self
    }

    /// The monotonic clock for every validity computation. Default: the
    /// OS monotonic clock. Tests inject a [`ManualClock`](crate::ManualClock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Validates the settings and starts one worker thread per node.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when there are no nodes, a node appears twice, the
    /// quorum is below a majority or above N, the drift factor is outside
    /// `[0, 1)`, the node timeout is zero or not below the TTL, or the TTL
    /// is unusable.
    pub fn build(self) -> Result<LockManager> {
        let n = self.nodes.len();
        let config_err = |reason: String| Error::Config { reason };
        if n == 0 {
            return Err(config_err("no nodes configured".into()));
        }
        let names: Vec<String> = self.nodes.iter().map(NodeSpec::name).collect();
        for (i, name) in names.iter().enumerate() {
            if let Some(j) = names[..i].iter().position(|other| other == name) {
                return Err(config_err(format!(
                    "node {name} is configured twice (positions {j} and {i}); one server must cast one vote"
                )));
            }
        }
        let quorum = self.quorum.unwrap_or_else(|| majority(n));
        if quorum < majority(n) || quorum > n {
            return Err(config_err(format!(
                "quorum {quorum} is outside {}..={n} for {n} nodes: below a majority two clients could both win",
                majority(n)
            )));
        }
        let drift_factor = self.drift_factor.unwrap_or(DEFAULT_DRIFT_FACTOR);
        if !(0.0..1.0).contains(&drift_factor) {
            return Err(config_err(format!(
                "drift factor {drift_factor} is outside [0, 1)"
            )));
        }
        let max_ttl = self.max_ttl.unwrap_or(DEFAULT_MAX_TTL);
        if max_ttl.is_zero() || max_ttl > MAX_TTL_LIMIT {
            return Err(config_err(format!(
                "max_ttl {max_ttl:?} is outside (0, {MAX_TTL_LIMIT:?}]"
            )));
        }
        let ttl = self.ttl.unwrap_or(DEFAULT_TTL.min(max_ttl));
        check_ttl(ttl, max_ttl, drift_factor).map_err(config_err)?;
        let node_timeout = self.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT);
        if node_timeout.is_zero() || node_timeout >= ttl {
            return Err(config_err(format!(
                "node timeout {node_timeout:?} must be above zero and below the TTL {ttl:?}"
            )));
        }
        let config = Config {
            ttl,
            max_ttl,
            node_timeout,
            drift_factor,
            quorum,
            prefix: self.prefix,
            retry: self.retry.unwrap_or_default(),
            clock: self.clock.unwrap_or_else(|| Arc::new(MonotonicClock)),
        };
        let backends = self
            .nodes
            .into_iter()
            .map(|node| node.open(node_timeout))
            .collect::<Result<Vec<_>>>()?;
        let quarantine = self
            .restart_quarantine
            .unwrap_or(true)
            .then(|| max_ttl.saturating_add(drift(max_ttl, drift_factor)));
        // Dropping the last handle waits up to two node timeouts (a batch
        // in progress, then the queued releases) for the releases to leave.
        let drain_wait = node_timeout.saturating_mul(2);
        let engine = Engine::start(
            backends,
            quarantine,
            max_ttl,
            drain_wait,
            Arc::clone(&config.clock),
        )?;
        Ok(LockManager {
            inner: Arc::new(Inner {
                engine,
                config,
                watchdog: Mutex::new(None),
                local: LocalQueue::default(),
            }),
        })
    }
}

impl fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManagerBuilder")
            .field(
                "nodes",
                &self.nodes.iter().map(NodeSpec::name).collect::<Vec<_>>(),
            )
            .field("ttl", &self.ttl)
            .field("quorum", &self.quorum)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::clock::ManualClock;

    const MS: Duration = Duration::from_millis(1);
    const LONG: Duration = Duration::from_secs(3);
    const SHORT: Duration = Duration::from_millis(300);

    fn cluster(clock: &ManualClock) -> (Vec<MemoryBackend>, LockManager, LockManager) {
        let nodes: Vec<MemoryBackend> = (0..3)
            .map(|i| MemoryBackend::with_clock(format!("mem-{i}"), Arc::new(clock.clone())))
            .collect();
        let manager = || {
            LockManager::builder()
                .nodes(nodes.iter().cloned())
                .clock(Arc::new(clock.clone()))
                .ttl(LONG)
                .max_ttl(LONG)
                .node_timeout(Duration::from_millis(500))
                .retry(RetryPolicy::none())
                .build()
                .unwrap()
        };
        let (a, b) = (manager(), manager());
        (nodes, a, b)
    }

    /// Issue 9, hole 2. Per-node FIFO makes the extend *begun* last the one
    /// the servers apply last, and `PEXPIRE` can shorten a key. Schedule:
    /// the watchdog sends a 3 s extend; the holder's own `extend(300 ms)`
    /// completes; the watchdog gathers later. Before the fix the watchdog
    /// wrote a ~3 s deadline, the keys expired after 300 ms, and a second
    /// manager locked while the first guard was still valid.
    #[test]
    fn an_extend_finishing_last_does_not_outlive_one_begun_after_it() {
        let clock = ManualClock::new();
        let (_nodes, a, b) = cluster(&clock);
        let mut guard = a.try_lock("r").unwrap();
        let lease = Arc::clone(guard.lease());
        let watchdog = a.begin_extend(&lease, LONG).unwrap();
        guard.extend(SHORT).unwrap();
        a.finish_extend(&lease, watchdog).unwrap();
        assert!(
            guard.validity() <= SHORT,
            "validity {:?} outlives the last extend ({SHORT:?})",
            guard.validity()
        );
        clock.advance(SHORT + MS);
        let other = b.try_lock("r");
        assert!(
            !(guard.is_valid() && other.as_ref().is_ok_and(LockGuard::is_valid)),
            "two valid holders"
        );
    }

    /// Issue 9, hole 2, the hand-over variant: a lock handed to the next
    /// local holder while an extend that shortens the keys is in flight
    /// must not carry the older, longer deadline.
    #[test]
    fn a_hand_over_during_a_shortening_extend_carries_the_shorter_deadline() {
        let clock = ManualClock::new();
        let (_nodes, a, _b) = cluster(&clock);
        let guard = a.try_lock("r").unwrap();
        let lease = Arc::clone(guard.lease());
        let shortening = a.begin_extend(&lease, SHORT).unwrap();
        let handoff = a.handoff(&lease, LONG, Streak::default());
        let deadline = handoff.map(|h| h.lease.state().deadline);
        assert!(
            deadline.is_none_or(|d| d <= a.now() + SHORT),
            "handed over with {:?} left while a {SHORT:?} extend is in flight",
            deadline.map(|d| d - a.now())
        );
        let _ = a.finish_extend(&lease, shortening);
        guard.forget();
    }

    /// A small model of one lease with extends from two sources, the
    /// watchdog's two-step extends (begun, then finished later, possibly
    /// after other extends) and the holder's own, with random TTLs, clock
    /// steps, checked after every step: a valid
    /// lease never claims more than a quorum of nodes holds its key for.
    #[test]
    fn lease_model_two_extend_sources_never_overstate_validity() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let ttls = [SHORT, Duration::from_secs(1), LONG];
        for _round in 0..40 {
            let clock = ManualClock::new();
            let (nodes, a, _b) = cluster(&clock);
            let mut guard = a.try_lock("r").unwrap();
            let lease = Arc::clone(guard.lease());
            let mut in_flight: Vec<ExtendInFlight> = Vec::new();
            for step in 0..60 {
                match next(5) {
                    0 => {
                        let ttl = ttls[next(3) as usize];
                        if let Ok(sent) = a.begin_extend(&lease, ttl) {
                            in_flight.push(sent);
                        }
                    }
                    1 if !in_flight.is_empty() => {
                        let i = next(in_flight.len() as u64) as usize;
                        let _ = a.finish_extend(&lease, in_flight.remove(i));
                    }
                    2 => {
                        let _ = guard.extend(ttls[next(3) as usize]);
                    }
                    3 => clock.advance(Duration::from_millis(next(200))),
                    _ => {}
                }
                assert!(a.flush(Duration::from_secs(10)));
                if !guard.is_valid() {
                    break;
                }
                let validity = guard.validity();
                let holding = nodes
                    .iter()
                    .filter(|n| {
                        n.holder(b"r").as_deref() == Some(lease.token.as_bytes())
                            && n.remaining_ttl(b"r") >= Some(validity)
                    })
                    .count();
                assert!(
                    holding >= 2,
                    "step {step}: the guard claims {validity:?} but only {holding} nodes hold it that long"
                );
            }
            for sent in in_flight {
                let _ = a.finish_extend(&lease, sent);
            }
            guard.forget();
        }
    }
}
