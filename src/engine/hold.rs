//! [`Hold`]: what a lease holds on each node, as a value you can see. A
//! lock holds its keys ([`KeySet`]: one, or a set taken as one); a
//! read-write lock's reader holds an entry among the lock's readers, and
//! its writer holds the writer's key, admitted once no reader is left.
//! Both sides name the lock's two keys by role ([`Pair`]).
//!
//! The hold travels with a lease and its ops from where a call enters to
//! the node threads (the rounds, the lease, the local lines, the owners,
//! the release retries, the echoes); `Action::op` turns an action on a
//! hold into the backend's op, one exhaustive match that refuses the
//! pairs that have none.

use std::fmt;
use std::sync::Arc;

use crate::backend::KeySet;

/// What a lease holds on each node.
///
/// Equal, and hashed alike, when the kind and the keys are: a reader and
/// the writer of one read-write lock are two holds, and neither is the
/// lock on the same two keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Hold {
    /// A lock on its keys (a single lock, `lock_all`'s set, a semaphore's
    /// slot): taken, extended, fenced and released on every key as one.
    Lock(KeySet),
    /// A read-write lock's reader: its own entry, with its own expiry,
    /// among the readers, taken only while the writer's key is absent. It
    /// has no fence and is never admitted.
    Reader(Pair),
    /// A read-write lock's writer: the writer's key, a lock's key in every
    /// way (taken as its intent, extended, fenced, released), and the one
    /// hold that is admitted (once no reader is left).
    Writer(Pair),
}

/// A read-write lock's two keys on the nodes, each named by its role: the
/// readers' key and the writer's. Cheap to clone (one reference count).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Pair(Arc<Keys>);

#[derive(PartialEq, Eq, Hash)]
struct Keys {
    /// The readers' key, as a set of one.
    readers: KeySet,
    /// The writer's key, as a set of one.
    writer: KeySet,
    /// Both, as a plain set (a read guard's keys).
    both: KeySet,
}

impl Pair {
    /// The pair of `readers` (the readers' key) and `writer` (the
    /// writer's); `None` when they are the same key.
    pub(crate) fn new(readers: &[u8], writer: &[u8]) -> Option<Self> {
        if readers == writer {
            return None;
        }
        Some(Self(Arc::new(Keys {
            readers: KeySet::one(readers),
            writer: KeySet::one(writer),
            both: KeySet::new([readers, writer])?,
        })))
    }

    /// The readers' key, as a set of one.
    pub(crate) fn readers(&self) -> &KeySet {
        &self.0.readers
    }

    /// The writer's key, as a set of one.
    pub(crate) fn writer(&self) -> &KeySet {
        &self.0.writer
    }

    /// Both keys, as a plain set.
    pub(crate) fn both(&self) -> &KeySet {
        &self.0.both
    }
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("readers", &self.0.readers)
            .field("writer", &self.0.writer)
            .finish()
    }
}

impl Hold {
    /// The keys it holds, for a guard's `keys()`: a lock's keys; a
    /// reader's, both keys of its lock (its entry is among the readers,
    /// and it keeps a writer from being admitted); a writer's, the
    /// writer's key.
    pub(crate) fn keys(&self) -> &KeySet {
        match self {
            Self::Lock(keys) => keys,
            Self::Reader(pair) => pair.both(),
            Self::Writer(pair) => pair.writer(),
        }
    }

    /// The keys whose channels its release announces on: a lock's keys,
    /// a reader's the readers' key, a writer's its own key.
    pub(crate) fn announced_on(&self) -> &KeySet {
        match self {
            Self::Lock(keys) => keys,
            Self::Reader(pair) => pair.readers(),
            Self::Writer(pair) => pair.writer(),
        }
    }

    /// Each member it holds as a hold of its own: a set of several as a
    /// lock on each key (a thread that holds a set holds each of its
    /// resources, and waiting for one of them, alone or in another set,
    /// would wait for itself); anything else as itself.
    pub(crate) fn members(&self) -> impl Iterator<Item = Hold> + '_ {
        // No allocation for a single lock or a read-write lock's side:
        // the hot path.
        let set = match self {
            Self::Lock(keys) if keys.len() > 1 => Some(keys),
            Self::Lock(_) | Self::Reader(_) | Self::Writer(_) => None,
        };
        let whole = set.is_none().then(|| self.clone());
        let each = set.map(|keys| keys.iter().map(|key| Self::Lock(KeySet::one(key))));
        whole.into_iter().chain(each.into_iter().flatten())
    }

    /// The kind, for messages ("a lock", "a read-write lock's reader",
    /// "a read-write lock's writer").
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Lock(_) => "a lock",
            Self::Reader(_) => "a read-write lock's reader",
            Self::Writer(_) => "a read-write lock's writer",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_pair_names_each_key_by_its_role() {
        for (readers, writer) in [("a:r", "a:w"), ("b:w", "b:r")] {
            let pair = Pair::new(readers.as_bytes(), writer.as_bytes()).unwrap();
            assert_eq!(pair.readers().single(), Some(readers.as_bytes()));
            assert_eq!(pair.writer().single(), Some(writer.as_bytes()));
            let reader = Hold::Reader(pair.clone());
            let both = KeySet::new([readers, writer]).unwrap();
            assert_eq!(reader.keys(), &both);
            assert_eq!(reader.announced_on(), pair.readers());
            let side = Hold::Writer(pair.clone());
            assert_eq!(side.keys(), pair.writer());
            assert_eq!(side.announced_on(), pair.writer());
            // Three holds: the reader, the writer, and the plain lock on
            // the same two keys, none equal to another.
            let plain = Hold::Lock(both);
            assert_ne!(reader, side);
            assert_ne!(reader, plain);
            assert_ne!(side, Hold::Lock(pair.writer().clone()));
        }
        assert!(Pair::new(b"k", b"k").is_none());
    }

    #[test]
    fn a_set_holds_each_member_and_anything_else_itself() {
        let set = Hold::Lock(KeySet::new(["a", "b"]).unwrap());
        let members: Vec<Hold> = set.members().collect();
        assert_eq!(
            members,
            [Hold::Lock(KeySet::one("a")), Hold::Lock(KeySet::one("b"))]
        );
        let one = Hold::Lock(KeySet::one("a"));
        assert_eq!(
            one.members().collect::<Vec<_>>(),
            std::slice::from_ref(&one)
        );
        let pair = Pair::new(b"x:readers", b"x:writer").unwrap();
        for side in [Hold::Reader(pair.clone()), Hold::Writer(pair)] {
            assert_eq!(
                side.members().collect::<Vec<_>>(),
                std::slice::from_ref(&side)
            );
        }
    }
}
