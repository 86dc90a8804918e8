//! [`LockManager::check_ready`]: whether a lock can be taken now, asked of
//! the servers with a probe lock of the crate's own.

use crate::backend::KeySet;
use crate::error::Result;
use crate::manager::LockManager;
use crate::report::Report;
use crate::resource::{READY, RESERVED};
use crate::token::random_u64;

impl LockManager {
    /// Whether a lock can be taken and kept now: takes a probe lock,
    /// extends it and releases it, as any lock would (`SET NX PX`, the
    /// extend and release scripts), on every node. `Ok` with the release's
    /// per-node report when all three reached a quorum; otherwise the error
    /// of the step that failed, naming each node and why (the probe lock
    /// is released in any case).
    ///
    /// This is the readiness check to give a load balancer or an
    /// orchestrator. [`health()`](Self::health) contacts no server and
    /// knows only what the last operations showed: it stops counting a
    /// node that is out of reach or refuses everything (a wrong password,
    /// a database it does not have, not a Redis server), but a failure
    /// tied to keys says nothing of the node: an ACL user whose key
    /// pattern does not cover the configured prefix gets `NOPERM` on
    /// every lock while every node is up. The probe lock's key is under
    /// the manager's prefix, so that case fails here.
    ///
    /// The probe lock is `<prefix>{quorum-lock}:ready:<random>` (the
    /// crate's own namespace, which no resource can enter), a new name
    /// per call so that checks from several processes never contend; it
    /// lives for the manager's TTL at most and is released at once. It
    /// costs three rounds (one round trip each) and counts in
    /// [`health()`](Self::health)`.locks` like any lock. Restart
    /// quarantine applies: a fresh server is not ready until its grants
    /// count.
    ///
    /// ```
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("n{i}"))).collect();
    /// let locks = LockManager::builder().nodes(nodes.iter().cloned()).build()?;
    /// assert_eq!(locks.check_ready()?.granted(), 3);
    ///
    /// nodes[0].set_down(true);
    /// nodes[1].set_down(true);
    /// let not_ready = locks.check_ready().unwrap_err();
    /// assert!(not_ready.is_no_quorum(), "{not_ready}");
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What taking the probe lock gave (`NoQuorum` naming each node's
    /// failure, `ValidityExpired`, `Runtime` when the OS has no
    /// randomness), `Lost` when too few nodes extended it (an ACL without
    /// `PEXPIRE`: every lock would be lost at its first extend), or
    /// `NoQuorum` when its release reached too few nodes.
    pub fn check_ready(&self) -> Result<Report> {
        let rounds = self.core().rounds();
        let name = [
            RESERVED,
            b":",
            READY.as_bytes(),
            b":",
            format!("{:016x}", random_u64()).as_bytes(),
        ]
        .concat();
        let resources = KeySet::one(name);
        let keys = rounds.keys_for(&resources);
        let lease = rounds.acquire_once(&resources, &keys, self.ttl(), false)?;
        let extended = rounds.extend(&lease, self.ttl());
        let released = rounds.release(&lease, None);
        extended.and(released)
    }
}
