//! Rounds: the Redlock steps over the engine. Acquire (vote, then keep the
//! lock only with a quorum and a positive validity, else release
//! on every node the attempt reached), extend (in two halves, in
//! `rounds/extend.rs`, so the watchdog can send many at
//! once), release (waited for, or queued), and the local hand-over of a
//! held lock to the next thread of the same manager.

mod admit;
mod extend;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

pub(crate) use self::admit::Admission;
pub(crate) use self::extend::ExtendInFlight;

use super::counters::{Counters, Event};
use super::fencing::{FenceFailure, next_fence, wall_micros};
use super::forget_watch::{ForgetWatch, after_loss};
use super::intents::Intents;
use super::lease::{Lease, LeaseState};
use super::line::Want;
use super::owners::Owners;
use super::support::Support;
use super::turns::{LocalQueue, Streak, Ticket};
use super::validity::drift;
use super::verdict::{AcquireVerdict, Votes, acquire_verdict, undo_where};
use crate::backend::KeySet;
use crate::clock::Clock;
use crate::engine::{Action, Direct, Engine, Gather, Gathered, Hold, Request};
use crate::error::{Error, Result};
use crate::report::{Name, NodeOutcome, NodeReport, Report, Round};
use crate::token::Token;

/// The settings every round reads, validated by the builder.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) ttl: Duration,
    pub(crate) max_ttl: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) quorum: usize,
    pub(crate) prefix: Vec<u8>,
    /// Locks get fencing tokens unless the call says otherwise.
    pub(crate) fencing: bool,
    pub(crate) clock: Arc<dyn Clock>,
    /// The owner label stored with every lock (src/owner.rs).
    pub(crate) owner: String,
}

/// The node workers and what the rounds over them share: the settings, the
/// local line of each lock and who holds which key on which thread.
#[derive(Debug)]
pub(crate) struct Rounds {
    engine: Engine,
    config: Config,
    /// Local turns for threads waiting on the same key.
    local: Arc<LocalQueue>,
    /// The live guards by key and thread (self-deadlock detection).
    owners: Arc<Owners>,
    /// What happened to the locks, for `health()`.
    counters: Arc<Counters>,
    /// Loses the live leases that a node's forget leaves without a quorum
    /// (the engine's forget hook).
    forgets: Arc<ForgetWatch>,
    /// The read-write locks' writers in progress (their local readers
    /// stand back).
    intents: Arc<Intents>,
    /// The nodes' names, in order, as every report names them (made once:
    /// a round's report shares them instead of copying each).
    names: Box<[Arc<str>]>,
}

impl Rounds {
    /// The rounds over `engine`, registered as its forget hook.
    pub(crate) fn new(engine: Engine, config: Config) -> Self {
        let local = Arc::new(LocalQueue::new(Arc::clone(&config.clock)));
        let owners = Arc::<Owners>::default();
        let counters = Arc::<Counters>::default();
        let forgets = ForgetWatch::install(
            &engine,
            Arc::clone(&owners),
            Arc::clone(&local),
            Arc::clone(&counters),
            config.quorum,
        );
        let names = engine.node_names().map(Arc::from).collect();
        Self {
            engine,
            local,
            owners,
            counters,
            forgets,
            intents: Arc::default(),
            config,
            names,
        }
    }

