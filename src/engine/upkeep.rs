//! A node's upkeep between rounds, wired to the backend, the shared
//! status and the log: the decisions are the state machines' (liveness in
//! `liveness.rs`, release retries in `retries.rs`, the identity's news in
//! `announce.rs`); this file runs their calls and says what they decided.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::announce::Verdict;
use super::execute::contained;
use super::identity::Standing;
use super::liveness::Change;
use super::worker::Worker;
use crate::backend::{Backend, BackendError, BackendErrorKind, KeySet, Op, Reply, ServerInfo};
use crate::owner;
use crate::token::Token;

/// Whether a release that failed with `error` may still be needed: every
/// error but `WRONGTYPE`, which says the key holds something that is not a
/// lock (so not ours). Retrying is bounded by `max_ttl` after which the key
/// has expired anyway.
fn release_outcome_unknown(error: &BackendError) -> bool {
    error.kind() != BackendErrorKind::WrongType
}

impl Worker {
    /// Keeps a release whose outcome is unknown for another try: any
    /// error (a timeout, a connection reset mid-request, `LOADING`, `BUSY`,
    /// a script error, an ACL refusal that an operator may fix) leaves the
    /// acquire it undoes possibly in place.
    pub(super) fn keep_for_retry(
        &mut self,
        keys: &KeySet,
        token: Token,
        result: &Result<Reply, BackendError>,
    ) {
        if result.as_ref().is_err_and(release_outcome_unknown) {
            self.keep(keys, token);
        }
    }

    /// Adds a release to the retry list (bounded: the oldest go first).
    pub(super) fn keep(&mut self, keys: &KeySet, token: Token) {
        if self.retries.keep(keys, token, Instant::now()) {
            self.health.note_abandoned(1);
        }
        self.health.note_retrying(self.retries.len());
    }

    /// Sends the pending releases again, as one batch; keeps those that
    /// still cannot reach the node and have not expired.
    pub(super) fn retry_releases(&mut self) {
        let expired = self.retries.expire(Instant::now());
        if expired > 0 {
            self.health.note_abandoned(expired as u64);
            log::warn!(
                "quorum-lock: node {}: stopped retrying {expired} releases it did not take \
                 within max_ttl: no longer needed, their keys have expired by now",
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
        let suffix = &self.shared.value_suffix;
        let mut values = Vec::new();
        for r in self.retries.pending() {
            owner::push_value(&r.token, suffix, &mut values);
        }
        let len = values.len() / self.retries.len();
        let ops: Vec<Op<'_>> = self
            .retries
            .pending()
            .zip(values.chunks(len.max(1)))
            .map(|(r, value)| Op::release(&r.keys, value))
            .collect();
        let (results, _) = self.call_backend(&ops);
        self.note_health(&results);
        let unknown = results
            .iter()
            .map(|r| r.as_ref().is_err_and(release_outcome_unknown));
        self.retries.after_attempt(unknown, Instant::now());
        self.health.note_retrying(self.retries.len());
    }

    /// A round trip in which every op failed to reach the server counts
    /// towards marking the node down; any answer from the server resets it.
    pub(super) fn note_health(&mut self, results: &[Result<Reply, BackendError>]) {
        self.health.note_results(results);
        let reached = !results
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.kind().is_connectivity()));
        let change = self.liveness.on_round_trip(reached, Instant::now());
        let cause = results.iter().find_map(|r| r.as_ref().err());
        self.announce_liveness(change, cause);
    }

    /// Judges the identity and settings `server` reported (with a batch's
    /// answers, or from a look), publishes the verdict, and passes on a
    /// forget: the leases that counted this node hear of it at once.
    pub(super) fn judge_server(&mut self, server: Option<&ServerInfo>) -> Standing {
        let now = self.shared.clock.now();
        let standing = self.identity.judge(server, now, &self.shared.registry);
        if server.is_some() {
            self.settings_look.seen(Instant::now());
        }
        if let Some(what) = self.identity.take_forgotten() {
            let name = self.name().to_owned();
            log::warn!(
                "quorum-lock: node {name} {what}: it may have lost lock keys, so its grants \
                 do not count, and a held lock whose quorum counted it is told it may be lost"
            );
            self.shared.forgets.note(self.index, &what);
        }
        self.publish_identity(standing);
        standing
    }

    /// Reads the server's settings by itself (see `settings_look.rs`): no
    /// batch brought them while a lock may be held on the node.
    pub(super) fn look_at_settings(&mut self) {
        let backend = &self.backend;
        let looked = catch_unwind(AssertUnwindSafe(|| server_info(&**backend)));
        // Seen, or tried: a failing look is not repeated at once (a node
        // that stops answering is found by the lock traffic and probes).
        self.settings_look.seen(Instant::now());
        if let Ok(Ok(server)) = looked
            && server.run_id.is_some()
        {
            self.judge_server(Some(&server));
        }
    }

