//! The monotonic clock the lock arithmetic reads, injectable for tests.
//!
//! Every lock decision (elapsed time, validity, deadlines) is measured on a
//! [`Clock`], never on wall-clock time: a wall clock can jump, a monotonic
//! clock only moves forward. Tests swap in a [`ManualClock`] to make drift
//! and validity deterministic.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// A source of monotonic time.
///
/// Implementations must never go backwards.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// Wall-clock time since the Unix epoch. Never used for lock timing;
    /// only as the floor of fencing tokens (see
    /// [`LockOptions::fencing`](crate::LockOptions::fencing)), which keeps
    /// them increasing across servers that restarted and forgot their
    /// counters. Default: the system clock.
    fn since_epoch(&self) -> Duration {
        system_since_epoch()
    }

    /// Whether this clock moves with real time. The crate's timers (the
    /// auto-extension thread, the local line's watch on the holder's
    /// validity) wait in real time for a moment on this clock: for a clock
    /// that moves with real time they sleep until then; for one that
    /// jumps (a [`ManualClock`]) they look at it again every millisecond
    /// or so, so an `advance` takes effect at once. Default: `true`.
    fn follows_real_time(&self) -> bool {
        true
    }
}

/// How often a timer looks at a clock that does not follow real time.
const JUMPY_CLOCK_POLL: Duration = Duration::from_millis(1);

/// The real-time instant to wake at, to act when `clock` reads `at`: `at`
/// itself (less what has passed) on a clock that follows real time, at
/// most [`JUMPY_CLOCK_POLL`] from now on one that jumps. `None`: too far
/// to express (wait without a timeout).
pub(crate) fn wake_at(clock: &dyn Clock, at: Instant) -> Option<Instant> {
    let left = at.saturating_duration_since(clock.now());
    let left = if clock.follows_real_time() {
        left
    } else {
        left.min(JUMPY_CLOCK_POLL)
    };
    Instant::now().checked_add(left)
}

fn system_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The operating system's monotonic clock ([`Instant::now`]). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// How far a [`ManualClock`] can move: far beyond any test, and always
/// representable as an [`Instant`].
const MANUAL_CLOCK_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A clock that only moves when told to: for deterministic tests of TTLs,
/// drift and validity. Its wall clock moves with it.
///
/// Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - t0, Duration::from_millis(250));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    origin: Instant,
    /// The wall clock at `origin`.
    epoch: Duration,
    offset: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at the current instant.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(ManualInner {
                origin: Instant::now(),
                epoch: system_since_epoch(),
                offset: Mutex::new(Duration::ZERO),
            }),
        }
    }

    /// Moves the clock forward by `by`, saturating at about a century past
    /// its start (`Duration::MAX` is fine).
    pub fn advance(&self, by: Duration) {
        let mut offset = self.inner.offset.lock();
        *offset = offset.saturating_add(by).min(MANUAL_CLOCK_SPAN);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.origin + *self.inner.offset.lock()
    }

    /// The wall clock at the clock's creation, moved like [`now`](Self::now).
    fn since_epoch(&self) -> Duration {
        self.inner.epoch + *self.inner.offset.lock()
    }

    /// `false`: it moves only when told to.
    fn follows_real_time(&self) -> bool {
        false
    }
}
