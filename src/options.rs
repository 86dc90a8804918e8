//! Per-call [`LockOptions`] and the [`RetryPolicy`] of
//! [`LockManager::lock`](crate::LockManager::lock).

use std::time::Duration;

use crate::cancel::CancellationToken;
use crate::token::random_u64;

/// Default longest hold of an auto-extended lock.
pub(crate) const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(600);

/// How [`LockManager::lock`](crate::LockManager::lock) retries a contended or failed attempt.
///
/// Between attempts it sleeps `delay` plus a random jitter in
/// `[0, jitter)`, so clients that collided do not collide again in step.
/// Retrying stops at `attempts` attempts or when the next sleep would end
/// after `max_wait`, whichever comes first: it never retries forever
/// unless asked to. A time limit without an explicit attempt count means
/// "retry until the time is spent"; an attempt count without a time limit
/// means that many attempts; without either, retry until the manager's
/// [`default_wait`](crate::LockManager::default_wait) is spent (62.6 s
/// with the default settings: what
/// [`LockManager::lock`](crate::LockManager::lock) does by default, wait
/// like `Mutex::lock`, within a bound that outlasts a crashed holder's
/// lock and a restart quarantine).
///
/// While no quorum can grant (nodes quarantined, down, unusable), release
/// notices do not bring attempts forward: at most one attempt per retry
/// delay, or one when the quarantine in the way ends (plus the jitter).
/// Failures that retrying cannot fix (see [`Error::is_retryable`](crate::Error::is_retryable)) end the
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
    /// `None`: not set (no count limit).
    attempts: Option<u32>,
    max_wait: Option<Duration>,
    delay: Duration,
    jitter: Duration,
}

/// The least time limit when neither an attempt count nor a time limit is
/// set: a manager waits at least this long, or longer when its `max_ttl`
/// asks (see [`LockManager::default_wait`](crate::LockManager::default_wait)).
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(60);

impl RetryPolicy {
    /// The default policy: retry for up to the manager's
    /// [`default_wait`](crate::LockManager::default_wait) (no attempt
    /// cap), 100 ms delay, 100 ms jitter.
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

