//! The synchronisation primitives under the engine's gate
//! ([`engine::gate`](crate::engine)) and a node's job queue: parking_lot's
//! mutex and condition variable and std's atomics, or loom's when the
//! crate is built with `--cfg loom`, so that loom can explore every
//! interleaving of their own code (as tokio does with its `loom` facade).
//! Only those two go through here: the rest of the crate keeps its locks
//! short and argues about them locally.
//!
//! Run the loom checks with
//! `RUSTFLAGS="--cfg loom" cargo test --lib --no-default-features --target-dir target/loom -- loom_checks wire_order`.

#[cfg(not(loom))]
pub(crate) use self::fast::Condvar;
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use self::checked::Condvar;
#[cfg(loom)]
pub(crate) use self::checked::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

/// parking_lot's condition variable, with the guard passed by value (the
/// signature loom's has).
#[cfg(not(loom))]
mod fast {
    use std::time::Instant;

    use super::MutexGuard;

    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
        }

        /// Waits until notified or `deadline`; the flag says whether it
        /// timed out.
        pub(crate) fn wait_until<'a, T>(
            &self,
            mut guard: MutexGuard<'a, T>,
            deadline: Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            let timed_out = self.0.wait_until(&mut guard, deadline).timed_out();
            (guard, timed_out)
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
    }
}

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

    /// loom's condition variable. loom does not model time: a wait with
    /// a deadline is a wait that only a notification ends, so a model
    /// that loses one deadlocks, which loom reports.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        pub(crate) fn wait_until<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _deadline: std::time::Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            (self.wait(guard), false)
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
    }
}

/// Runs `model` under loom over every interleaving (with at most
/// `preemptions`, if set; a canary on this thread stays in force, as loom
/// runs the model's threads on it) and returns how many executions loom
/// ran and the first violation one of them returned. A violation is
/// returned, not panicked on: a panic inside the model would abort in
/// loom's destructors.
#[cfg(all(test, loom))]
pub(crate) fn explore(
    preemptions: Option<usize>,
    model: impl Fn() -> Option<String> + Sync + Send + 'static,
) -> (usize, Option<String>) {
    use std::sync::{Arc, Mutex};

    let seen: Arc<Mutex<(usize, Option<String>)>> = Arc::default();
    let record = Arc::clone(&seen);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemptions;
    builder.check(move || {
        let violation = model();
        let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
        seen.0 += 1;
        if seen.1.is_none() {
            seen.1 = violation;
        }
    });
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    (seen.0, seen.1.clone())
}

/// Asserts that an [`explore`] of the model `name` found no violation.
#[cfg(all(test, loom))]
#[allow(clippy::print_stdout)] // a test's report
pub(crate) fn assert_clean(name: &str, (executions, violation): (usize, Option<String>)) {
    println!("{name}: loom explored {executions} executions, no violation");
    assert_eq!(violation, None, "{name}: after {executions} executions");
}

/// Runs `explore` with the canary `broken` on and asserts that it found
/// the violation the canary must cause.
#[cfg(all(test, loom))]
#[allow(clippy::print_stdout, clippy::panic)] // a test's report and failure
pub(crate) fn assert_caught(
    broken: crate::canary::Canary,
    explore: impl FnOnce() -> (usize, Option<String>),
) {
    let (executions, violation) = crate::canary::with(broken, explore);
    let Some(violation) = violation else {
        panic!("canary {broken:?}: no violation in {executions} executions");
    };
    println!("canary {broken:?} caught: {violation}");
}
