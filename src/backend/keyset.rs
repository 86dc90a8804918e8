//! Several keys locked as one (`LockManager::lock_all`): the set travels
//! through the engine as one composite key, and reaches a backend as a
//! [`KeySet`] in the set operations ([`OpKind::AcquireAll`](super::OpKind)
//! and its kin), which take every key or none in one atomic step.
//!
//! The composite key is never stored on a server: only its members are.
//! It starts with [`SET_MARK`], which no resource may start with (the
//! manager refuses such names), so a composite key is never mistaken for
//! a plain one, nor the other way round.

use std::fmt;

/// The first bytes of a composite key. `0xff` never starts valid UTF-8
/// text, and the manager refuses resources that start with the mark.
pub(crate) const SET_MARK: &[u8] = b"\xffquorum-lock:set\xff";

/// Most members of one set.
pub const MAX_SET_SIZE: usize = 64;

/// The keys of a set operation, in order (sorted, without duplicates).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeySet<'a> {
    /// The members, each as a 4-byte big-endian length and the key.
    encoded: &'a [u8],
}

impl<'a> KeySet<'a> {
    /// The set in a composite key, if `key` is one.
    pub(crate) fn of(key: &'a [u8]) -> Option<Self> {
        key.strip_prefix(SET_MARK).map(|encoded| Self { encoded })
    }

    /// The keys, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.encoded;
        std::iter::from_fn(move || {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
            let (key, tail) = tail.split_at_checked(len)?;
            rest = tail;
            Some(key)
        })
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the set has no keys (never, for a set the crate built).
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl fmt::Debug for KeySet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// The composite key of `keys` (already sorted and deduplicated).
pub(crate) fn compose<K: AsRef<[u8]>>(keys: &[K]) -> Vec<u8> {
    let mut out = SET_MARK.to_vec();
    for key in keys {
        let key = key.as_ref();
        let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(key);
    }
    out
}

/// A resource or a composite of resources, for messages: `{a, b}` for a
/// set, the lossy text otherwise.
pub(crate) fn show(resource: &[u8]) -> String {
    match KeySet::of(resource) {
        Some(set) => {
            let names: Vec<_> = set.iter().map(String::from_utf8_lossy).collect();
            format!("{{{}}}", names.join(", "))
        }
        None => String::from_utf8_lossy(resource).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composite_key_lists_its_members_and_a_plain_key_is_none() {
        let composite = compose(&[&b"a"[..], b"", b"long:key"]);
        let set = KeySet::of(&composite).unwrap();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [&b"a"[..], b"", b"long:key"]
        );
        assert_eq!(set.len(), 3);
        assert_eq!(show(&composite), "{a, , long:key}");
        assert!(KeySet::of(b"a").is_none());
        assert_eq!(show(b"plain"), "plain");
        // A truncated encoding stops; it never reads past the end.
        let cut = &composite[..composite.len() - 2];
        assert_eq!(KeySet::of(cut).unwrap().len(), 2);
    }
}
