//! What a round asks of the nodes: the engine's side of the one
//! vocabulary for a node operation. A round is an action on what one
//! lease holds ([`Hold`]) with one token ([`Request`]; [`Action::op`]
//! makes the backend's [`Op`] of it, or refuses a pair that has none),
//! gathered until decided or from every node ([`Gather`]), on the
//! caller's thread where the nodes are idle or not ([`Direct`]).

use std::fmt;
use std::time::Duration;

use super::hold::Hold;
use crate::backend::{BackendError, BackendErrorKind, KeySet, Op};
use crate::token::Token;

/// What a round asks each node to do, with what that needs (the TTL of
/// an acquire or extend, the fence of a raise). The hold and the token
/// travel beside it; [`Action::op`] says what it is on each hold.
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
    /// A read-write lock's writer ([`Hold::Writer`]), admitted once no
    /// reader is left: its key's expiry set anew (see `OpKind::Admit`).
    Admit { ttl: Duration },
}

impl Action {
    /// The action's name, as a round's span shows it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Acquire { .. } => "acquire",
            Self::AcquireFenced { .. } => "acquire_fenced",
            Self::Extend { .. } => "extend",
            Self::Release => "release",
            Self::RaiseFence(_) => "raise_fence",
            Self::Admit { .. } => "admit",
        }
    }

    /// The backend's op for this action on `hold` with `token`; the
    /// fenced kinds name the node's fence counters hash, `counters`. The
    /// backend runs it on one key, or on every key of a set (all or
    /// nothing; a fenced set reads and raises every member's counter).
    ///
    /// One exhaustive match over (action, hold):
    ///
    /// | action          | `Lock(keys)`        | `Writer(pair)`            | `Reader(pair)`  |
    /// |-----------------|---------------------|---------------------------|-----------------|
    /// | `Acquire`       | acquire `keys`      | acquire the writer's key  | `ReadAcquire`   |
    /// | `AcquireFenced` | fenced acquire      | fenced acquire            | refused         |
    /// | `Extend`        | extend              | extend                    | `ReadExtend`    |
    /// | `Release`       | release             | release                   | `ReadRelease`   |
    /// | `RaiseFence`    | raise the fence     | raise the fence           | refused         |
    /// | `Admit`         | refused             | `Admit`                   | refused         |
    ///
    /// # Errors
    ///
    /// [`Impossible`] for a pair that has no op: a reader has no fence
    /// and is never admitted, and only a read-write lock's writer is
    /// admitted. Such a pair is never sent as another op: the node
    /// answers it with this error, as a failure (see `Batch`).
    pub(crate) fn op<'a>(
        self,
        hold: &'a Hold,
        token: &'a [u8],
        counters: &'a [u8],
    ) -> Result<Op<'a>, Impossible> {
        use Action::{Acquire, AcquireFenced, Admit, Extend, RaiseFence, Release};
        let impossible = Impossible {
            action: self,
            hold: hold.kind(),
        };
        Ok(match (self, hold) {
            (Acquire { ttl }, Hold::Lock(keys)) => Op::acquire(keys, token, ttl),
            (AcquireFenced { ttl }, Hold::Lock(keys)) => {
                Op::acquire_fenced(keys, token, ttl, counters)
            }
            (Extend { ttl }, Hold::Lock(keys)) => Op::extend(keys, token, ttl),
            (Release, Hold::Lock(keys)) => Op::release(keys, token),
            (RaiseFence(fence), Hold::Lock(keys)) => Op::raise_fence(keys, token, counters, fence),
            (Admit { .. }, Hold::Lock(_)) => return Err(impossible),
            // The writer's key is a lock's key, and the writer alone is
            // admitted: only while it holds that key and no reader is left.
            (Acquire { ttl }, Hold::Writer(pair)) => Op::acquire(pair.writer(), token, ttl),
            (AcquireFenced { ttl }, Hold::Writer(pair)) => {
                Op::acquire_fenced(pair.writer(), token, ttl, counters)
            }
            (Extend { ttl }, Hold::Writer(pair)) => Op::extend(pair.writer(), token, ttl),
            (Release, Hold::Writer(pair)) => Op::release(pair.writer(), token),
            (RaiseFence(fence), Hold::Writer(pair)) => {
                Op::raise_fence(pair.writer(), token, counters, fence)
            }
            (Admit { ttl }, Hold::Writer(pair)) => {
                Op::admit(pair.writer(), token, ttl, pair.readers().first())
            }
            // A reader's entry among the readers.
            (Acquire { ttl }, Hold::Reader(pair)) => {
                Op::read_acquire(pair.readers(), token, ttl, pair.writer().first())
            }
            (Extend { ttl }, Hold::Reader(pair)) => Op::read_extend(pair.readers(), token, ttl),
            (Release, Hold::Reader(pair)) => Op::read_release(pair.readers(), token),
            (AcquireFenced { .. } | RaiseFence(_) | Admit { .. }, Hold::Reader(_)) => {
                return Err(impossible);
            }
        })
    }

    /// What an answer to this acquire-like action on `hold` tells the
    /// waiters, by the keys they listen on: a refusal names the holder of
    /// the first (the keys an acquire takes as a lock: a lock's, a
    /// writer's intent); a grant says the second were free there. A
    /// reader's acquire and the writer's admission read both keys of
    /// their lock, and their refusals (the writer's holder, the last
    /// reader to leave) are told to nobody.
    pub(crate) fn told_waiters(self, hold: &Hold) -> (Option<&KeySet>, &KeySet) {
        match (self, hold) {
            (Self::Admit { .. }, Hold::Writer(pair)) | (_, Hold::Reader(pair)) => {
                (None, pair.both())
            }
            (_, Hold::Lock(keys)) => (Some(keys), keys),
            (_, Hold::Writer(pair)) => (Some(pair.writer()), pair.writer()),
        }
    }

    /// Whether the action reads or writes the fence counters.
    pub(crate) fn is_fenced(self) -> bool {
        matches!(self, Self::AcquireFenced { .. } | Self::RaiseFence(_))
    }
}

