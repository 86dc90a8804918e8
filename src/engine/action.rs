//! What a round asks each node to do: the engine's side of the one
//! vocabulary for a node operation. A round is an action on one key with
//! one token; [`Action::op`] makes the backend's [`Op`] of it.

use std::time::Duration;

use crate::backend::{KeySet, Op, OpKind};

/// What a round asks each node to do, with what that needs (the TTL of
/// an acquire or extend, the fence of a raise). The key and the token
/// travel beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `SET NX PX` (or our token already there).
    Acquire { ttl: Duration },
    /// The same, and read the fence counter beside the lock.
    AcquireFenced { ttl: Duration },
    /// Compare-and-pexpire.
    Extend { ttl: Duration },
    /// Compare-and-delete.
    Release,
    /// Raise the fence counter to this value while the lock is ours.
    RaiseFence(u64),
}

impl Action {
    /// The backend's op for `key` and `token`; the fenced kinds name the
    /// node's fence counters hash, `counters`.
    /// A composite key (several resources locked as one, see
    /// `backend/keyset.rs`) makes the set kind of the op: every key or
    /// none; a fenced set reads and raises every member's counter.
    pub(crate) fn op<'a>(self, key: &'a [u8], token: &'a [u8], counters: &'a [u8]) -> Op<'a> {
        if let Some(keys) = KeySet::of(key) {
            let kind = match self {
                Self::Acquire { ttl } => OpKind::AcquireAll { ttl, keys },
                Self::AcquireFenced { ttl } => OpKind::AcquireAllFenced {
                    ttl,
                    keys,
                    counter: counters,
                },
                Self::Extend { ttl } => OpKind::ExtendAll { ttl, keys },
                Self::Release => OpKind::ReleaseAll { keys },
                Self::RaiseFence(fence) => OpKind::RaiseFenceAll {
                    keys,
                    counter: counters,
                    fence,
                },
            };
            return Op { key, token, kind };
        }
        match self {
            Self::Acquire { ttl } => Op::acquire(key, token, ttl),
            Self::AcquireFenced { ttl } => Op::acquire_fenced(key, token, ttl, counters),
            Self::Extend { ttl } => Op::extend(key, token, ttl),
            Self::Release => Op::release(key, token),
            Self::RaiseFence(fence) => Op::raise_fence(key, token, counters, fence),
        }
    }

    /// Whether the action reads or writes the fence counters.
    pub(crate) fn is_fenced(self) -> bool {
        matches!(self, Self::AcquireFenced { .. } | Self::RaiseFence(_))
    }
}
