//! Which thread holds a live guard for which key, per manager, so that a
//! thread asking again for a lock it holds fails at once with
//! [`Error::Deadlock`](crate::Error::Deadlock) instead of waiting for
//! itself (issue 18, item 2).
//!
//! A guard counts for the thread that acquired it, from the moment it is
//! made until it is released, forgotten or dropped, and only while its
//! lock is valid: a guard whose validity ran out (or that is known lost)
//! holds nothing that waiting could wait for, so asking again is fine.
//! Rust cannot tell when a guard moves to another thread: it keeps
//! counting for the thread that took it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::thread::{self, ThreadId};
use std::time::Instant;

use parking_lot::Mutex;

use super::lease::Lease;
use crate::backend::KeySet;

/// The live guards of one manager, by key and acquiring thread.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    /// The leases of the live guards each (key, thread) took: one,
    /// unless the thread locked again after its earlier lock expired.
    held: Mutex<HashMap<Holder, Vec<Weak<Lease>>>>,
}

/// A key and the thread that took a guard for it.
type Holder = (Arc<[u8]>, ThreadId);

impl Owners {
    /// Whether the current thread holds a live guard for `key` whose lock
    /// is still valid at `now` (on the manager's clock).
    pub(crate) fn held_by_me(&self, key: &Arc<[u8]>, now: Instant) -> bool {
        let me = thread::current().id();
        let held = self.held.lock();
        members(key).any(|member| {
            held.get(&(member, me)).is_some_and(|leases| {
                leases.iter().filter_map(Weak::upgrade).any(|lease| {
                    let state = lease.state();
                    state.lost().is_none() && state.deadline() > now
                })
            })
        })
    }

    /// Every live guard's lease, once each (a set's lease is held under
    /// each member's key), collected under the lock and returned without
    /// it, so the caller may lock each lease in turn.
    pub(crate) fn live(&self) -> Vec<Arc<Lease>> {
        let held = self.held.lock();
        let mut live: Vec<Arc<Lease>> = held.values().flatten().filter_map(Weak::upgrade).collect();
        drop(held);
        live.sort_by_key(Arc::as_ptr);
        live.dedup_by(|a, b| Arc::ptr_eq(a, b));
        live
    }

    /// Records a guard for `lease` made on the current thread, until the
    /// returned [`Owned`] is dropped.
    pub(crate) fn own(self: &Arc<Self>, lease: &Arc<Lease>) -> Owned {
        let thread = thread::current().id();
        let key = Arc::clone(&lease.key);
        let lease = Arc::downgrade(lease);
        let mut held = self.held.lock();
        for member in members(&key) {
            held.entry((member, thread))
                .or_default()
                .push(Weak::clone(&lease));
        }
        drop(held);
        Owned {
            owners: Arc::clone(self),
            key,
            lease,
            thread,
        }
    }
}

/// One live guard's entry in [`Owners`]; removed when dropped.
/// The keys a lease holds: its key, or each member's key of a set (a
/// thread that holds a set holds each of its resources, and waiting for
/// one of them, alone or in another set, would wait for itself).
fn members(key: &Arc<[u8]>) -> impl Iterator<Item = Arc<[u8]>> {
    // No allocation for a single key: the hot path.
    let set: Option<Vec<Arc<[u8]>>> = KeySet::of(key).map(|s| s.iter().map(Arc::from).collect());
    let single = set.is_none().then(|| Arc::clone(key));
    single.into_iter().chain(set.into_iter().flatten())
}

#[derive(Debug)]
pub(crate) struct Owned {
    owners: Arc<Owners>,
    key: Arc<[u8]>,
    /// Compared by address only: it may be gone already.
    lease: Weak<Lease>,
    thread: ThreadId,
}

impl Drop for Owned {
    fn drop(&mut self) {
        let mut held = self.owners.held.lock();
        for member in members(&self.key) {
            let entry = (member, self.thread);
            if let Some(leases) = held.get_mut(&entry) {
                leases.retain(|l| !l.ptr_eq(&self.lease));
                if leases.is_empty() {
                    held.remove(&entry);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::redlock::owners::*;
    use crate::redlock::support::Support;
    use crate::token::Token;

    fn lease(key: &str, deadline: Instant) -> Arc<Lease> {
        let token = Token::random().unwrap();
        let ttl = Duration::from_secs(1);
        Arc::new(Lease::new(
            b"r",
            key.as_bytes().into(),
            token,
            ttl,
            deadline,
            Support::default(),
            None,
        ))
    }

    #[test]
    fn a_valid_guard_counts_for_its_thread_until_dropped() {
        let owners = Arc::new(Owners::default());
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        let (r, s) = (lease("r", later), lease("s", later));
        let key = Arc::clone(&r.key);
        let owned = owners.own(&r);
        assert!(owners.held_by_me(&key, now));
        assert!(!owners.held_by_me(&s.key, now));
        assert!(!owners.held_by_me(&key, later), "expired: holds nothing");
        let other = Arc::clone(&owners);
        let k = Arc::clone(&key);
        assert!(
            !std::thread::spawn(move || other.held_by_me(&k, now))
                .join()
                .unwrap()
        );
        let again = lease("r", later);
        let twice = owners.own(&again);
        drop(owned);
        assert!(owners.held_by_me(&key, now));
        drop(again); // the lease may go before its entry
        drop(twice);
        assert!(!owners.held_by_me(&key, now));
        assert!(owners.held.lock().is_empty());
    }

    #[test]
    fn every_live_lease_is_visited_once() {
        let owners = Arc::new(Owners::default());
        let later = Instant::now() + Duration::from_secs(1);
        let (r, s) = (lease("r", later), lease("s", later));
        let (_r1, _r2) = (owners.own(&r), owners.own(&r));
        let _s = owners.own(&s);
        let live = owners.live();
        assert_eq!(live.len(), 2);
        assert!(live.iter().any(|l| Arc::ptr_eq(l, &r)));
        drop(live);
        drop(s); // the guard's entry may outlive its lease
        assert_eq!(owners.live().len(), 1);
    }
}
