//! Work under a lock ([`LockManager::with_lock`], its form for work that
//! can fail, [`LockManager::with_lock_result`], and the one attempt of
//! the latter, [`LockManager::try_with_lock`]): renewed for as long as the
//! work runs, released after it, and `Err(Lost)` when the lock did not
//! hold.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::{LockOptions, RetryPolicy};

impl LockManager {
    /// Runs `work` while holding `resource` under auto-extension, then
    /// releases it, also when `work` panics (the panic then continues).
    /// Returns what `work` returned, if the lock held until `work` ended.
    ///
    /// If the lock was lost while `work` ran (an extend found no quorum,
    /// or the validity ran out, e.g. through a pause longer than it), the
    /// call returns [`Error::Lost`] and **`work`'s value is dropped**: it
    /// was produced without the exclusivity the lock was meant to give, so
    /// the caller must not treat it as done under the lock. Work whose
    /// value must survive anyway (say, to undo it) should use
    /// [`lock_with`](Self::lock_with) and [`LockGuard::check`] itself.
    ///
    /// The lock is renewed for as long as `work` runs: unless `options`
    /// sets [`max_hold`](LockOptions::max_hold) or
    /// [`max_extensions`](LockOptions::max_extensions), there is no hold
    /// bound here (a nightly job of an hour is normal), unlike
    /// [`lock_with`](Self::lock_with)'s default of 10 minutes.
    ///
    /// `work` gets the guard: call [`LockGuard::check`] before any step
    /// that must not run without the lock (an extend can fail), or watch
    /// [`LockGuard::lost_signal`]. For work that returns a `Result`, see
    /// [`with_lock_result`](Self::with_lock_result) (it waits as this
    /// call does) and [`try_with_lock`](Self::try_with_lock) (one
    /// attempt).
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
    /// let total = locks.with_lock("ledger", &LockOptions::new(), |guard| {
    ///     assert!(guard.is_valid());
    ///     40 + 2
    /// })?;
    /// assert_eq!(total, 42);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Self::lock_with), when the lock cannot be taken;
    /// `work` does not run then. [`Error::Lost`] when the lock was lost
    /// before `work` returned (its value is dropped). A failing release
    /// after `work` is not an error: the keys expire with their TTL.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<T> {
        let mut options = options.clone().auto_extend(true);
        if options.max_hold.is_none() {
            options = options.max_hold(Duration::MAX);
        }
        let guard = self.lock_with(resource, &options)?;
        // On a panic in `work`, unwinding drops the guard, which queues the
        // release on every node.
        let value = work(&guard);
        // Did the lock hold until now? Asked before the release, which
        // ends the lease.
        let held = guard.check();
        // The work is done; a release that no quorum confirmed leaves keys
        // that expire by themselves, so there is nothing for the caller to do.
        let _ = guard.release();
        held.map(|()| value)
    }

    /// [`with_lock`](Self::with_lock) for work that can fail: `work`
    /// returns `Result<T, E>`, and a lock error becomes an `E` too, so one
    /// `?` handles both. It waits for the lock as
    /// [`lock_with`](Self::lock_with) does (the options' retry policy and
    /// wait, else the manager's); for one attempt, see
    /// [`try_with_lock`](Self::try_with_lock).
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// #[derive(Debug)]
    /// enum JobError {
    ///     Lock(quorum_lock::Error),
    ///     Empty,
    /// }
    /// impl From<quorum_lock::Error> for JobError {
    ///     fn from(e: quorum_lock::Error) -> Self {
    ///         JobError::Lock(e)
    ///     }
    /// }
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build().unwrap();
    /// let total: Result<u32, JobError> = locks.with_lock_result("ledger", &LockOptions::new(), |guard| {
    ///     guard.check()?; // a lost lock is a JobError::Lock
    ///     let rows: Vec<u32> = vec![40, 2];
    ///     if rows.is_empty() {
    ///         return Err(JobError::Empty);
    ///     }
    ///     Ok(rows.iter().sum())
    /// });
    /// assert_eq!(total.unwrap(), 42);
    /// ```
    ///
    /// # Errors
    ///
    /// The lock's error (as `E`) when it cannot be taken or was lost while
    /// `work` ran (then `work`'s result, `Ok` or `Err`, is dropped: the
    /// loss is what the caller must know), otherwise `work`'s own.
    pub fn with_lock_result<T, E: From<Error>>(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
        work: impl FnOnce(&LockGuard) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.with_lock(resource, options, work)?
    }

    /// [`with_lock_result`](Self::with_lock_result) with one attempt, as
    /// every `try_` of this crate ([`try_lock`](Self::try_lock),
    /// `try_read`, `try_write`, `try_acquire`): when the lock is held
    /// elsewhere (or no quorum answers) it fails at once, and `work` does
    /// not run. The options' retry policy and
    /// [`wait`](LockOptions::wait) do not apply (one attempt, no waiting
    /// in the local line); the rest of them do (TTL, fencing, the bounds
    /// of auto-extension).
    ///
    /// ```
    /// use quorum_lock::{Error, LockManager, LockOptions, MemoryBackend};
    ///
    /// let node = MemoryBackend::new("mem");
    /// let locks = LockManager::builder().node(node.clone()).build()?;
    /// let other = LockManager::builder().node(node).build()?;
    /// let held = other.try_lock("ledger")?;
    ///
    /// let busy: Result<u32, Error> = locks.try_with_lock("ledger", &LockOptions::new(), |_| Ok(1));
    /// let busy = busy.unwrap_err();
    /// assert!(busy.is_contended());
    /// assert_eq!(busy.report().map(|r| r.attempts()), Some(1));
    ///
    /// held.release()?;
    /// let done: Result<u32, Error> = locks.try_with_lock("ledger", &LockOptions::new(), |_| Ok(2));
    /// assert_eq!(done?, 2);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`with_lock_result`](Self::with_lock_result), after a single
    /// attempt: [`Error::Contended`] (as `E`) when the lock is held
    /// elsewhere, also by this thread.
    pub fn try_with_lock<T, E: From<Error>>(
        &self,
        resource: impl AsRef<[u8]>,
        options: &LockOptions,
        work: impl FnOnce(&LockGuard) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let once = options.clone().retry(RetryPolicy::none());
        self.with_lock_result(resource, &once, work)
    }
}
