//! [`LockManagerBuilder`]: every setting with its default, validated by
//! [`build`](LockManagerBuilder::build), which starts the node workers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
#[cfg(feature = "redis")]
use crate::backend::cluster::RedisClusterBackend;
#[cfg(feature = "redis")]
use crate::backend::redis::{RedisBackend, Scripts};
#[cfg(feature = "redis")]
use crate::backend::sentinel::RedisSentinelBackend;
use crate::clock::{Clock, MonotonicClock};
use crate::engine::{Engine, Settings, majority};
use crate::error::{Error, Result};
use crate::manager::LockManager;
use crate::options::RetryPolicy;
use crate::owner;
use crate::redlock::{Config, Core, Rounds, check_ttl, drift};
use crate::resource::{FENCES, MAX_RESOURCE_LEN, PROBE, crate_key};

/// Default lock TTL.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default per-node timeout.
pub(crate) const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default clock-drift factor (the drift allowance is `ttl * factor + 2 ms`).
pub(crate) const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default longest TTL (or extension) a lock may ask for.
pub(crate) const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);
/// The largest `max_ttl` the builder accepts (30 days): far below what the
/// servers' millisecond expiry arithmetic can express.
pub(crate) const MAX_TTL_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);

impl LockManager {
    /// A builder with every setting at its default and no nodes.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }
}

/// Builds a [`LockManager`]; [`build`](Self::build) validates everything.
#[derive(Default)]
pub struct LockManagerBuilder {
    nodes: Vec<NodeSpec>,
    ttl: Option<Duration>,
    max_ttl: Option<Duration>,
    node_timeout: Option<Duration>,
    drift_factor: Option<f64>,
    quorum: Option<usize>,
    prefix: Vec<u8>,
    retry: Option<RetryPolicy>,
    clock: Option<Arc<dyn Clock>>,
    restart_quarantine: Option<bool>,
    fencing: bool,
    accept_eviction_risk: bool,
    owner: Option<String>,
    #[cfg(feature = "redis")]
    scripts: Scripts,
}

/// A configured node, opened at `build` (Redis URLs then get the final
/// per-node timeout).
enum NodeSpec {
    Backend(Arc<dyn Backend>),
    #[cfg(feature = "redis")]
    Redis {
        url: String,
        name: String,
        /// Set at `build`, from [`LockManagerBuilder::scripts`].
        scripts: Scripts,
    },
}

impl NodeSpec {
    fn name(&self) -> String {
        match self {
            Self::Backend(b) => b.describe(),
            #[cfg(feature = "redis")]
            Self::Redis { name, .. } => name.clone(),
        }
    }

    // Only Redis URLs need the timeout; without the feature it goes unused.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    fn open(self, timeout: Duration) -> Result<Arc<dyn Backend>> {
        match self {
            Self::Backend(b) => Ok(b),
            #[cfg(feature = "redis")]
            Self::Redis { url, scripts, .. } => {
                let opened = if crate::backend::cluster::is_cluster_url(&url) {
                    RedisClusterBackend::open(&url, timeout)
                        .map(|b| Arc::new(b.with_scripts(scripts)) as Arc<dyn Backend>)
                } else if crate::backend::sentinel::is_sentinel_url(&url) {
                    RedisSentinelBackend::open(&url, timeout)
                        .map(|b| Arc::new(b.with_scripts(scripts)) as Arc<dyn Backend>)
                } else {
                    RedisBackend::open(&url, timeout)
                        .map(|b| Arc::new(b.with_scripts(scripts)) as Arc<dyn Backend>)
                };
                opened.map_err(|e| Error::Config {
                    reason: e.message().to_owned(),
                })
            }
        }
    }
}

impl LockManagerBuilder {
    /// Adds one lock server. Order is kept in reports.
    #[must_use]
    pub fn node(mut self, backend: impl Backend) -> Self {
        self.nodes.push(NodeSpec::Backend(Arc::new(backend)));
        self
    }

