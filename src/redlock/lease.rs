//! The [`Lease`]: what a held lock is on the servers (its hold, token) and its
//! state (deadline, TTL, the nodes that support it, lost, finished) as a
//! closed state machine with named transitions, shared by the guard, the
//! rounds that extend and release it, the watchdog, and the forget watch.

use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Mutex, MutexGuard};

use super::support::Support;
use super::verdict::{ExtendVerdict, begin_cap, sets_deadline};
use crate::backend::KeySet;
use crate::engine::{Epochs, Hold};
use crate::error::Error;
use crate::token::Token;

/// The part of a held lock that the watchdog shares with the guard.
pub(crate) struct Lease {
    /// The resources as the caller named them (one, or a set's).
    pub(crate) resources: KeySet,
    /// What it holds on the nodes: a lock on their keys (the prefix, then
    /// each resource), or a read-write lock's side.
    pub(crate) hold: Hold,
    pub(crate) token: Token,
    /// The fencing token, when the lock was acquired with fencing. A fence
    /// is at least 1 (`next_fence`), so `NonZeroU64` leaves 0 free to mean
    /// none: 8 bytes in every lease instead of an `Option<u64>`'s 16.
    fence: Option<NonZeroU64>,
    state: Mutex<LeaseState>,
    /// The lock's span while it is held (nothing without the `tracing`
    /// feature): the watchdog's spans and a loss's follow from it.
    pub(crate) trace: crate::trace::Held,
}

/// What may change while the lock is held, as a closed state machine:
/// its fields are private, and the named transitions below are the only
/// way to change them, so no caller can break what they keep:
///
/// - lost is never cleared (the first reason wins);
/// - nothing extends a finished (released, forgotten, handed-over) lease;
/// - beginning an extend caps the deadline at what that extend would give
///   (a node may apply it at any moment, and `PEXPIRE` can shorten a key);
/// - only the extend begun last sets the deadline when it finishes, and
///   with it the support: the nodes that granted that extend;
/// - a hand-over carries the (capped) deadline and the support (the same
///   keys on the same nodes) and finishes this lease;
/// - a support check loses a lease that fewer than a quorum of its
///   supporting nodes still hold (their forget epoch moved).
///
/// ```text
///               begin_extend (caps the deadline);
///               finish_extend confirmed (the extend begun last sets
///               the deadline, the TTL and the support)
///              +----+
///              v    |
///   new ----> held -+-- finish / hand_over --> finished (a hand-over
///              |                                starts the next lease with
///              |                                this deadline and support)
///              +-- finish_extend failed, check_support below the
///                  quorum, lose --> lost (never cleared)
/// ```
///
/// The mutex around it is never held across a network wait: only across
/// non-blocking sends.
#[cfg_attr(test, derive(Clone))]
pub(crate) struct LeaseState {
    /// The conservative end of validity, on the manager's clock.
    deadline: Instant,
    /// The TTL last set on the nodes.
    ttl: Duration,
    /// The nodes whose grants the deadline rests on, with their forget
    /// epochs before the granting round was sent.
    support: Support,
    /// Set when the guard releases, forgets or hands over the lock.
    finished: bool,
    /// Successful extends so far (manual and automatic).
    extensions: u32,
    /// Extends begun so far: the sequence number of the latest one.
    extends_begun: u64,
    /// What most leases never have, boxed once the first of it comes:
    /// every held lock keeps a lease, and these inline made each 80 bytes
    /// larger (issue 30).
    rare: Option<Box<Rare>>,
}

/// The part of a [`LeaseState`] most leases never have.
#[derive(Default)]
#[cfg_attr(test, derive(Clone))]
struct Rare {
    /// Set once the lock is known (or feared) to be lost; never cleared.
    lost: Option<Error>,
    /// Why auto-extension stopped, once it has.
    renewal_stopped: Option<String>,
    /// Waiting for the loss notification.
    subscribers: Vec<Sender<Error>>,
}

/// An extend that has begun on a lease: what its verdict needs, and its
/// place among the lease's extends. Consumed by
/// [`LeaseState::finish_extend`].
#[derive(Debug)]
#[cfg_attr(test, derive(Clone, PartialEq, Eq, Hash))]
pub(crate) struct ExtendTicket {
    start: Instant,
    ttl: Duration,
    drift: Duration,
    old_deadline: Instant,
    seq: u64,
    /// Every node's forget epoch, read before the extend was sent.
    epochs: Epochs,
}

impl ExtendTicket {
    /// When it began (before the first send).
    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    /// The TTL it sets.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Its drift allowance.
    pub(crate) fn drift(&self) -> Duration {
        self.drift
    }

