//! A read-write lock's writer admission: the writer holds its key (its
//! intent, a plain lock that new readers respect) and asks every node to
//! admit it, which a node does only while no reader is left there. A
//! quorum of admissions in time is an extend of the writer's key that also
//! saw no reader: the lease's deadline moves as an extend's would. Fewer
//! is not a failure: the intent still holds, and the writer asks again
//! once readers have left.

use super::Rounds;
use super::extend::Judged;
use crate::engine::Action;
use crate::error::{Error, Result};
use crate::redlock::lease::{CannotExtend, Lease, NotExtended};
use crate::redlock::validity::drift;
use crate::redlock::verdict::ExtendVerdict;
use crate::report::{Report, Round};

/// What one admission round found.
pub(crate) enum Admission {
    /// A quorum admitted the writer in time: the lease now rests on it.
    Admitted,
    /// Not yet (readers are still in on too many nodes, or too few nodes
    /// answered): the round's report. The lease is as it was.
    NotYet(Report),
}

impl Rounds {
    /// One admission round for the writer's `lease` (it holds a
    /// read-write lock's writer, `Hold::Writer`: the admission is that
    /// hold's alone, see `Action::op`). Sets the writer's key's expiry to
    /// the lease's TTL where a node admits it.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the intent is gone: the lease was lost,
    /// released, or its validity ran out before the round.
    pub(crate) fn admit(&self, lease: &Lease) -> Result<Admission> {
        let config = &self.config;
        let mut state = lease.state();
        let ttl = state.ttl();
        let drift = drift(ttl, config.drift_factor);
        let start = self.now();
        let epochs = self.engine.forgets().snapshot();
        let ticket = match state.begin_extend(start, ttl, drift, epochs) {
            Ok(ticket) => ticket,
            Err(CannotExtend::Lost(lost)) => return Err(lost),
            Err(CannotExtend::Finished) => return Err(gone("the writer's intent was released")),
            Err(CannotExtend::Expired) => {
                let error = gone("the writer's intent ran out before it was admitted");
                self.lose(lease, state, &error);
                return Err(error);
            }
        };
        let pending = self.send_extend(lease, Action::Admit { ttl }, &ticket);
        drop(state);
        let Judged {
            report,
            verdict,
            granted,
        } = self.gather_extend(lease, pending, &ticket, Round::Acquire);
        if !matches!(verdict, ExtendVerdict::Confirmed { .. }) {
            // The ticket goes unfinished: an extend begun later sets the
            // deadline, and the cap this one set is what it would give.
            return Ok(Admission::NotYet(report));
        }
        let mut state = lease.state();
        let failure = |reason| Error::Lost {
            reason,
            report: None,
        };
        match state.finish_extend(ticket, verdict, granted, failure) {
            Ok(()) => self.extended(lease, state).map(|()| Admission::Admitted),
            // Only a confirmed verdict gets here, so it cannot fail: a loss
            // seen meanwhile is the lease's.
            Err(NotExtended::AlreadyLost(lost) | NotExtended::Failed { error: lost, .. }) => {
                Err(lost)
            }
        }
    }
}

fn gone(reason: &str) -> Error {
    Error::Lost {
        reason: reason.into(),
        report: None,
    }
}