    /// Most attempts, the first included (at least 1). Set without
    /// [`max_wait`](Self::max_wait), it is the only limit. Default: no
    /// count limit.
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts.max(1));
        self
    }

    /// Stop retrying once the next attempt would start after `max_wait`
    /// from the first; `Duration::MAX` waits as long as it takes. Without
    /// an explicit [`attempts`](Self::attempts), the count is unlimited.
    /// Default: the manager's
    /// [`default_wait`](crate::LockManager::default_wait) (at least 60
    /// seconds), unless [`attempts`](Self::attempts) is set (then no time
    /// limit).
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Fixed part of the pause between attempts. Default: 100 ms.
    ///
    /// A lock's waiter (`lock`, `lock_with`) is woken early by release
    /// notices; while every node can send them, its timed attempt waits
    /// past this pause until the holder's key expires on a quorum (a
    /// refused acquire reads the time it has left), at most one second
    /// and never past the wait's budget: the timer is then only the
    /// fallback for a lost notice. See docs/safety.md, "Wake-ups".
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

    /// This policy, with `wait` as its time limit when it sets neither
    /// an attempt count nor a time limit (the manager's default wait,
    /// see [`LockManager::lock`](crate::LockManager::lock)).
    pub(crate) fn or_default_wait(mut self, wait: Duration) -> Self {
        if self.attempts.is_none() && self.max_wait.is_none() {
            self.max_wait = Some(wait);
        }
        self
    }

    /// The attempt limit in force.
    pub(crate) fn max_attempts(&self) -> u32 {
        self.attempts.unwrap_or(u32::MAX)
    }

    /// The time limit in force, if any.
    fn time_limit(&self) -> Option<Duration> {
        match (self.attempts, self.max_wait) {
            (_, Some(max)) => Some(max),
            (None, None) => Some(DEFAULT_WAIT),
            (Some(_), None) => None,
        }
    }

    /// Whether the policy allows one attempt only (no waiting in line).
    pub(crate) fn single_attempt(&self) -> bool {
        self.max_attempts() == 1
    }

    /// The longest the policy can keep a caller waiting: `max_wait`, or
    /// what the attempts can take at most (saturating).
    pub(crate) fn budget(&self) -> Duration {
        self.time_limit().unwrap_or_else(|| {
            self.delay
                .saturating_add(self.jitter)
                .saturating_mul(self.max_attempts().saturating_sub(1))
        })
    }

    /// The pause before attempt `made + 1`, or `None` when the policy is
    /// spent after `made` attempts and `waited` time.
    pub(crate) fn next_delay(&self, made: u32, waited: Duration) -> Option<Duration> {
        self.next_delay_after(made, waited, Duration::ZERO)
    }

    /// [`next_delay`](Self::next_delay), for an attempt that cannot
    /// succeed before `not_before` from now: the pause is the longer of
    /// the delay and `not_before`, plus the jitter (every process that
    /// waits for the same moment, as the end of a restart quarantine,
    /// computes the same `not_before`: without the jitter they would all
    /// try at once and split the votes).
    pub(crate) fn next_delay_after(
        &self,
        made: u32,
        waited: Duration,
        not_before: Duration,
    ) -> Option<Duration> {
        if made >= self.max_attempts() {
            return None;
        }
        let jitter_nanos = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let jitter = match jitter_nanos {
            0 => Duration::ZERO,
            j => Duration::from_nanos(random_u64() % j),
        };
        let delay = self.delay.max(not_before).saturating_add(jitter);
        match self.time_limit() {
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

/// Per-call options for [`LockManager::lock_with`](crate::LockManager::lock_with).
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) auto_extend: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) max_extensions: Option<u32>,
    pub(crate) fencing: Option<bool>,
    pub(crate) cancellation: Option<CancellationToken>,
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
    /// [`LockGuard::lost_signal`](crate::LockGuard::lost_signal) fires), or a bound is reached
    /// ([`max_hold`](Self::max_hold), [`max_extensions`](Self::max_extensions)).
    /// One timer thread per manager serves every such lock. Default: off.
    ///
    /// **Renewal stops after 10 minutes by default** ([`max_hold`](Self::max_hold)'s
    /// default): a guard that a program forgot (leaked, or parked in a
    /// struct that lives for ever) must not hold the lock for ever. The
    /// lock then ends at its deadline, within one TTL; the guard's
    /// [`lost_signal`](crate::LockGuard::lost_signal) fires at once with
    /// the reason, and [`renewal_stopped`](crate::LockGuard::renewal_stopped)
    /// says why. For
    /// work that may take longer, set `max_hold` to its bound, or
    /// `Duration::MAX` for none; [`with_lock`](crate::LockManager::with_lock)
    /// renews without bound, since the closure's return ends the hold.
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

    /// Give the lock a fencing token ([`LockGuard::fence`](crate::LockGuard::fence)):
    /// a number, agreed by a quorum, that strictly increases from one
    /// holder of the resource to the next, so the protected resource can
    /// refuse a write from a holder that lost the lock without knowing it
    /// (a pause past its validity). Costs one more round trip per
    /// acquisition; a fenced lock is never handed to a waiting thread of
    /// the same manager, and a thread that asks for fencing is never
    /// handed a lock (it acquires, and gets a fence of its own). Needs a backend that supports it (Redis and the
    /// memory backend do). Default: the manager's
    /// [`fencing`](crate::LockManagerBuilder::fencing) setting (off).
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = Some(on);
        self
    }

    /// Stop waiting when `token` is cancelled: the call then returns
    /// [`Error::Cancelled`](crate::Error::Cancelled) within a few
    /// milliseconds (plus at most one node timeout for a round in flight),
    /// holding nothing. A token already cancelled fails the call before
    /// any node is contacted. See [`CancellationToken`]. Default: none.
    #[must_use]
    pub fn cancellation(mut self, token: &CancellationToken) -> Self {
        self.cancellation = Some(token.clone());
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

#[cfg(test)]
mod tests {
    use crate::options::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn attempts_and_time_limits_combine_as_documented() {
        assert_eq!(RetryPolicy::new().max_attempts(), u32::MAX);
        assert_eq!(RetryPolicy::new().time_limit(), Some(DEFAULT_WAIT));
        assert_eq!(RetryPolicy::new().attempts(3).time_limit(), None);
        assert_eq!(RetryPolicy::new().max_wait(MS).max_attempts(), u32::MAX);
        assert_eq!(
            RetryPolicy::new().max_wait(MS).attempts(3).max_attempts(),
            3
        );
        assert_eq!(RetryPolicy::new().attempts(0).max_attempts(), 1);
        assert!(RetryPolicy::none().single_attempt());
        assert!(
            !RetryPolicy::new()
                .attempts(2)
                .delay(Duration::ZERO)
                .single_attempt()
        );
    }

    /// Regression: the default gave up after 10 attempts (about 1.3 s),
    /// unlike `Mutex::lock`; it now retries until 60 s are spent.
    #[test]
    fn the_default_policy_waits_past_ten_attempts() {
        let p = RetryPolicy::new();
        assert!(p.next_delay(10, Duration::from_millis(1500)).is_some());
        assert!(p.next_delay(1000, Duration::from_secs(59)).is_some());
        assert_eq!(p.next_delay(1000, DEFAULT_WAIT), None);
    }

    #[test]
    fn the_budget_saturates() {
        let p = RetryPolicy::new().delay(100 * MS).jitter(100 * MS);
        assert_eq!(p.budget(), DEFAULT_WAIT);
        assert_eq!(p.clone().attempts(10).budget(), 200 * MS * 9);
        assert_eq!(p.clone().max_wait(5 * MS).budget(), 5 * MS);
        let huge = RetryPolicy::new().delay(Duration::MAX).attempts(u32::MAX);
        assert_eq!(huge.budget(), Duration::MAX);
    }

    #[test]
    fn the_next_delay_stays_in_bounds_and_ends() {
        let p = RetryPolicy::new().attempts(3).delay(10 * MS).jitter(5 * MS);
        for made in 1..3 {
            let d = p.next_delay(made, Duration::ZERO).unwrap();
            assert!(d >= 10 * MS && d < 15 * MS, "{d:?}");
        }
        assert_eq!(p.next_delay(3, Duration::ZERO), None, "attempts spent");
        let timed = RetryPolicy::new()
            .max_wait(100 * MS)
            .delay(10 * MS)
            .jitter(Duration::ZERO);
        assert_eq!(timed.next_delay(50, 80 * MS), Some(10 * MS));
        assert_eq!(
            timed.next_delay(50, 95 * MS),
            None,
            "would end past max_wait"
        );
        let forever = RetryPolicy::new()
            .max_wait(Duration::MAX)
            .jitter(Duration::MAX);
        assert!(forever.next_delay(1_000, Duration::MAX / 2).is_some());
    }
}
