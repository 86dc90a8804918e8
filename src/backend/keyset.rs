//! [`KeySet`]: the keys of one lock, one type from where a call enters to
//! the backend. A single lock is a set of one; a lock on several
//! resources at once (`LockManager::lock_all`) is a set of several, which
//! a backend takes all or nothing in one atomic step.

use std::fmt;
use std::sync::Arc;

/// Most members of one set.
pub const MAX_SET_SIZE: usize = 64;

/// The keys of one lock: sorted (as bytes), distinct, at least one and at
/// most [`MAX_SET_SIZE`].
///
/// A single lock is a set of one, and [`single`](Self::single) gives its
/// key; a backend runs an op on a set of several keys as one atomic step on
/// all of them (see [`OpKind`](super::OpKind)). The constructors keep the
/// invariants, so no other value exists. Cheap to clone (one reference
/// count); equal, and hashed alike, when the keys are: a set is its keys
/// and nothing more (what a lock does with them is its op's
/// [`OpKind`](super::OpKind)).
///
/// The crate also keeps a lock's resource names (its keys before the
/// manager's prefix) in one; [`Display`](fmt::Display) shows a set of one
/// as its key and a set of several as `{a, b}` (lossy UTF-8), `Debug` as a
/// list of lossy strings.
///
/// ```
/// use quorum_lock::backend::KeySet;
/// use quorum_lock::MAX_SET_SIZE;
///
/// let set = KeySet::new(["b", "a", "b"]).unwrap();
/// assert_eq!(set.as_slice(), [&b"a"[..], b"b"]);
/// assert_eq!(set.single(), None);
/// assert_eq!(set.to_string(), "{a, b}");
/// assert_eq!(KeySet::one("job").single(), Some(&b"job"[..]));
/// assert!(KeySet::new(Vec::<&str>::new()).is_none());
/// assert!(KeySet::new((0..=MAX_SET_SIZE).map(|i| i.to_string())).is_none());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeySet {
    /// Sorted, distinct, 1 to [`MAX_SET_SIZE`] keys.
    keys: Arc<[Vec<u8>]>,
}

impl KeySet {
    /// The set of one key (a single lock's).
    pub fn one(key: impl AsRef<[u8]>) -> Self {
        Self {
            keys: Arc::from([key.as_ref().to_vec()]),
        }
    }

    /// The set of `keys`, sorted, each once; `None` when there are none or
    /// more than [`MAX_SET_SIZE`] distinct ones (it stops reading as soon
    /// as it has more; repeats count once).
    pub fn new<K: AsRef<[u8]>>(keys: impl IntoIterator<Item = K>) -> Option<Self> {
        let mut sorted = std::collections::BTreeSet::new();
        for key in keys {
            let key = key.as_ref();
            if !sorted.contains(key) {
                sorted.insert(key.to_vec());
            }
            if sorted.len() > MAX_SET_SIZE {
                return None;
            }
        }
        if sorted.is_empty() {
            return None;
        }
        Some(Self {
            keys: sorted.into_iter().collect(),
        })
    }

    /// The keys, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.keys.iter().map(Vec::as_slice)
    }

    /// The keys, in order, as a slice.
    pub fn as_slice(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// How many keys: 1 to [`MAX_SET_SIZE`].
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always `false`: a set has at least one key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key of a set of one (a single lock); `None` for several.
    pub fn single(&self) -> Option<&[u8]> {
        match &self.keys[..] {
            [key] => Some(key),
            _ => None,
        }
    }

    /// The first key (the smallest): the only one of a set of one.
    pub fn first(&self) -> &[u8] {
        self.keys.first().map_or(&[][..], Vec::as_slice)
    }

    /// Where `key` is among the keys, if it is one of them.
    pub fn position(&self, key: &[u8]) -> Option<usize> {
        self.keys.binary_search_by(|k| k[..].cmp(key)).ok()
    }

    /// Whether `key` is one of the keys.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.position(key).is_some()
    }

    /// Every key with `prefix` in front: a lock's keys on the nodes from
    /// its resource names (the order and distinctness carry over).
    pub(crate) fn prefixed(&self, prefix: &[u8]) -> Self {
        if prefix.is_empty() {
            return self.clone();
        }
        // A common prefix keeps the order and the distinctness.
        Self {
            keys: self.keys.iter().map(|k| [prefix, k].concat()).collect(),
        }
    }
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// `a` for a set of one, `{a, b}` for several: lossy UTF-8.
impl fmt::Display for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(key) = self.single() {
            return f.write_str(&String::from_utf8_lossy(key));
        }
        f.write_str("{")?;
        for (i, key) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&String::from_utf8_lossy(key))?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_sorted_distinct_and_one_to_the_cap() {
        let set = KeySet::new([&b"long:key"[..], b"a", b"", b"a"]).unwrap();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [&b""[..], b"a", b"long:key"]
        );
        assert_eq!(set.len(), 3);
        assert!(!set.is_empty());
        assert_eq!(set.single(), None);
        assert_eq!(set.first(), b"");
        assert_eq!(set.position(b"long:key"), Some(2));
        assert!(set.contains(b"a") && !set.contains(b"b"));
        assert_eq!(set.to_string(), "{, a, long:key}");
        assert_eq!(format!("{set:?}"), r#"["", "a", "long:key"]"#);
        // The order and the equality do not depend on how it was given.
        assert_eq!(set, KeySet::new([&b"a"[..], b"long:key", b""]).unwrap());

        assert!(KeySet::new(Vec::<Vec<u8>>::new()).is_none(), "empty");
        let full = (0..MAX_SET_SIZE).map(|i| format!("k{i}"));
        assert_eq!(KeySet::new(full).unwrap().len(), MAX_SET_SIZE);
        let over = (0..=MAX_SET_SIZE).map(|i| format!("k{i}"));
        assert!(KeySet::new(over).is_none(), "over the cap");
        let repeats = std::iter::repeat_n("a", MAX_SET_SIZE * 4).chain(["b"]);
        assert_eq!(KeySet::new(repeats).unwrap().len(), 2, "repeats count once");
    }

    #[test]
    fn a_single_lock_is_a_set_of_one() {
        let one = KeySet::one("job");
        assert_eq!(one.single(), Some(&b"job"[..]));
        assert_eq!(one.first(), b"job");
        assert_eq!(one.len(), 1);
        assert_eq!(one, KeySet::new(["job", "job"]).unwrap());
        assert_eq!(one.to_string(), "job");
        assert_eq!(one.position(b"job"), Some(0));
        let prefixed = KeySet::new(["b", "a"]).unwrap().prefixed(b"p:");
        assert_eq!(prefixed.as_slice(), [&b"p:a"[..], b"p:b"]);
        assert_eq!(one.prefixed(b"").single(), Some(&b"job"[..]));
        assert_eq!(KeySet::one(b"\xff").to_string(), "\u{fffd}");
    }
}
