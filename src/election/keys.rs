//! An election's two keys, from its name: checked before any node is
//! contacted.

use crate::backend::KeySet;
use crate::error::{Error, Result};
use crate::manager::LockManager;
use crate::resource::split_by_a_cluster;

/// What the lock key adds to the name: `{name}` first, so that on a
/// cluster node both keys hash to the slot of the name (unless the prefix
/// has a hash tag of its own, which then decides for both), then the
/// crate's mark and the role.
const LOCK: &[u8] = b"}{quorum-lock}:leader";
/// What the record key adds to the name.
const RECORD: &[u8] = b"}{quorum-lock}:record";

/// The kind, as its refusals name it.
const KIND: &str = "election";

/// An election's name and keys.
#[derive(Debug)]
pub(crate) struct Keys {
    /// The name, as given, for the guards' and reports' resource.
    pub(crate) name: KeySet,
    /// The lock key, with the prefix: a lock's key set of one.
    pub(crate) lock: KeySet,
    /// The record key, with the prefix.
    pub(crate) record: Vec<u8>,
    /// Both keys: what an observer waiting for a change listens on (the
    /// lock key's releases, the record key's proclaims).
    pub(crate) watched: KeySet,
}

impl Keys {
    /// The keys of the election `name` on `locks`' nodes.
    pub(crate) fn new(locks: &LockManager, name: &[u8]) -> Result<Self> {
        if name.is_empty() {
            return Err(invalid("the election's name is empty".into()));
        }
        locks.check_resource(name)?;
        let role = |suffix: &[u8]| [b"{", name, suffix].concat();
        let (lock, record) = (role(LOCK), role(RECORD));
        if lock.len().max(record.len()) > crate::MAX_RESOURCE_LEN {
            return Err(invalid(format!(
                "the election's name is {} bytes: its keys add {} to it, over the {} bytes a \
                 resource may have",
                name.len(),
                LOCK.len().max(RECORD.len()) + 1,
                crate::MAX_RESOURCE_LEN
            )));
        }
        let rounds = locks.core().rounds();
        let unprefixed = lock.len();
        let (lock, record) = (rounds.key_for(&lock), rounds.key_for(&record));
        if let Some(reason) = split_by_a_cluster(&lock, lock.len() - unprefixed, KIND) {
            return Err(invalid(reason));
        }
        let watched = KeySet::new([&lock, &record])
            .filter(|both| both.len() == 2)
            .ok_or_else(|| invalid("the election's two keys are the same".into()))?;
        Ok(Self {
            name: KeySet::one(name),
            lock: KeySet::one(lock),
            record,
            watched,
        })
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::MemoryBackend;

    /// Every name, under every prefix, is refused before any node is
    /// contacted or has its two keys in one slot of a cluster.
    #[test]
    fn a_name_keeps_both_keys_in_one_slot_or_is_refused() {
        for prefix in ["", "app:", "app{", "app{}", "app{t}", "}"] {
            let locks = LockManager::builder()
                .node(MemoryBackend::new("a"))
                .prefix(prefix)
                .build()
                .unwrap();
            for name in ["job", "}job", "{", "{}", "a}b", "{tag}x"] {
                match Keys::new(&locks, name.as_bytes()) {
                    Ok(keys) => {
                        let lock = keys.lock.first();
                        assert_ne!(lock, &keys.record[..]);
                        #[cfg(feature = "redis")]
                        {
                            use crate::backend::cluster::slot::slot_of;
                            assert_eq!(slot_of(lock), slot_of(&keys.record), "{prefix} {name}");
                        }
                        assert!(split_by_a_cluster(lock, prefix.len(), KIND).is_none());
                    }
                    Err(Error::InvalidArgument { reason }) => {
                        let refused = prefix == "app{}" || name.starts_with('}');
                        assert!(refused, "{prefix} {name}: {reason}");
                    }
                    Err(e) => panic!("{prefix} {name}: {e}"),
                }
            }
        }
    }
}