/// An action that has no op on a hold ([`Action::op`]): refused, never
/// run as another op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Impossible {
    action: Action,
    /// The hold's kind ([`Hold::kind`]).
    hold: &'static str,
}

impl Impossible {
    /// The failure a node reports for it: the op was never sent.
    pub(crate) fn error(self) -> BackendError {
        BackendError::new(BackendErrorKind::Other, self.to_string())
    }
}

impl fmt::Display for Impossible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no operation {:?} on {}: refused, never sent",
            self.action, self.hold
        )
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

/// One operation for every node, on what one lease holds.
pub(crate) struct Request<'a> {
    pub(crate) action: Action,
    pub(crate) hold: &'a Hold,
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
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::backend::OpKind;
    use crate::engine::hold::Pair;

    const TTL: Duration = Duration::from_secs(1);

    /// Every action, the fenced and the admission included.
    fn actions() -> [Action; 6] {
        [
            Action::Acquire { ttl: TTL },
            Action::AcquireFenced { ttl: TTL },
            Action::Extend { ttl: TTL },
            Action::Release,
            Action::RaiseFence(7),
            Action::Admit { ttl: TTL },
        ]
    }

    /// The kind and keys of `action` on `hold`, or its refusal.
    fn op(action: Action, hold: &Hold) -> Result<(OpKind<'_>, &KeySet), Impossible> {
        action.op(hold, b"t", b"c").map(|op| (op.kind, op.keys))
    }

    /// A lock and a writer get the lock's kinds on their keys (the
    /// writer's: its own); a reader gets the reader's kinds on the
    /// readers' key, naming the writer's by its role; the admission is
    /// the writer's alone; nothing is turned into another op.
    #[test]
    fn each_hold_gets_its_own_ops_and_the_impossible_pairs_are_refused() {
        let pair = Pair::new(b"k:readers", b"k:writer").unwrap();
        let (readers, writer) = (pair.readers().clone(), pair.writer().clone());
        let plain = KeySet::new(["k:readers", "k:writer"]).unwrap();
        let lock = Hold::Lock(plain.clone());
        let (reader, side) = (Hold::Reader(pair.clone()), Hold::Writer(pair));
        for (hold, keys) in [(&lock, &plain), (&side, &writer)] {
            let expected = [
                OpKind::Acquire { ttl: TTL },
                OpKind::AcquireFenced {
                    ttl: TTL,
                    counter: b"c",
                },
                OpKind::Extend { ttl: TTL },
                OpKind::Release,
                OpKind::RaiseFence {
                    counter: b"c",
                    fence: 7,
                },
            ];
            for (action, kind) in actions().into_iter().zip(expected) {
                assert_eq!(op(action, hold), Ok((kind, keys)), "{action:?}");
            }
        }
        let refused = op(Action::Admit { ttl: TTL }, &lock).unwrap_err();
        assert!(refused.to_string().contains("a lock"), "{refused}");
        assert_eq!(
            op(Action::Admit { ttl: TTL }, &side),
            Ok((
                OpKind::Admit {
                    ttl: TTL,
                    readers: b"k:readers"
                },
                &writer
            ))
        );
        let read = [
            Some(OpKind::ReadAcquire {
                ttl: TTL,
                writer: b"k:writer",
            }),
            None,
            Some(OpKind::ReadExtend { ttl: TTL }),
            Some(OpKind::ReadRelease),
            None,
            None,
        ];
        for (action, kind) in actions().into_iter().zip(read) {
            match kind {
                Some(kind) => assert_eq!(op(action, &reader), Ok((kind, &readers))),
                None => {
                    let refused = op(action, &reader).unwrap_err();
                    assert!(refused.to_string().contains("reader"), "{refused}");
                    assert_eq!(refused.error().kind(), BackendErrorKind::Other);
                }
            }
        }
        assert!(op(Action::Release, &reader).unwrap().0.is_release());
        // A release and an extend exist on every hold: a kept release is
        // always sent again, an extend always reaches the nodes.
        for hold in [&lock, &reader, &side] {
            assert!(op(Action::Release, hold).is_ok());
            assert!(op(Action::Extend { ttl: TTL }, hold).is_ok());
            assert!(op(Action::Acquire { ttl: TTL }, hold).is_ok());
        }
    }
}
