//! The synchronisation primitives under the engine's gate
//! ([`engine::gate`](crate::engine)): parking_lot's mutex and std's atomics,
//! or loom's when the crate is built with `--cfg loom`, so that loom can
//! explore every interleaving of the gate's own code (as tokio does with its
//! `loom` facade). Only the gate goes through here: the rest of the crate
//! keeps its locks short and argues about them locally.
//!
//! Run the loom checks with
//! `RUSTFLAGS="--cfg loom" cargo test --lib --no-default-features --target-dir target/loom gate`.

#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use self::checked::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

/// loom's mutex behind parking_lot's signatures (no poisoning: a panic
/// under the lock fails the loom test anyway).
#[cfg(loom)]
mod checked {
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }
}
