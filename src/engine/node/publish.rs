//! What a node's state tells the world: the vitals `health()` reads, the
//! metrics, and the log lines, for the changes its machines decide
//! (liveness in `liveness.rs`, the identity's verdicts in `identity.rs`).
//!
//! The identity's verdicts (quarantined until when, the same server as
//! which other node, answering without an identity, a replica) and the
//! server's eviction settings are judged for every batch; [`Announced`]
//! remembers what was last announced, so the shared status is written
//! (under its lock) and a line is logged only when something changed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::identity::{Identity, Standing};
use super::rights::Refused;
use super::vitals::Vitals;
use crate::backend::BackendError;

/// One node's published status, and what was last announced of it.
pub(super) struct Publisher {
    name: String,
    health: Arc<Vitals>,
    announced: Announced,
    /// A cluster node's quarantine as last published (`shards`).
    shards_until: Option<Instant>,
    /// The replicas that confirmed the last hold, as last published
    /// (`confirming`).
    confirming: Option<usize>,
}

impl Publisher {
    pub(super) fn new(name: String, health: Arc<Vitals>) -> Self {
        crate::metrics::node_up(&name, true);
        Self {
            name,
            health,
            announced: Announced::default(),
            shards_until: None,
            confirming: None,
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

    /// Every operation of a round trip was refused, node-wide, for
    /// `error`: not voting until it serves again.
    pub(super) fn refusing(&self, error: BackendError) {
        log::warn!(
            "quorum-lock: node {} refuses every operation ({error}): it does not count as \
             voting until that is fixed; asking it again every {:?}",
            self.name,
            super::refusal::RECHECK
        );
        self.health.update(|s| s.refusing = Some(error));
    }

    /// A node that refused every operation serves again.
    pub(super) fn serving_again(&self) {
        log::info!("quorum-lock: node {} serves again", self.name);
        self.health.update(|s| s.refusing = None);
    }

    /// Its access rules refuse what locks need, on the crate's own keys
    /// (see `rights.rs`): not voting until a try finds them let through.
    pub(super) fn refuses_locks(&self, refused: Refused) {
        let ops: Vec<String> = refused.ops.iter().map(ToString::to_string).collect();
        log::warn!(
            "quorum-lock: node {} refuses what locks need ({}) on the manager's own keys: {}; \
             every lock rests on the other nodes, and it does not count as voting until that \
             is fixed; trying it again every {:?}",
            self.name,
            ops.join(", "),
            refused.error.reason(&self.name),
            super::rights::RETRY
        );
        self.health
            .update(|s| s.refuses_locks = Some((refused.ops, refused.error)));
    }

    /// A node that refused what locks need lets every one through again.
    pub(super) fn serves_locks_again(&self) {
        log::info!(
            "quorum-lock: node {} lets what locks need through again: it votes",
            self.name
        );
        self.health.update(|s| s.refuses_locks = None);
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

    /// Publishes a cluster node's standing for `health()`: until when the
    /// last of its quarantined shards is (`None`: none), written only when
    /// it changed (each shard's quarantine is logged when it begins), and
    /// the evicting setting of a shard that may evict, if one may.
    pub(super) fn shards(
        &mut self,
        quarantined_until: Option<Instant>,
        eviction: Option<&str>,
        accept_eviction: bool,
    ) {
        self.eviction(eviction, accept_eviction);
        if self.shards_until == quarantined_until {
            return;
        }
        self.shards_until = quarantined_until;
        crate::metrics::node_quarantined(&self.name, quarantined_until.is_some());
        self.health
            .update(|s| s.quarantined_until = quarantined_until);
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
        self.eviction(identity.eviction(), accept_eviction);
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

    /// Publishes how many replicas confirmed the holds of a batch (`None`:
    /// the batch had no hold, nothing changes), and warns when a node
    /// whose holds replicas confirm has none.
    pub(super) fn confirming(&mut self, replicas: Option<usize>) {
        let Some(replicas) = replicas else {
            return;
        };
        if self.confirming == Some(replicas) {
            return;
        }
        if replicas == 0 {
            log::warn!(
                "quorum-lock: node {}: no replica confirms its holds: they are only as safe as \
                 a plain server's",
                self.name
            );
        }
        self.confirming = Some(replicas);
        self.health
            .update(|s| s.confirming_replicas = Some(replicas));
    }

    /// Publishes the server's eviction settings for `health()` and warns
    /// once when they appear.
    fn eviction(&mut self, setting: Option<&str>, accept_eviction: bool) {
        let Some(eviction) = self.announced.eviction(setting) else {
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

/// The identity's verdicts on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Verdict {
    /// Quarantined until then (on the manager's clock).
    quarantined_until: Option<Instant>,
    /// The same server as this node, which votes for both.
    duplicate_of: Option<usize>,
    /// Answered without a server identity (quarantine on).
    unidentified: bool,
    /// The server said it is a replica.
    replica: bool,
}

/// What changed with one batch's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct News {
    /// The verdict to publish, when it changed.
    publish: Option<Verdict>,
    /// Newly quarantined, for this long.
    quarantined_for: Option<Duration>,
    /// The quarantine is over: clear it in the identity too.
    quarantine_over: bool,
    /// Newly found to be the same server as this node.
    duplicate_of: Option<usize>,
    /// Newly answering without an identity.
    unidentified: bool,
}

/// What was last announced about one node.
#[derive(Debug, Default)]
struct Announced {
    verdict: Verdict,
    eviction: Option<String>,
}

impl Announced {
    /// The news in `verdict`, judged `standing` for the batch.
    fn verdict(&mut self, verdict: Verdict, standing: Standing) -> News {
        let was = self.verdict;
        let quarantine_over = was.quarantined_until.is_some() && standing == Standing::Voting;
        if verdict == was && !quarantine_over {
            return News::default();
        }
        let mut news = News {
            quarantined_for: match standing {
                Standing::Quarantined(left)
                    if verdict.quarantined_until != was.quarantined_until =>
                {
                    Some(left)
                }
                _ => None,
            },
            duplicate_of: verdict
                .duplicate_of
                .filter(|_| verdict.duplicate_of != was.duplicate_of),
            unidentified: verdict.unidentified && !was.unidentified,
            ..News::default()
        };
        let mut published = verdict;
        // Over only when nothing new replaced it in this same batch.
        if quarantine_over && verdict.quarantined_until == was.quarantined_until {
            published.quarantined_until = None;
            news.quarantine_over = true;
        }
        self.verdict = published;
        news.publish = Some(published);
        news
    }

    /// The server's eviction settings, when they changed since the last
    /// announcement: `Some(new)` (itself `None` when they are gone).
    fn eviction(&mut self, eviction: Option<&str>) -> Option<Option<String>> {
        if eviction == self.eviction.as_deref() {
            return None;
        }
        self.eviction = eviction.map(str::to_owned);
        Some(self.eviction.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quarantined(until: Instant) -> Verdict {
        Verdict {
            quarantined_until: Some(until),
            ..Verdict::default()
        }
    }

    #[test]
    fn a_quarantine_is_announced_once_and_its_end_once() {
        let until = Instant::now() + Duration::from_secs(60);
        let mut announced = Announced::default();
        let left = Duration::from_secs(60);
        let news = announced.verdict(quarantined(until), Standing::Quarantined(left));
        assert_eq!(news.quarantined_for, Some(left));
        assert_eq!(news.publish, Some(quarantined(until)));
        let again = announced.verdict(quarantined(until), Standing::Quarantined(left / 2));
        assert_eq!(
            again,
            News::default(),
            "nothing new: nothing written, nothing logged"
        );
        let over = announced.verdict(quarantined(until), Standing::Voting);
        assert!(over.quarantine_over);
        assert_eq!(over.publish, Some(Verdict::default()), "published as over");
        assert_eq!(over.quarantined_for, None);
        let after = announced.verdict(Verdict::default(), Standing::Voting);
        assert_eq!(after, News::default());
    }

    #[test]
    fn a_duplicate_and_a_missing_identity_are_news_only_when_they_appear() {
        let mut announced = Announced::default();
        let duplicate = Verdict {
            duplicate_of: Some(1),
            ..Verdict::default()
        };
        let news = announced.verdict(duplicate, Standing::DuplicateOf(1));
        assert_eq!(news.duplicate_of, Some(1));
        assert_eq!(
            announced.verdict(duplicate, Standing::DuplicateOf(1)),
            News::default()
        );
        let unidentified = Verdict {
            unidentified: true,
            ..Verdict::default()
        };
        let news = announced.verdict(unidentified, Standing::Unverified);
        assert!(news.unidentified && news.duplicate_of.is_none());
        assert_eq!(news.publish, Some(unidentified));
        let news = announced.verdict(unidentified, Standing::Unverified);
        assert_eq!(news, News::default());
    }

    #[test]
    fn eviction_settings_are_news_when_they_change() {
        let mut announced = Announced::default();
        assert_eq!(announced.eviction(None), None);
        let policy = "maxmemory 4194304, maxmemory-policy allkeys-lru";
        assert_eq!(
            announced.eviction(Some(policy)),
            Some(Some(policy.to_owned()))
        );
        assert_eq!(announced.eviction(Some(policy)), None);
        assert_eq!(announced.eviction(None), Some(None));
    }
}
