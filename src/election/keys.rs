//! An election's two keys, from its name: checked before any node is
//! contacted.

use crate::backend::KeySet;
use crate::error::{Error, Result};
use crate::manager::LockManager;

/// What the lock key adds to the name: `{name}` first, so that on a
/// cluster node both keys hash to the slot of the name (unless the prefix
/// has a hash tag of its own, which then decides for both), then the
/// crate's mark and the role.
const LOCK: &[u8] = b"}{quorum-lock}:leader";
/// What the record key adds to the name.
const RECORD: &[u8] = b"}{quorum-lock}:record";

/// An election's name and keys.
#[derive(Debug)]
pub(crate) struct Keys {
    /// The name, as given, for the guards' and reports' resource.
    pub(crate) name: KeySet,
    /// The lock key, with the prefix: a lock's key set of one.
    pub(crate) lock: KeySet,
    /// The record key, with the prefix.
    pub(crate) record: Vec<u8>,
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
        if let Some(reason) = empty_hash_tag(&lock, lock.len() - unprefixed) {
            return Err(invalid(reason));
        }
        Ok(Self {
            name: KeySet::one(name),
            lock: KeySet::one(lock),
            record,
        })
    }
}

/// Why a cluster would put the election's two keys in two slots, if it
/// would (as for a read-write lock's, `rw.rs`): the keys are alike up to
/// the `}` after the name, so their hash tag is the same unless it is
/// empty, which happens when the first `{` is followed at once by `}`.
fn empty_hash_tag(key: &[u8], prefix_len: usize) -> Option<String> {
    let open = key.iter().position(|&b| b == b'{')?;
    if key.get(open + 1) != Some(&b'}') {
        return None;
    }
    let whose = if open < prefix_len {
        "the manager's prefix, whose first `{` is followed by `}`"
    } else {
        "a name that starts with `}`"
    };
    Some(format!(
        "the election's keys would have an empty hash tag (`{{}}`), from {whose}: a Redis \
         cluster would then put its two keys in different slots; name the election without a \
         leading `}}` (and give the prefix no `{{}}`)"
    ))
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
                        assert!(empty_hash_tag(lock, prefix.len()).is_none());
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
