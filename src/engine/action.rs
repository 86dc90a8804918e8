//! What one round asks each node to do.

/// What a round asks each node to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `SET NX PX` (or our token already there).
    Acquire,
    /// The same, and read the fence counter beside the lock.
    AcquireFenced,
    /// Compare-and-pexpire.
    Extend,
    /// Compare-and-delete.
    Release,
    /// Raise the fence counter to this value while the lock is ours.
    RaiseFence(u64),
}
