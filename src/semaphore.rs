//! A counting semaphore over the same quorum: at most `permits` holders of
//! one name across every process, built from `permits` ordinary Redlock
//! locks (the slots `name:0` .. `name:{permits-1}`).
//!
//! The obvious quorum semaphore, a count of at most K per node and a
//! majority of nodes, is **unsafe**: with 3 nodes and K = 2, holders A, B
//! and C can each be counted on a different pair of nodes (A on 1 and 2, B
//! on 2 and 3, C on 1 and 3): every node counts two, every holder has a
//! majority, and three hold a permit. With slots, a permit *is* a lock on
//! one slot, so each slot has at most one valid holder (the Redlock
//! guarantee, with every protection of this crate: quarantine, fencing,
//! validity), and K slots have at most K. docs/safety.md carries the
//! argument; `src/redlock/checks/semaphore.rs` shows the naive rule failing
//! and the slots holding, exhaustively for small bounds.

use std::time::Instant;

use crate::backend::KeySet;
use crate::backend::keyset::MAX_SET_SIZE;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::{LockOptions, RetryPolicy};
use crate::trace::Call;
use crate::waiting::{Tried, Waiting};

/// Most permits one semaphore may have: a scan tries one slot per round, so
/// a full semaphore of K permits costs K rounds per attempt.
pub const MAX_PERMITS: u32 = 1024;

/// At most [`permits`](Self::permits) holders of one name across every
/// process that uses the same nodes. Made by [`LockManager::semaphore`].
///
/// A permit is a [`LockGuard`] on one of the semaphore's slots: it has a
/// validity, extends (also automatically), fences, releases on drop and
/// can be lost, exactly like a lock.
///
/// ```
/// use quorum_lock::{LockManager, MemoryBackend};
///
/// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
/// let uploads = locks.semaphore("uploads", 2)?;
/// let first = uploads.try_acquire()?;
/// let second = uploads.try_acquire()?;
/// assert!(uploads.try_acquire().unwrap_err().is_contended()); // both permits held
/// drop(first);
/// let third = uploads.try_acquire()?; // a permit is free again
/// assert_ne!(second.resource(), third.resource());
/// # Ok::<(), quorum_lock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    locks: LockManager,
    name: Vec<u8>,
    permits: u32,
}

impl LockManager {
    /// A semaphore named `name` with `permits` permits: at most that many
    /// holders at a time, across every process using these nodes with the
    /// same prefix. Its permits are the locks `name:0` .. `name:{permits-1}`
    /// (a plain lock on one of those names contends with that permit).
    ///
    /// All processes must use the same `permits` for a name: one that asks
    /// for more uses more slots, and the bound is then the larger count.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, zero permits or more
    /// than [`MAX_PERMITS`], or a name whose slot names (`name:slot`) would
    /// be over [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes. No node
    /// is contacted.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(invalid("the semaphore's name is empty".into()));
        }
        if permits == 0 || permits > MAX_PERMITS {
            return Err(invalid(format!(
                "a semaphore needs 1 to {MAX_PERMITS} permits, not {permits}"
            )));
        }
        let semaphore = Semaphore {
            locks: self.clone(),
            name: name.to_vec(),
            permits,
        };
        // Its longest slot name must be a resource a lock can have.
        self.check_resource(&semaphore.slot_resource(permits - 1))?;
        Ok(semaphore)
    }
}

impl Semaphore {
    /// How many holders it allows.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Its name, as given.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The lock name of slot `slot` (`name:slot`).
    pub fn slot_resource(&self, slot: u32) -> Vec<u8> {
        let mut resource = self.name.clone();
        resource.push(b':');
        resource.extend_from_slice(slot.to_string().as_bytes());
        resource
    }

    /// One scan of the slots (one attempt on each, starting at a random
    /// one, until one is taken) with the manager's default options.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] when every slot was held (its report is the
    /// last slot's); a slot that could not be judged (too few nodes
    /// answered) gives that slot's error instead; otherwise as
    /// [`LockManager::try_lock`].
    pub fn try_acquire(&self) -> Result<LockGuard> {
        self.acquire_with(&LockOptions::new().retry(RetryPolicy::none()))
    }

