//! [`RedisClusterBackend`]: a whole Redis or Valkey cluster as one lock
//! node (one vote), each key's ops sent to the master of its slot.
//!
//! * **Routing**: the slot map comes from `CLUSTER SLOTS` (asked of the
//!   seed, or of any master known before), read at the first batch, at
//!   the batch after a master was out of reach (a failover may have moved
//!   its slots) or counted other replicas than the map, and again when a
//!   server answers `MOVED` (the op did not run there). `ASK` (a slot
//!   being migrated, the key not on its old master) names the importing
//!   master, which serves the key after `ASKING` (`redis/asking.rs`).
//!   The redirected ops of a batch are followed once, within the call:
//!   each at its new master, the ops bound for one master in one
//!   pipeline in the batch's order, whatever mix of `MOVED` and `ASK`
//!   brought them (an op never overtakes an earlier op of its slot).
//! * **A bounded call**: every call ends by one deadline, four node
//!   timeouts from its start ([`Backend::call_timeout`]).
//! * **Identity per shard**: each shard master answers with its own
//!   identity ([`Answers::per_answer`]), so the engine judges each grant
//!   by the server that gave it: a restarted master's grants wait out the
//!   restart quarantine, the other shards' grants still count.
//! * **Replicas**: a hold (acquire, extend, fence raise) counts only
//!   when every replica of its shard acknowledged the write: as many as
//!   the master itself counts when it wrote it (`INFO replication`) and
//!   as the cluster lists (`WAIT`, in the same pipeline, within the
//!   timeout), however old the slot map: a replica promoted by a failover
//!   then holds the key. A shard whose replicas do not all answer grants
//!   nothing.
//! * **One slot per op**: a lock on several keys needs them in one slot
//!   (a common hash tag); a lock's fence counters live in its slot
//!   (`<prefix>{<tag>}{quorum-lock}:fences`, `counter_in_slot`).
//! * **Release notices**: the release script's `PUBLISH` reaches every
//!   node's subscribers, so the listener subscribes on the seed.
//!
//! What this promises and what it does not: `docs/safety.md`, "A cluster
//! as one node".

mod flight;
mod router;
pub(crate) mod slot;
mod topology;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::backend::redis::{RedisBackend, Scripts};
use crate::backend::{
    Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, Op, Probe,
    ReleaseListener, ServerInfo,
};

use self::flight::{CALL_TIMEOUTS, ClusterFlight};
use self::router::{Cluster, MAP_READ_TIMEOUTS, State};

/// The URL schemes of a cluster node.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// A Redis or Valkey cluster as one lock node: one vote, each key served
/// by the master of its slot, each grant judged by the shard that gave it.
///
/// Cheap to clone (clones share the slot map and the shards' pools). Its
/// `Debug` output and its errors never show the password.
///
/// ```no_run
/// use std::time::Duration;
/// use quorum_lock::RedisClusterBackend;
/// use quorum_lock::backend::Backend;
///
/// let node = RedisClusterBackend::open("redis+cluster://:secret@10.0.0.1:7000", Duration::from_millis(100))?;
/// assert_eq!(node.describe(), "redis+cluster://:***@10.0.0.1:7000/0");
/// # Ok::<(), quorum_lock::backend::BackendError>(())
/// ```
#[derive(Clone)]
pub struct RedisClusterBackend {
    inner: Arc<Cluster>,
}
/// Whether `url` names a cluster node (`redis+cluster://`, `rediss+cluster://`).
pub(crate) fn is_cluster_url(url: &str) -> bool {
    SCHEMES.iter().any(|(cluster, _)| url.starts_with(cluster))
}

impl RedisClusterBackend {
    /// Prepares a cluster node from one seed address, without connecting:
    /// `redis+cluster://[user[:password]@]host[:port][/db]`, or
    /// `rediss+cluster://...` for TLS to every shard (the `tls` feature).
    /// Credentials, TLS and `timeout` apply to every shard; `timeout`
    /// bounds each round trip.
    ///
    /// # Errors
    ///
    /// [`BackendErrorKind::Config`] for a URL of another scheme, or one
    /// [`RedisBackend::open`] refuses (the message never shows the
    /// password).
    pub fn open(url: &str, timeout: Duration) -> Result<Self, BackendError> {
        let Some((cluster, plain)) = SCHEMES.iter().find(|(c, _)| url.starts_with(c)) else {
            return Err(BackendError::new(
                BackendErrorKind::Config,
                "a cluster node's URL starts with redis+cluster:// or rediss+cluster://",
            ));
        };
        let seed = RedisBackend::open(&format!("{plain}{}", &url[cluster.len()..]), timeout)?;
        Ok(Self::from_seed(seed))
    }

