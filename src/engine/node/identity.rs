//! Which server answers for a node: restart quarantine, duplicate-node
//! detection and servers that may evict lock keys, from the identity the
//! backend reports ([`ServerInfo`]).
//!
//! A server that restarted without durable persistence has forgotten the
//! locks it held. If it voted at once, a second client could win a quorum
//! while the first still holds the lock. So a node whose server is younger
//! than the quarantine (max TTL plus drift), or whose identity changed, has
//! its grants withheld until that much time has passed since its start:
//! by then every lock it could have forgotten has expired anyway.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::ServerInfo;
use crate::clock::Reading;

/// Run ids seen by one engine's nodes: the same server configured twice
/// (e.g. `localhost` and `127.0.0.1`) must not cast two votes.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_run_id: Mutex<HashMap<Arc<str>, usize>>,
}

impl Clone for Registry {
    fn clone(&self) -> Self {
        Self {
            by_run_id: Mutex::new(self.by_run_id.lock().clone()),
        }
    }
}

/// What a node's grants count for right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its votes count.
    Voting,
    /// Restarted recently: its grants do not count for this much longer.
    Quarantined(Duration),
    /// The same server as this (earlier) node: only that one votes.
    DuplicateOf(usize),
    /// With quarantine on, the server's identity could not be read after
    /// it answered: it may have restarted, so its grants do not count.
    Unverified,
    /// The server may evict lock keys (`maxmemory` with an evicting
    /// policy) and the manager does not accept that risk: its grants do
    /// not count.
    MayEvict,
    /// The server is a replica now: its keys are its master's, and what
    /// it grants (with `replica-read-only no`) is gone at the next sync.
    Replica,
}

/// One node's view of its server's identity.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    node: usize,
    /// `None`: quarantine is off.
    quarantine: Option<Duration>,
    run_id: Option<Arc<str>>,
    quarantined_until: Option<Instant>,
    duplicate_of: Option<usize>,
    /// The settings that let the server evict lock keys, when it said so.
    eviction: Option<String>,
    /// Count its grants all the same (`accept_eviction_risk`).
    accept_eviction: bool,
    /// How long a node that may have forgotten keys without restarting
    /// (eviction allowed until now, a new replication history) has its
    /// grants withheld: max TTL plus drift, as a restart's quarantine,
    /// whether or not restart quarantine is on.
    forget_window: Duration,
    /// Why the current quarantine was set, in words.
    quarantine_reason: &'static str,
    /// The replication history last seen (`master_replid`).
    replication_id: Option<Arc<str>>,
    /// Whether the server said it is a replica.
    replica: bool,
    /// The count of keys the server had evicted at the last read.
    evicted_keys: Option<u64>,
    /// A forget seen and not yet taken by the worker (what happened).
    forgotten: Option<String>,
}

/// Why a node is quarantined, for the log.
const RESTARTED: &str = "its server started or restarted less than max_ttl + drift ago";
const EVICTED: &str = "it evicted keys, or its settings allowed it until now, and those \
                       keys may belong to locks that are still held";
const NEW_HISTORY: &str = "it took a new replication history (a failover, REPLICAOF, or a \
                           replica promoted) and may hold another server's keys";

/// The resolution of a reported uptime: Redis' `uptime_in_seconds` is
/// floor(wall now) - floor(wall start), which can read one second after a
/// few milliseconds. A first contact credits the server one second less
/// than it reports.
const UPTIME_RESOLUTION: Duration = Duration::from_secs(1);

impl Identity {
    pub(crate) fn new(node: usize, quarantine: Option<Duration>, accept_eviction: bool) -> Self {
        Self {
            node,
            quarantine,
            run_id: None,
            quarantined_until: None,
            duplicate_of: None,
            eviction: None,
            accept_eviction,
            forget_window: quarantine.unwrap_or(Duration::ZERO),
            quarantine_reason: RESTARTED,
            replication_id: None,
            replica: false,
            evicted_keys: None,
            forgotten: None,
        }
    }

