//! [`MemoryBackend`]: an in-process lock server with fault injection, for
//! tests, demos and examples.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use self::notices::{Inbox, MemoryListener};
use self::state::State;
use super::{
    Answers, Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, NoticeWaker, Op,
    Probe, ReleaseListener, Reply, ServerInfo,
};
use crate::clock::{Clock, MonotonicClock};

mod election;
mod notices;
mod rw;
mod state;

/// The longest a paused node holds a call before answering anyway, so a
/// test that forgets [`MemoryBackend::resume`] cannot hang forever.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The uptime a node that was never restarted reports (a year): it never
/// held a lock before it was created, so it has none to forget.
const NEVER_RESTARTED_UPTIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How a [`MemoryBackend`] reports its uptime in
/// [`ServerInfo::uptime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UptimeReport {
    /// The exact time since the node (re)started, on its clock. The default.
    #[default]
    Exact,
    /// As Redis reports `uptime_in_seconds`: whole seconds, computed as
    /// `floor(wall now) - floor(wall at start)` on the node's *wall*
    /// clock. It can read one second after a few milliseconds of real
    /// uptime, and a wall-clock step (see
    /// [`MemoryBackend::step_wall_clock`]) after the start inflates it.
    WholeSeconds {
        /// How far past a whole second the node's wall clock reads at the
        /// moment the node was created.
        phase: Duration,
    },
}

