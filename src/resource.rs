//! What a resource name may be: the checks every call that names a lock
//! makes before any node is contacted.

use crate::redlock::FENCE_COUNTERS;

/// The longest resource name a lock may have, in bytes (4 KiB).
///
/// Every lock call checks it before any node is contacted, as it checks the
/// owner label and the set size: a name is sent to every node in every
/// round, and one caller's huge name must never hold up the other callers'
/// batches to those nodes. A semaphore's name leaves room for its slot
/// suffix (`:` and the slot number). The configured prefix is not counted
/// (it is bounded on its own by the builder).
///
/// ```
/// use quorum_lock::{LockManager, MAX_RESOURCE_LEN, MemoryBackend};
///
/// let locks = LockManager::builder()
///     .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
///     .build()?;
/// assert!(locks.try_lock(vec![b'r'; MAX_RESOURCE_LEN]).is_ok());
/// assert!(locks.try_lock(vec![b'r'; MAX_RESOURCE_LEN + 1]).unwrap_err().is_invalid());
/// # Ok::<(), quorum_lock::Error>(())
/// ```
pub const MAX_RESOURCE_LEN: usize = 4096;

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
    if resource == FENCE_COUNTERS {
        return Some(format!(
            "the resource name {} is reserved: the nodes keep the fence counters there",
            String::from_utf8_lossy(FENCE_COUNTERS)
        ));
    }
    None
}