    /// Takes a permit, waiting while every permit is held, as
    /// [`LockManager::lock`] waits for a lock: with the manager's default
    /// options and retry policy (by default for up to 60 s).
    ///
    /// ```
    /// use std::thread;
    ///
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let locks = LockManager::builder()
    ///     .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
    ///     .build()?;
    /// let uploads = locks.semaphore("uploads", 1)?;
    /// let held = uploads.acquire()?;
    /// let waiter = {
    ///     let uploads = uploads.clone();
    ///     thread::spawn(move || uploads.acquire().map(|permit| permit.release()))
    /// };
    /// drop(held); // frees the permit: the waiter takes it
    /// let report = waiter.join().unwrap()??;
    /// // Released on a quorum at least (a node that answers after the
    /// // node timeout, on a busy machine, is not counted).
    /// assert!(report.granted() >= report.quorum());
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire_with`](Self::acquire_with).
    pub fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(&LockOptions::new())
    }

    /// Takes a permit with `options` (TTL, auto-extension, fencing,
    /// cancellation as for a lock): scans the slots, and while every slot
    /// is held waits between scans as `options`' retry policy says, until
    /// its wait budget is spent (by default 60 s, as
    /// [`LockManager::lock`]). As a lock waiter, it listens for release
    /// notices: a slot released in another process ends the wait early
    /// (for a semaphore of up to [`MAX_SET_SIZE`](crate::MAX_SET_SIZE)
    /// permits; a larger one waits out its delays).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire) once the budget is spent;
    /// [`Error::Cancelled`] once the cancellation token is cancelled; an
    /// error that retrying cannot fix (an invalid TTL, an ACL refusal) at
    /// once; [`Error::Deadlock`] at once, before any node is contacted,
    /// when this thread holds every permit through this manager (it would
    /// wait for itself).
    pub fn acquire_with(&self, options: &LockOptions) -> Result<LockGuard> {
        let mut scans = 0;
        crate::trace::take(Call::Acquire, self.locks.quorum(), &mut scans, |scans| {
            self.acquire_counting(options, scans)
        })
    }

    /// [`acquire_with`](Self::acquire_with), counting its scans in `scans`.
    fn acquire_counting(&self, options: &LockOptions, scans: &mut u32) -> Result<LockGuard> {
        crate::trace::resource(&self.name);
        let mut waiting = Waiting::new(
            options,
            self.locks.retry(),
            self.locks.default_wait(),
            scans,
        );
        // Each slot gets exactly one attempt per scan: the semaphore does
        // its own waiting, between scans.
        let once = options.clone().retry(RetryPolicy::none());
        // A single attempt scans every slot once; a wait stops a scan (of
        // a large semaphore) when its budget is spent.
        let stop = match waiting.single_attempt() {
            true => None,
            false => waiting.deadline(),
        };
        // A wait while this thread holds every permit would wait for
        // itself (one scan cannot deadlock: it says what the servers say).
        // A cancelled token is answered first, as a lock does.
        waiting.check_cancelled()?;
        if !waiting.single_attempt() && self.every_permit_held_by_this_thread() {
            return Err(Error::Deadlock {
                resource: String::from_utf8_lossy(&self.name).into_owned(),
            });
        }
        // Wake-ups, as for a lock: after the first full scan, listen for
        // the release of any slot and scan once more at once (that catches
        // a release made before the subscription); then wait between scans
        // for a slot's release notice, the delay or the cancellation. (A
        // semaphore of more than `MAX_SET_SIZE` permits waits out its
        // delays.)
        let rounds = self.locks.core().rounds();
        // The slots' keys are built only once a scan has failed: a
        // permit taken at once costs nothing more.
        let listen = || match self.permits as usize <= MAX_SET_SIZE {
            true => KeySet::new((0..self.permits).map(|slot| self.slot_resource(slot)))
                .map(|slots| rounds.keys_for(&slots)),
            false => None,
        };
        waiting.until_done(rounds, listen, None, |_| Tried::of(self.scan(&once, stop)))
    }

    /// Whether this thread holds a valid lock on every slot, through this
    /// manager.
    fn every_permit_held_by_this_thread(&self) -> bool {
        let rounds = self.locks.core().rounds();
        let now = rounds.now();
        (0..self.permits).all(|slot| {
            let slot = rounds.lock_on(&KeySet::one(self.slot_resource(slot)));
            rounds.owners().held_by_me(&slot, now)
        })
    }

    /// One attempt on each slot, from a random one on, until one is taken
    /// or `stop` passes (at least one slot is always tried).
    fn scan(&self, once: &LockOptions, stop: Option<Instant>) -> Result<LockGuard> {
        let first = random_below(self.permits);
        // The semaphore is full only if every slot tried was held: a slot
        // that could not be judged (no quorum) makes the answer "unknown".
        let (mut held, mut unknown) = (None, None);
        for i in 0..self.permits {
            if i > 0 && stop.is_some_and(|stop| Instant::now() >= stop) {
                break;
            }
            let slot = (first + i) % self.permits;
            match self
                .locks
                .lock_as(Call::TryLock, &self.slot_resource(slot), once)
            {
                Ok(guard) => return Ok(guard),
                Err(e) if e.is_contended() => held = Some(e),
                Err(e) if e.is_retryable() => unknown = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(unknown
            .or(held)
            .unwrap_or_else(|| invalid("no slot was tried".into())))
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

/// A random slot to start a scan at, so that holders spread over the slots
/// instead of all contending for slot 0 first. Not a safety matter: a
/// failing random source starts at 0.
fn random_below(n: u32) -> u32 {
    let mut bytes = [0u8; 4];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u32::from_le_bytes(bytes) % n.max(1),
        Err(_) => 0,
    }
}
