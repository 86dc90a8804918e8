//! Who in this manager waits for which lock's release, shared by the node
//! threads, which hand each notice (it names one server key) to the
//! waiters of every lock with that key: a single lock's, or a set's with
//! it as a member. Also the
//! short memory of releases that others were waiting for, for the
//! fairness rule (see `Rounds::yield_to_waiters`).
//!
//! A waiter is woken once notices for its key have come from enough
//! nodes to tell a holder's release from a failed attempt's undo, not at
//! the first one. While a holder holds the lock on at least a quorum Q of
//! the N nodes, another process's attempt can take the key only on the
//! other N - Q nodes, so its undo announces a release on at most N - Q
//! nodes; the holder's own release announces it on at least Q nodes, of
//! which all but the deaf ones (nodes that send no notices) are heard.
//! So the threshold is Q minus the deaf nodes, but **never below
//! N - Q + 1**: below that, undos would count as releases. Waking on
//! undos made the waiters that lost a race wake each other in turn for as
//! long as the winner held the lock, each wake-up one more failed attempt
//! (and one more undo): measured with 4 processes on one key, that doubled
//! the attempts; with one of three nodes deaf and a threshold of one
//! notice, two waiters made about 40 times the attempts. The price of
//! the floor: a release that only deaf nodes and fewer than
//! N - Q + 1 hearing nodes announce wakes nobody, and the waiters retry
//! on their timer (with N - Q + 1 or more nodes deaf, always). A split
//! vote, where nobody won, undoes on every node and still wakes everyone.
//!
//! An acquire of the key that a node grants counts as that node's notice
//! (`Waiters::note_free`): the key was free there. It stands in for a
//! notice the node could not send because it subscribed after the
//! release, and the floor holds for it as for notices.
//!
//! For a set (`lock_all`), each member's notices are counted apart: a
//! member released on node 0 and another on node 1 is no member released
//! on a quorum.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::echoes::Echoes;
use super::hold::Hold;
use crate::backend::KeySet;

/// How long a release that others listened for is remembered: the
/// releaser's next `lock` of that key lets them go first only if it comes
/// within this time (a loop that locks again at once); later, the others
/// have had their chance anyway.
pub(crate) const HEARD_FOR: Duration = Duration::from_secs(1);

/// Most keys remembered at once as "others were waiting": a bound on the
/// memory, whatever the number of keys a manager releases.
const MAX_HEARD: usize = 1024;

/// The waiters of one engine, by key.
#[derive(Debug)]
pub(crate) struct Waiters {
    book: Mutex<Book>,
    /// Notices from this many nodes wake a waiter (fewer when some nodes
    /// cannot send any, see `deaf`).
    quorum: usize,
    /// Per node: it sends no notices now (off, refused, or its
    /// subscription failed).
    deaf: Vec<AtomicBool>,
    /// Changes whenever the set of watched keys may have changed: a node
    /// thread compares it with the one it last subscribed for.
    generation: AtomicU64,
    /// Locks whose last release here was heard by another process, and
    /// when: by what the released lease held.
    heard: Mutex<HashMap<Hold, Instant>>,
    /// This manager's undos, whose notices wake nobody.
    echoes: Echoes,
}

#[derive(Debug, Default)]
struct Book {
    /// The waiters of each lock, by its keys.
    keys: HashMap<KeySet, Vec<Waiter>>,
    next_id: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    /// Rung (one slot) when the waiter should try again.
    bell: Sender<()>,
    /// Per member of the watched keys (one for a single lock, in the
    /// set's order for a set), per node: a notice for that member came from it
    /// since the waiter last cleared.
    heard_from: Vec<Vec<bool>>,
    /// Per node, the refusal of an acquire of the key there since the
    /// waiter last cleared (those of its last attempt).
    seen: Vec<Option<Refusal>>,
    /// The holder when the waiter last asked: the digest then seen on a
    /// quorum of nodes, once one was.
    known: Option<u64>,
    /// What `seen` shows was told already.
    told: bool,
}

/// A node's refusal of an acquire ([`Reply::HeldBy`](crate::backend::Reply)).
#[derive(Debug, Clone, Copy)]
struct Refusal {
    /// The digest of the value the key held.
    digest: u64,
    /// When that key expires there, when the node said.
    expires: Option<Instant>,
}