    /// The lease's deadline when it began (before the cap).
    pub(crate) fn old_deadline(&self) -> Instant {
        self.old_deadline
    }

    /// The validity left when it began: how long its round may take.
    pub(crate) fn remaining(&self) -> Duration {
        self.old_deadline.saturating_duration_since(self.start)
    }

    #[cfg(test)]
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }
}

/// Why an extend may not begin.
#[derive(Debug)]
pub(crate) enum CannotExtend {
    /// The lease is lost, for this reason.
    Lost(Error),
    /// The lease was released, forgotten or handed over.
    Finished,
    /// The validity ran out before the extend: the caller marks it lost.
    Expired,
}

/// How an extend ended, when it did not extend.
#[derive(Debug)]
pub(crate) enum NotExtended {
    /// Its verdict failed: the lease is now lost (`first`: by this call).
    Failed { error: Error, first: bool },
    /// Confirmed, but the lease had been marked lost meanwhile.
    AlreadyLost(Error),
}

/// What a hand-over gives the next holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) ttl: Duration,
    pub(crate) deadline: Instant,
    /// The same keys on the same nodes: the same support.
    pub(crate) support: Support,
}

impl Lease {
    pub(crate) fn new(
        resources: KeySet,
        hold: Hold,
        token: Token,
        ttl: Duration,
        deadline: Instant,
        support: Support,
        fence: Option<u64>,
    ) -> Self {
        debug_assert_ne!(fence, Some(0), "a fence is at least 1");
        let trace = crate::trace::Held::new(&resources);
        Self {
            resources,
            hold,
            token,
            fence: fence.and_then(NonZeroU64::new),
            state: Mutex::new(LeaseState::new(ttl, deadline, support)),
            trace,
        }
    }

    /// The fencing token, when the lock was acquired with fencing.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence.map(NonZeroU64::get)
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resource", &self.resources.to_string())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl LeaseState {
    fn new(ttl: Duration, deadline: Instant, support: Support) -> Self {
        Self {
            deadline,
            ttl,
            support,
            finished: false,
            extensions: 0,
            extends_begun: 0,
            rare: None,
        }
    }

    /// The rare part, made on first use.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The conservative end of validity (also once lost or finished).
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The TTL last set on the nodes.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The nodes whose grants the deadline rests on.
    #[cfg(test)]
    pub(crate) fn support(&self) -> &Support {
        &self.support
    }

    /// Why the lock is lost, once it is.
    pub(crate) fn lost(&self) -> Option<&Error> {
        self.rare.as_ref()?.lost.as_ref()
    }

    /// Released, forgotten or handed over.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Lost or finished: nothing more will happen to it.
    pub(crate) fn is_over(&self) -> bool {
        self.finished || self.lost().is_some()
    }

    /// Successful extends so far.
    pub(crate) fn extensions(&self) -> u32 {
        self.extensions
    }

    /// Why auto-extension stopped, once it has.
    pub(crate) fn renewal_stopped(&self) -> Option<&str> {
        self.rare.as_ref()?.renewal_stopped.as_deref()
    }

    /// Safe time left at `now`: zero once lost or past the deadline.
    pub(crate) fn validity(&self, now: Instant) -> Duration {
        if self.lost().is_some() {
            return Duration::ZERO;
        }
        self.deadline.saturating_duration_since(now)
    }

    /// Begins an extend at `start` with `ttl` (and its `drift`), with
    /// every node's forget `epochs` read before it is sent: refused on a
    /// lost or finished lease, or one whose validity ran out. Caps the
    /// deadline at what this extend would give.
    pub(crate) fn begin_extend(
        &mut self,
        start: Instant,
        ttl: Duration,
        drift: Duration,
        epochs: Epochs,
    ) -> Result<ExtendTicket, CannotExtend> {
        if let Some(lost) = self.lost() {
            return Err(CannotExtend::Lost(lost.clone()));
        }
        if self.finished {
            return Err(CannotExtend::Finished);
        }
        if self.deadline <= start {
            return Err(CannotExtend::Expired);
        }
        let old_deadline = self.deadline;
        self.deadline = begin_cap(self.deadline, start, ttl, drift);
        self.extends_begun += 1;
        Ok(ExtendTicket {
            start,
            ttl,
            drift,
            old_deadline,
            seq: self.extends_begun,
            epochs,
        })
    }