    fn from_seed(seed: RedisBackend) -> Self {
        let shown = seed.url_redacted();
        let described = SCHEMES
            .iter()
            .find_map(|(cluster, plain)| {
                shown
                    .strip_prefix(plain)
                    .map(|rest| format!("{cluster}{rest}"))
            })
            .unwrap_or_else(|| shown.to_owned());
        Self {
            inner: Arc::new(Cluster {
                seed,
                described,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The same cluster with ops run as [`Scripts`] says, on every shard
    /// (see [`RedisBackend::with_scripts`]).
    #[must_use]
    pub fn with_scripts(self, scripts: Scripts) -> Self {
        Self::from_seed(self.inner.seed.clone().with_scripts(scripts))
    }

    /// The node's URL without the password, as [`describe`](Backend::describe).
    pub fn url_redacted(&self) -> &str {
        &self.inner.described
    }
}

impl fmt::Debug for RedisClusterBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClusterBackend")
            .field("url", &self.inner.described)
            .field("shards", &self.inner.state.lock().shards.len())
            .finish()
    }
}

impl Backend for RedisClusterBackend {
    fn describe(&self) -> String {
        self.inner.described.clone()
    }

    /// Reads the slot map if it has none (or it is stale), sends each
    /// shard its ops in one pipeline, and returns; [`InFlight::finish`]
    /// reads them, and follows the redirects once (`MOVED` after reading
    /// the map again, `ASK`), in the batch's order.
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        Box::new(ClusterFlight::send(Arc::clone(&self.inner), ops))
    }

    /// Four timeouts: every call ends by one deadline that far from its
    /// start. Within it, a slot map read (the seed, then every master
    /// known, each at most one timeout, all at most two) and one batch
    /// (its shards' round trips share one timeout); only when a redirect
    /// came within the first timeout, the map again (after a `MOVED`) and
    /// the redirected ops at their new masters (one batch), each step cut
    /// at the deadline.
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.inner.seed.timeout().saturating_mul(CALL_TIMEOUTS))
    }

    fn probe(&self) -> Option<&dyn Probe> {
        Some(self)
    }

    fn inspector(&self) -> Option<&dyn Inspect> {
        Some(self)
    }

    /// A subscriber on the seed: a cluster delivers a `PUBLISH` (the
    /// release script's notice, run on the key's master) to the
    /// subscribers of every node. A release's answer counts the listeners
    /// of its own master only, so another process' waiters are not
    /// counted, and the releaser does not let them go first (notices are
    /// hints either way: a waiter that hears one tries again).
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        self.inner.seed.release_listener()
    }
}

impl Probe for RedisClusterBackend {
    /// The identity of the master of slot 0, after reading the slot map
    /// again: whether the cluster answers. Each batch's answers carry the
    /// identity of each shard that gave them, which is what grants are
    /// judged by.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        let topology = self
            .inner
            .topology(true, self.inner.deadline_in(MAP_READ_TIMEOUTS))?;
        let range = topology.range_of(0).ok_or_else(|| {
            self.inner
                .error(BackendErrorKind::Unreachable, "no master serves slot 0")
        })?;
        Probe::server_info(&self.inner.shard(range)?)
    }
}

impl Inspect for RedisClusterBackend {
    /// Asks the master of the key's slot.
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        let topology = self
            .inner
            .topology(false, self.inner.deadline_in(MAP_READ_TIMEOUTS))?;
        let shard = self.inner.master_of(slot::slot_of(key), &topology)?;
        Inspect::inspect(&shard, key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls_name_a_cluster_without_secrets() {
        let node = RedisClusterBackend::open(
            "redis+cluster://u:s3cret@127.0.0.1:7000/0",
            Duration::from_millis(50),
        )
        .unwrap();
        assert_eq!(node.describe(), "redis+cluster://u:***@127.0.0.1:7000/0");
        assert!(!format!("{node:?}").contains("s3cret"));
        assert!(is_cluster_url("rediss+cluster://h:1"));
        assert!(!is_cluster_url("redis://h:1"));
        let bad = RedisClusterBackend::open("redis://h:1", Duration::from_millis(50)).unwrap_err();
        assert_eq!(bad.kind(), BackendErrorKind::Config);
        let wrong = RedisClusterBackend::open("redis+cluster://:pw@", Duration::from_millis(50));
        assert!(wrong.is_err_and(|e| !e.to_string().contains("pw@")));
    }
}
