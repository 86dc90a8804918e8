//! The monotonic clock the lock arithmetic reads, injectable for tests.
//!
//! Every lock decision (elapsed time, validity, deadlines) is measured on a
//! [`Clock`], never on wall-clock time: a wall clock can jump, a monotonic
//! clock only moves forward. Tests swap in a [`ManualClock`] to make drift
//! and validity deterministic.
//!
//! The default clock also counts the time the host was **suspended** (a
//! laptop's lid, a VM suspended by its hypervisor with the guest's
//! knowledge): the servers' keys expire meanwhile, so a lock's validity
//! must run out with them. `Instant` on Linux reads `CLOCK_MONOTONIC`,
//! which stops during a suspend; [`MonotonicClock`] reads
//! `CLOCK_BOOTTIME` there (see its docs for other platforms).
//!
//! Instants on the manager's clock are never handed to the OS as they
//! are (a channel's deadline, a socket timeout, which count on
//! `Instant::now`): after a suspend the two clocks differ by the time
//! suspended. A wait for a moment on the manager's clock is turned into a
//! duration when it starts ([`wake_at`]).

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

/// A reading of a [`Clock`] taken when first asked for, then kept: a
/// batch's judgment of its server needs the manager's clock only when a
/// quarantine runs or something changed, and a reading of the boot clock
/// is a call into the vDSO and a conversion: about 100 instructions as
/// callgrind counts them (`clock::boot::now`, 101 per call on 0d34ce6),
/// the vDSO's own work aside, once per batch.
pub(crate) struct Reading<'a> {
    clock: &'a dyn Clock,
    at: Option<Instant>,
}

impl<'a> Reading<'a> {
    /// `clock`, not read yet.
    pub(crate) fn of(clock: &'a dyn Clock) -> Self {
        Self { clock, at: None }
    }

    /// A reading already taken: `at`.
    #[cfg(test)]
    pub(crate) fn at(at: Instant) -> Self {
        Self {
            clock: &MonotonicClock,
            at: Some(at),
        }
    }

    /// The reading: the clock is read at the first call only.
    pub(crate) fn now(&mut self) -> Instant {
        let clock = self.clock;
        *self.at.get_or_insert_with(|| clock.now())
    }
}

fn system_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The operating system's monotonic clock, counting the time the host
/// was suspended. The default.
///
/// - **Linux, Android**: `CLOCK_BOOTTIME`. It moves as `CLOCK_MONOTONIC`
///   (what [`Instant::now`] reads) while the host runs, and also counts
///   the time it was suspended, as the servers' clocks do: after a
///   suspend longer than a lock's validity, [`LockGuard::is_valid`](crate::LockGuard::is_valid)
///   is false and auto-extension reports the lock lost, instead of
///   reporting the validity left before the suspend.
/// - **Elsewhere**: [`Instant::now`]. Windows' `QueryPerformanceCounter`
///   counts suspended time; macOS' clock (`CLOCK_UPTIME_RAW`) does not,
///   so there a suspend longer than the validity goes unnoticed, as it
///   does in every peer library.
///
/// The instants it returns are `Instant`s placed at the first reading
/// (the process's first) plus the `CLOCK_BOOTTIME` time since: they are
/// comparable with each other, not with [`Instant::now`] once the host
/// was suspended. A VM paused by its hypervisor without the guest knowing
/// is seen by no guest clock: that is a process pause (docs/safety.md,
/// assumption 1).
///
/// ```
/// use quorum_lock::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock;
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        boot::now()
    }
}

/// `CLOCK_BOOTTIME` as an `Instant` (see [`MonotonicClock`]).
#[cfg(any(target_os = "linux", target_os = "android"))]
mod boot {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use nix::time::{ClockId, clock_gettime};

    /// The first reading: an `Instant` and the `CLOCK_BOOTTIME` time
    /// read with it (`None`: the kernel has no `CLOCK_BOOTTIME`, before
    /// Linux 2.6.39, and `Instant` is used).
    static ORIGIN: OnceLock<Option<(Instant, Duration)>> = OnceLock::new();

    /// `CLOCK_BOOTTIME` now, if the kernel has it.
    pub(super) fn boottime() -> Option<Duration> {
        let ts = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
        let secs = u64::try_from(ts.tv_sec()).ok()?;
        let nanos = u32::try_from(ts.tv_nsec()).ok()?;
        Some(Duration::new(secs, nanos))
    }

    pub(super) fn origin() -> Option<(Instant, Duration)> {
        *ORIGIN.get_or_init(|| boottime().map(|boot| (Instant::now(), boot)))
    }

    /// The instant `boot` (a `CLOCK_BOOTTIME` reading) stands for, given
    /// the first reading `origin`.
    pub(super) fn instant_at(origin: (Instant, Duration), boot: Duration) -> Instant {
        let (at, boot0) = origin;
        at.checked_add(boot.saturating_sub(boot0)).unwrap_or(at)
    }

    pub(super) fn now() -> Instant {
        match (origin(), boottime()) {
            (Some(origin), Some(boot)) => instant_at(origin, boot),
            _ => Instant::now(),
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod boot {
    use std::time::Instant;

    pub(super) fn now() -> Instant {
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

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    /// The default clock reads `CLOCK_BOOTTIME`: each reading lies
    /// between the direct readings taken before and after it, placed on
    /// the clock's origin.
    #[test]
    fn the_default_clock_advances_with_clock_boottime() {
        let clock = MonotonicClock;
        let _ = clock.now();
        let origin = boot::origin().expect("this kernel has CLOCK_BOOTTIME");
        for _ in 0..100 {
            let before = boot::boottime().unwrap();
            let now = clock.now();
            let after = boot::boottime().unwrap();
            assert!(
                boot::instant_at(origin, before) <= now,
                "behind CLOCK_BOOTTIME"
            );
            assert!(
                now <= boot::instant_at(origin, after),
                "ahead of CLOCK_BOOTTIME"
            );
        }
    }

    /// A suspend moves the boot time and not `CLOCK_MONOTONIC`: the
    /// default clock's instant moves with it.
    #[test]
    fn a_suspend_moves_the_default_clocks_instants() {
        let origin = (Instant::now(), Duration::from_secs(1_000));
        let hour = Duration::from_secs(3_600);
        let resumed = boot::instant_at(origin, Duration::from_secs(1_000) + hour);
        assert_eq!(resumed - origin.0, hour);
        // Never before the origin, even for a reading before it.
        assert_eq!(boot::instant_at(origin, Duration::from_secs(1)), origin.0);
    }
}

#[cfg(test)]
mod reading_tests {
    use super::*;

    /// A reading reads its clock at the first call, not before, and keeps
    /// that value: a batch's judgment uses one instant throughout.
    #[test]
    fn a_reading_is_taken_at_the_first_call_and_kept() {
        let clock = ManualClock::new();
        let start = clock.now();
        let mut reading = Reading::of(&clock);
        clock.advance(Duration::from_secs(5));
        assert_eq!(reading.now(), start + Duration::from_secs(5));
        clock.advance(Duration::from_secs(5));
        assert_eq!(reading.now(), start + Duration::from_secs(5));
        assert_eq!(Reading::at(start).now(), start);
    }
}