/// What the refusals since a waiter last asked say of the lock's holder
/// (see [`Waiters::note_holder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderNews {
    /// Another holder than before holds it on a quorum of nodes: the lock
    /// was let go (or expired) and taken again, for real.
    Moved,
    /// The same holder as before still holds it on a quorum of nodes.
    Stayed,
    /// The first holder seen.
    First,
    /// Nothing to tell: no refusal since, nothing new since the last
    /// news, or no holder on a quorum (a split vote).
    Unknown,
}

impl Waiters {
    /// No waiters yet, for `nodes` nodes and locks that need `quorum`.
    pub(crate) fn new(nodes: usize, quorum: usize) -> Self {
        Self {
            book: Mutex::default(),
            quorum,
            deaf: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            generation: AtomicU64::new(0),
            heard: Mutex::default(),
            echoes: Echoes::default(),
        }
    }

    /// Registers a waiter for the lock of `keys`; dropping the [`Watch`]
    /// unregisters it.
    pub(crate) fn register(self: &Arc<Self>, keys: &KeySet) -> Watch {
        // One slot: notices that arrive while the waiter is busy coalesce
        // into one wake-up.
        let (bell, notices) = crossbeam_channel::bounded(1);
        let mut book = self.book.lock();
        let id = book.next_id;
        book.next_id += 1;
        let heard_from = vec![vec![false; self.deaf.len()]; keys.len()];
        let waiter = Waiter {
            id,
            bell,
            heard_from,
            seen: vec![None; self.deaf.len()],
            known: None,
            told: false,
        };
        book.keys.entry(keys.clone()).or_default().push(waiter);
        self.generation.fetch_add(1, Ordering::SeqCst);
        Watch {
            waiters: Arc::clone(self),
            keys: keys.clone(),
            id,
            notices,
        }
    }

