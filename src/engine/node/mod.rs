//! One node's state, sans-IO in the manner of quinn-proto's `Connection`:
//! no clock inside, named transitions that take the time as an argument,
//! and [`State::poll_timeout`] to say when to call back.
//!
//! Two drivers move it: the node's own thread (`worker.rs`: it waits for
//! jobs until the poll timeout, then calls [`State::timer_fired`] and
//! runs the jobs), and a caller that drives a round itself on an idle node
//! (`drive.rs`). Both send a batch with [`State::begin`], read its
//! answers ([`Sent::read`]) and hand them to
//! [`State::answers_arrived`]: everything that follows a round trip
//! (votes, latency, liveness, identity and quarantine, release retries,
//! release notices, the settings look) happens there, whoever drove it.
//!
//! ```text
//!   begin(items, now) ──> Sent ──read()──> Arrived ──answers_arrived(now)──> votes
//!   timer_fired(now): a probe when due, release retries, a settings look, notices
//!   poll_timeout(): the next time timer_fired has something to do
//! ```
//!
//! Two clocks: `now` is real time, passed in by the drivers
//! (`Instant::now()`), for liveness, retries, the settings look and the
//! notices: whether a server answers is a matter of the network, not of
//! lock validity (see `liveness.rs`), and a node marked down must still be
//! probed in a test whose manual clock never moves. The manager's clock
//! (`Shared::clock`, injectable) times the restart quarantine, as it times
//! every lock's validity.
//!
//! Every backend call goes through `io.rs`.

mod batch;
mod identity;
pub(super) mod io;
mod judge;
mod liveness;
mod notices;
mod publish;
mod refusal;
mod retries;
mod rights;
mod rights_try;
mod settings_look;
mod shards;
mod vitals;
pub(super) mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use self::batch::{Arrived, Item, Sent, Vote};
use self::batch::{Batch, grant, vote};
#[cfg(test)]
pub(crate) use self::identity::Standing;
pub(crate) use self::identity::{Identity, Registry};
use self::liveness::{Change, Liveness};
pub(crate) use self::notices::Doorbell;
use self::notices::{Ears, NodeNotices};
use self::publish::Publisher;
use self::refusal::Refusal;
use self::retries::RetryList;
use self::rights::Rights;
use self::settings_look::SettingsLook;
use self::shards::Shards;
pub(crate) use self::vitals::Vitals;
use super::action::Action;
use super::echoes::Heard;
use super::forgets::Forgets;
use super::hold::Hold;
use super::waiters::Waiters;
use crate::backend::{Backend, BackendError, BackendErrorKind, Holding, Reply, Sources};
use crate::clock::Clock;
use crate::report::NodeOutcome;
use crate::token::Token;

/// What every node of one engine shares.
pub(crate) struct Shared {
    /// The manager's clock, for quarantine times.
    pub(crate) clock: Arc<dyn Clock>,
    /// Restart quarantine (max TTL plus drift), or `None` when off.
    pub(crate) quarantine: Option<Duration>,
    /// How long a node that may have forgotten keys while it kept
    /// answering has its grants withheld (max TTL plus drift).
    pub(crate) forget_window: Duration,
    /// Run ids seen, for duplicate detection.
    pub(crate) registry: Registry,
    /// Node names, for reports.
    pub(crate) names: Vec<String>,
    /// How long a release that could not reach its node is retried: the
    /// longest a key can live (max TTL), after which it is gone anyway.
    pub(crate) release_retry_window: Duration,
    /// The key of the fence counters' hash on every node.
    pub(crate) fence_counters: Arc<[u8]>,
    /// What the keys of a try of a node's rights start with
    /// (`<prefix>{quorum-lock}:probe`; see `rights.rs`).
    pub(crate) rights_key: Arc<[u8]>,
    /// What follows the token in every value stored: the owner label
    /// (src/owner.rs), or nothing.
    pub(crate) value_suffix: Box<[u8]>,
    /// Count grants of servers that may evict lock keys.
    pub(crate) accept_eviction: bool,
    /// Who waits for which lock's release (wake-ups).
    pub(crate) waiters: Arc<Waiters>,
    /// When each node was seen to have possibly forgotten keys.
    pub(crate) forgets: Arc<Forgets>,
}

