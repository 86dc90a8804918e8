//! Which master runs an op: the slot map (`CLUSTER SLOTS`, read again
//! when it is stale), one backend per master, and the fence counters of a
//! lock moved into its key's slot.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::slot::{self, slot_of};
use super::topology::{Range, Topology};
use crate::backend::redis::RedisBackend;
use crate::backend::{BackendError, BackendErrorKind, KeySet, Op, OpKind};

/// A cluster node's state: its seed, its name, the slot map and the
/// shards' backends.
pub(super) struct Cluster {
    /// The address the node was configured with, with its settings
    /// (credentials, TLS, timeout, scripts): every shard's backend is made
    /// from it.
    pub(super) seed: RedisBackend,
    pub(super) described: String,
    pub(super) state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) topology: Option<Arc<Topology>>,
    /// The slot map is to be read again before the next batch: a master
    /// could not be reached (it may have failed over).
    pub(super) stale: bool,
    /// One backend (and pool) per master, by address.
    pub(super) shards: HashMap<(String, u16), RedisBackend>,
}

/// The most a slot map read takes, in node timeouts: each server asked
/// (the seed, then the masters known) at most one, all of them together
/// at most this many.
pub(super) const MAP_READ_TIMEOUTS: u32 = 2;

impl Cluster {
    /// `timeouts` node timeouts from now.
    pub(super) fn deadline_in(&self, timeouts: u32) -> Instant {
        self.seed.deadline_in(timeouts)
    }

    /// The slot map: the one read before, unless `fresh` or there is none.
    /// A read asks the seed, then every master known before, each for at
    /// most one node timeout, and ends by [`MAP_READ_TIMEOUTS`] from now
    /// or by `until`, whichever comes first.
    pub(super) fn topology(
        &self,
        fresh: bool,
        until: Instant,
    ) -> Result<Arc<Topology>, BackendError> {
        let known = {
            let state = self.state.lock();
            match &state.topology {
                Some(topology) if !fresh && !state.stale => return Ok(Arc::clone(topology)),
                _ => state.shards.values().cloned().collect::<Vec<_>>(),
            }
        };
        let until = until.min(self.deadline_in(MAP_READ_TIMEOUTS));
        // The seed first, then any master known before (the seed may be
        // the server that failed).
        let mut last = None;
        for server in std::iter::once(&self.seed).chain(&known) {
            if Instant::now() >= until {
                last = Some(self.error(
                    BackendErrorKind::Timeout,
                    &format!(
                        "the slot map (CLUSTER SLOTS) was not read in time{}",
                        last.map_or_else(String::new, |e: BackendError| format!(": {e}"))
                    ),
                ));
                break;
            }
            let asked = server.host_port().map_or("", |(host, _)| host);
            let read = server
                .command_by(redis::cmd("CLUSTER").arg("SLOTS"), until)
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
    pub(super) fn shard(&self, range: &Range) -> Result<RedisBackend, BackendError> {
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
    /// ([`master_of`](Self::master_of)), with the fence counters a fenced
    /// op names moved into that slot (`counters_of`).
    pub(super) fn route(
        &self,
        op: &Op<'_>,
        topology: &Topology,
    ) -> Result<(RedisBackend, Option<Vec<u8>>), BackendError> {
        let slot = slot_of(op.keys.first());
        let counters = counters_of(op);
        if counters.as_deref().is_some_and(|c| slot_of(c) != slot) {
            return Err(self.error(
                BackendErrorKind::Other,
                &format!(
                    "the fence counters of {} cannot live in its slot {slot} (its hash tag \
                     holds a brace): name the lock without braces, or with one hash tag",
                    op.keys
                ),
            ));
        }
        // A read-write lock's op names its other key by its role: the
        // script takes both, so both live in the op's slot.
        let named = match op.kind {
            OpKind::ReadAcquire { writer: other, .. }
            | OpKind::Admit { readers: other, .. }
            | OpKind::Proclaim {
                record_key: other, ..
            } => Some(other),
            OpKind::Acquire { .. }
            | OpKind::AcquireFenced { .. }
            | OpKind::Extend { .. }
            | OpKind::Release
            | OpKind::RaiseFence { .. }
            | OpKind::ReadExtend { .. }
            | OpKind::ReadRelease => None,
        };
        let keys = op.keys.iter().chain(named);
        if let Some(other) = keys.map(slot_of).find(|&s| s != slot) {
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
        Ok((self.master_of(slot, topology)?, counters))
    }

    /// The backend of the master that serves `slot`. A slot no master
    /// serves (its master failed, no replica promoted yet) marks the map
    /// stale: the next batch reads it again.
    pub(super) fn master_of(
        &self,
        slot: u16,
        topology: &Topology,
    ) -> Result<RedisBackend, BackendError> {
        match topology.range_of(slot) {
            Some(range) => self.shard(range),
            None => {
                self.state.lock().stale = true;
                Err(self.error(
                    BackendErrorKind::Unreachable,
                    &format!("no master serves slot {slot} (CLUSTER SLOTS)"),
                ))
            }
        }
    }

    pub(super) fn error(&self, kind: BackendErrorKind, detail: &str) -> BackendError {
        BackendError::new(kind, format!("{}: {detail}", self.described))
    }
}

/// The fence counters a fenced op names, moved into its keys' slot
/// (`counter_in_slot`); `None` for an op without them.
pub(super) fn counters_of(op: &Op<'_>) -> Option<Vec<u8>> {
    match op.kind {
        OpKind::AcquireFenced { counter, .. } | OpKind::RaiseFence { counter, .. } => {
            Some(counter_in_slot(counter, op.keys))
        }
        _ => None,
    }
}

/// The fence counters of the lock on `keys` in the slot of its keys: the
/// manager's `<prefix>{quorum-lock}:fences` becomes
/// `<prefix>{<tag>}{quorum-lock}:fences`, `<tag>` the keys' hash tag (a
/// hash in that slot, as on a standalone node, so the scripts are the
/// same). No lock's key is ever this name: a resource may not contain
/// `{quorum-lock}`.
fn counter_in_slot(counter: &[u8], keys: &KeySet) -> Vec<u8> {
    let reserved = crate::resource::RESERVED;
    let at = counter
        .windows(reserved.len())
        .rposition(|w| w == reserved)
        .unwrap_or(0);
    let tag = slot::hash_tag(keys.first());
    [&counter[..at], b"{", tag, b"}", &counter[at..]].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_counters_live_in_the_slot_of_their_lock() {
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
}
