//! [`LockManager::inspect`]: reading who holds a lock on every node, and
//! judging the answers ([`Inspection`], in `inspection.rs`).

use crate::error::Result;
use crate::inspection::Inspection;
use crate::manager::LockManager;
use crate::redlock::drift;

impl LockManager {
    /// Who holds `resource`, and for how long: reads the lock's key on
    /// every node (`GET` and `PTTL` in one script; nothing is written) and
    /// judges the answers as a round would.
    ///
    /// [`Inspection::is_held`] when a quorum of nodes holds the key with
    /// the same value; [`Inspection::owner`] is then the holder's label
    /// ([`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner)),
    /// and [`Inspection::time_left`] a conservative bound: the quorum-th
    /// longest time left among those nodes, less the clock drift and the
    /// time the inspection took.
    ///
    /// **Stale by construction**: the lock may change hands as soon as the
    /// nodes were read. Show it to people; never use it to decide that the
    /// caller may act alone (take the lock for that). Restart quarantine is
    /// not applied: a node that restarted empty answers "absent" for a
    /// lock it forgot, so a lock that only quarantine still protects reads
    /// free or split.
    ///
    /// Each node is read after whatever this manager queued there before
    /// (so a lock this thread just took is seen), and answers within twice
    /// the node timeout or counts as failed.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use quorum_lock::inspection::Verdict;
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let locks = LockManager::builder()
    ///     .nodes((0..3).map(|i| MemoryBackend::new(format!("n{i}"))))
    ///     .owner("report-job@host-1")
    ///     .restart_quarantine(false)
    ///     .build()?;
    /// assert_eq!(locks.inspect("report")?.verdict(), Verdict::Free);
    /// let guard = locks.lock("report")?;
    /// let seen = locks.inspect("report")?;
    /// assert!(seen.is_held());
    /// assert_eq!(seen.owner(), Some("report-job@host-1"));
    /// assert!(seen.time_left() > Duration::ZERO && seen.time_left() < locks.ttl());
    /// drop(guard);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// resource no lock can have (empty, too long, or in the crate's own
    /// namespace `{quorum-lock}`, see
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN)), before any node is
    /// contacted. Nodes that fail are part
    /// of the answer ([`KeyState::Failed`](crate::inspection::KeyState::Failed),
    /// [`Verdict::Unknown`](crate::inspection::Verdict::Unknown)), not an
    /// error.
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Inspection> {
        let resource = resource.as_ref();
        self.check_resource(resource)?;
        let rounds = self.core().rounds();
        let config = rounds.config();
        let key = rounds.key_for(resource);
        // On the manager's clock, as the nodes' expiries are.
        let started = rounds.now();
        let answers = rounds
            .engine()
            .inspect(&key, config.node_timeout.saturating_mul(2));
        let took = rounds.now().saturating_duration_since(started);
        let named = rounds
            .engine()
            .node_names()
            .map(str::to_owned)
            .zip(answers)
            .collect();
        let factor = config.drift_factor;
        Ok(Inspection::judge(
            String::from_utf8_lossy(resource).into_owned(),
            config.quorum,
            named,
            |left| drift(left, factor),
            took,
        ))
    }
}