/// A hook run before each operation: see [`MemoryBackend::set_hook`].
pub type CallHook = Arc<dyn Fn(&Op<'_>) + Send + Sync>;

/// Which operations a node's access rules refuse: see
/// [`MemoryBackend::set_denied`].
pub type DenyRule = Arc<dyn Fn(&Op<'_>) -> bool + Send + Sync>;

/// One in-process lock server with the semantics of a Redis master (`SET NX
/// PX`, compare-and-delete, compare-and-pexpire) and faults a test can drive.
///
/// Clones are handles to the same node: give one to the manager and keep one
/// to inject faults and inspect keys. Expiry follows the node's [`Clock`],
/// so with a [`ManualClock`](crate::ManualClock) TTL tests are exact.
///
/// It has every capability of a [`Backend`]: it reports its identity
/// ([`Probe`]; a new one at each [`restart`](Self::restart)), can be
/// inspected ([`Inspect`]) and announces releases
/// ([`ReleaseListener`]); it has no bound on a call (a paused node holds
/// calls until resumed).
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::MemoryBackend;
/// use quorum_lock::backend;
///
/// let node = MemoryBackend::new("mem-0");
/// assert!(backend::acquire(&node, b"job", b"token-a", Duration::from_secs(1))?);
/// assert_eq!(node.holder(b"job").as_deref(), Some(&b"token-a"[..]));
///
/// node.set_down(true);
/// assert!(backend::release(&node, b"job", b"token-a").is_err());
/// node.set_down(false);
/// assert!(backend::release(&node, b"job", b"token-a")?);
/// # Ok::<(), quorum_lock::backend::BackendError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    clock: Arc<dyn Clock>,
    /// When the node was created, on its clock: the wall clock's epoch.
    created: Instant,
    state: Mutex<State>,
    unpaused: Condvar,
    round_trips: AtomicU64,
    operations: AtomicU64,
    /// Times `set_down(false)` brought the node back up.
    recoveries: AtomicU64,
}

impl MemoryBackend {
    /// A healthy node named `name` on the monotonic clock.
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_clock(name, Arc::new(MonotonicClock))
    }

    /// A healthy node whose expiry follows `clock`.
    pub fn with_clock(name: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        let started_at = clock.now();
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                clock,
                created: started_at,
                state: Mutex::new(State {
                    keys: HashMap::new(),
                    down: false,
                    paused: false,
                    latency: Duration::ZERO,
                    fail_next: 0,
                    lose_replies_next: 0,
                    generation: 0,
                    started_at,
                    hook: None,
                    denied: None,
                    uptime_report: UptimeReport::Exact,
                    wall_steps: Duration::ZERO,
                    wall_start_secs: 0,
                    identity_hidden: false,
                    memory: (0, "noeviction".to_owned()),
                    evicted: 0,
                    notices_on: true,
                    listeners: HashMap::new(),
                    next_listener: 0,
                    to_wake: Vec::new(),
                }),
                unpaused: Condvar::new(),
                round_trips: AtomicU64::new(0),
                recoveries: AtomicU64::new(0),
                operations: AtomicU64::new(0),
            }),
        }
    }

    /// Takes the node down (every call fails as unreachable, nothing is
    /// applied) or brings it back up with its keys intact. A manager that
    /// marked the node down uses it again from its next round.
    pub fn set_down(&self, down: bool) {
        let was_down = std::mem::replace(&mut self.inner.state.lock().down, down);
        if was_down && !down {
            // Managers that marked the node down use it again on their
            // next round (see `Probe::recoveries`).
            self.inner.recoveries.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Announces releases to the managers waiting for them (the default),
    /// or not: with `false` the node neither announces releases nor
    /// accepts listeners, like a Redis server whose ACL denies `PUBLISH`
    /// and `SUBSCRIBE`, and waiters retry on their timer alone.
    pub fn set_release_notices(&self, on: bool) {
        let mut state = self.inner.state.lock();
        state.notices_on = on;
        if !on {
            state.listeners.values_mut().for_each(Inbox::clear);
        }
    }

    /// Adds `latency` of real time to every round trip (a batch is one).
    pub fn set_latency(&self, latency: Duration) {
        self.inner.state.lock().latency = latency;
    }

    /// Holds every call until [`resume`](Self::resume) (at most 60 s):
    /// the operations are applied when the pause ends, like Redis'
    /// `CLIENT PAUSE`.
    pub fn pause(&self) {
        self.inner.state.lock().paused = true;
    }

    /// Ends a [`pause`](Self::pause).
    pub fn resume(&self) {
        self.inner.state.lock().paused = false;
        self.inner.unpaused.notify_all();
    }

    /// The next `n` operations fail without being applied.
    pub fn fail_next(&self, n: u32) {
        self.inner.state.lock().fail_next = n;
    }

    /// The next `n` operations are applied but their replies are lost: the
    /// caller sees a timeout for an operation that did happen.
    pub fn lose_replies_next(&self, n: u32) {
        self.inner.state.lock().lose_replies_next = n;
    }

    /// Simulates a restart without persistence: every key is forgotten, the
    /// node gets a new run id and its uptime starts again from zero.
    pub fn restart(&self) {
        let now = self.inner.clock.now();
        let mut state = self.inner.state.lock();
        state.keys.clear();
        state.evicted = 0;
        state.generation += 1;
        state.started_at = now;
        state.wall_start_secs = state.wall(self.inner.created, now).as_secs();
    }

    /// How [`server_info`](Probe::server_info) reports the uptime from
    /// now on: exactly (the default), or in whole seconds of the wall clock
    /// as Redis does. A node that never restarted reports a year of uptime
    /// either way: it never held a lock before it was created.
    pub fn set_uptime_report(&self, report: UptimeReport) {
        let mut state = self.inner.state.lock();
        state.uptime_report = report;
        state.wall_steps = Duration::ZERO;
        let started = state.started_at;
        state.wall_start_secs = state.wall(self.inner.created, started).as_secs();
    }

    /// Steps the node's wall clock forward by `by` (an NTP step, an
    /// operator's `date -s`). Only the whole-second uptime report follows
    /// the wall clock; expiry follows the node's monotonic [`Clock`].
    pub fn step_wall_clock(&self, by: Duration) {
        let mut state = self.inner.state.lock();
        state.wall_steps = state.wall_steps.saturating_add(by);
    }

    /// Reports no identity (`run_id` and uptime unknown) while `hidden`,
    /// like a Redis-compatible proxy whose `INFO` has no `run_id`; lock
    /// operations work as usual.
    pub fn set_identity_hidden(&self, hidden: bool) {
        self.inner.state.lock().identity_hidden = hidden;
    }

    /// Expires `key` now, as if this node's clock had jumped forward.
    pub fn expire_now(&self, key: &[u8]) {
        self.inner.state.lock().keys.remove(key);
    }

    /// Reports `maxmemory` and `maxmemory-policy` as given (Redis' `INFO
    /// memory`) from now on; by default 0 and `noeviction`. The node does
    /// not evict by itself: call [`evict_volatile`](Self::evict_volatile)
    /// where a server under memory pressure would.
    pub fn set_maxmemory(&self, limit: u64, policy: &str) {
        self.inner.state.lock().memory = (limit, policy.to_owned());
    }

    /// Evicts every key with an expiry (every lock key; the fence counters
    /// have none), as a Redis server at `maxmemory` under an evicting
    /// policy drops idle volatile keys first. Returns how many were evicted.
    pub fn evict_volatile(&self) -> usize {
        self.inner.state.lock().evict_volatile()
    }

    /// Runs `hook` before each operation (e.g. to advance a
    /// [`ManualClock`](crate::ManualClock) and model a slow node), or stops
    /// doing so with `None`.
    pub fn set_hook(&self, hook: Option<CallHook>) {
        self.inner.state.lock().hook = hook;
    }

    /// Refuses the operations `rule` picks, unapplied, as a server's
    /// access rules would (`BackendErrorKind::Denied`, as Redis'
    /// `NOPERM`), or none with `None`: e.g. every extend and release, as
    /// an ACL user without scripts on Redis 7, or every op on keys
    /// outside a key pattern. The identity probe is not refused.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use quorum_lock::backend::{self, BackendErrorKind, OpKind};
    /// use quorum_lock::MemoryBackend;
    ///
    /// let node = MemoryBackend::new("mem-0");
    /// node.set_denied(Some(Arc::new(|op| !matches!(op.kind, OpKind::Acquire { .. }))));
    /// assert!(backend::acquire(&node, b"job", b"token-a", Duration::from_secs(1))?);
    /// let refused = backend::release(&node, b"job", b"token-a").unwrap_err();
    /// assert_eq!(refused.kind(), BackendErrorKind::Denied);
    /// # Ok::<(), quorum_lock::backend::BackendError>(())
    /// ```
    pub fn set_denied(&self, rule: Option<DenyRule>) {
        self.inner.state.lock().denied = rule;
    }

    /// The token holding lock `key`, if it is held and unexpired.
    pub fn holder(&self, key: &[u8]) -> Option<Vec<u8>> {
        let now = self.inner.clock.now();
        self.inner
            .state
            .lock()
            .live(key, now)
            .and_then(|e| e.token().map(<[u8]>::to_vec))
    }

    /// The readers of a read-write lock whose readers' key is `key`
    /// ([`RwLock::keys`](crate::RwLock::keys)) that have not expired:
    /// each one's value (token, then owner label) and time left.
    pub fn readers(&self, key: &[u8]) -> Vec<(Vec<u8>, Duration)> {
        let now = self.inner.clock.now();
        self.inner.state.lock().live_readers(key, now)
    }

    /// Time until `key` expires, if it is held.
    pub fn remaining_ttl(&self, key: &[u8]) -> Option<Duration> {
        let now = self.inner.clock.now();
        self.inner
            .state
            .lock()
            .live(key, now)
            .and_then(|e| e.expires_at)
            .map(|at| at.saturating_duration_since(now))
    }

    /// Number of unexpired keys (lock keys, and the fence counters' hash
    /// once a fenced lock was taken, as Redis' `DBSIZE` counts them).
    pub fn key_count(&self) -> usize {
        let now = self.inner.clock.now();
        let mut state = self.inner.state.lock();
        state
            .keys
            .retain(|_, e| e.expires_at.is_none_or(|at| at > now));
        state.keys.len()
    }

    /// Round trips served so far (a batch counts once).
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// Operations served so far (each op of a batch counts).
    pub fn operations(&self) -> u64 {
        self.inner.operations.load(Ordering::Relaxed)
    }

    /// One round trip: the pause gate and the latency, once.
    fn round_trip(&self) {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let latency = {
            let mut state = self.inner.state.lock();
            if state.paused {
                // Bounded: a pause never outlives MAX_PAUSE.
                let _ = self
                    .inner
                    .unpaused
                    .wait_while_for(&mut state, |s| s.paused, MAX_PAUSE);
            }
            state.latency
        };
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
    }

    fn apply(&self, op: &Op<'_>) -> Result<Reply, BackendError> {
        self.inner.operations.fetch_add(1, Ordering::Relaxed);
        let (hook, denied) = {
            let state = self.inner.state.lock();
            (state.hook.clone(), state.denied.clone())
        };
        if let Some(hook) = hook {
            hook(op);
        }
        // Outside the node's lock, as the hook: a rule may call the node.
        let refused = denied.is_some_and(|rule| rule(op));
        let now = self.inner.clock.now();
        let mut state = self.inner.state.lock();
        if state.down {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is down (injected)",
            ));
        }
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return Err(BackendError::new(
                BackendErrorKind::Other,
                "injected failure",
            ));
        }
        if refused {
            return Err(BackendError::new(
                BackendErrorKind::Denied,
                format!("{}: NOPERM (injected)", self.inner.name),
            ));
        }
        let answer = state.apply(op, now);
        let lost = answer.is_ok() && state.lose_replies_next > 0;
        if lost {
            state.lose_replies_next -= 1;
        }
        // The listeners that heard a release are woken outside the node's
        // lock: a waker may run its owner's code.
        let to_wake = std::mem::take(&mut state.to_wake);
        drop(state);
        to_wake.iter().for_each(NoticeWaker::wake);
        if lost {
            return Err(BackendError::new(
                BackendErrorKind::Timeout,
                "reply lost (injected); the operation was applied",
            ));
        }
        answer
    }
}

