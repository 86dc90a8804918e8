//! The node state's handlers: what happened, at `now` (a batch's answers,
//! the timer, a probe's outcome, a recovery, a change of the watched
//! keys, a barrier about to be answered), and the work each sets off
//! (votes, liveness, refusals, release retries, the settings look).
//! The getters, mutators and polls are in `mod.rs`.

use std::time::Instant;

use super::batch::{Arrived, Batch, Item, Vote, grant, vote};
use super::liveness::Change;
use super::notices::{Ears, NodeNotices};
use super::{State, io, refusal};
use crate::backend::{BackendError, BackendErrorKind, KeySet, Reply, Sources};
use crate::engine::action::Action;
use crate::engine::echoes::Heard;
use crate::engine::hold::Hold;
use crate::report::NodeOutcome;
use crate::token::Token;

impl State {
    // Handlers: what happened, at `now`.

    /// A batch's answers, read at `now`: one vote per item, handed to
    /// `each` in item order (no list is made: a driven round has one item
    /// per node), and everything that follows a round trip (latency,
    /// liveness, identity and quarantine, release retries, notices,
    /// holders for the waiters, the settings look).
    pub(crate) fn answers_arrived(
        &mut self,
        arrived: Arrived,
        now: Instant,
        each: impl FnMut(Vote),
    ) {
        let Arrived {
            batch,
            answers,
            started,
        } = arrived;
        self.vote_answers(&batch, answers, started, now, each);
        // The batch's lists serve the node's next batch (`room.rs`).
        let (items, values) = batch.into_lists();
        if let Some(items) = items {
            self.room.keep_items(items);
        }
        self.room.keep_values(values);
    }

    /// [`answers_arrived`](Self::answers_arrived)'s votes and what
    /// follows them, for `batch` sent at `started`.
    fn vote_answers(
        &mut self,
        batch: &Batch,
        answers: Option<io::Results>,
        started: Instant,
        now: Instant,
        mut each: impl FnMut(Vote),
    ) {
        let Some(answers) = answers else {
            // Settled without the server: the node is down.
            for _ in batch.items() {
                each(Vote::of(NodeOutcome::Down));
            }
            return;
        };
        if !answers.0.is_empty() {
            let took = now.saturating_duration_since(started);
            self.publish.vitals().note_latency(took);
            crate::metrics::round_trip(self.publish.name(), took);
            self.note_health(&answers.0, now);
        }
        // One result per item: an item whose action has no op on its hold
        // was never sent, and fails (`Action::op`).
        let (results, sources) = batch.spread(answers);
        let mut holds = false;
        match sources {
            Sources::One(server) => {
                let standing = self.standing(&results, server.as_ref(), now);
                let identified = server.is_some_and(|s| s.run_id.is_some());
                for (item, result) in batch.items().iter().zip(results) {
                    self.after_answer(item, &result, now);
                    let eviction = self.identity.eviction();
                    let names = &self.shared.names;
                    let vote = vote(item.action, result, standing, identified, || {
                        grant(standing, eviction, names)
                    });
                    holds |= item.action != Action::Release && vote.outcome.is_granted();
                    each(vote);
                }
            }
            // A cluster node: each answer judged by the shard that gave it.
            Sources::Each(servers) => {
                if servers.iter().any(Option::is_some) {
                    // The shards' settings came with their answers: no
                    // background look while batches bring them.
                    self.settings_look.brought(now);
                }
                let confirming = servers
                    .iter()
                    .flatten()
                    .filter_map(|s| s.confirming_replicas)
                    .min();
                self.publish.confirming(confirming);
                for ((item, result), server) in batch.items().iter().zip(results).zip(servers) {
                    self.after_answer(item, &result, now);
                    let judged = self.shards.judge(&result, server.as_deref(), &self.shared);
                    let names = &self.shared.names;
                    let vote = vote(
                        item.action,
                        result,
                        judged.standing,
                        judged.identified,
                        || grant(judged.standing, judged.eviction.as_deref(), names),
                    );
                    holds |= item.action != Action::Release && vote.outcome.is_granted();
                    each(vote);
                }
                self.publish_shards();
            }
        }
        if holds {
            // A lock may be held here until max TTL from now: its
            // settings are watched that long (see `settings_look.rs`).
            self.settings_look.granted(now);
        }
    }

    /// The timer fired at `now`: probes a down node and retries releases
    /// when due, looks at the server's settings when due, and looks after
    /// the release notices. Whether the other nodes should read their
    /// notices at once (a waiter heard from too few nodes yet).
    #[must_use]
    pub(crate) fn timer_fired(&mut self, now: Instant) -> bool {
        // A batch parked unread is read when it falls due, and before
        // anything else the timer sends.
        if self.poll_timeout().is_some_and(|at| at <= now) {
            self.read_unread();
        }
        if self.liveness.probe_due(now) {
            self.probe(now);
        }
        if !self.liveness.is_down() && self.retries.due(now) {
            self.retry_releases(now);
        }
        if !self.liveness.is_down() && self.refusal.recheck_due(now) {
            self.recheck(now);
        }
        self.try_rights_if_due(now);
        if !self.liveness.is_down() && self.settings_look.due(now) {
            self.look_at_settings(now);
        }
        self.listen(now)
    }

