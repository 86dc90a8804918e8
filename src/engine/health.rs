//! A node's health as callers see it (down or up, smoothed round-trip
//! time), and the releases kept for a node that could not take them yet.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::token::Token;

/// Most releases kept for retry per node; beyond that the oldest are left
/// to expire with their TTL.
const MAX_RELEASE_RETRIES: usize = 10_000;

/// The node's health as the callers see it: one flag, read on every round.
#[derive(Debug, Default)]
pub(crate) struct Health {
    pub(super) down: AtomicBool,
    /// Smoothed time of a round trip to this node, in nanoseconds.
    latency_ns: AtomicU64,
    /// Releases for this node while it is down, kept without waking its
    /// thread or trying to connect; sent once it is back (see
    /// [`Health::park`]).
    pub(super) parked: Mutex<VecDeque<RetryRelease>>,
}

impl Health {
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
    pub(crate) fn park(&self, key: &Arc<[u8]>, token: Token) -> bool {
        RetryRelease::push(&mut self.parked.lock(), key, token);
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
}

/// A release that did not reach the node (it failed, or the node was
/// down): it may be needed to undo an acquire that still sits in the
/// node's socket (a frozen server runs it when it wakes up), so it is sent
/// again until the key must have expired.
#[derive(Debug)]
pub(super) struct RetryRelease {
    pub(super) key: Arc<[u8]>,
    pub(super) token: Token,
    /// When the release was first due; it is dropped once
    /// [`Shared::release_retry_window`] has passed since.
    pub(super) since: Instant,
}

impl RetryRelease {
    /// Appends a release to `list`, dropping the oldest beyond
    /// [`MAX_RELEASE_RETRIES`] (they expire with their TTL).
    pub(super) fn push(list: &mut VecDeque<RetryRelease>, key: &Arc<[u8]>, token: Token) {
        if list.len() >= MAX_RELEASE_RETRIES {
            list.pop_front();
        }
        list.push_back(RetryRelease {
            key: Arc::clone(key),
            token,
            since: Instant::now(),
        });
    }
}
