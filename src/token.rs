//! The random token that marks one acquisition as ours.

use std::fmt;

/// Number of random bytes in a [`Token`].
pub(crate) const TOKEN_LEN: usize = 20;

/// 20 random bytes from the operating system's CSPRNG, unique per
/// acquisition.
///
/// The token is what makes release and extend safe: a node deletes or
/// extends a key only while it still holds our token, so a lock that
/// expired and was taken by someone else is never touched. `Debug` and
/// `Display` show only a short prefix, so logs never carry a whole token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; TOKEN_LEN]);

impl Token {
    /// A fresh random token.
    ///
    /// # Errors
    ///
    /// The reason, when the operating system's random source fails (this
    /// does not happen on supported platforms once booted): the caller
    /// reports it as [`Error::Runtime`](crate::Error::Runtime).
    pub(crate) fn random() -> Result<Self, String> {
        let mut bytes = [0u8; TOKEN_LEN];
        getrandom::fill(&mut bytes).map_err(|e| format!("the OS random source failed: {e}"))?;
        Ok(Self(bytes))
    }

    /// The raw random bytes. A node stores them first in the lock's value,
    /// followed by the owner label (see [`matches_stored`](Self::matches_stored)).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({self})")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..4] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

/// A random `u64` for retry jitter. If the OS source fails it falls back
/// to the standard library's per-process hash keys (jitter needs spread,
/// not secrecy), never to the wall clock.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};

    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return RandomState::new().hash_one(std::thread::current().id());
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_display_only_a_prefix() {
        let a = Token::random().unwrap();
        let b = Token::random().unwrap();
        assert_ne!(a, b);
        let shown = format!("{a:?} {a}");
        let full: String = a.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&full));
        assert_eq!(a.to_string().chars().count(), 9);
    }
}