    /// A probe's outcome at `now`: `healthy` when the server answered.
    pub(crate) fn probe_result(&mut self, healthy: bool, now: Instant) {
        let change = self.liveness.on_probe(healthy, now);
        self.announce_liveness(change, None, now);
    }

    /// The backend reported a recovery: probes the node now if it is
    /// marked down, so the operations that follow go to it.
    pub(crate) fn probe_now(&mut self, now: Instant) {
        if self.liveness.is_down() {
            self.probe(now);
        }
    }

    /// The watched keys may have changed: subscribes for them now (before
    /// any operation that follows), and hands out the notices that have
    /// arrived. Whether the other nodes should read theirs at once.
    #[must_use]
    pub(crate) fn listen(&mut self, now: Instant) -> bool {
        self.with_ears(|notices, ears| notices.tend(ears, now))
    }

    /// Whether the server has confirmed a subscription to every key of
    /// `keys` (a subscription kept for an earlier waiter of the same key):
    /// a new waiter of them needs no change of it.
    pub(crate) fn listens_for(&self, keys: &KeySet) -> bool {
        self.notices.listens_for(keys)
    }

    /// Hands out the release notices that have arrived, on the thread
    /// whose listener rang (see `notices.rs`, `Doorbell`), and nothing
    /// else. Whether a waiter heard from too few nodes yet, as
    /// [`Self::timer_fired`].
    #[must_use]
    pub(crate) fn take_rung_notices(&mut self, now: Instant) -> bool {
        self.with_ears(|notices, ears| notices.take_rung(ears, now))
    }