    pub(crate) fn intents(&self) -> &Arc<Intents> {
        &self.intents
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Marks `lease` lost (the first reason wins), notifies its holder,
    /// and counts and logs the loss once. Then, with the lease's lock let
    /// go (the lines' lock comes first), tells a thread waiting in the
    /// local line that the holder's lock no longer holds it back.
    pub(crate) fn lose(&self, lease: &Lease, mut state: MutexGuard<'_, LeaseState>, error: &Error) {
        let first = state.lose(error);
        self.after_loss(lease, state, error, first);
    }

    /// What follows a loss: counted and logged once (`first`), then the
    /// local line is nudged with the lease's lock let go.
    fn after_loss(
        &self,
        lease: &Lease,
        state: MutexGuard<'_, LeaseState>,
        error: &Error,
        first: bool,
    ) {
        after_loss(&self.counters, &self.local, lease, state, error, first);
    }

    /// Checks `lease`'s support against the nodes' forget epochs now, and
    /// loses it if fewer than a quorum of its supporting nodes still hold
    /// it. Called once a guard has registered its lease among the live
    /// ones: a forget seen after the round was sent and before the
    /// registration is caught here, one after it by the forget hook.
    pub(crate) fn check_support(&self, lease: &Lease) {
        let _ = self.forgets.check(lease, lease.state());
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn local(&self) -> &Arc<LocalQueue> {
        &self.local
    }

    pub(crate) fn owners(&self) -> &Arc<Owners> {
        &self.owners
    }

    /// Now, on the manager's clock.
    pub(crate) fn now(&self) -> Instant {
        self.config.clock.now()
    }

    /// The key stored on the nodes for `resource`: the prefix (if any)
    /// followed by the resource bytes.
    pub(crate) fn key_for(&self, resource: &[u8]) -> Vec<u8> {
        [&self.config.prefix[..], resource].concat()
    }

    /// The keys stored on the nodes for a lock on `resources`: each
    /// resource's key (see [`key_for`](Self::key_for)).
    pub(crate) fn keys_for(&self, resources: &KeySet) -> KeySet {
        resources.prefixed(&self.config.prefix)
    }

    /// What a lock on `resources` holds on the nodes: their keys
    /// ([`keys_for`](Self::keys_for)), taken as one lock.
    pub(crate) fn lock_on(&self, resources: &KeySet) -> Hold {
        Hold::Lock(self.keys_for(resources))
    }

    /// One Redlock attempt at `hold`: vote, then keep the lock only with
    /// a quorum and a positive validity; otherwise release on every node.
    /// With `fenced`, the granting nodes also read their fence counters,
    /// and the lock is kept only once a quorum has acknowledged the new
    /// fence within the validity (see [`super::fencing`]).
    /// (A fenced reader has no op: every node refuses it, see
    /// `Action::op`; `RwLock` never asks for one.)
    pub(crate) fn acquire_once(
        &self,
        resources: &KeySet,
        hold: &Hold,
        ttl: Duration,
        fenced: bool,
    ) -> Result<Arc<Lease>> {
        let config = &self.config;
        let token = Token::random().map_err(|reason| Error::Runtime { reason })?;
        let start = self.now();
        // Read before the first send: a node seen forgetting from here on
        // no longer supports this lock.
        let epochs = self.engine.forgets().snapshot();
        let request = Request {
            action: if fenced {
                Action::AcquireFenced { ttl }
            } else {
                Action::Acquire { ttl }
            },
            hold,
            token,
        };
        // The caller drives the round on every idle node (no thread
        // hand-off), reading the fastest first and deciding early.
        let gather = Gather::UntilDecided {
            quorum: config.quorum,
        };
        let pending = self
            .engine
            .scatter(&request, config.node_timeout, Direct::IdleNodes, gather);
        let gathered = pending.gather(gather);
        let elapsed = self.now().saturating_duration_since(start);
        let drift = drift(ttl, config.drift_factor);
        let votes = Votes::of(gathered.outcomes(), config.quorum);
        let verdict = acquire_verdict(votes, ttl, drift, start, elapsed);
        // A failure gives up on the attempt everywhere it may have landed:
        // the nodes it reached that granted, failed or have not answered
        // (any of them may hold our token), not those that said the key is
        // another token's. Worked out on failure only, as is the report: a
        // granted lock needs neither.
        let fail = |gathered: Gathered| {
            self.engine
                .undo_where(hold, token, &undo_where(gathered.reached()));
            self.report(Round::Acquire, resources, gathered.into_outcomes(), elapsed)
        };
        if let AcquireVerdict::Granted { deadline } = verdict {
            let fence = if fenced {
                match self.fence(hold, token, gathered.fences(), deadline) {
                    Ok(fence) => Some(fence),
                    Err(failure) => {
                        let error = failure.into_error(fail(gathered), self.engine.node_names());
                        self.counters.note_failed_attempt(&error);
                        return Err(error);
                    }
                }
            } else {
                None
            };
            let granted = gathered.outcomes().map(NodeOutcome::is_granted);
            let support = Support::of_grants(&epochs, granted);
            let lease = Lease::new(
                resources.clone(),
                hold.clone(),
                token,
                ttl,
                deadline,
                support,
                fence,
            );
            self.counters.note(Event::Acquired);
            return Ok(Arc::new(lease));
        }
        let report = Box::new(fail(gathered));
        let error = match verdict {
            AcquireVerdict::TooSlow => Error::ValidityExpired { report },
            AcquireVerdict::Contended => Error::Contended { report },
            AcquireVerdict::Granted { .. } | AcquireVerdict::NoQuorum => Error::NoQuorum { report },
        };
        self.counters.note_failed_attempt(&error);
        Err(error)
    }

    /// Phase 2 of a fenced acquire: picks the fence from the counters the
    /// granting nodes read and writes it back to a quorum before
    /// `deadline`. On failure the caller releases everywhere.
    fn fence(
        &self,
        hold: &Hold,
        token: Token,
        reads: Vec<u64>,
        deadline: Instant,
    ) -> std::result::Result<u64, FenceFailure> {
        let wall = wall_micros(self.config.clock.since_epoch());
        let fence = next_fence(reads, wall).map_err(FenceFailure::Counter)?;
        let left = deadline.saturating_duration_since(self.now());
        let wait = self.config.node_timeout.min(left);
        let request = Request {
            action: Action::RaiseFence(fence),
            hold,
            token,
        };
        let quorum = self.config.quorum;
        let outcomes = self.engine.round(
            &request,
            Gather::UntilDecided { quorum },
            wait,
            Direct::Never,
        );
        let acknowledged = outcomes.iter().filter(|o| o.is_granted()).count();
        // Counts only if a quorum holds it before the lock could be gone.
        if acknowledged >= quorum && self.now() < deadline {
            Ok(fence)
        } else {
            Err(FenceFailure::NotAcknowledged(outcomes))
        }
    }

    /// `release()`: hands the lock to the next thread of this manager
    /// waiting for it, when that is safe and fair (the rules of
    /// [`Self::handoff`], as for a dropped guard): no node is contacted
    /// and the report says so. Otherwise releases on every node as
    /// [`Self::release`] does, and the next waiter gets the turn after the
    /// release was sent.
    pub(crate) fn release_or_hand_over(
        &self,
        lease: &Lease,
        turn: Option<Ticket>,
    ) -> Result<Report> {
        let kept = match turn {
            None => None,
            Some(turn) => {
                let start = self.now();
                let streak = turn.streak();
                let Some(kept) = turn.offer_lock(|want| self.handoff(lease, want, streak)) else {
                    let nodes = self.engine.node_names().count();
                    let elapsed = self.now().saturating_duration_since(start);
                    let outcomes = vec![NodeOutcome::HandedOver; nodes];
                    return Ok(self.report(Round::Release, &lease.resources, outcomes, elapsed));
                };
                Some(kept)
            }
        };
        self.release(lease, kept)
    }

    /// Releases on every node and waits for their answers (at most the
    /// per-node timeout). Marks the lease finished first, under its lock, so
    /// the watchdog sends no extend after this release: an extend it sent
    /// earlier is queued ahead of this release on every node.
    pub(crate) fn release(&self, lease: &Lease, turn: Option<Ticket>) -> Result<Report> {
        let config = &self.config;
        let start = self.now();
        let request = Request {
            action: Action::Release,
            hold: &lease.hold,
            token: lease.token,
        };
        lease.state().finish();
        let pending = self.engine.scatter(
            &request,
            config.node_timeout,
            Direct::IdleNodes,
            Gather::All,
        );
        // The next local waiter's acquire now queues behind this release.
        drop(turn);
        let outcomes = pending.gather(Gather::All).into_outcomes();
        let elapsed = self.now().saturating_duration_since(start);
        let report = self.report(Round::Release, &lease.resources, outcomes, elapsed);
        // Once a quorum has answered, no quorum can still hold our token.
        if report.granted() + report.refused() >= config.quorum {
            Ok(report)
        } else {
            Err(Error::NoQuorum {
                report: Box::new(report),
            })
        }
    }

    /// Queues the release on every node and returns at once (guard drop),
    /// in a span of its own with the `tracing` feature.
    pub(crate) fn release_detached(&self, lease: &Lease) {
        let mut state = lease.state();
        state.finish();
        let quorum = self.config.quorum;
        crate::trace::dropped(quorum, &lease.trace, &lease.resources, || {
            self.engine.release_detached(&lease.hold, lease.token);
        });
    }

    /// A dropped guard that holds the local turn: hands the lock itself to
    /// the next thread waiting for it when that is safe and fair (no round
    /// trip at all), otherwise releases on every node and passes the turn.
    pub(crate) fn hand_over(&self, lease: &Lease, turn: Ticket) {
        let streak = turn.streak();
        turn.pass_with(|want| {
            let handoff = want.and_then(|want| self.handoff(lease, want, streak));
            if handoff.is_none() {
                // Queued before the next waiter gets the turn, so its
                // acquire runs after this release on every node.
                self.release_detached(lease);
            }
            handoff
        });
    }

    /// The lock renamed for the next holder, if it may be handed over: it
    /// is the lock the waiter asked for (same TTL; neither fenced), at
    /// least half of its TTL is still valid,
    /// nothing marked it lost, and the streak of local turns is not at its
    /// bound (then it is released and the next turn yields first, so other
    /// processes get their chance).
    pub(crate) fn handoff(&self, lease: &Lease, want: &Want, streak: Streak) -> Option<Arc<Lease>> {
        let next = streak.next();
        // Fencing on either side: the next holder needs a larger fence than
        // this one (or, for a plain waiter, a lock without one), so it
        // acquires (and fences) anew.
        if next.yield_first || lease.fence().is_some() || want.fenced {
            return None;
        }
        // The old guard's lease is done: its auto-extension stops.
        let handed = lease.state().hand_over(self.now(), want.ttl)?;
        let renamed = Lease::new(
            lease.resources.clone(),
            lease.hold.clone(),
            lease.token,
            handed.ttl,
            handed.deadline,
            handed.support,
            None,
        );
        self.counters.note(Event::HandOver);
        Some(Arc::new(renamed))
    }

    fn report(
        &self,
        operation: Round,
        resources: &KeySet,
        outcomes: impl IntoIterator<Item = NodeOutcome>,
        elapsed: Duration,
    ) -> Report {
        Report {
            round: operation,
            resource: Name::of(resources),
            quorum: self.config.quorum,
            nodes: self
                .names
                .iter()
                .zip(outcomes)
                .map(|(node, outcome)| NodeReport {
                    node: Arc::clone(node),
                    outcome,
                })
                .collect(),
            elapsed,
            attempts: 1,
            waited: elapsed,
            held_here: false,
            writer_here: false,
        }
    }
}

/// `error` of the last attempt, with the count and the whole wait.
pub(crate) fn with_attempts(mut error: Error, attempts: u32, waited: Duration) -> Error {
    if let Error::Contended { report }
    | Error::NoQuorum { report }
    | Error::ValidityExpired { report } = &mut error
    {
        report.attempts = attempts;
        report.waited = waited.max(report.elapsed);
    }
    error
}