    fn unregister(&self, keys: &KeySet, id: u64) {
        let mut book = self.book.lock();
        if let Some(list) = book.keys.get_mut(keys) {
            list.retain(|w| w.id != id);
            if list.is_empty() {
                book.keys.remove(keys);
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// This manager's undos (see `echoes.rs`).
    pub(super) fn echoes(&self) -> &Echoes {
        &self.echoes
    }

    /// The current generation (see the field).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The keys to listen for and the generation they belong to: every
    /// key of every watched lock (a single lock's, each member of a set),
    /// once.
    pub(super) fn keys(&self) -> (u64, Vec<Arc<[u8]>>) {
        let book = self.book.lock();
        let mut keys: Vec<Arc<[u8]>> = Vec::with_capacity(book.keys.len());
        for watched in book.keys.keys() {
            keys.extend(watched.iter().map(Arc::from));
        }
        keys.sort_unstable();
        keys.dedup();
        (self.generation(), keys)
    }

    /// From how many nodes a key's notices must come to wake its waiters:
    /// the quorum less the deaf nodes, never below one more than the
    /// nodes an undo can reach while a holder holds a quorum (see the
    /// module docs).
    fn needed(&self) -> usize {
        let nodes = self.deaf.len();
        let deaf = self
            .deaf
            .iter()
            .filter(|d| d.load(Ordering::Relaxed))
            .count();
        let undos_reach = nodes.saturating_sub(self.quorum);
        self.quorum.saturating_sub(deaf).max(undos_reach + 1).max(1)
    }

    /// Takes note of a release notice for the server key `key` from node
    /// `node`, and wakes the waiters of every lock with that key (a single
    /// lock's, or a set's member) that have now heard of it from enough nodes
    /// (every one of them with `node` = `None`: notices may have been
    /// missed). Whether some waiter still needs notices from other nodes.
    pub(super) fn notify(&self, key: &[u8], node: Option<usize>) -> bool {
        let needed = self.needed();
        let mut book = self.book.lock();
        let mut short = false;
        // Each concerned watched lock with the position of `key` among
        // its keys (0 for a single lock).
        let concerned = book
            .keys
            .iter_mut()
            .filter_map(|(watched, list)| watched.position(key).map(|m| (m, list)));
        let waiters = concerned.flat_map(|(m, list)| list.iter_mut().map(move |w| (m, w)));
        for (member, waiter) in waiters {
            let Some(heard_from) = waiter.heard_from.get_mut(member) else {
                continue;
            };
            if let Some(slot) = node.and_then(|n| heard_from.get_mut(n)) {
                *slot = true;
            }
            let heard = heard_from.iter().filter(|h| **h).count();
            if node.is_none() || heard >= needed {
                // Full: a wake-up is already pending; disconnected: the
                // waiter is being dropped. Either way nothing is lost.
                let _ = waiter.bell.try_send(());
            } else {
                short = true;
            }
        }
        short
    }

    /// Takes note that an acquire of `keys` (a single lock or a set)
    /// found them free on node `node`: for their waiters, as good as a
    /// notice of their release there. It closes the gap a subscription leaves: a waiter
    /// listens on each node from when that node's thread subscribed (the
    /// watch waits for that only up to a node timeout, so a busy node
    /// thread may subscribe after the release), but every attempt made
    /// after the watch runs on each node after the subscription, so that
    /// node either announces the release or the attempt finds the key
    /// free (a grant, often a late answer the failed round did not wait
    /// for). The floor holds as for notices: while a holder holds a
    /// quorum, the key is free on at most N - Q nodes.
    pub(super) fn note_free(&self, keys: &KeySet, node: usize) {
        for key in keys.iter() {
            self.notify(key, Some(node));
        }
    }

    /// Whether node `node` can send notices now.
    pub(super) fn set_deaf(&self, node: usize, deaf: bool) {
        if let Some(flag) = self.deaf.get(node) {
            flag.store(deaf, Ordering::Relaxed);
        }
    }

    /// Forgets what waiter `id` of `keys` heard and was refused with so far.
    fn clear(&self, keys: &KeySet, id: u64) {
        let mut book = self.book.lock();
        let waiter = book
            .keys
            .get_mut(keys)
            .and_then(|list| list.iter_mut().find(|w| w.id == id));
        if let Some(waiter) = waiter {
            waiter
                .heard_from
                .iter_mut()
                .flatten()
                .for_each(|h| *h = false);
            waiter.seen.iter_mut().for_each(|r| *r = None);
            waiter.told = false;
        }
    }

    /// Takes note that node `node` refused an acquire of `keys` because
    /// it holds the value of digest `digest`, whose key there expires at
    /// `expires` when the node said, for the waiters of `keys` (see
    /// [`Watch::take_holder_news`] and [`Watch::quorum_free_at`]). Only a
    /// process with access to the key can change what this shows; one
    /// that may only publish notices cannot.
    pub(super) fn note_holder(
        &self,
        keys: &KeySet,
        node: usize,
        digest: u64,
        expires: Option<Instant>,
    ) {
        let mut book = self.book.lock();
        let Some(list) = book.keys.get_mut(keys) else {
            return;
        };
        for waiter in list {
            if let Some(slot) = waiter.seen.get_mut(node) {
                *slot = Some(Refusal { digest, expires });
                waiter.told = false;
            }
        }
    }

    /// The earliest time a quorum of nodes may grant the lock waiter `id`
    /// of `keys` waits for, as the refusals noted since it last cleared
    /// tell: the time enough of the holder's keys have expired, counting
    /// every node whose refusal did not say when (or that did not refuse)
    /// as free now. `None` when that is now, or when some node sends no
    /// release notices (a release there is heard by nobody, so the waiter
    /// must not count on notices to learn of it).
    fn quorum_free_at(&self, keys: &KeySet, id: u64) -> Option<Instant> {
        if self.deaf.iter().any(|d| d.load(Ordering::Relaxed)) {
            return None;
        }
        let book = self.book.lock();
        let waiter = book.keys.get(keys)?.iter().find(|w| w.id == id)?;
        let mut known: Vec<Instant> = waiter
            .seen
            .iter()
            .flatten()
            .filter_map(|r| r.expires)
            .collect();
        let maybe_free = waiter.seen.len() - known.len();
        // Nodes whose keys must expire before a quorum can grant.
        let to_expire = self.quorum.checked_sub(maybe_free).filter(|n| *n > 0)?;
        known.sort_unstable();
        known.get(to_expire - 1).copied()
    }

    /// What the refusals noted since the waiter last cleared (those of its
    /// last attempt, late answers included) say of the holder of the lock
    /// that waiter `id` waits for, against the holder it knew. The holder
    /// is the value a quorum of nodes refused with, not one node's: while
    /// a holder holds a quorum, another waiter's failed attempt holds the
    /// key for a moment on at most the other nodes, so its token is never
    /// taken for a new holder. Older refusals do not count: a node that
    /// granted the last attempt would otherwise still show the holder from
    /// before.
    fn take_holder_news(&self, keys: &KeySet, id: u64) -> HolderNews {
        let quorum = self.quorum;
        let mut book = self.book.lock();
        let Some(waiter) = book
            .keys
            .get_mut(keys)
            .and_then(|list| list.iter_mut().find(|w| w.id == id))
        else {
            return HolderNews::Unknown;
        };
        if waiter.told {
            return HolderNews::Unknown;
        }
        let seen = &waiter.seen;
        let digest_on = |d: u64| seen.iter().flatten().filter(|r| r.digest == d).count();
        let holder = seen
            .iter()
            .flatten()
            .map(|r| r.digest)
            .find(|d| digest_on(*d) >= quorum);
        let news = match (waiter.known, holder) {
            (_, None) => return HolderNews::Unknown,
            (None, Some(_)) => HolderNews::First,
            (Some(known), Some(now)) if known != now => HolderNews::Moved,
            (Some(_), Some(_)) => HolderNews::Stayed,
        };
        waiter.known = holder;
        waiter.told = true;
        news
    }

    /// Remembers that a release of `hold` here was heard by others.
    pub(super) fn note_heard(&self, hold: &Hold) {
        let now = Instant::now();
        let mut heard = self.heard.lock();
        if heard.len() >= MAX_HEARD {
            heard.retain(|_, at| now.saturating_duration_since(*at) < HEARD_FOR);
        }
        if heard.len() < MAX_HEARD || heard.contains_key(hold) {
            heard.insert(hold.clone(), now);
        }
    }

    /// Whether the last release of `hold` here, less than [`HEARD_FOR`]
    /// ago, was heard by others; forgets it either way.
    pub(crate) fn take_heard(&self, hold: &Hold) -> bool {
        self.heard
            .lock()
            .remove(hold)
            .is_some_and(|at| at.elapsed() < HEARD_FOR)
    }
}

/// A registered waiter for one lock. Dropping it unregisters it, and the
/// node threads stop listening for its keys once nobody waits for them.
#[derive(Debug)]
pub(crate) struct Watch {
    waiters: Arc<Waiters>,
    keys: KeySet,
    id: u64,
    notices: Receiver<()>,
}

impl Watch {
    /// Ready when a release notice for the key arrived from any node.
    pub(crate) fn notices(&self) -> &Receiver<()> {
        &self.notices
    }

    /// Forgets the notices that arrived so far (they are about releases
    /// that an attempt starting now sees anyway).
    pub(crate) fn clear(&self) {
        self.waiters.clear(&self.keys, self.id);
        while self.notices.try_recv().is_ok() {}
    }

    /// What the refusals of this manager's attempts since the last
    /// [`clear`](Self::clear) say of the lock's holder: another one than
    /// the one known (the lock changed hands; it is known from now on),
    /// the same one, the first one seen, or nothing new (see
    /// `Waiters::note_holder`). Each refusal is news once.
    pub(crate) fn take_holder_news(&self) -> HolderNews {
        self.waiters.take_holder_news(&self.keys, self.id)
    }

    /// When a quorum of nodes may grant the lock at the earliest, as the
    /// refusals since the last [`clear`](Self::clear) tell (see
    /// `Waiters::quorum_free_at`): `None` when that may be now, or when
    /// some node cannot send release notices.
    pub(crate) fn quorum_free_at(&self) -> Option<Instant> {
        self.waiters.quorum_free_at(&self.keys, self.id)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.waiters.unregister(&self.keys, self.id);
    }
}

#[cfg(test)]
#[path = "waiters_tests.rs"]
mod tests;
