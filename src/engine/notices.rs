//! A node thread's part in the wake-ups: it keeps its node's subscription
//! to the release notices in line with the keys this manager's callers
//! wait for, reads the notices between jobs, and hands each one to the
//! waiters of its key (see [`Waiters`](super::waiters::Waiters)).
//!
//! No thread is added: while some key is watched, the node thread waits
//! for jobs at most [`NOTICE_POLL`] at a time and looks for notices in
//! between; with nothing watched it sleeps on its queue as before, at no
//! cost.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::worker::{Job, Worker};
use crate::backend::{KeySet, ReleaseListener, Reply};

/// How long a node thread waits for a job before it looks for release
/// notices, while some key is watched: about the longest a notice waits
/// on the socket before the waiters hear of it (the first node thread
/// that reads one asks the others to read theirs at once). Shorter wakes
/// waiters sooner but wakes an idle node thread more often (one
/// non-blocking read each time), and only while someone waits. Measured
/// with 4 processes on one key and critical sections of 2 ms
/// (docs/benchmarks.md): 2 ms gave 1.56x the critical sections' time in
/// all, 1 ms 1.42x; 1 000 wake-ups a second per node cost a few percent
/// of a core while a manager waits.
pub(super) const NOTICE_POLL: Duration = Duration::from_millis(1);

/// How long after a subscription failed for want of the server (down,
/// timed out, connection lost) the node thread tries again.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// One node's subscription, owned by its node thread.
#[derive(Default)]
pub(super) struct NodeNotices {
    /// `None` until first needed; then the backend's listener, if it
    /// has one.
    listener: Option<Option<Box<dyn ReleaseListener>>>,
    /// Notices are off for good here: the backend has none, or the
    /// server refused (ACL, a proxy without pub/sub).
    off: bool,
    /// Keys whose subscription the server has confirmed.
    listening: HashSet<Arc<[u8]>>,
    /// The registry generation last subscribed for.
    synced: u64,
    /// When to subscribe again after a failure.
    retry_at: Option<Instant>,
    /// Notices may have been missed (the subscription was lost): wake
    /// every waiter once it is back.
    missed: bool,
    /// Per key, notices of this manager's own releases still to come:
    /// they wake nobody (an attempt's own undo must not wake its caller).
    echoes: HashMap<Arc<[u8]>, u32>,
}

impl NodeNotices {
    /// When the node thread must wake up for the notices, if at all.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        if !self.listening.is_empty() {
            return Some(Instant::now() + NOTICE_POLL);
        }
        self.retry_at
    }

    fn lose_subscriptions(&mut self, retry: bool) {
        self.missed |= !self.listening.is_empty() || retry;
        self.listening.clear();
        self.echoes.clear();
        self.retry_at = retry.then(|| Instant::now() + RELISTEN_AFTER);
    }
}

impl Worker {
    /// Subscribes for the keys now watched, when they changed (or a retry
    /// is due), then hands out the notices that have arrived.
    pub(super) fn tend_notices(&mut self) {
        if self.notices.off {
            return;
        }
        let changed = self.shared.waiters.generation() != self.notices.synced;
        let due = self.notices.retry_at.is_some_and(|at| Instant::now() >= at);
        if changed || due {
            self.subscribe();
        }
        if !self.notices.listening.is_empty() {
            self.hand_out_notices();
        }
    }

