//! What a node holds under a lock's key: the answer to
//! [`Inspect::inspect`](super::Inspect::inspect).

use std::fmt;
use std::time::Duration;

/// At most this many bytes of a stored value are read back by an
/// inspection (a lock's own value is far shorter): a key that some other
/// program filled with megabytes costs no more than this.
pub const MAX_INSPECTED_VALUE: usize = 256;

/// A key's value (its first [`MAX_INSPECTED_VALUE`] bytes) and time left,
/// read in one atomic step.
///
/// `Debug` shows the value's length only: a value holds a lock's whole
/// token, which never goes into text.
#[derive(Clone, PartialEq, Eq)]
pub struct Holding {
    value: Vec<u8>,
    len: usize,
    ttl: Option<Duration>,
}

impl Holding {
    /// A key holding `value` (its whole length `len` in bytes; only the
    /// first [`MAX_INSPECTED_VALUE`] bytes of `value` are kept) that
    /// expires in `ttl` (`None`: no expiry).
    pub fn new(value: &[u8], len: usize, ttl: Option<Duration>) -> Self {
        let value = value[..value.len().min(MAX_INSPECTED_VALUE)].to_vec();
        Self {
            len: len.max(value.len()),
            value,
            ttl,
        }
    }

    /// The value, or its first [`MAX_INSPECTED_VALUE`] bytes.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The value's whole length, in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Time left before the key expires; `None` when it has no expiry
    /// (which a lock key never lacks).
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// The holder's owner label, when the value is a quorum-lock lock
    /// that carries one
    /// ([`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner)):
    /// never any part of its token. `None` for a value of another client,
    /// or one stored without a label.
    ///
    /// ```
    /// use quorum_lock::backend::Holding;
    ///
    /// assert_eq!(Holding::new(b"some other client's value", 25, None).owner(), None);
    /// ```
    pub fn owner(&self) -> Option<&str> {
        crate::owner::owner_in(&self.value)
    }

    /// Whether `other` holds the same value (the same holder).
    pub(crate) fn same_holder(&self, other: &Self) -> bool {
        self.len == other.len && self.value == other.value
    }
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("len", &self.len)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::holding::*;
    use crate::owner::{push_value, value_suffix};
    use crate::token::Token;

    #[test]
    fn the_owner_is_read_from_a_labelled_lock_value() {
        let token = Token::random().unwrap_or_else(|e| panic!("random: {e}"));
        let mut value = Vec::new();
        push_value(&token, &value_suffix("build-7:4211:job"), &mut value);
        let held = Holding::new(&value, value.len(), Some(Duration::from_secs(3)));
        assert_eq!(held.owner(), Some("build-7:4211:job"));
        let mut bare = Vec::new();
        push_value(&token, &value_suffix(""), &mut bare);
        assert_eq!(Holding::new(&bare, bare.len(), None).owner(), None);
    }
}
