//! Several resources locked at once, all or nothing
//! ([`LockManager::lock_all`]).
//!
//! The set is one lock: one token, one validity, one round per attempt.
//! On each node one script takes every key or none (the node votes for
//! the whole set), and the quorum rule is the same as for one key. Any two
//! majorities share a node, and that node applied the two scripts
//! atomically in some order, so two overlapping sets (or a set and a
//! single lock on one of its resources) are never both held: the second
//! script found a key of the first. Nothing is held while waiting: a
//! failed attempt releases what it took on every node, like a single lock.
//!
//! The set is one [`KeySet`], built here once and carried to the
//! backends, as a single lock's set of one is: the local line, hand-overs,
//! auto-extension, retries of releases and every deadline work as for one
//! key.

use std::collections::BTreeSet;

use crate::backend::KeySet;
use crate::backend::keyset::MAX_SET_SIZE;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::manager::take::measured;
use crate::options::LockOptions;
use crate::trace::Call;

impl LockManager {
    /// Locks every resource of `resources` at once, all or nothing, with
    /// per-call options; the guard holds them together: it extends,
    /// releases and is lost as one lock ([`LockGuard::resources`] lists
    /// them).
    ///
    /// Each node takes every key of the set or none in one atomic script,
    /// and votes for the set as for one key. A single-resource lock on any
    /// of them contends with the set, and so do overlapping sets: never
    /// two holders of one resource, and no deadlock, since nothing is held
    /// while waiting (a failed attempt releases what it took; jittered
    /// retries settle two sets that keep colliding). Duplicates are
    /// removed; one resource is the same as [`lock_with`](Self::lock_with).
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};
    ///
    /// let locks = LockManager::builder()
    ///     .nodes((0..3).map(|i| MemoryBackend::new(format!("n{i}"))))
    ///     .restart_quarantine(false)
    ///     .build()?;
    /// let both = locks.lock_all(["account:7", "account:9"], &LockOptions::new())?;
    /// assert_eq!(both.resources(), [&b"account:7"[..], b"account:9"]);
    /// // Either account alone is taken while the pair is held.
    /// assert!(locks.try_lock("account:9").unwrap_err().is_contended());
    /// both.release()?;
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// With fencing ([`LockOptions::fencing`], or the manager's default),
    /// the set gets one fence that serves every member: it exceeds every
    /// fence any of them had, and each member's counter is raised to it on
    /// a quorum, so each resource still sees its fences increase from one
    /// holder (set or single) to the next. [`LockGuard::fence`] gives it.
    ///
    /// A thread that holds a set and waits for one of its resources (alone
    /// or in another set), or holds a resource and waits for a set with
    /// it, would wait for itself: that is
    /// [`Error::Deadlock`](crate::Error::Deadlock) at once, as for one
    /// lock. A waiter for a set listens for the release of every member:
    /// any of them wakes it. [`inspect`](Self::inspect) looks at one
    /// resource at a time.
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Self::lock_with); [`Error::InvalidArgument`] for
    /// no resources, more than [`MAX_SET_SIZE`] distinct ones (repeats
    /// count once; a list of more than 1,024 names in all, repeats
    /// included, is refused too), or a resource no lock can have (see
    /// [`lock`](Self::lock)), before any node is contacted.
    pub fn lock_all<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
        options: &LockOptions,
    ) -> Result<LockGuard> {
        measured(Call::LockAll, self.quorum(), |rounds| {
            self.take_all(resources, options, rounds)
        })
    }

    fn take_all<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
        options: &LockOptions,
        made: &mut u32,
    ) -> Result<LockGuard> {
        let names = self.distinct_names(resources)?;
        // One resource is a set of one: the same as `lock_with`.
        self.take_keys(&names, options, made)
    }

    /// The distinct names of `resources`, sorted, each checked as a lock's
    /// resource. The cap counts distinct names, so repeats never hide a
    /// member; at most [`MAX_SET_NAMES_READ`] names are read in all, so an
    /// endless list is refused rather than read for ever.
    fn distinct_names<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
    ) -> Result<KeySet> {
        let invalid = |reason: String| Err(Error::InvalidArgument { reason });
        let mut names = BTreeSet::new();
        for (read, resource) in resources.into_iter().enumerate() {
            if read == MAX_SET_NAMES_READ {
                return invalid(format!(
                    "lock_all reads at most {MAX_SET_NAMES_READ} names, repeats included"
                ));
            }
            let resource = resource.as_ref();
            // Checked before it is copied: a huge name is refused here.
            self.check_resource(resource)?;
            if !names.contains(resource) {
                names.insert(resource.to_vec());
            }
            if names.len() > MAX_SET_SIZE {
                return invalid(format!(
                    "lock_all takes at most {MAX_SET_SIZE} distinct resources at once, \
                     not {} or more",
                    names.len()
                ));
            }
        }
        match KeySet::new(names) {
            Some(set) => Ok(set),
            None => invalid("lock_all needs at least one resource".into()),
        }
    }
}

/// Most names [`LockManager::lock_all`] reads from its list, repeats
/// included (sixteen times the set cap): enough for any list with repeats
/// a program builds on purpose, and a bound on one that never ends.
const MAX_SET_NAMES_READ: usize = MAX_SET_SIZE * 16;
