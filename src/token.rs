//! The random token that marks one acquisition as ours.

use std::cell::RefCell;
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
        POOL.with(|pool| pool.borrow_mut().take(std::process::id()))
            .map(Self)
            .map_err(|e| format!("the OS random source failed: {e}"))
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

/// Tokens one read of the OS random source makes.
const TOKENS_PER_READ: usize = 32;

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool::empty()) };
}

/// A thread's unread OS randomness, handed out as tokens: one
/// `getrandom` call per [`TOKENS_PER_READ`] tokens instead of one per
/// lock. Every byte still comes straight from the OS CSPRNG, is handed
/// out once and is never derived from another, so tokens stay as
/// unpredictable and unique as before.
///
/// A `fork` copies the pool into the child, and two processes handing
/// out the same bytes would make equal tokens (a lock of one would count
/// as the other's `AlreadyOurs`). So the pool remembers the process it
/// was filled in and is thrown away when asked from another one: the
/// process id, read per token (`getpid`, a system call that does no work
/// in the kernel; the crate has no `unsafe` for a fork hook).
struct Pool {
    bytes: [u8; TOKEN_LEN * TOKENS_PER_READ],
    /// Bytes handed out so far (all of them: empty).
    used: usize,
    /// The process that filled it.
    pid: u32,
}

impl Pool {
    const fn empty() -> Self {
        Self {
            bytes: [0; TOKEN_LEN * TOKENS_PER_READ],
            used: TOKEN_LEN * TOKENS_PER_READ,
            pid: 0,
        }
    }

    /// The next token's bytes, as process `pid` asks for them.
    fn take(&mut self, pid: u32) -> Result<[u8; TOKEN_LEN], getrandom::Error> {
        if self.pid != pid || self.used + TOKEN_LEN > self.bytes.len() {
            // Marked empty first: a failed read leaves nothing to reuse.
            self.used = self.bytes.len();
            getrandom::fill(&mut self.bytes)?;
            self.used = 0;
            self.pid = pid;
        }
        let mut token = [0u8; TOKEN_LEN];
        token.copy_from_slice(&self.bytes[self.used..self.used + TOKEN_LEN]);
        // Handed out bytes are wiped: a copy of the pool (a core dump)
        // shows no token already in use.
        self.bytes[self.used..self.used + TOKEN_LEN].fill(0);
        self.used += TOKEN_LEN;
        Ok(token)
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

    /// Many tokens from one pool (several refills) are all distinct, and
    /// a pool asked from another process (a forked child) reads afresh
    /// rather than hand out what the parent would hand out next.
    #[test]
    fn a_pool_never_repeats_and_refills_in_a_new_process() {
        let mut seen = std::collections::HashSet::new();
        let mut pool = Pool::empty();
        for _ in 0..TOKENS_PER_READ * 3 + 1 {
            assert!(seen.insert(pool.take(7).unwrap()));
        }
        let mut parent = Pool::empty();
        let first = parent.take(7).unwrap();
        let mut child = Pool {
            bytes: parent.bytes,
            used: parent.used,
            pid: parent.pid,
        };
        let parents_next = parent.take(7).unwrap();
        let childs_next = child.take(8).unwrap();
        assert_ne!(parents_next, childs_next);
        assert_ne!(first, childs_next);
        assert_eq!(child.used, TOKEN_LEN, "the child's pool was read again");
    }
}
