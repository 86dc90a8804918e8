//! A node's upkeep between rounds: marking it down after failed round
//! trips and back up when a probe answers, releases kept for retry, and
//! publishing (and logging) what its identity says, for `health()`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::health::RetryRelease;
use super::identity::Standing;
use super::worker::{FIRST_BACKOFF, RELEASE_RETRY_EVERY, Worker};
use crate::backend::{BackendError, BackendErrorKind, Op, Reply, ServerInfo};
use crate::token::Token;

/// Whether a release that failed with `error` may still be needed: every
/// error but `WRONGTYPE`, which says the key holds something that is not a
/// lock (so not ours). Retrying is bounded by `max_ttl` after which the key
/// has expired anyway.
fn release_outcome_unknown(error: &BackendError) -> bool {
    error.kind() != BackendErrorKind::WrongType
}

/// Consecutive failed round trips (all connectivity errors) before a node is
/// marked down.
const DOWN_AFTER: u32 = 2;
/// Longest wait before probing a down node again.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

impl Worker {
    /// Keeps a release whose outcome is unknown for another try: any
    /// error (a timeout, a connection reset mid-request, `LOADING`, `BUSY`,
    /// a script error, an ACL refusal that an operator may fix) leaves the
    /// acquire it undoes possibly in place.
    pub(super) fn keep_for_retry(
        &mut self,
        key: &Arc<[u8]>,
        token: Token,
        result: &Result<Reply, BackendError>,
    ) {
        if result.as_ref().is_err_and(release_outcome_unknown) {
            self.keep(key, token);
        }
    }

    /// Adds a release to the retry list (bounded: the oldest go first).
    pub(super) fn keep(&mut self, key: &Arc<[u8]>, token: Token) {
        if RetryRelease::push(&mut self.retries, key, token) {
            self.health.note_abandoned(1);
        }
        self.health.note_retrying(self.retries.len());
    }

    /// Sends the pending releases again, as one batch; keeps those that
    /// still cannot reach the node and have not expired.
    pub(super) fn retry_releases(&mut self) {
        let now = Instant::now();
        let window = self.shared.release_retry_window;
        let before = self.retries.len();
        self.retries.retain(|r| r.since + window > now);
        let expired = before - self.retries.len();
        if expired > 0 {
            self.health.note_abandoned(expired as u64);
            log::warn!(
                "quorum-lock: node {}: gave up on {expired} releases it could not take within \
                 max_ttl; their keys have expired by now",
                self.name()
            );
        }
        self.health.note_retrying(self.retries.len());
        if self.retries.is_empty() {
            return;
        }
        log::debug!(
            "quorum-lock: node {}: retrying {} releases",
            self.name(),
            self.retries.len()
        );
        let ops: Vec<Op<'_>> = self
            .retries
            .iter()
            .map(|r| Op::Release {
                key: &r.key,
                token: r.token.as_bytes(),
            })
            .collect();
        let (results, _) = self.call_backend(&ops);
        self.note_health(&results);
        let mut results = results.into_iter();
        self.retries.retain(|_| {
            results
                .next()
                .is_some_and(|r| r.as_ref().is_err_and(release_outcome_unknown))
        });
        self.health.note_retrying(self.retries.len());
    }

