//! Echoes: the release notices of this manager's own undos.
//!
//! A failed attempt releases what it may have taken (its undo), and that
//! release announces itself like any other. Its notice says nothing a
//! waiter of this manager can use: the attempt that caused it has already
//! failed, and waking on it makes the next attempt fail the same way. On
//! servers in restart quarantine (every node grants, no vote counts) each
//! attempt's undo woke its own caller at once: about 150,000 attempts a
//! minute, each a `SET`, a release and a `PUBLISH` on every server.
//!
//! So an undo is registered here **before** it is queued, and its notice,
//! recognised by its node and key, wakes nobody. A notice names a key,
//! never a token (a notice must not carry one), so the count is kept per
//! node and key; the undo's answer tells whether a notice follows:
//!
//! - before the answer, a notice of the key from that node is taken for
//!   the undo's (it may arrive first: notices and answers travel on
//!   different connections) and swallowed;
//! - an answer that says the release deleted the key and was heard
//!   ([`Reply::Notified`]) means its notice is on its way, or was the one
//!   swallowed;
//! - an answer that says nothing was announced to us (nothing deleted, or
//!   nobody listening) means a notice swallowed meanwhile was somebody
//!   else's: it is handed out then, late but not lost;
//! - an error leaves the undo unanswered (it may still run; its retries
//!   answer with the same token).
//!
//! Every other release, a holder's (any thread's, any manager's, a set's,
//! a reader's or a writer's), is not registered and wakes its waiters.
//! What is registered is bounded in number ([`MAX_ECHOES`]) and in age
//! ([`ECHO_LIFETIME`]): an echo that never came cannot silence later
//! notices for long; past the bound, an undo is simply not registered
//! (its notice then wakes, as before this rule).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::hold::Hold;
use crate::backend::Reply;
use crate::token::Token;

/// The longest an undo's echo is waited for: an undo answers within its
/// node's timeout, and its notice a moment later; an echo still expected
/// after this is taken as lost.
pub(crate) const ECHO_LIFETIME: Duration = Duration::from_secs(10);

/// Most undos (per node) and keys awaited at once.
pub(crate) const MAX_ECHOES: usize = 4096;

/// The undos of one engine and the notices they will cause.
#[derive(Debug, Default)]
pub(crate) struct Echoes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Undos queued and not answered yet, by node and token: what each
    /// gives up.
    undos: HashMap<(usize, Token), (Hold, Instant)>,
    /// Per node and announced key.
    keys: HashMap<(usize, Box<[u8]>), Count>,
}

/// One node's key: what its undos will announce.
#[derive(Debug, Clone, Copy)]
struct Count {
    /// Undos not answered yet.
    pending: u32,
    /// Notices swallowed while undos were pending (taken for theirs).
    swallowed: u32,
    /// Undos answered "announced" whose notice has not come yet.
    expected: u32,
    /// Last change: an echo older than [`ECHO_LIFETIME`] is dropped.
    at: Instant,
}

/// What an undo's answer says of its notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// It deleted the key and listeners heard it (this manager among
    /// them, when it listens): its notice comes.
    Announced,
    /// Nothing of it reaches this manager: no key deleted, or nobody
    /// listening.
    Silent,
    /// No answer (an error): it may still run.
    Unknown,
}

impl Heard {
    /// What the answer `result` to a release says.
    pub(crate) fn of<E>(result: &Result<Reply, E>) -> Self {
        match result {
            Ok(Reply::Notified(_)) => Self::Announced,
            Ok(_) => Self::Silent,
            Err(_) => Self::Unknown,
        }
    }
}

impl Echoes {
    /// Registers the undo of `token` on `hold`, about to be queued to
    /// `node`: its notices come on the keys its release announces on
    /// ([`Hold::announced_on`]: every member of a lock or set, a reader's
    /// readers' key).
    pub(crate) fn expect(&self, node: usize, hold: &Hold, token: Token, now: Instant) {
        let mut inner = self.inner.lock();
        inner.prune(now);
        if inner.undos.len() >= MAX_ECHOES || inner.keys.len() >= MAX_ECHOES {
            return;
        }
        if inner.undos.contains_key(&(node, token)) {
            return;
        }
        for key in hold.announced_on().iter() {
            let count = inner
                .keys
                .entry((node, Box::from(key)))
                .or_insert(Count::new(now));
            count.pending = count.pending.saturating_add(1);
            count.at = now;
        }
        inner.undos.insert((node, token), (hold.clone(), now));
    }

