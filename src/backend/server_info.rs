//! What a server says about itself ([`ServerInfo`]): who it is, which
//! server and version ([`ServerVersion`]), since when, whether it may evict
//! keys, and its replication role and history.

use std::fmt;
use std::sync::Arc;
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
    pub run_id: Option<Arc<str>>,
    /// How long the server has been up. With whole-second reports (Redis'
    /// `uptime_in_seconds`), the engine credits one second less.
    pub uptime: Option<Duration>,
    /// The memory limit in bytes (`maxmemory`; 0: none).
    pub maxmemory: Option<u64>,
    /// What the server drops when it reaches `maxmemory`
    /// (`maxmemory-policy`, e.g. `noeviction` or `volatile-lru`).
    pub maxmemory_policy: Option<Arc<str>>,
    /// Whether the server is a replica now (`role` in `INFO replication`):
    /// a master turned replica (`REPLICAOF`, a failover) drops its keys for
    /// its new master's.
    pub replica: Option<bool>,
    /// The server's replication history (`master_replid` in
    /// `INFO replication`): a new one without a restart means the server
    /// took another server's data set or was promoted, so the keys it held
    /// may be gone.
    pub replication_id: Option<Arc<str>>,
    /// Keys the server has evicted since its start (`evicted_keys` in
    /// `INFO stats`): a count that grew between two reads means keys were
    /// evicted in between, whatever the policy says now.
    pub evicted_keys: Option<u64>,
    /// Which server this is, and its version (`server_name` and
    /// `valkey_version` in `INFO server` for Valkey, which reports
    /// `redis_version:7.2.4` in every release; `redis_version` for Redis):
    /// what tells whether it has the commands that replace scripts.
    pub version: Option<ServerVersion>,
    /// How many replicas had to acknowledge each hold of the batch that
    /// brought this identity, on a server whose holds are confirmed by
    /// its replicas (a cluster's shard master, a Sentinel node's master):
    /// `Some(0)` when it has none, so its holds are as safe as a plain
    /// server's; `None` on a plain server, or a batch without a hold.
    pub confirming_replicas: Option<usize>,
}

/// Which server a node runs: a product and its version, from `INFO server`.
///
/// ```
/// use quorum_lock::backend::{ServerProduct, ServerVersion};
///
/// let valkey = ServerVersion::new(ServerProduct::Valkey, 9, 1, 2);
/// assert_eq!(valkey.to_string(), "Valkey 9.1.2");
/// assert!(valkey.at_least(ServerProduct::Valkey, 9, 0));
/// assert!(!valkey.at_least(ServerProduct::Redis, 8, 4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerVersion {
    /// Redis or Valkey.
    pub product: ServerProduct,
    /// The major version.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
    /// The patch level.
    pub patch: u32,
}

/// The server software of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerProduct {
    /// Redis (or a server that reports only `redis_version`).
    Redis,
    /// Valkey (`server_name:valkey`).
    Valkey,
}

impl ServerVersion {
    /// A product at a version.
    pub fn new(product: ServerProduct, major: u32, minor: u32, patch: u32) -> Self {
        Self {
            product,
            major,
            minor,
            patch,
        }
    }

    /// Parses `"9.1.2"` (a missing minor or patch counts 0); `None` when
    /// the major is not a number.
    pub fn parse(product: ServerProduct, version: &str) -> Option<Self> {
        let mut parts = version.trim().split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next().and_then(Result::ok).unwrap_or(0);
        let patch = parts.next().and_then(Result::ok).unwrap_or(0);
        Some(Self::new(product, major, minor, patch))
    }

    /// Whether this is `product` at `major.minor` or later.
    pub fn at_least(&self, product: ServerProduct, major: u32, minor: u32) -> bool {
        self.product == product && (self.major, self.minor) >= (major, minor)
    }

    /// What a server of this version can do without a Lua script: the
    /// commands that do the scripts' work (release: `DELIFEQ` on Valkey
    /// 9.0+, `DELEX .. IFEQ` on Redis 8.4+; extend: `SET .. IFEQ` on Valkey
    /// 8.1+ and Redis 8.4+; `lock_all`: `MSETEX` on Valkey 9.1+ and Redis
    /// 8.4+). Fencing needs a script on every server.
    ///
    /// ```
    /// use quorum_lock::backend::{ServerProduct, ServerVersion};
    ///
    /// let valkey_81 = ServerVersion::new(ServerProduct::Valkey, 8, 1, 8).without_scripts();
    /// assert!(valkey_81.extend && !valkey_81.release && !valkey_81.lock_all);
    /// let redis_7 = ServerVersion::new(ServerProduct::Redis, 7, 0, 15).without_scripts();
    /// assert!(!redis_7.extend && !redis_7.release);
    /// ```
    pub fn without_scripts(&self) -> WithoutScripts {
        use ServerProduct::{Redis, Valkey};
        let redis_84 = self.at_least(Redis, 8, 4);
        WithoutScripts {
            release: redis_84 || self.at_least(Valkey, 9, 0),
            extend: redis_84 || self.at_least(Valkey, 8, 1),
            lock_all: redis_84 || self.at_least(Valkey, 9, 1),
        }
    }
}

/// What a server can do without a Lua script: see
/// [`ServerVersion::without_scripts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WithoutScripts {
    /// Release (compare and delete).
    pub release: bool,
    /// Extend (compare and set the expiry, never creating a key).
    pub extend: bool,
    /// Acquire of several keys, all or none (`lock_all`).
    pub lock_all: bool,
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let product = match self.product {
            ServerProduct::Redis => "Redis",
            ServerProduct::Valkey => "Valkey",
        };
        write!(f, "{product} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl ServerInfo {
    /// A server that says who it is (`run_id`, new at every start) and how
    /// long it has been up, when it knows.
    pub fn new(run_id: impl Into<Arc<str>>, uptime: Option<Duration>) -> Self {
        Self {
            run_id: Some(run_id.into()),
            uptime,
            ..Self::default()
        }
    }

    /// The same, with the memory limit and the eviction policy.
    #[must_use]
    pub fn with_memory(mut self, maxmemory: u64, policy: impl Into<Arc<str>>) -> Self {
        self.maxmemory = Some(maxmemory);
        self.maxmemory_policy = Some(policy.into());
        self
    }

    /// The same, with its replication role and history.
    #[must_use]
    pub fn with_replication(mut self, replica: bool, replication_id: impl Into<Arc<str>>) -> Self {
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
