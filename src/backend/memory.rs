//! [`MemoryBackend`]: an in-process lock server with fault injection, for
//! tests, demos and examples.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Backend, BackendError, BackendErrorKind, Op, ServerInfo};
use crate::clock::{Clock, MonotonicClock};

/// The longest a paused node holds a call before answering anyway, so a
/// test that forgets [`MemoryBackend::resume`] cannot hang forever.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The uptime a node that was never restarted reports (a year): it never
/// held a lock before it was created, so it has none to forget.
const NEVER_RESTARTED_UPTIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// A hook run before each operation: see [`MemoryBackend::set_hook`].
pub type CallHook = Arc<dyn Fn(&Op<'_>) + Send + Sync>;

/// One in-process lock server with the semantics of a Redis master (`SET NX
/// PX`, compare-and-delete, compare-and-pexpire) and faults a test can drive.
///
/// Clones are handles to the same node: give one to the manager and keep one
/// to inject faults and inspect keys. Expiry follows the node's [`Clock`],
/// so with a [`ManualClock`](crate::ManualClock) TTL tests are exact.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::{Backend, MemoryBackend};
///
/// let node = MemoryBackend::new("mem-0");
/// assert!(node.acquire(b"job", b"token-a", Duration::from_secs(1))?);
/// assert!(!node.acquire(b"job", b"token-b", Duration::from_secs(1))?);
/// assert!(!node.release(b"job", b"token-b")?); // not the holder: untouched
/// assert!(node.release(b"job", b"token-a")?);
///
/// node.set_down(true);
/// assert!(node.acquire(b"job", b"token-a", Duration::from_secs(1)).is_err());
/// # Ok::<(), quorum_lock::BackendError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    unpaused: Condvar,
    round_trips: AtomicU64,
    operations: AtomicU64,
}

struct Entry {
    token: Vec<u8>,
    expires_at: Instant,
}

struct State {
    keys: HashMap<Vec<u8>, Entry>,
    down: bool,
    paused: bool,
    latency: Duration,
    fail_next: u32,
    lose_replies_next: u32,
    generation: u64,
    started_at: Instant,
    hook: Option<CallHook>,
}

impl State {
    /// The entry for `key` if it exists and has not expired at `now`.
    fn live(&mut self, key: &[u8], now: Instant) -> Option<&mut Entry> {
        if self.keys.get(key).is_some_and(|e| e.expires_at <= now) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }
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
                }),
                unpaused: Condvar::new(),
                round_trips: AtomicU64::new(0),
                operations: AtomicU64::new(0),
            }),
        }
    }

    /// Takes the node down (every call fails as unreachable, nothing is
    /// applied) or brings it back up with its keys intact.
    pub fn set_down(&self, down: bool) {
        self.inner.state.lock().down = down;
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
        let mut state = self.inner.state.lock();
        state.keys.clear();
        state.generation += 1;
        state.started_at = self.inner.clock.now();
    }

    /// Expires `key` now, as if this node's clock had jumped forward.
    pub fn expire_now(&self, key: &[u8]) {
        self.inner.state.lock().keys.remove(key);
    }

    /// Runs `hook` before each operation (e.g. to advance a
    /// [`ManualClock`](crate::ManualClock) and model a slow node), or stops
    /// doing so with `None`.
    pub fn set_hook(&self, hook: Option<CallHook>) {
        self.inner.state.lock().hook = hook;
    }

    /// The token holding `key`, if it is held and unexpired.
    pub fn holder(&self, key: &[u8]) -> Option<Vec<u8>> {
        let now = self.inner.clock.now();
        self.inner
            .state
            .lock()
            .live(key, now)
            .map(|e| e.token.clone())
    }

    /// Time until `key` expires, if it is held.
    pub fn remaining_ttl(&self, key: &[u8]) -> Option<Duration> {
        let now = self.inner.clock.now();
        self.inner
            .state
            .lock()
            .live(key, now)
            .map(|e| e.expires_at.saturating_duration_since(now))
    }

    /// Number of unexpired keys.
    pub fn key_count(&self) -> usize {
        let now = self.inner.clock.now();
        let mut state = self.inner.state.lock();
        state.keys.retain(|_, e| e.expires_at > now);
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

    fn apply(&self, op: &Op<'_>) -> Result<bool, BackendError> {
        self.inner.operations.fetch_add(1, Ordering::Relaxed);
        let hook = self.inner.state.lock().hook.clone();
        if let Some(hook) = hook {
            hook(op);
        }
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
        let answer = match *op {
            Op::Acquire { key, token, ttl } => {
                if state.live(key, now).is_some() {
                    false
                } else {
                    let expires_at = now.checked_add(ttl).ok_or_else(|| {
                        BackendError::new(BackendErrorKind::Other, "invalid expire time")
                    })?;
                    state.keys.insert(
                        key.to_vec(),
                        Entry {
                            token: token.to_vec(),
                            expires_at,
                        },
                    );
                    true
                }
            }
            Op::Release { key, token } => {
                let ours = state.live(key, now).is_some_and(|e| e.token == token);
                if ours {
                    state.keys.remove(key);
                }
                ours
            }
            Op::Extend { key, token, ttl } => match state.live(key, now) {
                Some(entry) if entry.token == token => {
                    entry.expires_at = now.checked_add(ttl).ok_or_else(|| {
                        BackendError::new(BackendErrorKind::Other, "invalid expire time")
                    })?;
                    true
                }
                _ => false,
            },
        };
        if state.lose_replies_next > 0 {
            state.lose_replies_next -= 1;
            return Err(BackendError::new(
                BackendErrorKind::Timeout,
                "reply lost (injected); the operation was applied",
            ));
        }
        Ok(answer)
    }
}

