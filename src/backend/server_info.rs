//! What a server says about itself ([`ServerInfo`]): who it is, since when,
//! whether it may evict keys, and its replication role and history.

use std::time::Duration;

/// How old a server's settings that can change at run time (eviction and
/// the count of keys evicted, the replication role and history) may be when a batch is sent: the Redis
/// backend reads them again in the pipeline of the first batch after that
/// age, ahead of its ops, and the engine looks by itself while a lock may
/// be held and no batch brings them.
pub(crate) const SETTINGS_MAX_AGE: Duration = Duration::from_millis(500);

/// What a server says about itself: who it is, how long it has run, and
/// whether it may evict keys.
///
/// `None` fields mean "unknown". Redis reports `run_id` (new at every
/// start) and `uptime_in_seconds` in `INFO server`, `maxmemory` and
/// `maxmemory_policy` in `INFO memory`, `role` and `master_replid` in
/// `INFO replication`, `evicted_keys` in `INFO stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// An identifier that changes whenever the server restarts.
    pub run_id: Option<String>,
    /// How long the server has been up. With whole-second reports (Redis'
    /// `uptime_in_seconds`), the engine credits one second less.
    pub uptime: Option<Duration>,
    /// The memory limit in bytes (`maxmemory`; 0: none).
    pub maxmemory: Option<u64>,
    /// What the server drops when it reaches `maxmemory`
    /// (`maxmemory-policy`, e.g. `noeviction` or `volatile-lru`).
    pub maxmemory_policy: Option<String>,
    /// Whether the server is a replica now (`role` in `INFO replication`):
    /// a master turned replica (`REPLICAOF`, a failover) drops its keys for
    /// its new master's.
    pub replica: Option<bool>,
    /// The server's replication history (`master_replid` in
    /// `INFO replication`): a new one without a restart means the server
    /// took another server's data set or was promoted, so the keys it held
    /// may be gone.
    pub replication_id: Option<String>,
    /// Keys the server has evicted since its start (`evicted_keys` in
    /// `INFO stats`): a count that grew between two reads means keys were
    /// evicted in between, whatever the policy says now.
    pub evicted_keys: Option<u64>,
}

impl ServerInfo {
    /// A server that says who it is (`run_id`, new at every start) and how
    /// long it has been up, when it knows.
    pub fn new(run_id: impl Into<String>, uptime: Option<Duration>) -> Self {
        Self {
            run_id: Some(run_id.into()),
            uptime,
            ..Self::default()
        }
    }

    /// The same, with the memory limit and the eviction policy.
    #[must_use]
    pub fn with_memory(mut self, maxmemory: u64, policy: impl Into<String>) -> Self {
        self.maxmemory = Some(maxmemory);
        self.maxmemory_policy = Some(policy.into());
        self
    }

    /// The same, with its replication role and history.
    #[must_use]
    pub fn with_replication(mut self, replica: bool, replication_id: impl Into<String>) -> Self {
        self.replica = Some(replica);
        self.replication_id = Some(replication_id.into());
        self
    }

    /// The same, with the count of keys evicted since the server started.
    #[must_use]
    pub fn with_evicted_keys(mut self, evicted_keys: u64) -> Self {
        self.evicted_keys = Some(evicted_keys);
        self
    }

    /// The settings that let this server evict lock keys, in words (such as
    /// `maxmemory 4194304, maxmemory-policy volatile-lru`), or `None` when
    /// it cannot (no `maxmemory`, or `noeviction`) or does not say.
    ///
    /// Lock keys carry an expiry and sit idle once written, so every
    /// evicting policy, `volatile-*` and `allkeys-*` alike, drops them
    /// first: the lock is gone on that server while its holder's guard is
    /// still valid. A policy this crate does not know counts as evicting.
    ///
    /// ```
    /// use quorum_lock::backend::ServerInfo;
    ///
    /// let cache = ServerInfo::new("r1", None).with_memory(4 << 20, "volatile-lru");
    /// assert_eq!(cache.eviction().as_deref(), Some("maxmemory 4194304, maxmemory-policy volatile-lru"));
    /// assert_eq!(ServerInfo::new("r2", None).with_memory(4 << 20, "noeviction").eviction(), None);
    /// assert_eq!(ServerInfo::new("r3", None).with_memory(0, "allkeys-lru").eviction(), None);
    /// ```
    pub fn eviction(&self) -> Option<String> {
        let (Some(limit), Some(policy)) = (self.maxmemory, self.maxmemory_policy.as_deref()) else {
            return None;
        };
        (limit > 0 && policy != "noeviction")
            .then(|| format!("maxmemory {limit}, maxmemory-policy {policy}"))
    }
}
