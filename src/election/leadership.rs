//! [`Leadership`]: what a leader holds, a fenced lock extended
//! automatically, its term (the lock's fence) and the value it proclaimed.

use std::fmt;
use std::time::Duration;

use super::{Election, check_value, proclaim};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lost::LostSignal;

/// This caller leads an [`Election`]: made by
/// [`campaign`](Election::campaign) and its kin.
///
/// It is a fenced lock, extended automatically until it is resigned,
/// dropped or lost. Act as the leader only while it is valid: check
/// [`is_valid`](Self::is_valid) (or [`check`](Self::check)) before each
/// step, watch [`lost_signal`](Self::lost_signal), and send the
/// [`term`](Self::term) with every write to a resource that can refuse a
/// stale leader's (as a fencing token: docs/safety.md). Dropping it
/// resigns in the background.
#[must_use = "dropping a Leadership resigns at once"]
pub struct Leadership {
    election: Election,
    guard: Option<LockGuard>,
    term: u64,
    value: Vec<u8>,
}

impl Leadership {
    pub(super) fn new(election: Election, guard: LockGuard, term: u64, value: &[u8]) -> Self {
        Self {
            election,
            guard: Some(guard),
            term,
            value: value.to_vec(),
        }
    }

    /// The lock under it (present until `resign` takes it).
    fn guard(&self) -> &LockGuard {
        // Invariant: `guard` is `Some` from `new` until `resign` or
        // `drop` take it, and both consume the leadership.
        #[allow(clippy::expect_used)]
        self.guard
            .as_ref()
            .expect("a leadership holds its lock until resigned")
    }

    /// This leader's term: strictly greater than every earlier leader's
    /// term of this election, across managers and processes (the fence of
    /// its lock, agreed by a quorum). Send it with every write that only
    /// the leader may make, to a resource that keeps the highest term it
    /// has seen and refuses lower ones.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value this leader proclaimed last.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The election it leads.
    pub fn election(&self) -> &Election {
        &self.election
    }

    /// Changes the value others read ([`Election::observe`]), only while
    /// this caller still leads: each node writes it only while the
    /// election's lock key there holds this leader's token, and it counts
    /// once a quorum of counted nodes did, within the validity.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a value over
    /// [`MAX_LEADER_VALUE`](super::MAX_LEADER_VALUE) bytes (no node
    /// contacted); [`Error::Lost`](crate::Error::Lost) when the leadership is lost or too many
    /// nodes no longer hold its lock; [`Error::NoQuorum`](crate::Error::NoQuorum) when too few
    /// nodes answered. The value kept here changes only on success; on an
    /// error some nodes may show the new value and others the old one,
    /// and observers see no leader agreed by a quorum until the next
    /// successful proclaim.
    pub fn proclaim(&mut self, value: &[u8]) -> Result<()> {
        check_value(value)?;
        proclaim::proclaim(
            &self.election.locks,
            &self.election.keys,
            self.guard(),
            self.term,
            value,
        )?;
        self.value = value.to_vec();
        Ok(())
    }

    /// Gives up the leadership: releases its lock on every node, so that
    /// the next leader need not wait for it to expire.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: the release's error when no node could
    /// be reached (the lock then expires within its TTL).
    pub fn resign(mut self) -> Result<()> {
        match self.guard.take() {
            Some(guard) => guard.release().map(|_| ()),
            None => Ok(()),
        }
    }

    /// A [`LostSignal`] that gets the [`Error::Lost`](crate::Error::Lost) as soon as the
    /// leadership is known to be lost (an extend fell short, or a node it
    /// counted forgot its keys): stop acting as the leader then.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard().lost_signal()
    }

    /// Whether this caller still leads, as far as it can tell: the
    /// validity of its lock has not run out and no extend fell short.
    pub fn is_valid(&self) -> bool {
        self.guard().is_valid()
    }

    /// Safe time left as the leader: zero once lost.
    pub fn validity(&self) -> Duration {
        self.guard().validity()
    }

    /// `Ok` while this caller leads.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) once the validity ran out or an extend fell short.
    pub fn check(&self) -> Result<()> {
        self.guard().check()
    }

    /// The lock under the leadership (its key, token, fence, TTL).
    pub fn lock(&self) -> &LockGuard {
        self.guard()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &String::from_utf8_lossy(self.election.name()))
            .field("term", &self.term)
            .field("value", &String::from_utf8_lossy(&self.value))
            .field("lock", &self.guard)
            .finish()
    }
}