impl Backend for MemoryBackend {
    fn acquire(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        self.round_trip();
        self.apply(&Op::Acquire { key, token, ttl })
    }

    fn release(&self, key: &[u8], token: &[u8]) -> Result<bool, BackendError> {
        self.round_trip();
        self.apply(&Op::Release { key, token })
    }

    fn extend(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        self.round_trip();
        self.apply(&Op::Extend { key, token, ttl })
    }

    fn describe(&self) -> String {
        self.inner.name.clone()
    }

    fn batch(&self, ops: &[Op<'_>]) -> Vec<Result<bool, BackendError>> {
        self.round_trip();
        ops.iter().map(|op| self.apply(op)).collect()
    }

    /// The node's identity, without a round trip (like Redis' identity
    /// cached per connection). A node that never restarted reports a long
    /// uptime: it has never forgotten a lock, so nothing needs quarantine.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        let now = self.inner.clock.now();
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
        let since_start = now.saturating_duration_since(state.started_at);
        let uptime = if state.generation == 0 {
            NEVER_RESTARTED_UPTIME.saturating_add(since_start)
        } else {
            since_start
        };
        Ok(ServerInfo {
            run_id: Some(format!("{}#{}", self.inner.name, state.generation)),
            uptime: Some(uptime),
        })
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
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn expiry_follows_the_injected_clock() {
        let clock = ManualClock::new();
        let node = MemoryBackend::with_clock("m", Arc::new(clock.clone()));
        assert!(node.acquire(b"k", b"a", TTL).unwrap());
        clock.advance(TTL - Duration::from_millis(1));
        assert_eq!(node.holder(b"k").as_deref(), Some(&b"a"[..]));
        clock.advance(Duration::from_millis(1));
        assert_eq!(node.holder(b"k"), None);
        assert!(node.acquire(b"k", b"b", TTL).unwrap());
    }

    #[test]
    fn extend_never_recreates_and_checks_the_token() {
        let clock = ManualClock::new();
        let node = MemoryBackend::with_clock("m", Arc::new(clock.clone()));
        assert!(!node.extend(b"k", b"a", TTL).unwrap());
        assert_eq!(node.key_count(), 0);
        assert!(node.acquire(b"k", b"a", TTL).unwrap());
        assert!(!node.extend(b"k", b"b", TTL * 2).unwrap());
        assert_eq!(node.remaining_ttl(b"k"), Some(TTL));
        assert!(node.extend(b"k", b"a", TTL * 2).unwrap());
        assert_eq!(node.remaining_ttl(b"k"), Some(TTL * 2));
        clock.advance(TTL * 2);
        assert!(!node.extend(b"k", b"a", TTL).unwrap());
    }

    #[test]
    fn faults() {
        let node = MemoryBackend::new("m");
        node.fail_next(1);
        assert!(node.acquire(b"k", b"a", TTL).is_err());
        assert_eq!(node.key_count(), 0, "a failed op is not applied");
        node.lose_replies_next(1);
        let err = node.acquire(b"k", b"a", TTL).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Timeout);
        assert_eq!(node.holder(b"k").as_deref(), Some(&b"a"[..]), "applied");
        let before = node.server_info().unwrap();
        node.restart();
        assert_eq!(node.key_count(), 0);
        assert_ne!(node.server_info().unwrap().run_id, before.run_id);
    }

    #[test]
    fn batch_is_one_round_trip() {
        let node = MemoryBackend::new("m");
        let ops = [
            Op::Acquire {
                key: b"a",
                token: b"t",
                ttl: TTL,
            },
            Op::Acquire {
                key: b"a",
                token: b"u",
                ttl: TTL,
            },
            Op::Release {
                key: b"a",
                token: b"t",
            },
        ];
        let results: Vec<bool> = node.batch(&ops).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(results, [true, false, true]);
        assert_eq!((node.round_trips(), node.operations()), (1, 3));
    }
}
