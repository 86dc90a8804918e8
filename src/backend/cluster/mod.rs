//! [`RedisClusterBackend`]: a whole Redis or Valkey cluster as one lock
//! node (one vote), each key's ops sent to the master of its slot.
//!
//! * **Routing**: the slot map comes from `CLUSTER SLOTS` (asked of the
//!   seed, or of any master known before), read at the first batch, at
//!   the batch after a master was out of reach (a failover may have moved
//!   its slots), and again when a server answers `MOVED` (the op did not
//!   run there): the ops it refused go to the new master once, in their
//!   order, within the call. `ASK` (a slot being migrated, the key not
//!   on its old master) is followed once too: the ops go to the importing
//!   master, each command after `ASKING` (`redis/asking.rs`).
//! * **Identity per shard**: each shard master answers with its own
//!   identity ([`Answers::per_answer`]), so the engine judges each grant
//!   by the server that gave it: a restarted master's grants wait out the
//!   restart quarantine, the other shards' grants still count.
//! * **Replicas**: a hold (acquire, extend, fence raise) on a shard with
//!   replicas counts only when every replica the cluster lists for it
//!   acknowledged the write (`WAIT`, in the same pipeline, within the
//!   timeout): a replica promoted by a failover then holds the key. A
//!   shard whose replicas do not all answer grants nothing.
//! * **One slot per op**: a lock on several keys needs them in one slot
//!   (a common hash tag); a lock's fence counters live in its slot
//!   (`<prefix>{<tag>}{quorum-lock}:fences`, `counter_in_slot`).
//! * **Release notices**: the release script's `PUBLISH` reaches every
//!   node's subscribers, so the listener subscribes on the seed.
//!
//! What this promises and what it does not: `docs/safety.md`, "A cluster
//! as one node".

mod slot;
mod topology;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::redis::redirect::Redirect;
use crate::backend::{
    Answers, Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, Op, OpKind,
    Probe, ReleaseListener, ServerInfo,
};
use crate::{RedisBackend, Scripts};

use self::slot::slot_of;
use self::topology::{Range, Topology};

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

