//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the
//! `metrics` feature: the program installs a recorder (Prometheus, StatsD,
//! ...) and gets what `health()` counts, plus timings. Without the feature
//! every function here is empty and inlined away, and a call's timing
//! ([`Stopwatch`]) reads no clock: no cost.
//!
//! The names and labels are listed in docs/operations.md; the counters are
//! the [`LockCounters`](crate::health::LockCounters) of `health()`, counted at the
//! same places.

use std::time::Duration;
#[cfg(feature = "metrics")]
use std::time::Instant;

/// When a call that takes a lock began, for [`acquire`]'s timing. The
/// clock is read only with the feature: a time passed as an argument is
/// read even when the function it goes to is empty (two reads per lock,
/// counted with callgrind).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch {
    #[cfg(feature = "metrics")]
    started: Instant,
}

impl Stopwatch {
    /// Starts timing now (with the feature).
    #[inline]
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            started: Instant::now(),
        }
    }
}

/// A counter of `health()`'s [`LockCounters`](crate::health::LockCounters),
/// by its field name.
#[inline]
pub(crate) fn count(field: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(format!("quorum_lock_{field}_total")).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = field;
}

/// How a call that takes a lock ended (`acquired`, `contended`,
/// `no_quorum`, `validity_expired`, `cancelled`, `deadlock`, `invalid`,
/// `error`), how long it waited (since `started`) and how many rounds it
/// made.
#[inline]
pub(crate) fn acquire(outcome: &'static str, started: Stopwatch, attempts: u32) {
    #[cfg(feature = "metrics")]
    {
        metrics::histogram!("quorum_lock_acquire_seconds", "outcome" => outcome)
            .record(started.started.elapsed().as_secs_f64());
        metrics::counter!("quorum_lock_acquire_attempts_total", "outcome" => outcome)
            .increment(u64::from(attempts));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (outcome, started, attempts);
}

/// How long a guard was held (from the guard's creation to its end). Only
/// with the feature: the guard keeps its creation time only then.
#[cfg(feature = "metrics")]
#[inline]
pub(crate) fn held(for_: Duration) {
    metrics::histogram!("quorum_lock_hold_seconds").record(for_.as_secs_f64());
}

/// One round trip to `node` (its name as `health()` gives it, never a
/// credential).
#[inline]
pub(crate) fn round_trip(node: &str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("quorum_lock_node_round_trip_seconds", "node" => node.to_owned())
        .record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (node, took);
}

/// Whether `node` is up (1) or marked down (0).
#[inline]
pub(crate) fn node_up(node: &str, up: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("quorum_lock_node_up", "node" => node.to_owned()).set(f64::from(u8::from(up)));
    #[cfg(not(feature = "metrics"))]
    let _ = (node, up);
}

/// Whether `node`'s grants are held back by restart quarantine (1) or
/// not (0).
#[inline]
pub(crate) fn node_quarantined(node: &str, quarantined: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("quorum_lock_node_quarantined", "node" => node.to_owned())
        .set(f64::from(u8::from(quarantined)));
    #[cfg(not(feature = "metrics"))]
    let _ = (node, quarantined);
}
