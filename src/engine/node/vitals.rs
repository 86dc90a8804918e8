//! A node's vitals as callers see them: down or up, smoothed round-trip
//! time, counters and the last error (for `LockManager::health`), and the
//! releases kept for a node that could not take them yet.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::retries::{RetryRelease, push_bounded};
use crate::backend::BackendError;
use crate::engine::hold::Hold;
use crate::health::{LockOp, NodeHealth, NodeState};
use crate::token::Token;

/// The node's vitals. The down flag is read on every round; the rest only
/// by `health()` snapshots, so it is written without any coordination
/// beyond atomics and one short lock.
#[derive(Debug, Default)]
pub(crate) struct Vitals {
    pub(super) down: AtomicBool,
    /// Smoothed time of a round trip to this node, in nanoseconds.
    latency_ns: AtomicU64,
    /// Releases for this node while it is down, kept without waking its
    /// thread or trying to connect; sent once it is back (see
    /// [`Vitals::park`]).
    pub(super) parked: Mutex<VecDeque<RetryRelease>>,
    operations: AtomicU64,
    failures: AtomicU64,
    timeouts: AtomicU64,
    abandoned: AtomicU64,
    /// Releases the worker keeps for retry (published by the worker).
    retrying: AtomicU64,
    status: Mutex<Status>,
}

/// What a snapshot reports besides the counters.
#[derive(Debug, Default, Clone)]
pub(super) struct Status {
    pub(super) last_error: Option<BackendError>,
    /// Real time: when it was marked down, and when the next probe is due.
    pub(super) down_since: Option<Instant>,
    /// Every operation of its last round trip was refused, node-wide.
    pub(super) refusing: Option<BackendError>,
    /// The operations every lock needs that its access rules refuse on
    /// the crate's own keys (see `rights.rs`), with the first refusal.
    pub(super) refuses_locks: Option<(Vec<LockOp>, BackendError)>,
    pub(super) next_probe: Option<Instant>,
    /// On the manager's clock.
    pub(super) quarantined_until: Option<Instant>,
    pub(super) duplicate_of: Option<usize>,
    pub(super) unidentified: bool,
    /// The server said it is a replica.
    pub(super) replica: bool,
    /// The settings that let the server evict lock keys, if it has them.
    pub(super) eviction: Option<String>,
    /// The fewest replicas that confirmed a hold, on a node whose holds
    /// its replicas confirm (a cluster, a Sentinel node).
    pub(super) confirming_replicas: Option<usize>,
}

impl Vitals {
    /// Whether the node is marked down: acquires and extends skip it.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// The smoothed round-trip time (zero before the first one).
    pub(crate) fn latency(&self) -> u64 {
        self.latency_ns.load(Ordering::Relaxed)
    }

    /// Keeps a release for a node that is down: no thread wake-up, no
    /// connection attempt; the worker sends it once a probe finds the node
    /// back. Returns `false` if the node came back meanwhile (the caller
    /// then queues the release as usual; a second release is harmless).
    pub(crate) fn park(&self, hold: &Hold, token: Token) -> bool {
        if push_bounded(&mut self.parked.lock(), hold, token, Instant::now()) {
            self.note_abandoned(1);
        }
        self.is_down()
    }

    /// Folds one round trip's time into the average (weight 1/4, so a node
    /// that just stalled stops looking fast at once).
    pub(super) fn note_latency(&self, took: Duration) {
        let sample = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let old = self.latency_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            old - old / 4 + sample / 4
        };
        self.latency_ns.store(new, Ordering::Relaxed);
    }

    /// Counts one batch's results; remembers the last error.
    pub(super) fn note_results(&self, results: &[Result<crate::backend::Reply, BackendError>]) {
        self.operations
            .fetch_add(results.len() as u64, Ordering::Relaxed);
        let mut last = None;
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            if e.kind() == crate::backend::BackendErrorKind::Timeout {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            last = Some(e);
        }
        if let Some(e) = last {
            self.status.lock().last_error = Some(e.clone());
        }
    }

    pub(super) fn note_abandoned(&self, n: u64) {
        self.abandoned.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn note_retrying(&self, n: usize) {
        self.retrying.store(n as u64, Ordering::Relaxed);
    }

    /// Changes the published status under its lock.
    pub(super) fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock());
    }

    /// The snapshot of this node named `name`, at `now` (real time) and
    /// `clock_now` (the manager's clock), with duplicates named by `names`.
    pub(crate) fn snapshot(
        &self,
        name: &str,
        names: &[String],
        now: Instant,
        clock_now: Instant,
        accept_eviction: bool,
    ) -> NodeHealth {
        let status = self.status.lock().clone();
        let state = if self.is_down() {
            NodeState::Down {
                since: status
                    .down_since
                    .map_or(Duration::ZERO, |at| now.saturating_duration_since(at)),
                next_probe_in: status
                    .next_probe
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
            }
        } else if let Some(error) = status.refusing.clone() {
            NodeState::Unusable {
                kind: error.kind(),
                reason: error.to_string(),
            }
        } else if let Some((ops, error)) = status.refuses_locks.clone() {
            NodeState::Refuses {
                ops,
                reason: error.reason(name),
            }
        } else if let Some(owner) = status.duplicate_of {
            NodeState::DuplicateOf(names.get(owner).cloned().unwrap_or_default())
        } else if status.unidentified {
            NodeState::Unidentified
        } else if status.replica {
            NodeState::Replica
        } else if let Some(setting) = status.eviction.clone().filter(|_| !accept_eviction) {
            NodeState::MayEvict { setting }
        } else {
            match status.quarantined_until {
                Some(until) if until > clock_now => NodeState::Quarantined {
                    remaining: until - clock_now,
                },
                _ => NodeState::Up,
            }
        };
        let latency = self.latency();
        let waiting = self.parked.lock().len() as u64 + self.retrying.load(Ordering::Relaxed);
        NodeHealth {
            name: name.to_owned(),
            state,
            round_trip: (latency > 0).then(|| Duration::from_nanos(latency)),
            last_error: status.last_error,
            operations: self.operations.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            releases_waiting: usize::try_from(waiting).unwrap_or(usize::MAX),
            releases_abandoned: self.abandoned.load(Ordering::Relaxed),
            eviction: status.eviction,
            confirming_replicas: status.confirming_replicas,
        }
    }
}