    /// How long a node that may have forgotten keys without a restart
    /// has its grants withheld (max TTL plus drift). Default: the restart
    /// quarantine, or none when that is off.
    #[must_use]
    pub(crate) fn forgetting_for(mut self, window: Duration) -> Self {
        self.forget_window = window;
        self
    }

    /// A forget seen since the last call (what happened, in words):
    /// leases that counted this node may have lost their keys here.
    pub(crate) fn take_forgotten(&mut self) -> Option<String> {
        self.forgotten.take()
    }

    /// Whether the server said it is a replica.
    pub(crate) fn is_replica(&self) -> bool {
        self.replica
    }

    /// Why the current quarantine was set, in words.
    pub(crate) fn quarantine_reason(&self) -> &'static str {
        self.quarantine_reason
    }

    /// What the grants of one batch count for: judged by the identity of
    /// the server that answered *that* batch (`None`: unknown), at `now` on
    /// the manager's clock (read only when a quarantine runs or starts).
    ///
    /// With quarantine on, an answer from a server that cannot be
    /// identified does not count: it may be a restarted server that forgot
    /// our locks. With quarantine off, identity only detects duplicates.
    pub(crate) fn judge(
        &mut self,
        server: Option<&ServerInfo>,
        now: &mut Reading<'_>,
        registry: &Registry,
    ) -> Standing {
        if let Some(server) = server {
            // Read with the answers, on the same connection, at most the
            // backend's settings age before the batch was sent.
            self.observe_settings(server, now);
        }
        match server.and_then(|s| s.run_id.as_ref().map(|id| (id, s.uptime))) {
            Some((run_id, uptime)) => self.observe(run_id, uptime, now, registry),
            None if self.quarantine.is_some() => return Standing::Unverified,
            None => {}
        }
        self.standing_read(now)
    }

    /// Takes in the settings that can change without a restart: eviction
    /// allowed, the replication role and history. A change that may have
    /// cost keys is a forget; once it is over, the node is quarantined
    /// for the forget window, as after a restart.
    fn observe_settings(&mut self, server: &ServerInfo, now: &mut Reading<'_>) {
        let same_server = self.run_id.is_some() && server.run_id == self.run_id;
        let eviction = server.eviction();
        if !self.accept_eviction {
            match (&self.eviction, &eviction) {
                (None, Some(setting)) => {
                    self.forgotten = Some(format!("may evict lock keys ({setting})"));
                }
                (Some(_), None) => self.quarantine_from(now.now(), self.forget_window, EVICTED),
                _ => {}
            }
        }
        self.eviction = eviction;
        if let Some(count) = server.evicted_keys {
            let grew = self.evicted_keys.is_some_and(|before| count > before);
            if same_server && grew && !self.accept_eviction {
                // Evicted since the last read, whatever the policy says
                // now: a policy switched on and off between two reads.
                // The settings, when they say why, are the better news.
                let evicted = count - self.evicted_keys.unwrap_or(0);
                self.forgotten.get_or_insert_with(|| {
                    format!("evicted {evicted} keys since the last read (evicted_keys {count})")
                });
                self.quarantine_from(now.now(), self.forget_window, EVICTED);
            }
            self.evicted_keys = Some(count);
        }
        if let Some(replica) = server.replica {
            if replica && !self.replica {
                self.forgotten = Some("became a replica (its keys are now its master's)".into());
            }
            self.replica = replica;
        }
        // Kept only when it changed: the same history is a reference
        // count per batch less.
        if let Some(id) = server
            .replication_id
            .as_ref()
            .filter(|id| self.replication_id.as_ref() != Some(*id))
        {
            if same_server && self.replication_id.is_some() {
                self.forgotten = Some(format!(
                    "took a new replication history (master_replid {}...)",
                    id.get(..8).unwrap_or(id.as_ref())
                ));
                self.quarantine_from(now.now(), self.forget_window, NEW_HISTORY);
            }
            self.replication_id = Some(Arc::clone(id));
        }
    }

    /// Withholds grants until `window` after `now`, unless a longer
    /// quarantine is already running.
    fn quarantine_from(&mut self, now: Instant, window: Duration, reason: &'static str) {
        if window.is_zero() {
            return;
        }
        let until = now + window;
        if self.quarantined_until.is_none_or(|current| current < until) {
            self.quarantined_until = Some(until);
            self.quarantine_reason = reason;
        }
    }

    /// Takes in a server's run id and reported uptime. Only a new or
    /// changed run id does any work.
    fn observe(
        &mut self,
        run_id: &Arc<str>,
        uptime: Option<Duration>,
        now: &mut Reading<'_>,
        registry: &Registry,
    ) {
        if self.run_id.as_ref() == Some(run_id) {
            return;
        }
        let restarted = self.run_id.is_some();
        {
            let mut seen = registry.by_run_id.lock();
            if let Some(old) = self.run_id.take()
                && seen.get(&old) == Some(&self.node)
            {
                seen.remove(&old);
            }
            let owner = *seen.entry(Arc::clone(run_id)).or_insert(self.node);
            self.duplicate_of = (owner != self.node).then_some(owner);
        }
        self.run_id = Some(Arc::clone(run_id));
        if restarted {
            // Not a forget of its own: with durable persistence a restart
            // keeps the keys, and without it the restart quarantine keeps
            // the node from voting until every lock it held has expired
            // (Redlock's own argument). The new server's history and
            // counts are its own.
            self.replication_id = None;
            self.evicted_keys = None;
        }
        if let Some(quarantine) = self.quarantine {
            // First contact: the server's uptime says how long ago it could
            // have forgotten anything, less its resolution (an unknown
            // uptime counts as zero). It assumes the server's wall clock
            // did not step forward since its start by more than the drift
            // allowance (which the quarantine includes), the assumption
            // Redis' own key expiry already needs. A changed identity
            // counts from now, whatever its uptime: the address may now
            // lead to another server that never had our keys, however long
            // it has been up.
            let credited = match (restarted, uptime) {
                (false, Some(uptime)) => uptime.saturating_sub(UPTIME_RESOLUTION),
                _ => Duration::ZERO,
            };
            let left = quarantine.saturating_sub(credited);
            self.quarantined_until = (!left.is_zero()).then(|| now.now() + left);
            self.quarantine_reason = RESTARTED;
        }
    }

    /// Until when its grants are withheld (on the manager's clock), if a
    /// quarantine was set.
    pub(crate) fn quarantined_until(&self) -> Option<Instant> {
        self.quarantined_until
    }

    /// Forgets a quarantine that has ended (so it is announced once).
    pub(crate) fn clear_quarantine(&mut self) {
        self.quarantined_until = None;
    }

    /// The run id last seen, if any.
    #[cfg(test)]
    pub(crate) fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// The earlier node that is the same server, if any.
    pub(crate) fn duplicate_of(&self) -> Option<usize> {
        self.duplicate_of
    }

    /// The settings that let the server evict lock keys, if it has them.
    pub(crate) fn eviction(&self) -> Option<&str> {
        self.eviction.as_deref()
    }

    /// What this node's grants count for at `now`.
    #[cfg(test)]
    fn standing(&self, now: Instant) -> Standing {
        self.standing_read(&mut Reading::at(now))
    }

    /// What this node's grants count for at `now`, which is read only
    /// when a quarantine was set.
    fn standing_read(&self, now: &mut Reading<'_>) -> Standing {
        if let Some(owner) = self.duplicate_of {
            return Standing::DuplicateOf(owner);
        }
        if self.eviction.is_some() && !self.accept_eviction {
            return Standing::MayEvict;
        }
        if self.replica {
            return Standing::Replica;
        }
        let Some(until) = self.quarantined_until else {
            return Standing::Voting;
        };
        let now = now.now();
        if until > now {
            Standing::Quarantined(until - now)
        } else {
            Standing::Voting
        }
    }
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