struct Cluster {
    /// The address the node was configured with, with its settings
    /// (credentials, TLS, timeout, scripts): every shard's backend is made
    /// from it.
    seed: RedisBackend,
    described: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    topology: Option<Arc<Topology>>,
    /// The slot map is to be read again before the next batch: a master
    /// could not be reached (it may have failed over).
    stale: bool,
    /// One backend (and pool) per master, by address.
    shards: HashMap<(String, u16), RedisBackend>,
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

impl Cluster {
    /// The slot map: the one read before, unless `fresh` or there is none.
    fn topology(&self, fresh: bool) -> Result<Arc<Topology>, BackendError> {
        let known = {
            let state = self.state.lock();
            match &state.topology {
                Some(topology) if !fresh && !state.stale => return Ok(Arc::clone(topology)),
                _ => state.shards.values().cloned().collect::<Vec<_>>(),
            }
        };
        // The seed first, then any master known before (the seed may be
        // the server that failed).
        let mut last = None;
        for server in std::iter::once(&self.seed).chain(&known) {
            let asked = server.host_port().map_or("", |(host, _)| host);
            let read = server
                .command(redis::cmd("CLUSTER").arg("SLOTS"))
                .and_then(|reply| {
                    Topology::parse(&reply, asked).map_err(|why| {
                        BackendError::new(
                            BackendErrorKind::Protocol,
                            format!("{}: {why}", server.url_redacted()),
                        )
                    })
                });
            match read {
                Ok(topology) => {
                    let topology = Arc::new(topology);
                    let mut state = self.state.lock();
                    state.topology = Some(Arc::clone(&topology));
                    state.stale = false;
                    return Ok(topology);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| self.error(BackendErrorKind::Unreachable, "no server to ask")))
    }

    /// The backend of the master that serves `range`.
    fn shard(&self, range: &Range) -> Result<RedisBackend, BackendError> {
        let mut state = self.state.lock();
        let address = (range.host.clone(), range.port);
        if let Some(shard) = state.shards.get(&address)
            && shard.replicas() == range.replicas
        {
            return Ok(shard.clone());
        }
        let shard = self
            .seed
            .shard_at(&range.host, range.port, range.replicas)?;
        state.shards.insert(address, shard.clone());
        Ok(shard)
    }

    /// The shard that runs `op`: the master of the slot of all its keys
    /// (and of the fence counters it names, `counter_in_slot`).
    fn route(&self, op: &Op<'_>, topology: &Topology) -> Result<RedisBackend, BackendError> {
        let slot = slot_of(op.keys.first());
        if let OpKind::AcquireFenced { counter, .. } | OpKind::RaiseFence { counter, .. } = op.kind
            && slot_of(&counter_in_slot(counter, op.keys)) != slot
        {
            return Err(self.error(
                BackendErrorKind::Other,
                &format!(
                    "the fence counters of {} cannot live in its slot {slot} (its hash tag \
                     holds a brace): name the lock without braces, or with one hash tag",
                    op.keys
                ),
            ));
        }
        if let Some(other) = op.keys.iter().map(slot_of).find(|&s| s != slot) {
            return Err(self.error(
                BackendErrorKind::Other,
                &format!(
                    "the keys of {} are in slots {slot} and {other} of the cluster, and a lock \
                     on several keys takes them in one slot: give them a common hash tag, such \
                     as {{orders}}:1 and {{orders}}:2",
                    op.keys
                ),
            ));
        }
        match topology.range_of(slot) {
            Some(range) => self.shard(range),
            None => Err(self.error(
                BackendErrorKind::Unreachable,
                &format!("no master serves slot {slot} (CLUSTER SLOTS)"),
            )),
        }
    }

    /// Runs the `ASK`-redirected ops at the masters named, each command
    /// after `ASKING`, with a connection of their own; their holds wait
    /// for that master's replicas as the slot map lists them (a master
    /// the map does not list cannot be confirmed: its ops fail).
    fn ask(&self, ops: &[Op<'_>], asked: &[(usize, Redirect)], answers: &mut [Option<Answer>]) {
        let topology = self.state.lock().topology.clone();
        let mut targets: Vec<(&str, u16)> = asked
            .iter()
            .map(|(_, r)| (r.host.as_str(), r.port))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for (host, port) in targets {
            let replicas = topology.as_deref().and_then(|t| t.replicas_of(host, port));
            let indices: Vec<usize> = asked
                .iter()
                .filter(|(_, r)| r.host == host && r.port == port)
                .map(|&(i, _)| i)
                .collect();
            let shard = match replicas {
                Some(replicas) => self.seed.shard_at(host, port, replicas).map(|s| s.asking()),
                None => Err(self.error(
                    BackendErrorKind::Other,
                    &format!(
                        "ASK to {host}:{port}, a master the slot map does not list: its \
                         replicas cannot be confirmed"
                    ),
                )),
            };
            let shard = match shard {
                Ok(shard) => shard,
                Err(e) => {
                    for &i in &indices {
                        answers[i] = Some((Err(e.clone()), None));
                    }
                    continue;
                }
            };
            let mut part = Part::new(shard);
            for &i in &indices {
                part.push(i, &ops[i]);
            }
            let sub = part.ops(ops);
            part.flight = Some(part.shard.send(&sub));
            let sent = Sent {
                parts: vec![part],
                failed: Vec::new(),
            };
            // A second redirect is not followed: it stays the op's error.
            let _ = sent.finish(self, ops, answers);
        }
    }

    fn error(&self, kind: BackendErrorKind, detail: &str) -> BackendError {
        BackendError::new(kind, format!("{}: {detail}", self.described))
    }

    /// Sends each op to its shard; an op that cannot be routed gets its
    /// error at once.
    fn send(&self, ops: &[Op<'_>], indices: &[usize], topology: &Topology) -> Sent {
        let mut parts: Vec<Part> = Vec::new();
        let mut failed = Vec::new();
        for &i in indices {
            let op = &ops[i];
            match self.route(op, topology) {
                Ok(shard) => {
                    let at = match parts
                        .iter()
                        .position(|p| p.shard.url_redacted() == shard.url_redacted())
                    {
                        Some(at) => at,
                        None => {
                            parts.push(Part::new(shard));
                            parts.len() - 1
                        }
                    };
                    parts[at].push(i, op);
                }
                Err(e) => failed.push((i, e)),
            }
        }
        for part in &mut parts {
            let sub = part.ops(ops);
            part.flight = Some(part.shard.send(&sub));
        }
        Sent { parts, failed }
    }
}

/// The fence counters of the lock on `keys` in the slot of its keys: the
/// manager's `<prefix>{quorum-lock}:fences` becomes
/// `<prefix>{<tag>}{quorum-lock}:fences`, `<tag>` the keys' hash tag (a
/// hash in that slot, as on a standalone node, so the scripts are the
/// same). No lock's key is ever this name: a resource may not contain
/// `{quorum-lock}`.
fn counter_in_slot(counter: &[u8], keys: &crate::backend::KeySet) -> Vec<u8> {
    let reserved = crate::resource::RESERVED;
    let at = counter
        .windows(reserved.len())
        .rposition(|w| w == reserved)
        .unwrap_or(0);
    let tag = slot::hash_tag(keys.first());
    [&counter[..at], b"{", tag, b"}", &counter[at..]].concat()
}

/// `op` with its fence counters at `counter` (a fenced op) or as it is.
fn with_counter<'a>(op: Op<'a>, counter: Option<&'a [u8]>) -> Op<'a> {
    match (op.kind, counter) {
        (OpKind::AcquireFenced { ttl, .. }, Some(counter)) => {
            Op::acquire_fenced(op.keys, op.token, ttl, counter)
        }
        (OpKind::RaiseFence { fence, .. }, Some(counter)) => {
            Op::raise_fence(op.keys, op.token, counter, fence)
        }
        _ => op,
    }
}

/// The ops sent to one shard.
struct Part {
    shard: RedisBackend,
    indices: Vec<usize>,
    /// Each fenced op's counters, in its slot (`counter_in_slot`), by
    /// place in `indices`.
    counters: Vec<Option<Vec<u8>>>,
    flight: Option<Box<dyn InFlight>>,
}

impl Part {
    fn new(shard: RedisBackend) -> Self {
        Self {
            shard,
            indices: Vec::new(),
            counters: Vec::new(),
            flight: None,
        }
    }

    fn push(&mut self, i: usize, op: &Op<'_>) {
        self.indices.push(i);
        self.counters.push(match op.kind {
            OpKind::AcquireFenced { counter, .. } | OpKind::RaiseFence { counter, .. } => {
                Some(counter_in_slot(counter, op.keys))
            }
            _ => None,
        });
    }

    /// This shard's ops, in order, with their counters in their slots.
    fn ops<'a>(&'a self, ops: &[Op<'a>]) -> Vec<Op<'a>> {
        self.indices
            .iter()
            .zip(&self.counters)
            .map(|(&i, counter)| with_counter(ops[i], counter.as_deref()))
            .collect()
    }
}

/// A batch sent to its shards.
struct Sent {
    parts: Vec<Part>,
    /// Ops refused before sending, with why.
    failed: Vec<(usize, BackendError)>,
}

type Answer = (
    Result<crate::backend::Reply, BackendError>,
    Option<Arc<ServerInfo>>,
);

impl Sent {
    /// Reads every shard's answers into `answers` (by op index), and
    /// returns the ops a shard redirected: `MOVED` (by index) and `ASK`
    /// (with the redirect, its host filled in). A master out of reach
    /// marks the slot map stale: the next batch reads it again (a
    /// failover moves its slots to a replica).
    fn finish(
        self,
        cluster: &Cluster,
        ops: &[Op<'_>],
        answers: &mut [Option<Answer>],
    ) -> (Vec<usize>, Vec<(usize, Redirect)>) {
        for (i, e) in self.failed {
            answers[i] = Some((Err(e), None));
        }
        let (mut moved, mut asked) = (Vec::new(), Vec::new());
        for mut part in self.parts {
            let Some(flight) = part.flight.take() else {
                continue;
            };
            let sub = part.ops(ops);
            let got = flight.finish(&sub);
            let server = got.server().cloned().map(Arc::new);
            for (&i, result) in part.indices.iter().zip(got.into_results()) {
                match &result {
                    Err(e) if redirect(e).is_some_and(|r| !r.ask) => moved.push(i),
                    Err(e) if let Some(ask) = redirect(e) => {
                        let mut ask = ask.clone();
                        if ask.host.is_empty() {
                            ask.host = part.shard.host_port().map_or("", |(h, _)| h).to_owned();
                        }
                        asked.push((i, ask));
                    }
                    Err(e) if e.kind() == BackendErrorKind::Unreachable => {
                        cluster.state.lock().stale = true;
                    }
                    _ => {}
                }
                answers[i] = Some((result, server.clone()));
            }
        }
        (moved, asked)
    }
}

/// The redirect an op's error carries, if any.
fn redirect(e: &BackendError) -> Option<&Redirect> {
    std::error::Error::source(e)?.downcast_ref::<Redirect>()
}

/// A cluster batch in flight: the shards' batches, and the ops to send
/// again where a `MOVED` says their slot now lives.
struct ClusterFlight {
    cluster: Arc<Cluster>,
    sent: Option<Sent>,
    started: Instant,
}

impl InFlight for ClusterFlight {
    fn wait(&mut self, until: Instant) -> bool {
        self.sent.as_mut().is_none_or(|sent| {
            sent.parts
                .iter_mut()
                .filter_map(|p| p.flight.as_mut())
                .all(|f| f.wait(until))
        })
    }

    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        let ClusterFlight {
            cluster,
            sent,
            started,
        } = *self;
        let mut answers: Vec<Option<Answer>> = vec![None; ops.len()];
        let (moved, asked) = sent
            .map(|s| s.finish(&cluster, ops, &mut answers))
            .unwrap_or_default();
        // Once, and only while the first batch's time is not spent: the
        // slot map again, and the refused ops, in their order, where it
        // says (a MOVED op did not run, so running it there is its only run).
        let timeout = cluster.seed.timeout();
        if !moved.is_empty()
            && started.elapsed() < timeout
            && let Ok(topology) = cluster.topology(true)
        {
            cluster
                .send(ops, &moved, &topology)
                .finish(&cluster, ops, &mut answers);
        }
        // Keys of a slot being migrated, not (or no longer) on its old
        // master: once, at the importing master, each command after
        // `ASKING`, in their order.
        if !asked.is_empty() && started.elapsed() < timeout {
            cluster.ask(ops, &asked, &mut answers);
        }
        Answers::per_answer(answers.into_iter().map(|a| {
            a.unwrap_or_else(|| {
                (
                    Err(cluster.error(BackendErrorKind::Protocol, "no answer for this op")),
                    None,
                )
            })
        }))
    }
}

impl Backend for RedisClusterBackend {
    fn describe(&self) -> String {
        self.inner.described.clone()
    }

    /// Reads the slot map if it has none, sends each shard its ops in one
    /// pipeline, and returns; [`InFlight::finish`] reads them, and sends
    /// the ops answered `MOVED` again, once, after reading the map again.
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        let cluster = Arc::clone(&self.inner);
        let started = Instant::now();
        let all: Vec<usize> = (0..ops.len()).collect();
        let sent = match cluster.topology(false) {
            Ok(topology) => cluster.send(ops, &all, &topology),
            Err(e) => Sent {
                parts: Vec::new(),
                failed: all.into_iter().map(|i| (i, e.clone())).collect(),
            },
        };
        Box::new(ClusterFlight {
            cluster,
            sent: Some(sent),
            started,
        })
    }

    /// A slot map read, one batch, and one more of each after a `MOVED`:
    /// up to four round trips of the timeout.
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.inner.seed.timeout().saturating_mul(4))
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
        let topology = self.inner.topology(true)?;
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
        let topology = self.inner.topology(false)?;
        let keys = crate::backend::KeySet::one(key);
        let op = Op::release(&keys, b"");
        let shard = self.inner.route(&op, &topology)?;
        Inspect::inspect(&shard, key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn fence_counters_live_in_the_slot_of_their_lock() {
        use crate::backend::KeySet;
        let counters = b"locks:{quorum-lock}:fences";
        let plain = KeySet::one("locks:job");
        let moved = counter_in_slot(counters, &plain);
        assert_eq!(moved, b"locks:{locks:job}{quorum-lock}:fences");
        assert_eq!(slot_of(&moved), slot_of(plain.first()));
        let tagged = KeySet::new(["locks:{o}:1", "locks:{o}:2"]).unwrap();
        let moved = counter_in_slot(counters, &tagged);
        assert_eq!(moved, b"locks:{o}{quorum-lock}:fences");
        assert_eq!(slot_of(&moved), slot_of(b"locks:{o}:2"));
        // A stray brace: the tag cannot be repeated; `route` refuses it.
        let stray = KeySet::one("locks:a}b");
        assert_ne!(
            slot_of(&counter_in_slot(counters, &stray)),
            slot_of(stray.first())
        );
    }

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
