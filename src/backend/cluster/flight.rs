//! A cluster batch in flight: each shard's part of it sent as one
//! pipeline, and the ops a shard redirected (`MOVED`, `ASK`) sent once
//! more where the redirect says.

use std::sync::Arc;
use std::time::Instant;

use super::router::{Cluster, counters_of};
use super::topology::Topology;
use crate::RedisBackend;
use crate::backend::redis::confirm::Unconfirmed;
use crate::backend::redis::redirect::Redirect;
use crate::backend::{
    Answers, Backend, BackendError, BackendErrorKind, InFlight, Op, OpKind, ServerInfo,
};

impl Cluster {
    /// Sends each op to its shard; an op that cannot be routed gets its
    /// error at once.
    fn send(&self, ops: &[Op<'_>], indices: &[usize], topology: &Topology) -> Sent {
        let mut parts: Vec<Part> = Vec::new();
        let mut failed = Vec::new();
        for &i in indices {
            match self.route(&ops[i], topology) {
                Ok((shard, counters)) => {
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
                    parts[at].push(i, counters);
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
                part.push(i, counters_of(&ops[i]));
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

    /// Op `i`, with its fence counters in its slot (a fenced op's).
    fn push(&mut self, i: usize, counters: Option<Vec<u8>>) {
        self.indices.push(i);
        self.counters.push(counters);
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
            if part.shard.replicas_differ() {
                // A replica added or gone since the map was read.
                cluster.state.lock().stale = true;
            }
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
                    // A master out of reach (it may have failed over), a
                    // hold its replicas did not all confirm (one may have
                    // failed, and no longer be listed): the map again.
                    Err(e) if e.kind() == BackendErrorKind::Unreachable || unconfirmed(e) => {
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

/// Whether an op's error says its shard's replicas did not all confirm it.
fn unconfirmed(e: &BackendError) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<Unconfirmed>())
}

/// The redirect an op's error carries, if any.
fn redirect(e: &BackendError) -> Option<&Redirect> {
    std::error::Error::source(e)?.downcast_ref::<Redirect>()
}

/// A cluster batch in flight: the shards' batches, and the ops to send
/// again where a `MOVED` says their slot now lives.
pub(super) struct ClusterFlight {
    cluster: Arc<Cluster>,
    sent: Option<Sent>,
    started: Instant,
}

impl ClusterFlight {
    /// Reads the slot map if there is none (or it is stale), and sends
    /// each shard its ops in one pipeline.
    pub(super) fn send(cluster: Arc<Cluster>, ops: &[Op<'_>]) -> Self {
        let started = Instant::now();
        let all: Vec<usize> = (0..ops.len()).collect();
        let sent = match cluster.topology(false) {
            Ok(topology) => cluster.send(ops, &all, &topology),
            Err(e) => Sent {
                parts: Vec::new(),
                failed: all.into_iter().map(|i| (i, e.clone())).collect(),
            },
        };
        Self {
            cluster,
            sent: Some(sent),
            started,
        }
    }
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
