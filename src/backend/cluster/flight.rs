//! A cluster batch in flight: each shard's part of it sent as one
//! pipeline, and the ops a shard redirected (`MOVED`, `ASK`) sent once
//! more where the redirects say, in the batch's order. The whole call
//! ends by one deadline, [`CALL_TIMEOUTS`] node timeouts after it began.

use std::sync::Arc;
use std::time::Instant;

use super::router::{Cluster, MAP_READ_TIMEOUTS, counters_of};
use super::slot::slot_of;
use super::topology::Topology;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::confirm::unconfirmed;
use crate::backend::redis::redirect::Redirect;
use crate::backend::{Answers, BackendError, BackendErrorKind, InFlight, Op, OpKind, ServerInfo};

/// The bound on one call, in node timeouts: a slot map read (at most
/// [`MAP_READ_TIMEOUTS`]) and one batch (its shards share one timeout),
/// then, only when a redirect came within the first timeout, the map
/// again and the redirected ops at their new masters; every step ends by
/// this deadline, whatever is left of its own timeout.
pub(super) const CALL_TIMEOUTS: u32 = MAP_READ_TIMEOUTS + 2;

impl Cluster {
    /// Sends each op to its shard, every shard's round trips ended by
    /// `until`; an op that cannot be routed gets its error at once.
    fn send(&self, ops: &[Op<'_>], indices: &[usize], topology: &Topology, until: Instant) -> Sent {
        let mut sent = Sent::default();
        for &i in indices {
            match self.route(&ops[i], topology) {
                Ok((shard, counters)) => sent.part_for(shard).push(i, counters),
                Err(e) => sent.failed.push((i, e)),
            }
        }
        sent.send(ops, until);
        sent
    }

    /// Sends the ops a shard redirected (`redirected`, in the batch's
    /// order) where the redirects say, every round trip ended by `until`,
    /// and reads their answers into `answers`. A `MOVED` op goes to the
    /// master of its slot in the map read again now (`fresh`; without
    /// one, its `MOVED` stays its error); an `ASK` op to the importing
    /// master it names. The ops bound for one master
    /// go in one pipeline in the batch's order, every command after
    /// `ASKING` when one of them was asked (harmless for a slot the
    /// master owns), so an op never overtakes an earlier op of its slot,
    /// whatever mix of redirects brought them there. An op whose slot an
    /// earlier op of the batch was sent elsewhere for is not sent: it
    /// could overtake that op, and it fails ("maybe applied": a failed
    /// release is sent again later). A second redirect is not followed:
    /// it stays the op's error.
    fn follow(
        &self,
        ops: &[Op<'_>],
        redirected: &[(usize, Redirect)],
        fresh: Option<Arc<Topology>>,
        answers: &mut [Option<Answer>],
        until: Instant,
    ) {
        let moved_to = fresh.clone();
        let Some(topology) = fresh.or_else(|| self.state.lock().topology.clone()) else {
            return;
        };
        // Where each slot's redirected ops go: the first one's master.
        let mut slots: Vec<(u16, (String, u16))> = Vec::new();
        // The masters, in order of first use, with their ops and whether
        // any of them was asked.
        let mut targets: Vec<((String, u16), bool, Vec<usize>)> = Vec::new();
        for (i, redirect) in redirected {
            let slot = slot_of(ops[*i].keys.first());
            let target = if redirect.ask {
                (redirect.host.clone(), redirect.port)
            } else {
                match moved_to.as_deref().and_then(|map| map.range_of(slot)) {
                    Some(range) => (range.host.clone(), range.port),
                    // No map read again, or no master serves the slot
                    // (yet): its MOVED stays its error.
                    None => continue,
                }
            };
            match slots.iter().find(|(s, _)| *s == slot) {
                Some((_, first)) if *first != target => {
                    answers[*i] = Some((Err(self.overtaking(slot, first, &target)), None));
                    continue;
                }
                Some(_) => {}
                None => slots.push((slot, target.clone())),
            }
            match targets.iter_mut().find(|(t, _, _)| *t == target) {
                Some((_, asked, indices)) => {
                    *asked |= redirect.ask;
                    indices.push(*i);
                }
                None => targets.push((target, redirect.ask, vec![*i])),
            }
        }
        let mut sent = Sent::default();
        for ((host, port), asked, indices) in targets {
            match self.redirected_to(&host, port, asked, &topology) {
                Ok(shard) => {
                    let part = sent.part_for(shard);
                    for i in indices {
                        part.push(i, counters_of(&ops[i]));
                    }
                }
                Err(e) => sent
                    .failed
                    .extend(indices.into_iter().map(|i| (i, e.clone()))),
            }
        }
        sent.send(ops, until);
        // A second redirect is not followed: it stays the op's error.
        let _ = sent.finish(self, ops, answers);
    }

    /// The backend of the master at `host:port` for redirected ops: with
    /// `ASKING` before every command when one of them was asked (on a
    /// connection of its own); its holds wait for that master's replicas
    /// as the slot map lists them (a master the map does not list cannot
    /// be confirmed: its ops fail).
    fn redirected_to(
        &self,
        host: &str,
        port: u16,
        asked: bool,
        topology: &Topology,
    ) -> Result<RedisBackend, BackendError> {
        let Some(range) = topology.master(host, port) else {
            return Err(self.error(
                BackendErrorKind::Other,
                &format!(
                    "ASK to {host}:{port}, a master the slot map does not list: its replicas \
                     cannot be confirmed"
                ),
            ));
        };
        if asked {
            return Ok(self.seed.shard_at(host, port, range.replicas)?.asking());
        }
        self.shard(range)
    }

    /// The error of a redirected op whose slot an earlier op of its batch
    /// was sent elsewhere for.
    fn overtaking(&self, slot: u16, first: &(String, u16), then: &(String, u16)) -> BackendError {
        self.error(
            BackendErrorKind::Other,
            &format!(
                "slot {slot} was redirected to {}:{} for an earlier op of this batch and to \
                 {}:{} for this one: sent there, it could overtake that op, so it was not sent \
                 (it may be retried)",
                first.0, first.1, then.0, then.1
            ),
        )
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
#[derive(Default)]
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
    /// The part of the shard `shard` names (a new one for a shard not
    /// met yet in this batch).
    fn part_for(&mut self, shard: RedisBackend) -> &mut Part {
        let at = match self
            .parts
            .iter()
            .position(|p| p.shard.url_redacted() == shard.url_redacted())
        {
            Some(at) => at,
            None => {
                self.parts.push(Part::new(shard));
                self.parts.len() - 1
            }
        };
        &mut self.parts[at]
    }

    /// Sends every part, its round trips ended by `until`.
    fn send(&mut self, ops: &[Op<'_>], until: Instant) {
        for part in &mut self.parts {
            let sub = part.ops(ops);
            part.flight = Some(part.shard.send_by(&sub, until));
        }
    }

    /// Reads every shard's answers into `answers` (by op index), and
    /// returns the ops a shard redirected, in the batch's order, each
    /// with its redirect (its host filled in). A master out of reach, a
    /// hold its replicas did not all confirm, a master that counts other
    /// replicas than the map: the slot map is read again before the next
    /// batch.
    fn finish(
        self,
        cluster: &Cluster,
        ops: &[Op<'_>],
        answers: &mut [Option<Answer>],
    ) -> Vec<(usize, Redirect)> {
        for (i, e) in self.failed {
            answers[i] = Some((Err(e), None));
        }
        let mut redirected = Vec::new();
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
                    Err(e) if let Some(redirect) = redirect(e) => {
                        let mut redirect = redirect.clone();
                        if redirect.host.is_empty() {
                            redirect.host =
                                part.shard.host_port().map_or("", |(h, _)| h).to_owned();
                        }
                        redirected.push((i, redirect));
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
        redirected.sort_unstable_by_key(|(i, _)| *i);
        redirected
    }
}

/// The redirect an op's error carries, if any.
fn redirect(e: &BackendError) -> Option<&Redirect> {
    std::error::Error::source(e)?.downcast_ref::<Redirect>()
}

/// A cluster batch in flight: the shards' batches, and the deadline that
/// ends the whole call.
pub(super) struct ClusterFlight {
    cluster: Arc<Cluster>,
    sent: Option<Sent>,
    started: Instant,
    /// [`CALL_TIMEOUTS`] after `started`.
    until: Instant,
}

impl ClusterFlight {
    /// Reads the slot map if there is none (or it is stale), and sends
    /// each shard its ops in one pipeline; the shards' round trips share
    /// one node timeout.
    pub(super) fn send(cluster: Arc<Cluster>, ops: &[Op<'_>]) -> Self {
        let started = Instant::now();
        let until = cluster.deadline_in(CALL_TIMEOUTS);
        let all: Vec<usize> = (0..ops.len()).collect();
        let sent = match cluster.topology(false, until) {
            Ok(topology) => {
                let batch = cluster.deadline_in(1).min(until);
                cluster.send(ops, &all, &topology, batch)
            }
            Err(e) => Sent {
                parts: Vec::new(),
                failed: all.into_iter().map(|i| (i, e.clone())).collect(),
            },
        };
        Self {
            cluster,
            sent: Some(sent),
            started,
            until,
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
            until,
        } = *self;
        let mut answers: Vec<Option<Answer>> = vec![None; ops.len()];
        let redirected = sent
            .map(|s| s.finish(&cluster, ops, &mut answers))
            .unwrap_or_default();
        // Once, and only while the first batch's time is not spent: the
        // slot map again after a MOVED (the op did not run, so running it
        // at the slot's new master is its only run), and every redirected
        // op where its redirect says, in the batch's order.
        if !redirected.is_empty() && started.elapsed() < cluster.seed.timeout() {
            let fresh = redirected
                .iter()
                .any(|(_, r)| !r.ask)
                .then(|| cluster.topology(true, until).ok())
                .flatten();
            let batch = cluster.deadline_in(1).min(until);
            cluster.follow(ops, &redirected, fresh, &mut answers, batch);
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
