//! What a resource name may be: the checks every call that names a lock
//! makes before any node is contacted, and the crate's own namespace on
//! the nodes, which no resource can enter.
//!
//! Every key the crate keeps for itself on a node (today the hash of the
//! fence counters; more to come) is `<prefix>{quorum-lock}:<name>`, built
//! by [`crate_key`]: the manager's prefix, then [`RESERVED`]. On a cluster
//! node the fence counters of a lock live in its key's slot, at
//! `<prefix>{<the key's hash tag>}{quorum-lock}:fences`. A resource that
//! contains [`RESERVED`] anywhere is refused, so no lock's key is ever one
//! of the crate's own keys, whatever `<name>` a later version adds: each
//! of them holds `{quorum-lock}` after the prefix, and a lock's key holds
//! it nowhere after the prefix.

/// The longest resource name a lock may have, in bytes (4 KiB).
///
/// Every lock call checks it before any node is contacted, as it checks the
/// owner label and the set size: a name is sent to every node in every
/// round, and one caller's huge name must never hold up the other callers'
/// batches to those nodes. A semaphore's name leaves room for its slot
/// suffix (`:` and the slot number). The configured prefix is not counted
/// (it is bounded on its own by the builder).
///
/// Besides the length, a resource may not be empty, nor contain
/// `{quorum-lock}`: the crate's own keys on the nodes, such as the fence
/// counters (`<prefix>{quorum-lock}:fences`, or on a cluster node
/// `<prefix>{<tag>}{quorum-lock}:fences` in the lock's slot), hold it.
///
/// ```
/// use quorum_lock::{LockManager, MAX_RESOURCE_LEN, MemoryBackend};
///
/// let locks = LockManager::builder()
///     .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
///     .build()?;
/// assert!(locks.try_lock(vec![b'r'; MAX_RESOURCE_LEN]).is_ok());
/// assert!(locks.try_lock(vec![b'r'; MAX_RESOURCE_LEN + 1]).unwrap_err().is_invalid());
/// assert!(locks.try_lock("{quorum-lock}:mine").unwrap_err().is_invalid());
/// assert!(locks.try_lock("{orders}{quorum-lock}:fences").unwrap_err().is_invalid());
/// # Ok::<(), quorum_lock::Error>(())
/// ```
pub const MAX_RESOURCE_LEN: usize = 4096;

/// The crate's own namespace on the nodes, after the manager's prefix: no
/// resource may contain it.
pub(crate) const RESERVED: &[u8] = b"{quorum-lock}";

/// The name of the hash of the fence counters in the crate's namespace:
/// its key is `<prefix>{quorum-lock}:fences` (see `redlock/fencing.rs`).
pub(crate) const FENCES: &str = "fences";

/// The names of readiness probe locks in the crate's namespace:
/// `<prefix>{quorum-lock}:ready:<random>` (see `ready.rs`).
pub(crate) const READY: &str = "ready";

/// The names of the keys a node's thread takes to try what locks need
/// on a node whose access rules refused an operation:
/// `<prefix>{quorum-lock}:probe:<random>` (see `engine/node/rights.rs`).
pub(crate) const PROBE: &str = "probe";

/// The key on the nodes of the crate's own `name`, for a manager with
/// `prefix`: `<prefix>{quorum-lock}:<name>`.
pub(crate) fn crate_key(prefix: &[u8], name: &str) -> Vec<u8> {
    [prefix, RESERVED, b":", name.as_bytes()].concat()
}

/// Why a cluster would put the two keys of a kind named `{name}` (a
/// read-write lock's, an election's) in two slots, if it would: `key` is
/// one of them (after the manager's prefix, `prefix_len` bytes), and
/// `kind` names the kind in the message ("read-write lock", "election").
/// The keys are `<prefix>{<name>}{quorum-lock}:<role>`, alike up to the
/// `}` after the name, so their hash tag (the bytes between the first `{`
/// and the first `}` after it) is the same, and so is their slot, unless
/// that tag is empty: each whole key is then hashed. That happens when
/// the first `{` is followed at once by `}`: a name that starts with `}`
/// (the first `{` being the one before the name), or a prefix whose own
/// first `{` is followed by `}`.
pub(crate) fn split_by_a_cluster(key: &[u8], prefix_len: usize, kind: &str) -> Option<String> {
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
        "the {kind}'s keys would have an empty hash tag (`{{}}`), from {whose}: a Redis \
         cluster would then hash each key whole and put the two in different slots, where no \
         call can take them together; give the {kind} a name without a leading `}}` (and the \
         prefix no `{{}}`)"
    ))
}

/// Why `resource` cannot name a lock, if it cannot.
pub(crate) fn invalid_resource(resource: &[u8]) -> Option<String> {
    if resource.is_empty() {
        return Some("the resource name is empty".into());
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Some(format!(
            "the resource name is {} bytes long, over the maximum of {MAX_RESOURCE_LEN}",
            resource.len()
        ));
    }
    if resource.windows(RESERVED.len()).any(|w| w == RESERVED) {
        let shown = String::from_utf8_lossy(&resource[..resource.len().min(64)]);
        let cut = if resource.len() > 64 { "..." } else { "" };
        return Some(format!(
            "the resource name {shown:?}{cut} contains {}, which marks the crate's own \
             keys on the nodes (such as the fence counters): no lock may use it",
            String::from_utf8_lossy(RESERVED)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_keys_live_in_the_namespace_no_resource_enters() {
        let fences = crate_key(b"locks:", FENCES);
        assert_eq!(fences, b"locks:{quorum-lock}:fences");
        assert_eq!(crate_key(b"", FENCES), b"{quorum-lock}:fences");
        for reserved in [
            &b"{quorum-lock}:fences"[..],
            b"{quorum-lock}",
            b"{quorum-lock}x",
            b"x{quorum-lock}",
            b"{orders}{quorum-lock}:fences",
        ] {
            let reason = invalid_resource(reserved).expect("refused");
            assert!(reason.contains("{quorum-lock}"), "{reason}");
            assert!(!reason.contains('\n'), "{reason}");
        }
        for fine in [
            &b"quorum-lock"[..],
            b"{quorum-lock",
            b"quorum-lock}",
            b"\xffquorum-lock:set\xff",
        ] {
            assert_eq!(invalid_resource(fine), None, "{fine:?}");
        }
        let long = [RESERVED, &[b'x'; 500][..]].concat();
        let reason = invalid_resource(&long).expect("refused");
        assert!(reason.len() < 300, "{reason}");
    }
}