    /// Adds several lock servers.
    #[must_use]
    pub fn nodes<B: Backend>(mut self, backends: impl IntoIterator<Item = B>) -> Self {
        for b in backends {
            self.nodes.push(NodeSpec::Backend(Arc::new(b)));
        }
        self
    }

    /// Adds one Redis master per URL (`redis://[user[:password]@]host[:port][/db]`,
    /// or `rediss://...` with the `tls` feature), or one whole Redis or
    /// Valkey cluster per `redis+cluster://host:port` (`rediss+cluster://`)
    /// URL: one node, one vote ([`RedisClusterBackend`](crate::RedisClusterBackend)),
    /// or one Sentinel-managed master set per
    /// `redis+sentinel://host:port[,host:port...]/MASTER-NAME` URL
    /// (`rediss+sentinel://`): one node, one vote
    /// ([`RedisSentinelBackend`](crate::RedisSentinelBackend)).
    /// Nothing connects yet: a node that is down makes its first
    /// operations fail, not the build. Each node's connect, read and write
    /// timeouts are the per-node timeout.
    ///
    /// ```no_run
    /// use quorum_lock::LockManager;
    ///
    /// let locks = LockManager::builder()
    ///     .redis_nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?
    ///     .build()?;
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL (named with its password
    /// replaced by `***`), or a `rediss://` URL without the `tls` feature.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_nodes<I>(mut self, urls: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for url in urls {
            let url = url.as_ref();
            let node = NodeSpec::Redis {
                url: url.to_owned(),
                name: String::new(),
                scripts: Scripts::Auto,
            };
            let name = node.open(DEFAULT_NODE_TIMEOUT)?.describe();
            self.nodes.push(NodeSpec::Redis {
                url: url.to_owned(),
                name,
                scripts: Scripts::Auto,
            });
        }
        Ok(self)
    }

    /// Default TTL of [`LockManager::lock`]. Default: 10 s.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Longest TTL or extension any lock may ask for. Default: 60 s; at
    /// most 30 days.
    #[must_use]
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = Some(max_ttl);
        self
    }

    /// How long a round waits for each node's answer; keep it small next to
    /// the TTL. Must be below the TTL. Default: 100 ms.
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Clock-drift factor: the validity is `ttl - elapsed - (ttl * factor +
    /// 2 ms)`. In `[0, 1)`. Default: 0.01.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = Some(factor);
        self
    }

    /// Votes needed: at least a majority (N/2 + 1), at most N. Default:
    /// N/2 + 1.
    #[must_use]
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// Prepended to every resource to form the key, at most
    /// [`MAX_RESOURCE_LEN`] bytes. Default: none, so keys interoperate with
    /// other Redlock clients.
    #[must_use]
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// Who this manager's locks name as their holder: the label stored
    /// with every lock it takes (after the token, see
    /// [`LockManager::inspect`]) and shown by `quorum-lock status`.
    /// Default: this host's name and process id, as `host:pid`.
    ///
    /// Anyone who can read the lock's key can read the label, so it must
    /// never carry a secret. At most [`MAX_OWNER_LEN`](crate::MAX_OWNER_LEN)
    /// bytes of printable ASCII (space included); an empty label stores
    /// none. [`build`](Self::build) refuses anything else.
    ///
    /// ```
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let locks = LockManager::builder()
    ///     .node(MemoryBackend::new("a"))
    ///     .owner("nightly-report@build-7")
    ///     .restart_quarantine(false)
    ///     .build()?;
    /// let _guard = locks.lock("report")?;
    /// let seen = locks.inspect("report")?;
    /// assert_eq!(seen.owner(), Some("nightly-report@build-7"));
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    #[must_use]
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.owner = Some(label.into());
        self
    }

    /// Retry policy of [`LockManager::lock`]. Default: [`RetryPolicy::new`]
    /// (retry for up to 60 s, no attempt cap).
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Restart quarantine: a node whose server restarted, or has been up
    /// for less than `max_ttl` plus drift, does not count towards a quorum
    /// until that much time has passed since its start (it may have
    /// forgotten locks it held). Needs a backend that reports its identity
    /// ([`Backend::probe`](crate::backend::Backend::probe); Redis and
    /// memory nodes do). Switching it off is safe only
    /// when every node persists its keys durably (`appendfsync always`), or
    /// restarts are always delayed by `max_ttl` by the operator. Default: on.
    #[must_use]
    pub fn restart_quarantine(mut self, on: bool) -> Self {
        self.restart_quarantine = Some(on);
        self
    }

    /// Count the grants of servers that may evict lock keys (`maxmemory`
    /// with a `maxmemory-policy` other than `noeviction`). Default: off:
    /// such a server's grants do not count, and a lock that needs them
    /// fails with an error naming the setting and the fix.
    ///
    /// **The risk**: lock keys carry an expiry and sit idle, so an
    /// evicting server drops them first under memory pressure (under
    /// `volatile-*` and `allkeys-*` policies alike). A lock evicted on
    /// enough servers can be taken by a second client while its holder's
    /// guard still reports validity: two holders, with no restart, pause
    /// or clock step. Accept it only when the servers cannot reach
    /// `maxmemory` in practice, or when the work the lock protects is safe
    /// to run twice (or is guarded by [fencing](Self::fencing) at the
    /// resource). [`LockManager::health`](crate::LockManager::health)
    /// shows the setting either way, and a warning is logged once per node.
    #[must_use]
    pub fn accept_eviction_risk(mut self, accept: bool) -> Self {
        self.accept_eviction_risk = accept;
        self
    }

    /// Whether the Redis nodes added by [`redis_nodes`](Self::redis_nodes)
    /// may run Lua scripts (see [`Scripts`]). Default:
    /// [`Scripts::Auto`], each server's own commands
    /// where its version has them (`DELIFEQ`, `SET .. IFEQ`, `MSETEX`:
    /// Valkey 9.1, Redis 8.4), scripts elsewhere. `Scripts::Never` is for an
    /// ACL user denied `@scripting`: what needs a script there (fencing,
    /// release and extend on older servers) fails at once, naming the server
    /// and what it lacks. Nodes added with [`node`](Self::node) keep their
    /// own setting ([`RedisBackend::with_scripts`](crate::RedisBackend::with_scripts)).
    ///
    /// ```
    /// use quorum_lock::{LockManager, Scripts};
    ///
    /// let builder = LockManager::builder()
    ///     .redis_nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?
    ///     .scripts(Scripts::Never);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    #[must_use]
    pub fn scripts(mut self, scripts: Scripts) -> Self {
        self.scripts = scripts;
        self
    }

    /// Give every lock a fencing token unless its
    /// [`LockOptions::fencing`](crate::LockOptions::fencing) says otherwise
    /// (see there). Default: off.
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// The monotonic clock for every validity computation. Default: the
    /// OS monotonic clock. Tests inject a [`ManualClock`](crate::ManualClock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Validates the settings and starts one worker thread per node.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when there are no nodes, a node appears twice, the
    /// quorum is below a majority or above N, the drift factor is outside
    /// `[0, 1)`, the node timeout is zero or not below the TTL, the TTL
    /// is unusable, or the prefix is over [`MAX_RESOURCE_LEN`] bytes.
    pub fn build(self) -> Result<LockManager> {
        let n = self.nodes.len();
        let config_err = |reason: String| Error::Config { reason };
        if n == 0 {
            return Err(config_err("no nodes configured".into()));
        }
        let names: Vec<String> = self.nodes.iter().map(NodeSpec::name).collect();
        for (i, name) in names.iter().enumerate() {
            if let Some(j) = names[..i].iter().position(|other| other == name) {
                return Err(config_err(format!(
                    "node {name} is configured twice (positions {j} and {i}); one server must cast one vote"
                )));
            }
        }
        let quorum = self.quorum.unwrap_or_else(|| majority(n));
        if quorum < majority(n) || quorum > n {
            return Err(config_err(format!(
                "quorum {quorum} is outside {}..={n} for {n} nodes: below a majority two clients could both win",
                majority(n)
            )));
        }
        let drift_factor = self.drift_factor.unwrap_or(DEFAULT_DRIFT_FACTOR);
        if !(0.0..1.0).contains(&drift_factor) {
            return Err(config_err(format!(
                "drift factor {drift_factor} is outside [0, 1)"
            )));
        }
        let max_ttl = self.max_ttl.unwrap_or(DEFAULT_MAX_TTL);
        if max_ttl.is_zero() || max_ttl > MAX_TTL_LIMIT {
            return Err(config_err(format!(
                "max_ttl {max_ttl:?} is outside (0, {MAX_TTL_LIMIT:?}]"
            )));
        }
        let ttl = self.ttl.unwrap_or(DEFAULT_TTL.min(max_ttl));
        check_ttl(ttl, max_ttl, drift_factor).map_err(config_err)?;
        let node_timeout = self.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT);
        if node_timeout.is_zero() || node_timeout >= ttl {
            return Err(config_err(format!(
                "node timeout {node_timeout:?} must be above zero and below the TTL {ttl:?}"
            )));
        }
        if self.prefix.len() > MAX_RESOURCE_LEN {
            return Err(config_err(format!(
                "the prefix is {} bytes long, over the maximum of {MAX_RESOURCE_LEN}",
                self.prefix.len()
            )));
        }
        let owner = self.owner.unwrap_or_else(owner::default_label);
        owner::check_label(&owner).map_err(config_err)?;
        let fence_counters = crate_key(&self.prefix, FENCES);
        let rights_key = crate_key(&self.prefix, PROBE);
        let config = Config {
            ttl,
            max_ttl,
            node_timeout,
            drift_factor,
            quorum,
            prefix: self.prefix,
            fencing: self.fencing,
            clock: self.clock.unwrap_or_else(|| Arc::new(MonotonicClock)),
            owner: owner.clone(),
        };
        #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
        let mut nodes = self.nodes;
        #[cfg(feature = "redis")]
        for node in &mut nodes {
            if let NodeSpec::Redis { scripts, .. } = node {
                *scripts = self.scripts;
            }
        }
        let backends = nodes
            .into_iter()
            .map(|node| node.open(node_timeout))
            .collect::<Result<Vec<_>>>()?;
        let quarantine = self
            .restart_quarantine
            .unwrap_or(true)
            .then(|| max_ttl.saturating_add(drift(max_ttl, drift_factor)));
        if quarantine.is_some() {
            let blind: Vec<String> = backends
                .iter()
                .filter(|b| b.probe().is_none())
                .map(|b| b.describe())
                .collect();
            if !blind.is_empty() {
                return Err(config_err(format!(
                    "node(s) {} cannot report their server's identity \
                     (their Backend::probe is None), so restart quarantine could never \
                     count their grants: report the server's run_id with every batch's \
                     answers and give the backend a probe (Backend::probe), or switch the \
                     quarantine off with LockManagerBuilder::restart_quarantine(false) where \
                     restarts are made safe another way (durable persistence, or restarts \
                     delayed by max_ttl)",
                    blind.join(", ")
                )));
            }
        }
        // Dropping the last handle waits up to two node timeouts (a batch
        // in progress, then the queued releases) for the releases to leave.
        let drain_wait = node_timeout.saturating_mul(2);
        let settings = Settings {
            quorum,
            quarantine,
            max_ttl,
            forget_window: max_ttl.saturating_add(drift(max_ttl, drift_factor)),
            drain_wait,
            clock: Arc::clone(&config.clock),
            fence_counters,
            rights_key,
            accept_eviction: self.accept_eviction_risk,
            value_suffix: owner::value_suffix(&owner),
        };
        let engine = Engine::start(backends, settings)?;
        let core = Core::new(Rounds::new(engine, config));
        Ok(LockManager::new(core, self.retry.unwrap_or_default()))
    }
}

impl fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManagerBuilder")
            .field(
                "nodes",
                &self.nodes.iter().map(NodeSpec::name).collect::<Vec<_>>(),
            )
            .field("ttl", &self.ttl)
            .field("quorum", &self.quorum)
            .finish_non_exhaustive()
    }
}
