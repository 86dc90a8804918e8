//! Which thread holds a live guard for which key, per manager, so that a
//! thread asking again for a lock it holds fails at once with
//! [`Error::Deadlock`](crate::Error::Deadlock) instead of waiting for
//! itself.
//!
//! A guard counts for the thread that acquired it, from the moment it is
//! made until it is released, forgotten or dropped, and only while its
//! lock is valid: a guard whose validity ran out (or that is known lost)
//! holds nothing that waiting could wait for, so asking again is fine.
//! Rust cannot tell when a guard moves to another thread: it keeps
//! counting for the thread that took it.

use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Weak};
use std::thread::{self, ThreadId};
use std::time::Instant;

use parking_lot::Mutex;

use super::lease::Lease;
use crate::engine::Hold;

/// The live guards of one manager, by what they hold and the acquiring
/// thread.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    /// The leases of the live guards each (member, thread) took.
    held: Mutex<HashMap<Holder, Leases, BuildHasherDefault<Prehashed>>>,
    /// The keys of the holders' hashes (SipHash, as a `HashMap`'s own:
    /// the keys are the application's resource names).
    keys: RandomState,
}

/// One member of a hold ([`Hold::members`]: a key of a lock, or a
/// read-write lock's side) and the thread that took a guard for it, with
/// their hash, computed once: a guard's drop finds its entry again
/// without hashing its keys a second time.
#[derive(Debug, PartialEq, Eq)]
struct Holder {
    hash: u64,
    member: Hold,
    thread: ThreadId,
}

impl Hash for Holder {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The map's hasher: a [`Holder`] brings its hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // `Holder` writes one `u64`; anything else is folded in.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// The leases of the live guards one (member, thread) took: one, unless the
/// thread locked again after its earlier lock expired. The one is kept in
/// the map's entry itself, so a held lock costs no allocation here (a
/// `Vec` of one was a 32-byte allocation per held lock, issue 30).
#[derive(Debug)]
enum Leases {
    One(Weak<Lease>),
    /// Two or more when the last was added (rare): a boxed slice keeps
    /// the entry small.
    Many(Box<[Weak<Lease>]>),
}

impl Leases {
    fn iter(&self) -> std::slice::Iter<'_, Weak<Lease>> {
        match self {
            Self::One(lease) => std::slice::from_ref(lease).iter(),
            Self::Many(leases) => leases.iter(),
        }
    }

    fn push(&mut self, lease: Weak<Lease>) {
        let mut all = match std::mem::replace(self, Self::Many(Box::default())) {
            Self::One(one) => vec![one],
            Self::Many(many) => many.into_vec(),
        };
        all.push(lease);
        *self = Self::Many(all.into_boxed_slice());
    }

    /// Removes every entry of `lease` (compared by address). Whether none
    /// is left (the caller then removes the map's entry: a `One` is not
    /// emptied in place).
    fn remove(&mut self, lease: &Arc<Lease>) -> bool {
        let other = |l: &Weak<Lease>| !std::ptr::eq(l.as_ptr(), Arc::as_ptr(lease));
        match self {
            Self::One(one) => !other(one),
            Self::Many(many) => {
                let mut left = std::mem::take(many).into_vec();
                left.retain(other);
                *many = left.into_boxed_slice();
                many.is_empty()
            }
        }
    }
}

impl Owners {
    /// `member` held by `thread`, hashed.
    fn holder(&self, member: Hold, thread: ThreadId) -> Holder {
        Holder {
            hash: self.keys.hash_one((&member, thread)),
            member,
            thread,
        }
    }