    pub(super) fn probe(&mut self) {
        let backend = &self.backend;
        let healthy = matches!(
            catch_unwind(AssertUnwindSafe(|| server_info(&**backend))),
            Ok(Ok(_))
        );
        let change = self.liveness.on_probe(healthy, Instant::now());
        self.announce_liveness(change, None);
    }

    /// Publishes and logs what the liveness machine decided; a node back
    /// up gets the releases parked while it was down.
    fn announce_liveness(&mut self, change: Option<Change>, cause: Option<&BackendError>) {
        match change {
            None => {}
            Some(Change::WentDown {
                failures,
                since,
                probe_at,
            }) => {
                self.health.down.store(true, Ordering::Release);
                crate::metrics::node_up(self.name(), false);
                self.health.update(|s| {
                    s.down_since = Some(since);
                    s.next_probe = Some(probe_at);
                });
                log::warn!(
                    "quorum-lock: node {} marked down after {failures} failed round trips: {}; \
                     probing it in the background",
                    self.name(),
                    cause.map_or_else(String::new, ToString::to_string)
                );
            }
            Some(Change::StillDown { backoff, probe_at }) => {
                self.health.update(|s| s.next_probe = Some(probe_at));
                log::debug!(
                    "quorum-lock: node {} still down; next probe in {backoff:?}",
                    self.name()
                );
            }
            Some(Change::CameUp { since }) => {
                self.health.down.store(false, Ordering::Release);
                crate::metrics::node_up(self.name(), true);
                self.health.update(|s| {
                    s.down_since = None;
                    s.next_probe = None;
                });
                // The releases parked while down go out with the next
                // retry, after whatever is already queued (an acquire
                // queued before the node went down runs first, then its
                // release). Those kept longer than the retry window are
                // dropped first, so that what is said to be sent is sent
                // (it read "sending 2 parked releases", then "gave up on
                // 2 releases").
                let parked = std::mem::take(&mut *self.health.parked.lock());
                let now = Instant::now();
                self.retries.take_parked(parked, now);
                let dropped = self.retries.expire(now);
                self.health.note_abandoned(dropped as u64);
                let pending = self.retries.len();
                let releases = match (pending, dropped) {
                    (0, 0) => String::new(),
                    (_, 0) => format!("; sending {pending} pending releases"),
                    _ => format!(
                        "; sending {pending} pending releases, {dropped} dropped unsent: kept \
                         longer than max_ttl, their keys have expired by now"
                    ),
                };
                log::info!(
                    "quorum-lock: node {} is back up after {:?} down{releases}",
                    self.name(),
                    since.elapsed(),
                );
                self.health.note_retrying(self.retries.len());
            }
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
        let verdict = Verdict {
            quarantined_until: self.identity.quarantined_until(),
            duplicate_of: self.identity.duplicate_of(),
            unidentified: standing == Standing::Unverified,
            replica: self.identity.is_replica(),
        };
        // Called after every batch: the shared status is written (under its
        // lock) only when something changed.
        let news = self.announced.verdict(verdict, standing);
        if let Some(published) = news.publish {
            crate::metrics::node_quarantined(self.name(), published.quarantined_until.is_some());
            self.health.update(|s| {
                s.quarantined_until = published.quarantined_until;
                s.duplicate_of = published.duplicate_of;
                s.unidentified = published.unidentified;
                s.replica = published.replica;
            });
        }
        let name = self.name().to_owned();
        if let Some(left) = news.quarantined_for {
            log::info!(
                "quorum-lock: node {name} quarantined for {left:?}: {} and may have forgotten \
                 locks",
                self.identity.quarantine_reason()
            );
        }
        if news.quarantine_over {
            self.identity.clear_quarantine();
            log::info!("quorum-lock: node {name}'s quarantine is over: its grants count again");
        }
        if let Some(owner) = news.duplicate_of {
            let other = self.shared.names.get(owner).map_or("?", String::as_str);
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
    fn publish_eviction(&mut self) {
        let Some(eviction) = self.announced.eviction(self.identity.eviction()) else {
            return;
        };
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
        self.health.update(|s| s.eviction = eviction);
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
        contained(ops.len(), || self.backend.send(ops).finish(ops))
    }
}

/// The server's identity through the backend's probe; a backend without
/// one knows nothing and contacts nobody: an empty answer, so a probe of
/// it always succeeds and a look at its settings finds none.
fn server_info(backend: &dyn Backend) -> Result<ServerInfo, BackendError> {
    backend
        .probe()
        .map_or_else(|| Ok(ServerInfo::default()), |probe| probe.server_info())
}