    /// Finishes the extend `ticket` with its `verdict` and which nodes
    /// `granted` it (one flag per node, in node order): a failed verdict
    /// marks the lease lost (with the error `failure` makes of its
    /// reason); a confirmed one counts, and sets the deadline, the TTL and
    /// the support (the granting nodes, at the ticket's epochs) only if it
    /// is the extend begun last.
    pub(crate) fn finish_extend(
        &mut self,
        ticket: ExtendTicket,
        verdict: ExtendVerdict,
        granted: impl IntoIterator<Item = bool>,
        failure: impl FnOnce(String) -> Error,
    ) -> Result<(), NotExtended> {
        let deadline = match verdict {
            ExtendVerdict::Confirmed { deadline } => deadline,
            failed => {
                let error = failure(failed.failure().unwrap_or_default());
                let first = self.lose(&error);
                return Err(NotExtended::Failed { error, first });
            }
        };
        if let Some(lost) = self.lost() {
            return Err(NotExtended::AlreadyLost(lost.clone()));
        }
        if sets_deadline(ticket.seq, self.extends_begun) {
            self.deadline = deadline;
            self.ttl = ticket.ttl;
            self.support = Support::of_grants(&ticket.epochs, granted);
        }
        self.extensions = self.extensions.saturating_add(1);
        Ok(())
    }

    /// Released or forgotten: nothing may extend it from now on.
    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }

    /// Hands the lock to the next local holder that wants `ttl`, if it is
    /// neither lost nor finished and at least half of its TTL is still
    /// valid at `now`: finishes this lease and gives its (capped) deadline.
    pub(crate) fn hand_over(&mut self, now: Instant, ttl: Duration) -> Option<Handed> {
        let validity = self.deadline.saturating_duration_since(now);
        if self.is_over() || self.ttl != ttl || validity < self.ttl / 2 {
            return None;
        }
        self.finished = true;
        Some(Handed {
            ttl: self.ttl,
            deadline: self.deadline,
            support: self.support.clone(),
        })
    }

    /// Checks the support against every node's forget epoch now
    /// (`epoch(node)`): when fewer than `quorum` supporting nodes still
    /// have the epoch recorded for them, and the lease is neither lost nor
    /// finished, marks it lost with the reason `reason` makes of the nodes
    /// whose epoch moved and of how many still hold the lock. Returns the
    /// error when this call marked the lease lost.
    pub(crate) fn check_support(
        &mut self,
        epoch: impl Fn(usize) -> u64,
        quorum: usize,
        reason: impl FnOnce(&[usize], usize) -> String,
    ) -> Option<Error> {
        if self.is_over() {
            return None;
        }
        let holding = self.support.holding(&epoch);
        if holding >= quorum {
            return None;
        }
        let error = Error::Lost {
            reason: reason(&self.support.moved(&epoch), holding),
            report: None,
        };
        self.lose(&error);
        Some(error)
    }

    /// Marks the lock lost (the first reason wins) and notifies every
    /// subscriber. Whether this call was the first to mark it.
    pub(crate) fn lose(&mut self, error: &Error) -> bool {
        let first = self.lost().is_none();
        if first {
            self.rare().lost = Some(error.clone());
        }
        self.notify(error);
        first
    }

    /// Sends `notice` to every subscriber (each gets at most one), without
    /// marking the lock lost: renewal stopped, the lock ends at its deadline.
    pub(crate) fn notify(&mut self, notice: &Error) {
        let Some(rare) = &mut self.rare else {
            return; // nobody subscribed
        };
        for subscriber in rare.subscribers.drain(..) {
            // A subscriber that stopped listening needs no notice.
            let _ = subscriber.try_send(notice.clone());
        }
    }

    /// Records why auto-extension stopped (the first reason wins).
    pub(crate) fn stop_renewal(&mut self, why: String) {
        let rare = self.rare();
        if rare.renewal_stopped.is_none() {
            rare.renewal_stopped = Some(why);
        }
    }

    /// Subscribes `subscriber` to the loss notice; if the lock is already
    /// lost, the notice is sent at once.
    pub(crate) fn subscribe(&mut self, subscriber: Sender<Error>) {
        match self.lost() {
            Some(lost) => {
                let _ = subscriber.try_send(lost.clone());
            }
            None => self.rare().subscribers.push(subscriber),
        }
    }

    /// A state as `Lease::new` makes it, for the lease explorer.
    #[cfg(test)]
    pub(crate) fn for_test(ttl: Duration, deadline: Instant, support: Support) -> Self {
        Self::new(ttl, deadline, support)
    }

    /// The sequence number of the latest extend begun.
    #[cfg(test)]
    pub(crate) fn extends_begun(&self) -> u64 {
        self.extends_begun
    }
}