/// One node's state: liveness, release retries, identity and quarantine,
/// release notices, the settings look, and what it published of them.
pub(crate) struct State {
    /// The node's place in the configuration.
    index: usize,
    backend: Arc<dyn Backend>,
    shared: Arc<Shared>,
    identity: Identity,
    /// The servers behind a node that answers from several (a cluster's
    /// shards), each judged on its own.
    shards: Shards,
    /// Releases to send again.
    retries: RetryList,
    /// Up, or down and when to probe it.
    liveness: Liveness,
    /// Whether it refuses this client as a whole, and when to ask again.
    refusal: Refusal,
    /// Whether its access rules refuse what locks need, and when to try.
    rights: Rights,
    /// The node's subscription to release notices.
    notices: NodeNotices,
    /// When to read the server's settings while locks may be held on it
    /// and no batch brings them.
    settings_look: SettingsLook,
    /// The vitals `health()` reads, and what was last announced.
    publish: Publisher,
}

impl State {
    /// The state of node `index`, talking to `backend`, publishing to
    /// `health`, created at `now` (real time).
    pub(crate) fn new(
        index: usize,
        backend: Arc<dyn Backend>,
        health: Arc<Vitals>,
        shared: Arc<Shared>,
        now: Instant,
    ) -> Self {
        let identity = Identity::new(index, shared.quarantine, shared.accept_eviction)
            .forgetting_for(shared.forget_window);
        let name = shared.names.get(index).map_or("?", String::as_str);
        Self {
            index,
            backend,
            identity,
            shards: Shards::new(index),
            retries: RetryList::new(shared.release_retry_window, now),
            liveness: Liveness::default(),
            refusal: Refusal::default(),
            rights: Rights::default(),
            notices: NodeNotices::default(),
            settings_look: SettingsLook::new(shared.release_retry_window),
            publish: Publisher::new(name.to_owned(), health),
            shared,
        }
    }

    /// The state, whose release listener wakes the node's thread with
    /// `doorbell` when notices arrive (without one, the thread polls for
    /// them while someone waits).
    pub(crate) fn ringing(mut self, doorbell: Doorbell) -> Self {
        self.notices = NodeNotices::new(Some(doorbell));
        self
    }

    /// Whether the node is marked down (rounds skip it; its thread probes
    /// it).
    pub(crate) fn is_down(&self) -> bool {
        self.liveness.is_down()
    }

