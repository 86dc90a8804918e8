//! What a test does to an in-memory node: faults (down, paused, slow,
//! failing, losing replies), restarts that forget, wall-clock steps, the
//! identity it reports, memory pressure, a hook before each operation and
//! access rules that refuse some; and the types those settings take.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::MemoryBackend;
use super::notices::Inbox;
use crate::backend::Op;

/// How a [`MemoryBackend`] reports its uptime in
/// [`ServerInfo::uptime`](crate::backend::ServerInfo::uptime).
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

impl MemoryBackend {
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

    /// How [`server_info`](crate::backend::Probe::server_info) reports the uptime from
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
    /// the wall clock; expiry follows the node's monotonic [`Clock`](crate::Clock).
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
}
