//! What a node's state tells the world: the vitals `health()` reads, the
//! metrics, and the log lines, for the changes its machines decide
//! (liveness in `liveness.rs`, the identity's verdicts in `announce.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::backend::BackendError;
use crate::engine::announce::{Announced, Verdict};
use crate::engine::health::Vitals;
use crate::engine::identity::{Identity, Standing};

/// One node's published status, and what was last announced of it.
pub(super) struct Publisher {
    name: String,
    health: Arc<Vitals>,
    announced: Announced,
}

impl Publisher {
    pub(super) fn new(name: String, health: Arc<Vitals>) -> Self {
        crate::metrics::node_up(&name, true);
        Self {
            name,
            health,
            announced: Announced::default(),
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn vitals(&self) -> &Vitals {
        &self.health
    }

    /// Marked down after `failures` failed round trips.
    pub(super) fn went_down(
        &self,
        failures: u32,
        since: Instant,
        probe_at: Instant,
        cause: Option<&BackendError>,
    ) {
        self.health.down.store(true, Ordering::Release);
        crate::metrics::node_up(&self.name, false);
        self.health.update(|s| {
            s.down_since = Some(since);
            s.next_probe = Some(probe_at);
        });
        log::warn!(
            "quorum-lock: node {} marked down after {failures} failed round trips: {}; \
             probing it in the background",
            self.name,
            cause.map_or_else(String::new, ToString::to_string)
        );
    }

    /// A probe failed.
    pub(super) fn still_down(&self, backoff: Duration, probe_at: Instant) {
        self.health.update(|s| s.next_probe = Some(probe_at));
        log::debug!(
            "quorum-lock: node {} still down; next probe in {backoff:?}",
            self.name
        );
    }

    /// Back up after `down_for`, with `pending` releases to send and
    /// `dropped` dropped unsent.
    pub(super) fn came_up(&self, down_for: Duration, pending: usize, dropped: usize) {
        self.health.down.store(false, Ordering::Release);
        crate::metrics::node_up(&self.name, true);
        self.health.update(|s| {
            s.down_since = None;
            s.next_probe = None;
        });
        let releases = match (pending, dropped) {
            (0, 0) => String::new(),
            (_, 0) => format!("; sending {pending} pending releases"),
            _ => format!(
                "; sending {pending} pending releases, {dropped} dropped unsent: kept \
                 longer than max_ttl, their keys have expired by now"
            ),
        };
        log::info!(
            "quorum-lock: node {} is back up after {down_for:?} down{releases}",
            self.name,
        );
    }

    /// Publishes the identity's verdict for `health()` snapshots and logs
    /// its changes (quarantine entered or over, duplicate found); `names`
    /// names the other nodes.
    pub(super) fn identity(
        &mut self,
        standing: Standing,
        identity: &mut Identity,
        names: &[String],
        accept_eviction: bool,
    ) {
        self.eviction(identity, accept_eviction);
        let verdict = Verdict {
            quarantined_until: identity.quarantined_until(),
            duplicate_of: identity.duplicate_of(),
            unidentified: standing == Standing::Unverified,
            replica: identity.is_replica(),
        };
        // Called after every batch: the shared status is written (under its
        // lock) only when something changed.
        let news = self.announced.verdict(verdict, standing);
        if let Some(published) = news.publish {
            crate::metrics::node_quarantined(&self.name, published.quarantined_until.is_some());
            self.health.update(|s| {
                s.quarantined_until = published.quarantined_until;
                s.duplicate_of = published.duplicate_of;
                s.unidentified = published.unidentified;
                s.replica = published.replica;
            });
        }
        let name = &self.name;
        if let Some(left) = news.quarantined_for {
            log::info!(
                "quorum-lock: node {name} quarantined for {left:?}: {} and may have forgotten \
                 locks",
                identity.quarantine_reason()
            );
        }
        if news.quarantine_over {
            identity.clear_quarantine();
            log::info!("quorum-lock: node {name}'s quarantine is over: its grants count again");
        }
        if let Some(owner) = news.duplicate_of {
            let other = names.get(owner).map_or("?", String::as_str);
            log::warn!(
                "quorum-lock: node {name} is the same server as {other} (same run id): \
                 only {other} votes"
            );
        }
        if news.unidentified {
            log::warn!(
                "quorum-lock: node {name} answered without a server identity (run_id): with \
                 restart quarantine on, its grants do not count"
            );
        }
    }

    /// Publishes the server's eviction settings for `health()` and warns
    /// once when they appear.
    fn eviction(&mut self, identity: &Identity, accept_eviction: bool) {
        let Some(eviction) = self.announced.eviction(identity.eviction()) else {
            return;
        };
        if let Some(setting) = &eviction {
            let verdict = if accept_eviction {
                "its grants count because the manager accepts the eviction risk"
            } else {
                "its grants do not count (set maxmemory-policy noeviction, or accept the \
                 risk with LockManagerBuilder::accept_eviction_risk)"
            };
            log::warn!(
                "quorum-lock: node {} may evict lock keys ({setting}): {verdict}",
                self.name
            );
        }
        self.health.update(|s| s.eviction = eviction);
    }
}