    /// A round trip in which every op failed to reach the server counts
    /// towards marking the node down; any answer from the server resets it.
    pub(super) fn note_health(&mut self, results: &[Result<Reply, BackendError>]) {
        self.health.note_results(results);
        let unreachable = results
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.kind().is_connectivity()));
        if !unreachable {
            self.mark_up();
            return;
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures >= DOWN_AFTER && self.probe_at.is_none() {
            let now = Instant::now();
            let probe_at = now + self.backoff;
            self.health.down.store(true, Ordering::Release);
            self.probe_at = Some(probe_at);
            self.health.update(|s| {
                s.down_since = Some(now);
                s.next_probe = Some(probe_at);
            });
            let cause = results.iter().find_map(|r| r.as_ref().err());
            log::warn!(
                "quorum-lock: node {} marked down after {} failed round trips: {}; \
                 probing it in the background",
                self.name(),
                self.failures,
                cause.map_or_else(String::new, ToString::to_string)
            );
        }
    }

    pub(super) fn probe(&mut self) {
        let backend = &self.backend;
        let healthy = matches!(
            catch_unwind(AssertUnwindSafe(|| backend.server_info())),
            Ok(Ok(_))
        );
        if healthy {
            self.mark_up();
        } else {
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            let probe_at = Instant::now() + self.backoff;
            self.probe_at = Some(probe_at);
            self.health.update(|s| s.next_probe = Some(probe_at));
            log::debug!(
                "quorum-lock: node {} still down; next probe in {:?}",
                self.name(),
                self.backoff
            );
        }
    }

    pub(super) fn mark_up(&mut self) {
        self.failures = 0;
        self.backoff = FIRST_BACKOFF;
        if self.probe_at.take().is_some() {
            self.health.down.store(false, Ordering::Release);
            let mut since = None;
            self.health.update(|s| {
                since = s.down_since.take();
                s.next_probe = None;
            });
            // The releases parked while down go out with the next retry,
            // after whatever is already queued (an acquire queued before
            // the node went down runs first, then its release).
            let parked = std::mem::take(&mut *self.health.parked.lock());
            log::info!(
                "quorum-lock: node {} is back up after {:?} down; sending {} parked releases",
                self.name(),
                since.map(|at| at.elapsed()).unwrap_or_default(),
                parked.len()
            );
            self.retries.extend(parked);
            self.health.note_retrying(self.retries.len());
            self.retry_at = Instant::now() + RELEASE_RETRY_EVERY;
        }
    }

    pub(super) fn name(&self) -> &str {
        self.shared
            .names
            .get(self.index)
            .map_or("?", String::as_str)
    }

    /// Publishes the identity's verdict for `health()` snapshots and logs
    /// its changes (quarantine entered or over, duplicate found).
    pub(super) fn publish_identity(&mut self, standing: Standing) {
        self.publish_eviction();
        let until = self.identity.quarantined_until();
        let duplicate = self.identity.duplicate_of();
        let unidentified = standing == Standing::Unverified;
        let (was_until, was_duplicate, was_unidentified) = self.published;
        let quarantine_over = was_until.is_some() && standing == Standing::Voting;
        // Called after every batch: the shared status is written (under its
        // lock) only when something changed.
        if (until, duplicate, unidentified) == self.published && !quarantine_over {
            return;
        }
        self.published = (until, duplicate, unidentified);
        self.health.update(|s| {
            s.quarantined_until = until;
            s.duplicate_of = duplicate;
            s.unidentified = unidentified;
        });
        let name = self.name().to_owned();
        if until != was_until
            && let Standing::Quarantined(left) = standing
        {
            log::info!(
                "quorum-lock: node {name} quarantined for {left:?}: its server started or \
                 restarted less than max_ttl + drift ago and may have forgotten locks"
            );
        }
        if quarantine_over && until == was_until {
            self.health.update(|s| s.quarantined_until = None);
            self.identity.clear_quarantine();
            self.published.0 = None;
            log::info!("quorum-lock: node {name}'s quarantine is over: its grants count again");
        }
        if duplicate != was_duplicate
            && let Some(owner) = duplicate
        {
            let other = self.shared.names.get(owner).map_or("?", String::as_str);
            log::warn!(
                "quorum-lock: node {name} is the same server as {other} (same run id): \
                 only {other} votes"
            );
        }
        if unidentified && !was_unidentified {
            log::warn!(
                "quorum-lock: node {name} answered without a server identity (run_id): with \
                 restart quarantine on, its grants do not count"
            );
        }
    }

    /// Publishes the server's eviction settings for `health()` and warns
    /// once when they appear.
    fn publish_eviction(&mut self) {
        let eviction = self.identity.eviction();
        if eviction == self.published_eviction.as_deref() {
            return;
        }
        let eviction = eviction.map(str::to_owned);
        if let Some(setting) = &eviction {
            let verdict = if self.shared.accept_eviction {
                "its grants count because the manager accepts the eviction risk"
            } else {
                "its grants do not count (set maxmemory-policy noeviction, or accept the \
                 risk with LockManagerBuilder::accept_eviction_risk)"
            };
            log::warn!(
                "quorum-lock: node {} may evict lock keys ({setting}): {verdict}",
                self.name()
            );
        }
        self.health.update(|s| s.eviction.clone_from(&eviction));
        self.published_eviction = eviction;
    }
}

impl Worker {
    /// One batch on the backend, with panics contained and the result count
    /// checked: every op gets exactly one answer. Also returns the identity
    /// of the server that answered, when the backend knows it.
    pub(super) fn call_backend(
        &self,
        ops: &[Op<'_>],
    ) -> (Vec<Result<Reply, BackendError>>, Option<ServerInfo>) {
        let backend = &self.backend;
        let answers = catch_unwind(AssertUnwindSafe(|| backend.identified_batch(ops)));
        let (mut results, server) = match answers {
            Ok(answers) => answers.into_parts(),
            Err(_) => {
                let e = BackendError::new(BackendErrorKind::Panicked, "the backend panicked");
                return (vec![Err(e); ops.len()], None);
            }
        };
        if results.len() != ops.len() {
            let e = BackendError::new(
                BackendErrorKind::Protocol,
                format!(
                    "backend returned {} results for {} ops",
                    results.len(),
                    ops.len()
                ),
            );
            results.truncate(ops.len());
            results.resize(ops.len(), Err(e));
        }
        (results, server)
    }
}