    /// When [`timer_fired`](Self::timer_fired) next has something to do:
    /// a probe while down, release retries, a recheck or a try of its
    /// rights while up, a look at the notices or the server's settings;
    /// `None`: nothing until the next job.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        // While down only the probe is due; the releases wait for it.
        let (work, recheck, rights) = match self.liveness.probe_at() {
            Some(at) => (Some(at), None, None),
            None => (
                self.retries.next_wake(),
                self.refusal.recheck_at(),
                self.rights.try_at(),
            ),
        };
        [
            work,
            recheck,
            rights,
            self.notices.next_wake(),
            self.settings_look.next_wake(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The timer fired at `now`: probes a down node and retries releases
    /// when due, looks at the server's settings when due, and looks after
    /// the release notices. Whether the other nodes should read their
    /// notices at once (a waiter heard from too few nodes yet).
    #[must_use]
    pub(crate) fn timer_fired(&mut self, now: Instant) -> bool {
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

    /// Tries what locks need on the node when an operation refused by
    /// its access rules asked for it (see `rights.rs`). Also run before a
    /// barrier is answered, so that `flush` returns with the verdict on
    /// the refusals it waited for.
    pub(crate) fn try_rights_if_due(&mut self, now: Instant) {
        if !self.liveness.is_down() && self.rights.try_due(now) {
            self.try_rights(now);
        }
    }

    /// The watched keys may have changed: subscribes for them now (before
    /// any operation that follows), and hands out the notices that have
    /// arrived. Whether the other nodes should read theirs at once.
    #[must_use]
    pub(crate) fn listen(&mut self, now: Instant) -> bool {
        let ears = Ears {
            backend: &*self.backend,
            waiters: &self.shared.waiters,
            index: self.index,
            name: self.publish.name(),
            down: self.liveness.is_down(),
        };
        self.notices.tend(&ears, now)
    }

    /// The backend reported a recovery: probes the node now if it is
    /// marked down, so the operations that follow go to it.
    pub(crate) fn probe_now(&mut self, now: Instant) {
        if self.liveness.is_down() {
            self.probe(now);
        }
    }

    /// A probe's outcome at `now`: `healthy` when the server answered.
    pub(crate) fn probe_result(&mut self, healthy: bool, now: Instant) {
        let change = self.liveness.on_probe(healthy, now);
        self.announce_liveness(change, None, now);
    }

    /// Sends `items` to the node as one batch at `now` (a node marked
    /// down skips acquires and extends at no cost, and keeps its releases
    /// for when it is back: an earlier acquire may have landed there).
    pub(crate) fn begin(&mut self, items: Vec<Item>, now: Instant) -> Sent {
        if self.liveness.is_down() {
            for item in items.iter().filter(|i| i.action == Action::Release) {
                self.keep(&item.hold, item.token, now);
            }
            return Sent::new(Batch::unsent(items), None, now);
        }
        let batch = Batch::new(
            items,
            &self.shared.value_suffix,
            &self.shared.fence_counters,
        );
        let ops = batch.ops();
        let in_flight = (!ops.is_empty()).then(|| io::send(&*self.backend, &ops));
        Sent::new(batch, in_flight, now)
    }

    /// A batch's answers, read at `now`: one vote per item, and
    /// everything that follows a round trip (latency, liveness, identity
    /// and quarantine, release retries, notices, holders for the
    /// waiters, the settings look).
    pub(crate) fn answers_arrived(&mut self, arrived: Arrived, now: Instant) -> Vec<Vote> {
        let Arrived {
            batch,
            answers,
            started,
        } = arrived;
        let Some(answers) = answers else {
            // Settled without the server: the node is down.
            return vec![Vote::of(NodeOutcome::Down); batch.items().len()];
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
        let mut votes = Vec::with_capacity(results.len());
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
                    votes.push(vote);
                }
            }
            // A cluster node: each answer judged by the shard that gave it.
            Sources::Each(servers) => {
                if servers.iter().any(Option::is_some) {
                    // The shards' settings came with their answers: no
                    // background look while batches bring them.
                    self.settings_look.seen(now);
                }
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
                    votes.push(vote);
                }
                self.publish_shards();
            }
        }
        if holds {
            // A lock may be held here until max TTL from now: its
            // settings are watched that long (see `settings_look.rs`).
            self.settings_look.granted(now);
        }
        votes
    }

    /// What `key` holds on this node (a node marked down is not asked).
    pub(crate) fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        if self.liveness.is_down() {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is marked down (being probed in the background)",
            ));
        }
        io::inspect(&*self.backend, key)
    }

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
                let real_now = Instant::now();
                for key in waiters
                    .echoes()
                    .answered(self.index, item.token, heard, real_now)
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
        self.settings_look.seen(now);
        if let Ok(server) = looked
            && server.run_id.is_some()
        {
            self.judge_server(Some(&server), now);
        }
    }

    /// Adds a release to the retry list (bounded: the oldest go first).
    fn keep(&mut self, hold: &Hold, token: Token, now: Instant) {
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
        let items = self
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

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