    /// Whether the current thread holds a live guard for any member of
    /// `hold` ([`Hold::members`]) whose lock is still valid at `now` (on
    /// the manager's clock).
    pub(crate) fn held_by_me(&self, hold: &Hold, now: Instant) -> bool {
        let me = thread::current().id();
        let held = self.held.lock();
        hold.members().any(|member| {
            held.get(&self.holder(member, me)).is_some_and(|leases| {
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
        let mut live: Vec<Arc<Lease>> = held
            .values()
            .flat_map(Leases::iter)
            .filter_map(Weak::upgrade)
            .collect();
        drop(held);
        live.sort_by_key(Arc::as_ptr);
        live.dedup_by(|a, b| Arc::ptr_eq(a, b));
        live
    }

    /// Records a guard for `lease` made on the current thread, until the
    /// returned [`Owned`] (which holds the lease) is dropped.
    pub(crate) fn own(self: &Arc<Self>, lease: Arc<Lease>) -> Owned {
        let thread = thread::current().id();
        let mut first = None;
        let mut held = self.held.lock();
        for member in lease.hold.members() {
            let holder = self.holder(member, thread);
            first.get_or_insert(holder.hash);
            let mine = Arc::downgrade(&lease);
            match held.entry(holder) {
                Entry::Occupied(mut leases) => leases.get_mut().push(mine),
                Entry::Vacant(entry) => {
                    entry.insert(Leases::One(mine));
                }
            }
        }
        drop(held);
        Owned {
            owners: Arc::clone(self),
            lease,
            thread,
            first: first.unwrap_or_default(),
        }
    }
}

/// One live guard's entry in [`Owners`], and its lease (the guard's: one
/// field for both keeps the guard small, issue 30); the entry is removed
/// when this is dropped.
#[derive(Debug)]
pub(crate) struct Owned {
    owners: Arc<Owners>,
    lease: Arc<Lease>,
    thread: ThreadId,
    /// The hash of the first member's entry (a single lock's only one).
    first: u64,
}

impl Owned {
    /// The guard's lease.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let mut held = self.owners.held.lock();
        for (i, member) in self.lease.hold.members().enumerate() {
            // The first member's hash is known (a single lock's: the hot
            // path); one lookup for both the find and the removal.
            let holder = match i {
                0 => Holder {
                    hash: self.first,
                    member,
                    thread: self.thread,
                },
                _ => self.owners.holder(member, self.thread),
            };
            if let Entry::Occupied(mut leases) = held.entry(holder)
                && leases.get_mut().remove(&self.lease)
            {
                leases.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::KeySet;
    use crate::engine::Pair;
    use crate::redlock::owners::*;
    use crate::redlock::support::Support;
    use crate::token::Token;

    fn lease(key: &str, deadline: Instant) -> Arc<Lease> {
        holding(Hold::Lock(KeySet::one(key)), deadline)
    }

    /// A lease of `hold` (its resource names do not matter here).
    fn holding(hold: Hold, deadline: Instant) -> Arc<Lease> {
        Arc::new(Lease::new(
            KeySet::one("r"),
            hold,
            Token::random().unwrap(),
            Duration::from_secs(1),
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
        let key = r.hold.clone();
        let owned = owners.own(Arc::clone(&r));
        assert!(owners.held_by_me(&key, now));
        assert!(!owners.held_by_me(&s.hold, now));
        assert!(!owners.held_by_me(&key, later), "expired: holds nothing");
        let other = Arc::clone(&owners);
        let k = key.clone();
        assert!(
            !std::thread::spawn(move || other.held_by_me(&k, now))
                .join()
                .unwrap()
        );
        let again = lease("r", later);
        let twice = owners.own(Arc::clone(&again));
        drop(owned);
        assert!(owners.held_by_me(&key, now));
        drop(again);
        assert!(owners.held_by_me(&key, now), "the entry holds its lease");
        drop(twice);
        assert!(!owners.held_by_me(&key, now));
        assert!(owners.held.lock().is_empty());
    }

    #[test]
    fn a_reader_holds_its_side_and_not_the_writers_nor_a_key() {
        let owners = Arc::new(Owners::default());
        let now = Instant::now();
        let pair = Pair::new(b"x:readers", b"x:writer").unwrap();
        let reader = holding(Hold::Reader(pair.clone()), now + Duration::from_secs(1));
        let _owned = owners.own(reader);
        assert!(
            owners.held_by_me(&Hold::Reader(pair.clone()), now),
            "the reader"
        );
        // Split into its keys, a reader would count as the writer's lock
        // (and a thread's second reader would be a deadlock).
        assert!(!owners.held_by_me(&Hold::Writer(pair), now), "the writer");
        let lock = |k: &str| Hold::Lock(KeySet::one(k));
        assert!(!owners.held_by_me(&lock("x:writer"), now));
        assert!(!owners.held_by_me(&lock("x:readers"), now));
        let plain = Hold::Lock(KeySet::new(["x:readers", "x:writer"]).unwrap());
        assert!(!owners.held_by_me(&plain, now), "not the plain set");
    }

    /// A set's guard holds each of its keys, and its drop finds every
    /// entry again: the first by the hash kept, the others hashed anew.
    #[test]
    fn a_set_holds_each_key_until_its_guard_is_dropped() {
        let owners = Arc::new(Owners::default());
        let now = Instant::now();
        let set = Hold::Lock(KeySet::new(["a", "b", "c"]).unwrap());
        let set = holding(set, now + Duration::from_secs(1));
        let owned = owners.own(set);
        let lock = |k: &str| Hold::Lock(KeySet::one(k));
        for key in ["a", "b", "c"] {
            assert!(owners.held_by_me(&lock(key), now), "{key}");
        }
        assert!(!owners.held_by_me(&lock("d"), now));
        assert_eq!(owners.held.lock().len(), 3);
        drop(owned);
        assert!(owners.held.lock().is_empty(), "every key's entry removed");
    }

    #[test]
    fn every_live_lease_is_visited_once() {
        let owners = Arc::new(Owners::default());
        let later = Instant::now() + Duration::from_secs(1);
        let (r, s) = (lease("r", later), lease("s", later));
        let (_r1, _r2) = (owners.own(Arc::clone(&r)), owners.own(Arc::clone(&r)));
        let s_owned = owners.own(s);
        let live = owners.live();
        assert_eq!(live.len(), 2);
        assert!(live.iter().any(|l| Arc::ptr_eq(l, &r)));
        drop(live);
        drop(s_owned);
        assert_eq!(owners.live().len(), 1);
    }
}
