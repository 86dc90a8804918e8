//! The validity arithmetic: how long a granted lock is safe to use.
//!
//! All of it in [`Duration`]s with checked arithmetic, so no input can
//! underflow or overflow into a wrong answer.

use std::time::Duration;

/// The fixed part of the clock-drift allowance (Redis' expiry resolution is
/// about a millisecond, plus scheduling slack).
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The clock-drift allowance for a lock of `ttl`: `ttl * factor + 2 ms`.
///
/// Saturates at [`Duration::MAX`] rather than panicking, so a nonsense
/// factor can only make a TTL look too small, never produce a validity.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    let proportional =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).unwrap_or(Duration::MAX);
    proportional.saturating_add(DRIFT_FLOOR)
}

/// Safe time left after a round that took `elapsed`:
/// `ttl - elapsed - drift`, or `None` when that is not positive.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// Checks a TTL before any node is contacted.
pub(crate) fn check_ttl(
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

#[cfg(test)]
mod tests {
    use crate::redlock::validity::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), 102 * MS);
        assert_eq!(drift(Duration::ZERO, 0.01), 2 * MS);
        assert_eq!(drift(Duration::MAX, 2.0), Duration::MAX);
        assert_eq!(drift(Duration::from_secs(1), f64::NAN), Duration::MAX);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let ttl = Duration::from_secs(10);
        let d = drift(ttl, 0.01);
        assert_eq!(validity(ttl, 500 * MS, d), Some(ttl - 500 * MS - 102 * MS));
        assert_eq!(validity(ttl, ttl - d, d), None, "zero is not valid");
        assert_eq!(validity(ttl, ttl - d - MS, d), Some(MS));
        assert_eq!(validity(ttl, ttl * 3, d), None, "no underflow");
        assert_eq!(validity(ttl, Duration::MAX, Duration::MAX), None);
        assert_eq!(validity(MS, Duration::ZERO, d), None, "ttl below drift");
    }

    #[test]
    fn ttl_checks_before_any_node_is_contacted() {
        let max = Duration::from_secs(60);
        assert!(check_ttl(Duration::from_secs(10), max, 0.01).is_ok());
        assert!(
            check_ttl(max, max, 0.01).is_ok(),
            "max_ttl itself is allowed"
        );
        assert!(
            check_ttl(Duration::ZERO, max, 0.01)
                .unwrap_err()
                .contains("zero")
        );
        assert!(
            check_ttl(max + MS, max, 0.01)
                .unwrap_err()
                .contains("above max_ttl")
        );
        // 2 ms is exactly the drift floor: nothing would be left.
        assert!(check_ttl(2 * MS, max, 0.0).unwrap_err().contains("drift"));
        assert!(check_ttl(3 * MS, max, 0.0).is_ok());
        assert!(check_ttl(Duration::from_secs(1), max, f64::NAN).is_err());
    }
}
