//! Spans and events through the [`tracing`](https://docs.rs/tracing)
//! facade, with the `tracing` feature: the program installs a subscriber
//! (a log formatter, or `tracing-opentelemetry` to export the spans) and
//! sees each call, its rounds and each node's answer, the waits between
//! attempts and the watchdog's work. Without the feature every function
//! here is empty and inlined away and every type is empty: no cost, and
//! no `tracing` in the dependency tree.
//!
//! One interface, two bodies: `on.rs` with the feature, `off.rs` without.
//! Both are compiled by the checks (clippy with all features and with
//! none), so they cannot drift apart. The names and fields are listed in
//! docs/operations.md. Spans only observe: nothing here is read back by
//! the code that decides.

#[cfg(feature = "tracing")]
mod names;
#[cfg(not(feature = "tracing"))]
mod off;
#[cfg(feature = "tracing")]
mod on;

#[cfg(not(feature = "tracing"))]
pub(crate) use self::off::*;
#[cfg(feature = "tracing")]
pub(crate) use self::on::*;

/// Whether spans are compiled in. A loop that only feeds them runs under
/// `if ON`, a constant: without the feature the compiler removes it.
pub(crate) const ON: bool = cfg!(feature = "tracing");

/// The public call a span stands for (the span's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `LockManager::lock`, `lock_with`.
    Lock,
    /// `LockManager::try_lock`.
    TryLock,
    /// `LockManager::lock_all`.
    LockAll,
    /// A semaphore's `acquire`, `acquire_with`, `try_acquire`.
    Acquire,
    /// A read-write lock's read side.
    Read,
    /// A read-write lock's write side.
    Write,
    /// An election's campaign (taking the election's lock).
    Campaign,
    /// `LockGuard::extend`.
    Extend,
    /// `LockGuard::release`, `release_on_nodes`.
    Release,
}

#[cfg(all(test, not(feature = "tracing")))]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// Without the feature a round, a lease, the engine and the watchdog
    /// keep nothing for spans: every type here is empty.
    #[test]
    fn without_the_feature_nothing_is_kept() {
        assert_eq!(size_of::<Round>(), 0);
        assert_eq!(size_of::<Held>(), 0);
        assert_eq!(size_of::<Nodes>(), 0);
        assert_eq!(size_of::<Pause>(), 0);
        assert_eq!(size_of::<Renewal>(), 0);
    }
}