    /// Takes in the answer of `node` to a release of `token` on `keys`.
    /// Returns the keys whose notice, swallowed meanwhile, turned out to
    /// be somebody else's: the caller hands them out now. Nothing for a
    /// release that is not a registered undo. `now` is asked only for an
    /// undo's answer (most releases are none: no clock read for them).
    pub(crate) fn answered(
        &self,
        node: usize,
        token: Token,
        heard: Heard,
        now: impl FnOnce() -> Instant,
    ) -> Vec<Box<[u8]>> {
        let mut inner = self.inner.lock();
        // Most releases are no undo: an empty table is not hashed into.
        if heard == Heard::Unknown || inner.undos.is_empty() {
            return Vec::new();
        }
        let Some((hold, _)) = inner.undos.remove(&(node, token)) else {
            return Vec::new();
        };
        let now = now();
        let mut handed = Vec::new();
        for key in hold.announced_on().iter() {
            let slot = (node, Box::from(key));
            let Some(count) = inner.keys.get_mut(&slot) else {
                continue;
            };
            count.pending = count.pending.saturating_sub(1);
            count.at = now;
            match heard {
                Heard::Announced if count.swallowed > 0 => count.swallowed -= 1,
                Heard::Announced => count.expected = count.expected.saturating_add(1),
                // More notices swallowed than undos left to claim them:
                // one was somebody else's.
                Heard::Silent if count.swallowed > count.pending => {
                    count.swallowed -= 1;
                    handed.push(slot.1.clone());
                }
                Heard::Silent | Heard::Unknown => {}
            }
            if count.is_idle() {
                inner.keys.remove(&slot);
            }
        }
        handed
    }

    /// Whether the notice of `key` from `node` is the echo of an undo of
    /// this manager (and so wakes nobody).
    pub(crate) fn swallow(&self, node: usize, key: &[u8], now: Instant) -> bool {
        let mut inner = self.inner.lock();
        let slot = (node, Box::from(key));
        let Some(count) = inner.keys.get_mut(&slot) else {
            return false;
        };
        let swallowed = if count.is_stale(now) {
            false
        } else if count.expected > 0 {
            count.expected -= 1;
            true
        } else if count.pending > count.swallowed {
            count.swallowed += 1;
            true
        } else {
            false
        };
        if swallowed {
            count.at = now;
        }
        if count.is_idle() || count.is_stale(now) {
            inner.keys.remove(&slot);
        }
        swallowed
    }

    /// `node` lost its subscription: the echoes it expected will not
    /// come.
    pub(crate) fn lost_notices(&self, node: usize) {
        let mut inner = self.inner.lock();
        inner.keys.retain(|(n, _), count| {
            if *n == node {
                count.expected = 0;
            }
            !count.is_idle()
        });
    }

    /// Undos and keys awaited now (for tests).
    #[cfg(test)]
    fn awaited(&self) -> (usize, usize) {
        let inner = self.inner.lock();
        (inner.undos.len(), inner.keys.len())
    }
}

impl Inner {
    /// Drops what is older than [`ECHO_LIFETIME`].
    fn prune(&mut self, now: Instant) {
        if self.undos.len() < MAX_ECHOES / 2 && self.keys.len() < MAX_ECHOES / 2 {
            return;
        }
        let fresh = |at: Instant| now.saturating_duration_since(at) < ECHO_LIFETIME;
        self.undos.retain(|_, (_, at)| fresh(*at));
        self.keys.retain(|_, count| fresh(count.at));
    }
}

impl Count {
    fn new(now: Instant) -> Self {
        Self {
            pending: 0,
            swallowed: 0,
            expected: 0,
            at: now,
        }
    }

    fn is_idle(&self) -> bool {
        self.pending == 0 && self.swallowed == 0 && self.expected == 0
    }

    fn is_stale(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.at) >= ECHO_LIFETIME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KeySet;
    use crate::engine::hold::Pair;

    fn token() -> Token {
        Token::random().unwrap()
    }

    fn key(name: &[u8]) -> Hold {
        Hold::Lock(KeySet::one(name))
    }

    #[test]
    fn an_undos_notice_wakes_nobody_before_or_after_its_answer() {
        let echoes = Echoes::default();
        let now = Instant::now();
        // The notice before the answer.
        let (first, second) = (token(), token());
        echoes.expect(0, &key(b"k"), first, now);
        assert!(echoes.swallow(0, b"k", now));
        assert!(
            echoes
                .answered(0, first, Heard::Announced, || now)
                .is_empty()
        );
        assert!(
            !echoes.swallow(0, b"k", now),
            "the next notice is another's"
        );
        // The answer before the notice.
        echoes.expect(0, &key(b"k"), second, now);
        assert!(
            echoes
                .answered(0, second, Heard::Announced, || now)
                .is_empty()
        );
        assert!(echoes.swallow(0, b"k", now));
        assert!(!echoes.swallow(0, b"k", now));
        assert_eq!(echoes.awaited(), (0, 0));
    }