impl Backend for MemoryBackend {
    fn describe(&self) -> String {
        self.inner.name.clone()
    }

    /// Runs the whole batch at once, in one round trip (the pause and the
    /// latency apply once), and reports the node's identity with the
    /// answers. The identity is read after the ops were applied: a restart
    /// in between makes the answers count as the new incarnation's (which
    /// is quarantined), never the other way round.
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        self.round_trip();
        let results: Vec<_> = ops.iter().map(|op| self.apply(op)).collect();
        let answered = results.iter().any(Result::is_ok);
        let server = answered.then(|| self.identity()).flatten();
        Box::new(Answers::new(results, server))
    }

    /// The node itself: every batch reports its identity too (unless a
    /// test hides it with `set_identity_hidden`).
    fn probe(&self) -> Option<&dyn Probe> {
        Some(self)
    }

    fn inspector(&self) -> Option<&dyn Inspect> {
        Some(self)
    }

    /// A listener of this node's release notices (one per manager that
    /// uses the node, also when managers share this handle).
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        Some(Box::new(MemoryListener::new(self)))
    }
}

impl Probe for MemoryBackend {
    /// The node's identity, without a round trip (like Redis' identity
    /// cached per connection). A node that never restarted reports a long
    /// uptime: it has never forgotten a lock, so nothing needs quarantine.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        let state = self.inner.state.lock();
        if state.down {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is down (injected)",
            ));
        }
        if state.paused {
            // A frozen server does not answer: report what the wait would.
            return Err(BackendError::new(
                BackendErrorKind::Timeout,
                "node is paused (injected)",
            ));
        }
        drop(state);
        Ok(self.identity().unwrap_or_default())
    }

    /// Times [`set_down(false)`](MemoryBackend::set_down) brought the node
    /// back up: a manager that marked it down uses it again on its next
    /// round.
    fn recoveries(&self) -> u64 {
        self.inner.recoveries.load(Ordering::SeqCst)
    }
}

