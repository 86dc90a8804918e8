//! Whether a node is up or down, as its round trips say: a small state
//! machine that takes the time as an argument, so its tests need no
//! sleeping.
//!
//! Up, a node is sent every operation. After [`DOWN_AFTER`] round trips in
//! a row that reached nothing (every operation failed with a connectivity
//! error) it is marked down: rounds skip it at no cost, and its thread
//! probes it at `probe_at`, backing off from [`FIRST_BACKOFF`] to
//! [`MAX_BACKOFF`]. Any answer from the server (a probe, or a round trip
//! with one reply) brings it back up.
//!
//! The times are real time (`Instant::now()` in the worker): whether a
//! server answers is a matter of the network, not of lock validity, which
//! is what the manager's injected clock is for.

use std::time::{Duration, Instant};

/// Consecutive failed round trips (all connectivity errors) before a node is
/// marked down.
pub(super) const DOWN_AFTER: u32 = 2;
/// First wait before probing a down node again (it doubles up to a bound).
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait before probing a down node again.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// A node's liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    /// Sent every operation; `failures` round trips in a row reached
    /// nothing.
    Up { failures: u32 },
    /// Skipped; probed at `probe_at`, the wait before that having been
    /// `backoff`.
    Down {
        since: Instant,
        backoff: Duration,
        probe_at: Instant,
    },
}

/// A change the worker must publish and log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// Marked down after `failures` failed round trips; first probe at
    /// `probe_at`.
    WentDown {
        failures: u32,
        since: Instant,
        probe_at: Instant,
    },
    /// A probe failed: the next one is at `probe_at`, `backoff` later.
    StillDown {
        backoff: Duration,
        probe_at: Instant,
    },
    /// Back up, after being down since `since`.
    CameUp { since: Instant },
}

impl Default for Liveness {
    fn default() -> Self {
        Self::Up { failures: 0 }
    }
}

impl Liveness {
    pub(super) fn is_down(&self) -> bool {
        matches!(self, Self::Down { .. })
    }

    /// When the next probe is due, while down.
    pub(super) fn probe_at(&self) -> Option<Instant> {
        match *self {
            Self::Down { probe_at, .. } => Some(probe_at),
            Self::Up { .. } => None,
        }
    }

    /// Whether a probe is due at `now`.
    pub(super) fn probe_due(&self, now: Instant) -> bool {
        self.probe_at().is_some_and(|at| now >= at)
    }

    /// A round trip that `reached` the server (at least one answer) or not.
    pub(super) fn on_round_trip(&mut self, reached: bool, now: Instant) -> Option<Change> {
        if reached {
            return self.come_up();
        }
        let Self::Up { failures } = self else {
            return None; // already down: the probes decide
        };
        *failures = failures.saturating_add(1);
        if *failures < DOWN_AFTER {
            return None;
        }
        let (failures, probe_at) = (*failures, now + FIRST_BACKOFF);
        *self = Self::Down {
            since: now,
            backoff: FIRST_BACKOFF,
            probe_at,
        };
        Some(Change::WentDown {
            failures,
            since: now,
            probe_at,
        })
    }

    /// A probe's outcome: `healthy` when the server answered.
    pub(super) fn on_probe(&mut self, healthy: bool, now: Instant) -> Option<Change> {
        if healthy {
            return self.come_up();
        }
        let Self::Down {
            backoff, probe_at, ..
        } = self
        else {
            return None;
        };
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        *probe_at = now + *backoff;
        Some(Change::StillDown {
            backoff: *backoff,
            probe_at: *probe_at,
        })
    }

    fn come_up(&mut self) -> Option<Change> {
        let was = std::mem::take(self);
        match was {
            Self::Down { since, .. } => Some(Change::CameUp { since }),
            Self::Up { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_two_failed_round_trips_then_probed_with_backoff_and_back_up() {
        let t0 = Instant::now();
        let mut node = Liveness::default();
        assert_eq!(
            node.on_round_trip(false, t0),
            None,
            "one failure is not enough"
        );
        let down = node.on_round_trip(false, t0);
        assert_eq!(
            down,
            Some(Change::WentDown {
                failures: 2,
                since: t0,
                probe_at: t0 + FIRST_BACKOFF
            })
        );
        assert!(node.is_down());
        assert!(!node.probe_due(t0));
        assert!(node.probe_due(t0 + FIRST_BACKOFF));
        // Each failed probe doubles the wait, up to the bound.
        let mut now = t0 + FIRST_BACKOFF;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let Some(Change::StillDown { backoff, probe_at }) = node.on_probe(false, now) else {
                panic!("a failed probe keeps it down");
            };
            assert_eq!(probe_at, now + backoff);
            waits.push(backoff.as_millis());
            now = probe_at;
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(node.on_probe(true, now), Some(Change::CameUp { since: t0 }));
        assert_eq!(node, Liveness::Up { failures: 0 });
        // Up again, the count and the backoff start over.
        assert_eq!(node.on_round_trip(false, now), None);
        let Some(Change::WentDown { probe_at, .. }) = node.on_round_trip(false, now) else {
            panic!("down again");
        };
        assert_eq!(probe_at, now + FIRST_BACKOFF);
    }

    #[test]
    fn any_answer_resets_the_failures_and_a_down_node_ignores_round_trips() {
        let t0 = Instant::now();
        let mut node = Liveness::default();
        node.on_round_trip(false, t0);
        assert_eq!(node.on_round_trip(true, t0), None);
        assert_eq!(
            node.on_round_trip(false, t0),
            None,
            "the count started over"
        );
        node.on_round_trip(false, t0);
        assert!(node.is_down());
        let before = node;
        assert_eq!(node.on_round_trip(false, t0), None);
        assert_eq!(node, before, "only probes and answers move a down node");
        assert_eq!(
            node.on_round_trip(true, t0),
            Some(Change::CameUp { since: t0 }),
            "an answer brings it back at once"
        );
    }
}