    #[test]
    fn a_notice_swallowed_for_a_silent_undo_is_handed_out_at_its_answer() {
        let echoes = Echoes::default();
        let now = Instant::now();
        let undo = token();
        echoes.expect(1, &key(b"k"), undo, now);
        // Somebody else's release, while the undo is pending.
        assert!(echoes.swallow(1, b"k", now));
        let handed = echoes.answered(1, undo, Heard::Silent, || now);
        assert_eq!(handed, vec![Box::<[u8]>::from(&b"k"[..])]);
        assert_eq!(echoes.awaited(), (0, 0));
    }

    #[test]
    fn only_registered_undos_and_their_node_and_key_are_echoes() {
        let echoes = Echoes::default();
        let now = Instant::now();
        echoes.expect(0, &key(b"k"), token(), now);
        assert!(!echoes.swallow(1, b"k", now), "another node");
        assert!(!echoes.swallow(0, b"other", now), "another key");
        // A holder's release (not registered) answers: nothing changes.
        assert!(
            echoes
                .answered(0, token(), Heard::Announced, || now)
                .is_empty()
        );
        assert!(echoes.swallow(0, b"k", now));
        assert!(!echoes.swallow(0, b"k", now), "one undo, one echo");
    }

    #[test]
    fn a_sets_undo_echoes_on_every_member() {
        let echoes = Echoes::default();
        let now = Instant::now();
        let set = Hold::Lock(KeySet::new([b"a".to_vec(), b"b".to_vec()]).unwrap());
        let undo = token();
        echoes.expect(2, &set, undo, now);
        assert!(
            echoes
                .answered(2, undo, Heard::Announced, || now)
                .is_empty()
        );
        assert!(echoes.swallow(2, b"a", now));
        assert!(echoes.swallow(2, b"b", now));
        assert_eq!(echoes.awaited(), (0, 0));
    }

    /// A reader's undo announces on the readers' key only: the writer's
    /// key is not its to release.
    #[test]
    fn a_readers_undo_echoes_on_the_readers_key_only() {
        let echoes = Echoes::default();
        let now = Instant::now();
        let pair = Pair::new(b"x:readers", b"x:writer").unwrap();
        let undo = token();
        echoes.expect(0, &Hold::Reader(pair), undo, now);
        assert!(!echoes.swallow(0, b"x:writer", now), "the writer's key");
        assert!(echoes.swallow(0, b"x:readers", now));
        assert!(
            echoes
                .answered(0, undo, Heard::Announced, || now)
                .is_empty()
        );
        assert_eq!(echoes.awaited(), (0, 0));
    }

    #[test]
    fn an_echo_that_never_comes_is_forgotten() {
        let echoes = Echoes::default();
        let now = Instant::now();
        let (first, second) = (token(), token());
        echoes.expect(0, &key(b"k"), first, now);
        assert!(
            echoes
                .answered(0, first, Heard::Announced, || now)
                .is_empty()
        );
        let later = now + ECHO_LIFETIME;
        assert!(!echoes.swallow(0, b"k", later), "stale: another's notice");
        // A subscription lost: the expected echo is gone at once.
        echoes.expect(0, &key(b"k"), second, now);
        assert!(
            echoes
                .answered(0, second, Heard::Announced, || now)
                .is_empty()
        );
        echoes.lost_notices(0);
        assert!(!echoes.swallow(0, b"k", now));
    }

    #[test]
    fn an_unanswered_undo_keeps_its_place_and_the_registry_is_bounded() {
        let echoes = Echoes::default();
        let now = Instant::now();
        let undo = token();
        echoes.expect(0, &key(b"k"), undo, now);
        assert!(echoes.answered(0, undo, Heard::Unknown, || now).is_empty());
        assert_eq!(
            echoes.awaited(),
            (1, 1),
            "a retry answers with the same token"
        );
        for i in 0..(MAX_ECHOES as u32 + 10) {
            echoes.expect(0, &key(&i.to_le_bytes()), token(), now);
        }
        let (undos, keys) = echoes.awaited();
        assert!(undos <= MAX_ECHOES && keys <= MAX_ECHOES, "{undos} {keys}");
    }
}
