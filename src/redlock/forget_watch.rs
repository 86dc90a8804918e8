//! The [`ForgetWatch`]: tells a held lock at once when a node it counted on
//! may have forgotten its keys, so a guard whose quorum is gone is lost
//! now, not at the end of its TTL.
//!
//! The engine counts each node's forgets (`engine::Forgets`: the node's
//! settings began to allow eviction, it became a replica, took a new
//! replication history, evicted keys) and calls one hook for each. The watch
//! is that hook: it checks every live lease's support (the nodes whose
//! grants its deadline rests on, with their epochs before the granting
//! round) and loses those that fewer than a quorum of nodes still hold.
//! A lease made by a round that a forget overtook is checked once more
//! when its guard registers (`Rounds::check_support`): a forget before the
//! registration is caught there, one after it by the hook.
//!
//! The hook runs on a node's thread: it never blocks on the network (a
//! loss only `try_send`s to the subscribers) and holds no lock of the
//! engine. It owns no handle to the engine or the rounds (the engine owns
//! the hook: that would be a cycle, and the last handle to drop would
//! join the node threads from one of them); it reads the epochs through a
//! weak handle.

use std::fmt::Write as _;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};

use super::counters::{Counters, Event};
use super::lease::{Lease, LeaseState};
use super::owners::Owners;
use super::turns::LocalQueue;
use crate::engine::{Engine, Forgets};
use crate::error::Error;
use crate::words::Shortened;

/// What the forget hook needs: the live leases, what follows a loss, the
/// nodes' names and epochs, and why each node was last seen forgetting.
pub(crate) struct ForgetWatch {
    owners: Arc<Owners>,
    local: Arc<LocalQueue>,
    counters: Arc<Counters>,
    forgets: Weak<Forgets>,
    names: Box<[String]>,
    quorum: usize,
    /// Why each node was last seen forgetting, for a check that did not
    /// come from the hook (`None` until the hook has heard it).
    why: Mutex<Box<[Option<Arc<str>>]>>,
}

impl ForgetWatch {
    /// Makes the watch over `engine`'s nodes and registers it as the
    /// engine's forget hook.
    pub(crate) fn install(
        engine: &Engine,
        owners: Arc<Owners>,
        local: Arc<LocalQueue>,
        counters: Arc<Counters>,
        quorum: usize,
    ) -> Arc<Self> {
        let names: Box<[String]> = engine.node_names().map(str::to_owned).collect();
        let watch = Arc::new(Self {
            owners,
            local,
            counters,
            forgets: Arc::downgrade(engine.forgets()),
            why: Mutex::new(vec![None; names.len()].into()),
            names,
            quorum,
        });
        let hook = Arc::clone(&watch);
        engine
            .forgets()
            .set_hook(Box::new(move |node, why| hook.heard(node, why)));
        watch
    }

    /// The hook: `node` may have forgotten keys, `why`. Every live lease
    /// is checked against the epochs now (the engine moved the node's
    /// epoch before calling).
    fn heard(&self, node: usize, why: &str) {
        if let Some(slot) = self.why.lock().get_mut(node) {
            *slot = Some(why.into());
        }
        for lease in self.owners.live() {
            self.check(&lease, lease.state());
        }
    }

    /// Checks `lease` (whose `state` the caller has locked) against every
    /// node's forget epoch now; if fewer than a quorum of its supporting
    /// nodes still hold it, it is lost now. Returns the loss, if this call
    /// made it.
    pub(crate) fn check(
        &self,
        lease: &Lease,
        mut state: MutexGuard<'_, LeaseState>,
    ) -> Option<Error> {
        let forgets = self.forgets.upgrade()?;
        let error = state.check_support(
            |node| forgets.epoch(node),
            self.quorum,
            |moved, holding| self.reason(moved, holding),
        )?;
        after_loss(&self.counters, &self.local, lease, state, &error, true);
        Some(error)
    }

    /// Why a lease is lost: which node(s) forgot, why, and how many of the
    /// nodes it needs still hold it (one line).
    fn reason(&self, moved: &[usize], holding: usize) -> String {
        let why = self.why.lock();
        let mut reason = String::new();
        for (i, node) in moved.iter().enumerate() {
            let name = self.names.get(*node).map_or("?", String::as_str);
            let said = why.get(*node).and_then(Option::as_deref);
            let said = said.unwrap_or("may have forgotten the lock's keys");
            let sep = if i == 0 { "" } else { "; " };
            let _ = write!(reason, "{sep}node {name} {said}");
        }
        let _ = write!(
            reason,
            ": {holding} of the {} nodes the lock needs still hold it",
            self.quorum
        );
        reason
    }
}

impl std::fmt::Debug for ForgetWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgetWatch")
            .field("quorum", &self.quorum)
            .finish_non_exhaustive()
    }
}

/// What follows a lease's loss, wherever it was found (a failed extend, a
/// forget): counted and logged once (`first`), then, with the lease's
/// lock let go (the lines' lock comes first), a thread waiting in the
/// local line is told that the holder's lock no longer holds it back.
pub(super) fn after_loss(
    counters: &Counters,
    local: &LocalQueue,
    lease: &Lease,
    state: MutexGuard<'_, LeaseState>,
    error: &Error,
    first: bool,
) {
    if first {
        counters.note(Event::Lost);
        crate::trace::lost(&lease.trace, &lease.resources, error);
        log::warn!(
            "quorum-lock: the lock on {} may be lost: {error}",
            Shortened(&lease.resources.to_string())
        );
    }
    drop(state);
    local.nudge(&lease.hold);
}