    /// Brings the subscription in line with the watched keys.
    fn subscribe(&mut self) {
        let (generation, keys) = self.shared.waiters.keys();
        if self.liveness.is_down() && !keys.is_empty() {
            // Down: no subscription attempt per change; once it is back.
            self.notices.lose_subscriptions(true);
            self.notices.synced = generation;
            self.shared.waiters.set_deaf(self.index, true);
            return;
        }
        let backend = &self.backend;
        let listener = self
            .notices
            .listener
            .get_or_insert_with(|| backend.release_listener());
        let Some(listener) = listener.as_mut() else {
            self.notices_off();
            return;
        };
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let outcome = catch_unwind(AssertUnwindSafe(|| listener.listen(&refs)));
        self.notices.synced = generation;
        match outcome {
            Ok(Ok(())) => {
                self.shared.waiters.set_deaf(self.index, false);
                self.notices.listening = keys.iter().cloned().collect();
                let listening = &self.notices.listening;
                self.notices.echoes.retain(|k, _| listening.contains(k));
                self.notices.retry_at = None;
                if std::mem::take(&mut self.notices.missed) {
                    // Releases may have gone unheard meanwhile: a spurious
                    // wake-up costs one attempt, a missed one a retry delay.
                    for key in &keys {
                        self.shared.waiters.notify(key, None);
                    }
                }
            }
            Ok(Err(e)) if keys.is_empty() => {
                // Nothing to listen for: the listener dropped what it had.
                log::debug!("quorum-lock: node {}: unsubscribing: {e}", self.name());
                self.notices.lose_subscriptions(false);
            }
            Ok(Err(e)) if e.kind().is_connectivity() => {
                log::debug!(
                    "quorum-lock: node {}: release notices unavailable for now, waiters \
                     retry on their timer: {e}",
                    self.name()
                );
                self.notices.lose_subscriptions(true);
                self.shared.waiters.set_deaf(self.index, true);
            }
            Ok(Err(e)) => {
                log::debug!(
                    "quorum-lock: node {}: release notices off (waiters retry on their \
                     timer): {e}",
                    self.name()
                );
                self.notices_off();
            }
            Err(_) => {
                log::debug!(
                    "quorum-lock: node {}: the release listener panicked: notices off",
                    self.name()
                );
                self.notices_off();
            }
        }
    }

    fn notices_off(&mut self) {
        self.shared.waiters.set_deaf(self.index, true);
        self.notices.off = true;
        self.notices.listener = Some(None);
        self.notices.lose_subscriptions(false);
    }

    /// Wakes the waiters of every key whose release notice arrived,
    /// except for the echoes of this manager's own releases.
    fn hand_out_notices(&mut self) {
        let Some(Some(listener)) = self.notices.listener.as_mut() else {
            return;
        };
        // `Instant::now()`: what has arrived, without waiting (the node
        // thread waits on its queue, and looks here between jobs).
        let now = Instant::now();
        let arrived = match catch_unwind(AssertUnwindSafe(|| listener.receive(now))) {
            Ok(Ok(arrived)) => arrived,
            Ok(Err(e)) => {
                log::debug!(
                    "quorum-lock: node {}: release notices interrupted: {e}",
                    self.name()
                );
                self.notices.lose_subscriptions(false);
                self.shared.waiters.set_deaf(self.index, true);
                // Try again on the next tick: most often the server is
                // back at once (a dropped connection); if not, the failed
                // subscription schedules the next try.
                self.notices.retry_at = Some(Instant::now());
                return;
            }
            Err(_) => {
                self.notices_off();
                return;
            }
        };
        let mut short = false;
        for key in arrived {
            if let Some(n) = self.notices.echoes.get_mut(&key[..])
                && *n > 0
            {
                *n -= 1;
                continue;
            }
            short |= self.shared.waiters.notify(&key, Some(self.index));
        }
        if short {
            // A release reaches every node at about the same time: ask the
            // other node threads to read their notices now, so the waiters
            // need not wait for their next poll to hear from a quorum.
            for (i, (jobs, exec)) in self.shared.peers.lock().iter().enumerate() {
                if i != self.index {
                    let _ = exec.enqueue(jobs, Job::Wake);
                }
            }
        }
    }

    /// Takes note of a release's answer: when others listen for this
    /// lock's notices (the count is of listeners for exactly its keys, see
    /// [`Reply::Notified`]), the next `lock` of it here lets them go
    /// first; when this node thread listens for a single lock's key too,
    /// its notice is an echo to skip (the members of a set are not
    /// tracked as echoes).
    pub(super) fn note_release(&mut self, keys: &KeySet, reply: Reply) {
        let Reply::Notified(heard) = reply else {
            return;
        };
        let own = keys
            .single()
            .and_then(|key| self.notices.listening.get(key))
            .cloned();
        if let Some(key) = &own {
            *self.notices.echoes.entry(Arc::clone(key)).or_default() += 1;
        }
        if heard > u64::from(own.is_some()) {
            self.shared.waiters.note_heard(keys);
        }
    }
}