    /// Runs `f` on the node's subscription with what it needs of the node.
    fn with_ears<T>(&mut self, f: impl FnOnce(&mut NodeNotices, &Ears<'_>) -> T) -> T {
        let ears = Ears {
            backend: &*self.backend,
            waiters: &self.shared.waiters,
            index: self.index,
            name: self.publish.name(),
            down: self.liveness.is_down(),
        };
        f(&mut self.notices, &ears)
    }

    /// Tries what locks need on the node when an operation refused by
    /// its access rules asked for it (see `rights.rs`). Also run before a
    /// barrier is answered, so that `flush` returns with the verdict on
    /// the refusals it waited for.
    pub(crate) fn try_rights_if_due(&mut self, now: Instant) {
        if !self.liveness.is_down() && self.rights.try_due(now) {
            self.try_rights(now);
        }
    }

    // What the handlers set off.

    /// What one answer tells besides the vote: a release to retry, a
    /// release heard by others, who holds the lock or that it was free.
    fn after_answer(&mut self, item: &Item, result: &Result<Reply, BackendError>, now: Instant) {
        match item.action {
            Action::Release => {
                if result.as_ref().is_err_and(release_outcome_unknown) {
                    // Any error (a timeout, a reset mid-request, `LOADING`,
                    // `BUSY`, a script error, an ACL refusal an operator may
                    // fix) leaves the acquire it undoes possibly in place.
                    self.keep(&item.hold, item.token, now);
                }
                let waiters = &self.shared.waiters;
                // An undo's answer says whether its echo is still to come
                // (see `echoes.rs`); a notice it turns out not to have
                // caused is handed out now.
                let heard = Heard::of(result);
                for key in waiters
                    .echoes()
                    .answered(self.index, item.token, heard, Instant::now)
                {
                    waiters.notify(&key, Some(self.index));
                }
                if let Ok(reply) = result {
                    self.notices.note_release(&item.hold, *reply, waiters);
                }
            }
            Action::Acquire { .. } | Action::AcquireFenced { .. } | Action::Admit { .. } => {
                let (taken, read) = item.action.told_waiters(&item.hold);
                match result {
                    // Who holds the lock, for the waiters' early wake-ups.
                    Ok(Reply::HeldBy { digest, expires_in }) => {
                        if let Some(keys) = taken {
                            let expires = expires_in.and_then(|left| now.checked_add(left));
                            let waiters = &self.shared.waiters;
                            waiters.note_holder(keys, self.index, *digest, expires);
                        }
                    }
                    // The key was free here: as good as a notice of its
                    // release, for a waiter this node may not have been
                    // listening for yet (`note_free`).
                    Ok(reply) if reply.is_yes() => {
                        self.shared.waiters.note_free(read, self.index);
                    }
                    _ => {}
                }
            }
            Action::Extend { .. } | Action::RaiseFence(_) => {}
        }
    }

    /// A round trip in which every op failed to reach the server counts
    /// towards marking the node down; any answer from the server resets it.
    fn note_health(&mut self, results: &[Result<Reply, BackendError>], now: Instant) {
        self.publish.vitals().note_results(results);
        let reached = !results
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.kind().is_connectivity()));
        let change = self.liveness.on_round_trip(reached, now);
        let cause = results.iter().find_map(|r| r.as_ref().err());
        self.announce_liveness(change, cause, now);
        let refusal = self.refusal.on_round_trip(results, now);
        self.announce_refusal(refusal);
        self.rights.on_round_trip(results, now);
    }

    /// Asks a node that refused every operation (and gets none now)
    /// whether it serves again: the backend's probe, which for Redis
    /// connects, authenticates and selects the database as the operations
    /// do.
    fn recheck(&mut self, now: Instant) {
        let probed = io::server_info(&*self.backend);
        let change = self.refusal.on_probe(probed.as_ref().map(|_| ()), now);
        self.announce_refusal(change);
    }

    /// Publishes and logs what the refusal machine decided.
    fn announce_refusal(&self, change: Option<refusal::Change>) {
        match change {
            None => {}
            Some(refusal::Change::Began(error)) => self.publish.refusing(error),
            Some(refusal::Change::Ended) => self.publish.serving_again(),
        }
    }

    /// Publishes and logs what the liveness machine decided; a node back
    /// up gets the releases parked while it was down.
    fn announce_liveness(
        &mut self,
        change: Option<Change>,
        cause: Option<&BackendError>,
        now: Instant,
    ) {
        match change {
            None => {}
            Some(Change::WentDown {
                failures,
                since,
                probe_at,
            }) => self.publish.went_down(failures, since, probe_at, cause),
            Some(Change::StillDown { backoff, probe_at }) => {
                self.publish.still_down(backoff, probe_at);
            }
            Some(Change::CameUp { since }) => {
                // The releases parked while down go out with the next
                // retry, after whatever is already queued (an acquire
                // queued before the node went down runs first, then its
                // release). Those kept longer than the retry window are
                // dropped first, so that what is said to be sent is sent.
                let vitals = self.publish.vitals();
                let parked = std::mem::take(&mut *vitals.parked.lock());
                self.retries.take_parked(parked, now);
                let dropped = self.retries.expire(now);
                vitals.note_abandoned(dropped as u64);
                let down_for = now.saturating_duration_since(since);
                self.publish.came_up(down_for, self.retries.len(), dropped);
                vitals.note_retrying(self.retries.len());
            }
        }
    }

    /// Asks a down node's server whether it answers.
    fn probe(&mut self, now: Instant) {
        let healthy = io::server_info(&*self.backend).is_ok();
        self.probe_result(healthy, now);
    }

    /// Reads the server's settings by itself (see `settings_look.rs`): no
    /// batch brought them while a lock may be held on the node.
    fn look_at_settings(&mut self, now: Instant) {
        let looked = io::server_info(&*self.backend);
        // Seen, or tried: a failing look is not repeated at once (a node
        // that stops answering is found by the lock traffic and probes).
        self.settings_look.looked(now);
        if let Ok(server) = looked
            && server.run_id.is_some()
        {
            self.judge_server(Some(&server), now);
        }
    }

    /// Adds a release to the retry list (bounded: the oldest go first).
    pub(super) fn keep(&mut self, hold: &Hold, token: Token, now: Instant) {
        let vitals = self.publish.vitals();
        if self.retries.keep(hold, token, now) {
            vitals.note_abandoned(1);
        }
        vitals.note_retrying(self.retries.len());
    }

    /// Sends the pending releases again, as one batch; keeps those that
    /// still cannot reach the node and have not expired.
    fn retry_releases(&mut self, now: Instant) {
        let expired = self.retries.expire(now);
        let vitals = self.publish.vitals();
        if expired > 0 {
            vitals.note_abandoned(expired as u64);
            log::warn!(
                "quorum-lock: node {}: stopped retrying {expired} releases it did not take \
                 within max_ttl: no longer needed, their keys have expired by now",
                self.publish.name()
            );
        }
        vitals.note_retrying(self.retries.len());
        if self.retries.is_empty() {
            return;
        }
        log::debug!(
            "quorum-lock: node {}: retrying {} releases",
            self.publish.name(),
            self.retries.len()
        );
        let items: Vec<Item> = self
            .retries
            .pending()
            .map(|r| Item {
                action: Action::Release,
                hold: r.hold.clone(),
                token: r.token,
            })
            .collect();
        let batch = Batch::new(
            items,
            &self.shared.value_suffix,
            &self.shared.fence_counters,
        );
        let answers = io::call(&*self.backend, &batch.ops());
        self.note_health(&answers.0, now);
        let (results, _) = batch.spread(answers);
        let unknown = results
            .iter()
            .map(|r| r.as_ref().is_err_and(release_outcome_unknown));
        self.retries.after_attempt(unknown, now);
        self.publish.vitals().note_retrying(self.retries.len());
    }
}

/// Whether a release that failed with `error` may still be needed: every
/// error but `WRONGTYPE`, which says the key holds something that is not a
/// lock (so not ours). Retrying is bounded by `max_ttl` after which the key
/// has expired anyway.
fn release_outcome_unknown(error: &BackendError) -> bool {
    error.kind() != BackendErrorKind::WrongType
}
