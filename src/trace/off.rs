//! The tracing interface without the `tracing` feature: empty types and
//! functions that the compiler removes (see `mod.rs`).

use std::time::Duration;

use super::Call;
use crate::backend::KeySet;
use crate::error::{Error, Result};
use crate::report::NodeOutcome;

/// Runs `body`, a call that takes a lock, counting its attempts.
#[inline(always)]
pub(crate) fn take<T>(
    _call: Call,
    _quorum: usize,
    attempts: &mut u32,
    body: impl FnOnce(&mut u32) -> Result<T>,
) -> Result<T> {
    body(attempts)
}

/// Runs `body`, a call on a held lock.
#[inline(always)]
pub(crate) fn act<T>(
    _call: Call,
    _quorum: usize,
    _held: &Held,
    _resources: &KeySet,
    body: impl FnOnce() -> Result<T>,
) -> Result<T> {
    body()
}

/// Runs `body`, a dropped guard's release (no span without the feature).
#[inline(always)]
pub(crate) fn dropped<T>(
    _quorum: usize,
    _held: &Held,
    _resources: &KeySet,
    body: impl FnOnce() -> T,
) -> T {
    body()
}

/// Names the resources of the call being made.
#[inline(always)]
pub(crate) fn resources(_keys: &KeySet) {}

/// Names the resource of the call being made.
#[inline(always)]
pub(crate) fn resource(_name: &[u8]) {}

/// The nodes, as spans name them.
#[derive(Debug)]
pub(crate) struct Nodes;

impl Nodes {
    #[inline(always)]
    pub(crate) fn new(_names: &[String], _quorum: usize) -> Self {
        Self
    }
}

/// A round's span.
#[derive(Debug)]
pub(crate) struct Round;

impl Round {
    /// A round with no span (the ballot box's own tests, not built for
    /// loom).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn none() -> Self {
        Self
    }

    #[inline(always)]
    pub(crate) fn begin(_nodes: &Nodes, _action: &'static str) -> Self {
        Self
    }

    /// Whether a span records the round: never without the feature.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn vote(&self, _slot: usize, _outcome: &NodeOutcome) {}

    #[inline(always)]
    pub(crate) fn decided(&self, _granted: usize, _unanswered: usize, _timed_out: bool) {}
}

/// A wait's span.
#[derive(Debug)]
pub(crate) struct Pause;

/// The wait between two attempts.
#[inline(always)]
pub(crate) fn pause(_delay: Duration) -> Pause {
    Pause
}

/// The wait in the local line.
#[inline(always)]
pub(crate) fn local_line() -> Pause {
    Pause
}

impl Pause {
    #[inline(always)]
    pub(crate) fn ended(self, _why: &'static str) {}
}

/// The span of a held lock.
#[derive(Debug)]
pub(crate) struct Held;

impl Held {
    #[inline(always)]
    pub(crate) fn new(_resources: &KeySet) -> Self {
        Self
    }
}

/// The span of one auto-extension.
#[derive(Debug)]
pub(crate) struct Renewal;

impl Renewal {
    #[inline(always)]
    pub(crate) fn begin(_held: &Held, _resources: &KeySet) -> Self {
        Self
    }

    #[inline(always)]
    pub(crate) fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        body()
    }

    #[inline(always)]
    pub(crate) fn ended(&self, _failed: Option<&Error>) {}
}

/// A lock found lost.
#[inline(always)]
pub(crate) fn lost(_held: &Held, _resources: &KeySet, _error: &Error) {}
