//! What a batch's grants count for: the identity of the server (or, for
//! a cluster, of each shard) that answered, judged and published, and a
//! forget passed on to the leases.

use std::time::Instant;

use super::identity::Standing;
use super::{Shared, State};
use crate::backend::{BackendError, Reply, ServerInfo};
use crate::clock::Reading;

impl State {
    /// What the grants of a batch count for, judged by the identity of the
    /// server that answered it (reported with the answers, never a cache
    /// another connection may have refreshed).
    pub(super) fn standing(
        &mut self,
        results: &[Result<Reply, BackendError>],
        server: Option<&ServerInfo>,
        now: Instant,
    ) -> Standing {
        if server.is_none() && !results.iter().any(Result::is_ok) {
            return Standing::Voting; // nothing was granted, nothing learned
        }
        self.judge_server(server, now)
    }

    /// Judges the identity and settings `server` reported at `now` (with
    /// a batch's answers, or from a look), on the manager's clock for the
    /// quarantine, publishes the verdict, and passes on a forget: the
    /// leases that counted this node hear of it at once.
    pub(super) fn judge_server(&mut self, server: Option<&ServerInfo>, now: Instant) -> Standing {
        if self.shards.seen() {
            // A cluster: a probe's server is one of its shards.
            let judged = self.shards.judge(&Ok(Reply::Yes), server, &self.shared);
            self.publish_shards();
            return judged.standing;
        }
        // The manager's clock, read only if a quarantine runs or starts.
        let mut clock_now = Reading::of(&*self.shared.clock);
        let standing = self
            .identity
            .judge(server, &mut clock_now, &self.shared.registry);
        if server.is_some() {
            self.settings_look.brought(now);
        }
        if let Some(what) = self.identity.take_forgotten() {
            log::warn!(
                "quorum-lock: node {} {what}: it may have lost lock keys, so its grants \
                 do not count, and a held lock whose quorum counted it is told it may be lost",
                self.publish.name()
            );
            self.shared.forgets.note(self.index, &what);
        }
        let Shared {
            names,
            accept_eviction,
            ..
        } = &*self.shared;
        self.publish
            .identity(standing, &mut self.identity, names, *accept_eviction);
        standing
    }

    /// Publishes a cluster node's standing: the last of its shards'
    /// quarantines, and a shard's evicting setting.
    pub(super) fn publish_shards(&mut self) {
        let until = self.shards.quarantined_until(self.shared.clock.now());
        let eviction = self.shards.eviction();
        self.publish
            .shards(until, eviction.as_deref(), self.shared.accept_eviction);
    }
}
