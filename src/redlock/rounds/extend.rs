//! Extend, in two halves (send, then gather), so the watchdog can send
//! many at once and gather them together: a quorum must confirm within
//! the remaining validity, and the extend begun last moves the lease's
//! support to its granting nodes. The halves serve a writer's admission
//! too (`admit.rs`: an extend that also saw no reader): one send, one
//! gather, one verdict for both.

use std::time::Duration;

use parking_lot::MutexGuard;

use super::Rounds;
use crate::engine::{Action, Direct, Gather, Pending, Request};
use crate::error::{Error, Result};
use crate::redlock::counters::Event;
use crate::redlock::lease::{CannotExtend, ExtendTicket, Lease, LeaseState, NotExtended};
use crate::redlock::validity::{check_ttl, drift};
use crate::redlock::verdict::{ExtendVerdict, extend_verdict};
use crate::report::{Report, Round};

/// An extend that has been sent and not yet gathered.
pub(crate) struct ExtendInFlight {
    pending: Pending,
    ticket: ExtendTicket,
    /// Sent by auto-extension: a failure also stops the renewal.
    renewing: bool,
}

/// The votes of an extend (or of an admission), gathered and judged
/// against its ticket.
pub(super) struct Judged {
    pub(super) report: Report,
    pub(super) verdict: ExtendVerdict,
    /// Which nodes granted, in configuration order: the lease's support
    /// once the verdict is applied.
    pub(super) granted: Vec<bool>,
}

impl Rounds {
    /// Extends a held lock: a quorum must confirm within the remaining
    /// validity. On success the lease's deadline moves to
    /// `extend_start + ttl - drift`; on failure the lease is marked lost.
    pub(crate) fn extend(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let in_flight = self.begin_extend(lease, ttl)?;
        self.finish_extend(lease, in_flight)
    }

    /// The first half of an extend: checks the lease and sends the extend
    /// to every node, under the lease's lock so that no extend is ever sent
    /// after a release. Returns at once.
    pub(crate) fn begin_extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendInFlight> {
        self.begin(lease, ttl, false)
    }

    /// [`begin_extend`](Self::begin_extend) for auto-extension: when this
    /// extend fails, the reason renewal stopped is recorded under the same
    /// lock as the loss, before the loss is announced, so whoever hears
    /// the loss also sees why renewal stopped.
    pub(crate) fn begin_renewal(&self, lease: &Lease, ttl: Duration) -> Result<ExtendInFlight> {
        self.begin(lease, ttl, true)
    }

    fn begin(&self, lease: &Lease, ttl: Duration, renewing: bool) -> Result<ExtendInFlight> {
        let config = &self.config;
        check_ttl(ttl, config.max_ttl, config.drift_factor)
            .map_err(|reason| Error::InvalidArgument { reason })?;
        let mut state = lease.state();
        let start = self.now();
        // Caps the deadline at what this extend would give: from the send
        // on, a node may apply it at any moment, and `PEXPIRE` can shorten
        // a key (the lease's lock is held until it is sent, so a hand-over
        // sees the capped deadline).
        // Read before the send, as for an acquire.
        let epochs = self.engine.forgets().snapshot();
        let ticket = match state.begin_extend(start, ttl, drift(ttl, config.drift_factor), epochs) {
            Ok(ticket) => ticket,
            Err(CannotExtend::Lost(lost)) => return Err(lost),
            Err(CannotExtend::Finished) => {
                return Err(Error::Lost {
                    reason: "the lock was released".into(),
                    report: None,
                });
            }
            Err(CannotExtend::Expired) => {
                let error = Error::Lost {
                    reason: "the lock's validity ran out before the extend".into(),
                    report: None,
                };
                self.counters.note(Event::ExtendFailed);
                if renewing {
                    state.stop_renewal(format!("an extend failed: {error}"));
                }
                self.lose(lease, state, &error);
                return Err(error);
            }
        };
        let pending = self.send_extend(lease, Action::Extend { ttl }, &ticket);
        drop(state);
        Ok(ExtendInFlight {
            pending,
            ticket,
            renewing,
        })
    }

    /// The second half of an extend: gathers the votes and updates the
    /// lease with their verdict. The extend begun last moves the support
    /// to its granting nodes, which are checked at once (under the lease's
    /// lock, so a forget seen since it was sent is not missed).
    pub(crate) fn finish_extend(&self, lease: &Lease, in_flight: ExtendInFlight) -> Result<()> {
        let ExtendInFlight {
            pending,
            ticket,
            renewing,
        } = in_flight;
        let Judged {
            report,
            verdict,
            granted,
        } = self.gather_extend(lease, pending, &ticket, Round::Extend);
        let failure = |reason| Error::Lost {
            reason,
            report: Some(Box::new(report)),
        };
        let mut state = lease.state();
        match state.finish_extend(ticket, verdict, granted, failure) {
            Ok(()) => self.extended(lease, state),
            Err(NotExtended::AlreadyLost(lost)) => Err(lost),
            Err(NotExtended::Failed { error, first }) => {
                self.counters.note(Event::ExtendFailed);
                if renewing {
                    state.stop_renewal(format!("an extend failed: {error}"));
                }
                self.after_loss(lease, state, &error, first);
                Err(error)
            }
        }
    }

    /// Sends `action` (an extend, or a writer's admission) for `lease` to
    /// every node, each given what the ticket's validity has left at most.
    /// Called under the lease's lock, which the ticket was taken under.
    pub(super) fn send_extend(
        &self,
        lease: &Lease,
        action: Action,
        ticket: &ExtendTicket,
    ) -> Pending {
        let request = Request {
            action,
            hold: &lease.hold,
            token: lease.token,
        };
        let wait = self.config.node_timeout.min(ticket.remaining());
        let gather = Gather::UntilDecided {
            quorum: self.config.quorum,
        };
        self.engine.scatter(&request, wait, Direct::Never, gather)
    }

    /// Gathers what [`send_extend`](Self::send_extend) sent and judges the
    /// votes against `ticket`, reporting them as `round`.
    pub(super) fn gather_extend(
        &self,
        lease: &Lease,
        pending: Pending,
        ticket: &ExtendTicket,
        round: Round,
    ) -> Judged {
        let config = &self.config;
        let gather = Gather::UntilDecided {
            quorum: config.quorum,
        };
        let outcomes = pending.gather(gather).into_outcomes();
        let end = self.now();
        let elapsed = end.saturating_duration_since(ticket.start());
        let report = self.report(round, &lease.resources, outcomes, elapsed);
        let verdict = extend_verdict(
            report.granted(),
            config.quorum,
            ticket.ttl(),
            ticket.drift(),
            ticket.start(),
            ticket.old_deadline(),
            end,
        );
        let granted = report
            .nodes
            .iter()
            .map(|n| n.outcome.is_granted())
            .collect();
        Judged {
            report,
            verdict,
            granted,
        }
    }

    /// A confirmed extend (or admission) applied to the lease, whose
    /// `state` the caller holds: counted, and the new support checked at
    /// once (under the lease's lock, so a forget seen since the send is
    /// not missed).
    pub(super) fn extended(&self, lease: &Lease, state: MutexGuard<'_, LeaseState>) -> Result<()> {
        self.counters.note(Event::ExtendOk);
        match self.forgets.check(lease, state) {
            Some(lost) => Err(lost),
            None => Ok(()),
        }
    }
}
