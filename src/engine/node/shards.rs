//! The servers behind a node that answers from several (a cluster: one
//! master per shard), each judged on its own: a restarted shard master's
//! grants wait out the restart quarantine while the other shards' grants
//! still count.
//!
//! Each server is known by its run id, and each gets an [`Identity`] of
//! its own at first contact, with the quarantine its uptime calls for:
//! a new run id is a new server (a restart, a promoted replica, a shard
//! added), never "the same server, changed". A promoted replica that has
//! been up for long is not caught here; the cluster backend's replica
//! check (`WAIT`) is what keeps its grants honest.

use super::Shared;
use super::identity::{Identity, Standing};
use crate::backend::{BackendError, Reply, ServerInfo};
use crate::clock::Reading;
use std::collections::HashMap;
use std::time::Instant;

/// How many servers' identities a node keeps. Past it they are all
/// forgotten at once: the next answer of each is a first contact again,
/// judged by its uptime, which gives the same quarantine.
const MAX_SERVERS: usize = 256;

/// A node's servers, by run id.
pub(super) struct Shards {
    node: usize,
    by_run_id: HashMap<String, Identity>,
    /// Whether the node has answered from several servers: from then on
    /// its health is theirs (`quarantined_until`).
    seen: bool,
}

/// What one answer counts for.
pub(super) struct Judged {
    pub(super) standing: Standing,
    /// The server that answered reported its run id.
    pub(super) identified: bool,
    /// The server's evicting setting, if it has one.
    pub(super) eviction: Option<String>,
}

impl Shards {
    pub(super) fn new(node: usize) -> Self {
        Self {
            node,
            by_run_id: HashMap::new(),
            seen: false,
        }
    }

    /// Whether the node answers from several servers (a cluster).
    pub(super) fn seen(&self) -> bool {
        self.seen
    }

    /// Until when the last of its quarantined servers is quarantined, on
    /// the manager's clock (`None`: none is, at `now`): what `health()`
    /// shows for the node, so that a quarantined shard is not hidden
    /// behind the others (the node is shown quarantined while one shard
    /// is, although the other shards' grants count).
    pub(super) fn quarantined_until(&self, now: Instant) -> Option<Instant> {
        self.by_run_id
            .values()
            .filter_map(Identity::quarantined_until)
            .filter(|&until| until > now)
            .max()
    }

    /// The evicting setting of one of its servers that may evict lock
    /// keys, named by its run id, if one may (the same one each time).
    pub(super) fn eviction(&self) -> Option<String> {
        self.by_run_id
            .iter()
            .filter_map(|(id, identity)| identity.eviction().map(|e| (id, e)))
            .min()
            .map(|(id, setting)| format!("shard {}...: {setting}", id.get(..8).unwrap_or(id)))
    }

    /// Judges one answer by the server that gave it (`None`: unknown), on
    /// the manager's clock; a forget it shows is passed on to the leases
    /// at once.
    pub(super) fn judge(
        &mut self,
        result: &Result<Reply, BackendError>,
        server: Option<&ServerInfo>,
        shared: &Shared,
    ) -> Judged {
        self.seen = true;
        let Some((server, run_id)) = server.and_then(|s| s.run_id.as_deref().map(|id| (s, id)))
        else {
            // Nothing granted, nothing learned; a grant from a server
            // that cannot be identified does not count under quarantine.
            let standing = if result.is_err() || shared.quarantine.is_none() {
                Standing::Voting
            } else {
                Standing::Unverified
            };
            return Judged {
                standing,
                identified: false,
                eviction: None,
            };
        };
        let node = self.node;
        // Known servers are looked up without a copy of their run id (an
        // answer of every batch comes here); a new one is added.
        if !self.by_run_id.contains_key(run_id) {
            if self.by_run_id.len() >= MAX_SERVERS {
                self.by_run_id.clear();
            }
            let identity = Identity::new(node, shared.quarantine, shared.accept_eviction)
                .forgetting_for(shared.forget_window);
            self.by_run_id.insert(run_id.to_owned(), identity);
        }
        let Some(identity) = self.by_run_id.get_mut(run_id) else {
            // Inserted above; were it missing, the grant would not count.
            return Judged {
                standing: Standing::Unverified,
                identified: false,
                eviction: None,
            };
        };
        let announced = identity.quarantined_until().is_some();
        let standing = identity.judge(
            Some(server),
            &mut Reading::of(&*shared.clock),
            &shared.registry,
        );
        let name = shared.names.get(node).map_or("?", String::as_str);
        if let (false, Standing::Quarantined(left)) = (announced, standing) {
            log::warn!(
                "quorum-lock: node {name}: the shard server {}... {}: its grants do not count \
                 for {left:?} more (the other shards' still do)",
                run_id.get(..8).unwrap_or(run_id),
                identity.quarantine_reason()
            );
        }
        if let Some(what) = identity.take_forgotten() {
            log::warn!(
                "quorum-lock: node {name}: the shard server {}... {what}: it may have lost lock \
                 keys, so its grants do not count, and a held lock whose quorum counted this \
                 node is told it may be lost",
                run_id.get(..8).unwrap_or(run_id)
            );
            shared.forgets.note(node, &what);
        }
        Judged {
            standing,
            identified: true,
            eviction: identity.eviction().map(str::to_owned),
        }
    }
}
