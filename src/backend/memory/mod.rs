//! [`MemoryBackend`]: an in-process lock server with fault injection, for
//! tests, demos and examples.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use self::faults::{CallHook, DenyRule, UptimeReport};
use self::notices::MemoryListener;
use self::state::State;
use super::{
    Answers, Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, NoticeWaker, Op,
    Probe, ReleaseListener, Reply, ServerInfo,
};
use crate::clock::{Clock, MonotonicClock};

mod election;
mod faults;
mod notices;
mod rw;
mod state;

/// The longest a paused node holds a call before answering anyway, so a
/// test that forgets [`MemoryBackend::resume`] cannot hang forever.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The uptime a node that was never restarted reports (a year): it never
/// held a lock before it was created, so it has none to forget.
const NEVER_RESTARTED_UPTIME: Duration = Duration::from_secs(365 * 24 * 3600);

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
                    listen_calls: 0,
                    to_wake: Vec::new(),
                }),
                unpaused: Condvar::new(),
                round_trips: AtomicU64::new(0),
                recoveries: AtomicU64::new(0),
                operations: AtomicU64::new(0),
            }),
        }
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

    /// Keys its listeners listen for, summed over the listeners (as
    /// Redis' `PUBSUB NUMSUB` of each channel would sum them).
    #[cfg(test)]
    pub(crate) fn listened_keys(&self) -> usize {
        let state = self.inner.state.lock();
        state.listeners.values().map(notices::Inbox::listens).sum()
    }

    /// Calls its listeners had to `listen` (each a change of subscription
    /// asked, as a `SUBSCRIBE` or `UNSUBSCRIBE` on Redis when it changes
    /// anything).
    #[cfg(test)]
    pub(crate) fn listen_calls(&self) -> u64 {
        self.inner.state.lock().listen_calls
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
