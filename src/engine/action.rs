//! What a round asks of the nodes: the engine's side of the one
//! vocabulary for a node operation. A round is an action on one lock's
//! keys with one token ([`Request`]; [`Action::op`] makes the backend's
//! [`Op`] of it), gathered until decided or from every node ([`Gather`]),
//! on the caller's thread where the nodes are idle or not ([`Direct`]).

use std::time::Duration;

use crate::backend::{KeySet, Op, OpKind};
use crate::token::Token;

/// What a round asks each node to do, with what that needs (the TTL of
/// an acquire or extend, the fence of a raise). The keys and the token
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
    /// A read-write lock's writer, admitted once no reader is left: its
    /// key's expiry set anew (see `OpKind::Admit`).
    Admit { ttl: Duration },
}

impl Action {
    /// The backend's op for `keys` and `token`; the fenced kinds name
    /// the node's fence counters hash, `counters`. The backend runs it on
    /// one key, or on every key of a set (all or nothing; a fenced set
    /// reads and raises every member's counter).
    ///
    /// On a read-write lock's keys (`KeySet::read_write`) the lock's
    /// actions are a reader's: acquire, extend and release its entry among
    /// the readers. A reader has no fence: the fenced kinds never reach
    /// such keys (`RwLock` takes no fence for a reader), and would only
    /// fail on the readers' set if they did.
    pub(crate) fn op<'a>(self, keys: &'a KeySet, token: &'a [u8], counters: &'a [u8]) -> Op<'a> {
        if let Some((readers, writer)) = keys.read_write_roles() {
            let kind = match self {
                Self::Acquire { ttl } | Self::AcquireFenced { ttl } => OpKind::ReadAcquire {
                    ttl,
                    readers,
                    writer,
                },
                Self::Extend { ttl } => OpKind::ReadExtend { ttl, readers },
                Self::Release => OpKind::ReadRelease { readers },
                Self::Admit { ttl } => OpKind::Admit {
                    ttl,
                    readers,
                    writer,
                },
                Self::RaiseFence(fence) => OpKind::RaiseFence {
                    counter: counters,
                    fence,
                },
            };
            return Op::read_write(keys, token, kind);
        }
        match self {
            Self::Acquire { ttl } => Op::acquire(keys, token, ttl),
            Self::AcquireFenced { ttl } => Op::acquire_fenced(keys, token, ttl, counters),
            Self::Extend { ttl } => Op::extend(keys, token, ttl),
            Self::Release => Op::release(keys, token),
            Self::RaiseFence(fence) => Op::raise_fence(keys, token, counters, fence),
            // Only ever sent on a read-write lock's keys (above); on others
            // it is an extend that also asks for no reader: there are none.
            Self::Admit { ttl } => Op::extend(keys, token, ttl),
        }
    }

    /// Whether the action reads or writes the fence counters.
    pub(crate) fn is_fenced(self) -> bool {
        matches!(self, Self::AcquireFenced { .. } | Self::RaiseFence(_))
    }
}

/// Whether the caller may run one node's operation on its own thread
/// (see `Engine::scatter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direct {
    /// Queue every operation to the node threads (never blocks).
    Never,
    /// Drive the round on the caller's thread on every idle node (see
    /// `drive.rs`).
    IdleNodes,
}

/// One operation for every node, on one lock's keys.
pub(crate) struct Request<'a> {
    pub(crate) action: Action,
    pub(crate) keys: &'a KeySet,
    pub(crate) token: Token,
}

/// How long a round gathers answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gather {
    /// Until `quorum` grants arrive or they can no longer arrive.
    UntilDecided {
        /// Grants needed.
        quorum: usize,
    },
    /// Until every node has answered.
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a read-write lock's keys the lock's actions are the reader's op
    /// kinds, each key named by its role; on a plain set of the same two
    /// keys they stay the lock's (a reader sent as a plain acquire would
    /// set both keys as a lock).
    #[test]
    fn a_read_write_pair_gets_the_readers_ops_and_a_plain_set_the_locks() {
        let ttl = Duration::from_secs(1);
        let pair = KeySet::read_write(b"k:readers", b"k:writer").unwrap();
        let (readers, writer): (&[u8], &[u8]) = (b"k:readers", b"k:writer");
        fn kind(action: Action, keys: &KeySet) -> OpKind<'_> {
            action.op(keys, b"t", b"c").kind
        }
        assert_eq!(
            kind(Action::Acquire { ttl }, &pair),
            OpKind::ReadAcquire {
                ttl,
                readers,
                writer
            }
        );
        assert_eq!(
            kind(Action::Extend { ttl }, &pair),
            OpKind::ReadExtend { ttl, readers }
        );
        assert_eq!(
            kind(Action::Release, &pair),
            OpKind::ReadRelease { readers }
        );
        assert_eq!(
            kind(Action::Admit { ttl }, &pair),
            OpKind::Admit {
                ttl,
                readers,
                writer
            }
        );
        assert!(kind(Action::Release, &pair).is_release());
        let plain = KeySet::new(["k:readers", "k:writer"]).unwrap();
        assert_eq!(
            kind(Action::Acquire { ttl }, &plain),
            OpKind::Acquire { ttl }
        );
        assert_eq!(kind(Action::Release, &plain), OpKind::Release);
        assert!(!kind(Action::Extend { ttl }, &plain).is_read_write());
    }
}