impl Inspect for MemoryBackend {
    /// Honours the pause, the latency and a node marked down, as every
    /// call does; consumes no injected failure (those are for the lock
    /// operations).
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        self.round_trip();
        let now = self.inner.clock.now();
        let mut state = self.inner.state.lock();
        if state.down {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is down (injected)",
            ));
        }
        state.inspect(key, now)
    }
}

impl MemoryBackend {
    /// Who the node is and how long it has been up, per its
    /// [`UptimeReport`]; `None` while the identity is hidden.
    fn identity(&self) -> Option<ServerInfo> {
        let now = self.inner.clock.now();
        let state = self.inner.state.lock();
        if state.identity_hidden {
            return None;
        }
        let since_start = match state.uptime_report {
            UptimeReport::Exact => now.saturating_duration_since(state.started_at),
            UptimeReport::WholeSeconds { .. } => {
                let wall_now = state.wall(self.inner.created, now).as_secs();
                Duration::from_secs(wall_now.saturating_sub(state.wall_start_secs))
            }
        };
        let uptime = if state.generation == 0 {
            NEVER_RESTARTED_UPTIME.saturating_add(since_start)
        } else {
            since_start
        };
        let (limit, policy) = &state.memory;
        Some(
            ServerInfo::new(
                format!("{}#{}", self.inner.name, state.generation),
                Some(uptime),
            )
            .with_memory(*limit, policy.clone())
            .with_evicted_keys(state.evicted),
        )
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("MemoryBackend")
            .field("name", &self.inner.name)
            .field("keys", &state.keys.len())
            .field("down", &state.down)
            .field("paused", &state.paused)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
