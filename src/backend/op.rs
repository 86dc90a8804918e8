//! One operation on one lock server ([`Op`], what it does: [`OpKind`]),
//! and the server's definite answer to it ([`Reply`]): the vocabulary the
//! engine and every backend share.

use std::time::Duration;

use super::KeySet;

/// Most readers one read-write lock ([`RwLock`](crate::RwLock)) has at a
/// time, on each node: a reader that finds this many live ones is refused
/// (as if the lock were held) until one leaves or expires. It bounds the
/// work and memory of each reader's entry and of the writer's admission.
pub const MAX_READERS: u32 = 1024;

/// One operation on one lock server, in a batch
/// ([`Backend::send`](super::Backend::send)): which keys, with whose
/// token, doing what.
///
/// The keys are the lock's: one for a single lock, several for a lock on
/// several resources at once
/// ([`LockManager::lock_all`](crate::LockManager::lock_all)). A backend
/// runs an op on several keys as one atomic step on all of them: every
/// key or none (see each [`OpKind`]). A read-write lock's op is on one of
/// its two keys, and names the other by its role (see
/// [`OpKind::ReadAcquire`]).
///
/// Made by its constructors ([`Op::acquire`] and the others); a backend
/// reads its fields. `#[non_exhaustive]`, as [`OpKind`] and [`Reply`]
/// are: kinds to come may bring fields of their own.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::backend::{KeySet, Op, OpKind};
///
/// let key = KeySet::one("locks:job");
/// let op = Op::acquire(&key, b"our-token", Duration::from_secs(10));
/// assert_eq!(op.kind, OpKind::Acquire { ttl: Duration::from_secs(10) });
/// assert_eq!(op.keys.single(), Some(&b"locks:job"[..]));
/// assert_eq!(op.ttl(), Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Op<'a> {
    /// The lock's keys (one, or several taken as one); for a read-write
    /// lock's kind, the one key its variant names.
    pub keys: &'a KeySet,
    /// Our token: the value the keys hold while the lock is ours.
    pub token: &'a [u8],
    /// What to do with the keys.
    pub kind: OpKind<'a>,
}

/// What an [`Op`] does with its keys. For several keys, each kind is one
/// atomic step on all of them, as described per variant.
///
/// `#[non_exhaustive]`: more kinds may come. A
/// backend answers a kind it does not know with
/// [`unsupported`](super::unsupported), and the lock that needs it fails
/// with that error instead of being granted wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpKind<'a> {
    /// Set the key to the token with this expiry, only if it does not
    /// exist (see [`backend::acquire`](super::acquire)).
    ///
    /// Several keys: set every one, only if none of them exists; all or
    /// nothing. [`Reply::No`] (or [`Reply::HeldBy`]): some key is held by
    /// another value and nothing was written; [`Reply::AlreadyOurs`]: some
    /// key already holds the token (another name of this server set them)
    /// and nothing was written.
    Acquire {
        /// Expiry to set.
        ttl: Duration,
    },
    /// The same, and read the lock's fence counter in the hash `counter`
    /// (see [`backend::acquire_fenced`](super::acquire_fenced)).
    ///
    /// Several keys: when this call set them, read the highest of their
    /// counters (fields of the hash `counter`, 0 when absent) in the same
    /// atomic step: [`Reply::Fenced`] with that value. One fence then
    /// serves every member (see [`RaiseFence`](Self::RaiseFence)).
    AcquireFenced {
        /// Expiry to set.
        ttl: Duration,
        /// The hash of the fence counters.
        counter: &'a [u8],
    },
    /// Set the expiry, only while the key holds the token (see
    /// [`backend::extend`](super::extend)).
    ///
    /// Several keys: only while each holds the token; else nothing is
    /// changed and the answer is [`Reply::No`].
    Extend {
        /// New expiry, from now.
        ttl: Duration,
    },
    /// Delete the key, only while it holds the token (see
    /// [`backend::release`](super::release)).
    ///
    /// Several keys: delete every one that holds the token; [`Reply::Yes`]
    /// (or [`Reply::Notified`]) when at least one was deleted.
    Release,
    /// Raise the fence counter to at least `fence`, only while the key
    /// holds the token (see [`backend::raise_fence`](super::raise_fence)).
    ///
    /// Several keys: raise every member's counter, only while every one
    /// holds the token.
    RaiseFence {
        /// The hash of the fence counters.
        counter: &'a [u8],
        /// The value the counter must reach.
        fence: u64,
    },
    /// Enter a read-write lock ([`RwLock`](crate::RwLock)) as one of its
    /// readers. Its keys, each named once by its role: [`Op::keys`] is
    /// the lock's **readers' key** (one key), `writer` the lock's
    /// **writer's key**. On the server's clock, in one atomic step: refuse
    /// while `writer` exists ([`Reply::HeldBy`] its value, or
    /// [`Reply::No`]); drop the readers whose expiry has passed; refuse
    /// ([`Reply::No`]) when [`MAX_READERS`](crate::MAX_READERS) remain;
    /// else add the token to the readers with its own expiry `ttl` from
    /// now (the readers' key itself lives as long as its last reader) and
    /// answer [`Reply::Yes`] ([`Reply::AlreadyOurs`] when the token was
    /// already there).
    ReadAcquire {
        /// This reader's expiry.
        ttl: Duration,
        /// The writer's key: a plain lock key, while a writer waits or
        /// holds. Read, never written.
        writer: &'a [u8],
    },
    /// Set this reader's expiry to `ttl` from now, only while its entry
    /// among the readers is there and has not expired; never adds one.
    /// [`Op::keys`] is the lock's **readers' key**.
    ReadExtend {
        /// New expiry, from now.
        ttl: Duration,
    },
    /// Remove this reader from the readers, announcing the release on the
    /// key's channel as [`Release`](Self::Release) does. [`Op::keys`] is
    /// the lock's **readers' key**.
    ReadRelease,
    /// Admit the writer. Its keys, each named once by its role:
    /// [`Op::keys`] is the lock's **writer's key** (a plain lock key,
    /// taken with [`Acquire`](Self::Acquire)), `readers` the lock's
    /// **readers' key**. Only while the writer's key holds the token and
    /// no reader is left among `readers` (those whose expiry has passed
    /// do not count), set the writer's key's expiry to `ttl` from now and
    /// answer [`Reply::Yes`]; else change nothing and answer
    /// [`Reply::No`] (or [`Reply::HeldBy`], with the time the last reader
    /// has left).
    Admit {
        /// New expiry of the writer's key, from now.
        ttl: Duration,
        /// The readers' key. Read, never written.
        readers: &'a [u8],
    },
    /// Write a leader election's record ([`Election`](crate::Election)):
    /// only while [`Op::keys`] (the election's lock key, one key) holds
    /// the token, set `record_key` to `record` (a string, no expiry) and
    /// answer [`Reply::Yes`]; else write nothing and answer [`Reply::No`].
    /// `record_key` lives in the lock key's slot on a cluster. A backend
    /// with release notices announces a write as a release of
    /// `record_key` (best effort, as a release's notice), for the
    /// observers waiting for a new value
    /// ([`Election::wait_update`](crate::Election::wait_update)); the
    /// lock key's waiters hear nothing of it.
    Proclaim {
        /// The election's record key. Written, never read.
        record_key: &'a [u8],
        /// What to store in it (at most
        /// [`MAX_INSPECTED_VALUE`](super::MAX_INSPECTED_VALUE) bytes).
        record: &'a [u8],
    },
}

impl OpKind<'_> {
    /// Whether the kind gives a lock up (a release, or a reader's).
    pub fn is_release(self) -> bool {
        matches!(self, Self::Release | Self::ReadRelease)
    }

    /// Whether the kind is a read-write lock's (each names which of the
    /// lock's two keys [`Op::keys`] is).
    pub fn is_read_write(self) -> bool {
        matches!(
            self,
            Self::ReadAcquire { .. }
                | Self::ReadExtend { .. }
                | Self::ReadRelease
                | Self::Admit { .. }
        )
    }
}

impl<'a> Op<'a> {
    /// An acquire of `keys` for `token` with an expiry of `ttl`.
    pub fn acquire(keys: &'a KeySet, token: &'a [u8], ttl: Duration) -> Self {
        Self {
            keys,
            token,
            kind: OpKind::Acquire { ttl },
        }
    }

    /// A fenced acquire: an acquire that also reads the fence counter.
    pub fn acquire_fenced(
        keys: &'a KeySet,
        token: &'a [u8],
        ttl: Duration,
        counter: &'a [u8],
    ) -> Self {
        Self {
            keys,
            token,
            kind: OpKind::AcquireFenced { ttl, counter },
        }
    }

    /// An extend of `keys` to `ttl` from now, while they hold `token`.
    pub fn extend(keys: &'a KeySet, token: &'a [u8], ttl: Duration) -> Self {
        Self {
            keys,
            token,
            kind: OpKind::Extend { ttl },
        }
    }

    /// A release of `keys`, while they hold `token`.
    pub fn release(keys: &'a KeySet, token: &'a [u8]) -> Self {
        Self {
            keys,
            token,
            kind: OpKind::Release,
        }
    }

    /// A raise of the fence counter of `keys` to at least `fence`.
    pub fn raise_fence(keys: &'a KeySet, token: &'a [u8], counter: &'a [u8], fence: u64) -> Self {
        Self {
            keys,
            token,
            kind: OpKind::RaiseFence { counter, fence },
        }
    }

    /// A reader's entry for `token` among `readers` (a read-write lock's
    /// readers' key), while `writer` (its writer's key) is absent.
    pub(crate) fn read_acquire(
        readers: &'a KeySet,
        token: &'a [u8],
        ttl: Duration,
        writer: &'a [u8],
    ) -> Self {
        Self {
            keys: readers,
            token,
            kind: OpKind::ReadAcquire { ttl, writer },
        }
    }

    /// An extend of the reader `token`'s entry among `readers`.
    pub(crate) fn read_extend(readers: &'a KeySet, token: &'a [u8], ttl: Duration) -> Self {
        Self {
            keys: readers,
            token,
            kind: OpKind::ReadExtend { ttl },
        }
    }

    /// A release of the reader `token`'s entry among `readers`.
    pub(crate) fn read_release(readers: &'a KeySet, token: &'a [u8]) -> Self {
        Self {
            keys: readers,
            token,
            kind: OpKind::ReadRelease,
        }
    }

    /// The admission of the writer holding `writer` (a read-write lock's
    /// writer's key) with `token`, while no reader is left in `readers`.
    pub(crate) fn admit(
        writer: &'a KeySet,
        token: &'a [u8],
        ttl: Duration,
        readers: &'a [u8],
    ) -> Self {
        Self {
            keys: writer,
            token,
            kind: OpKind::Admit { ttl, readers },
        }
    }

    /// A leader's record `record` in `record_key`, while `lock` (an
    /// election's lock key) holds `token`.
    pub(crate) fn proclaim(
        lock: &'a KeySet,
        token: &'a [u8],
        record_key: &'a [u8],
        record: &'a [u8],
    ) -> Self {
        Self {
            keys: lock,
            token,
            kind: OpKind::Proclaim { record_key, record },
        }
    }

    /// The expiry the op sets, for the kinds that set one.
    pub fn ttl(&self) -> Option<Duration> {
        match self.kind {
            OpKind::Acquire { ttl }
            | OpKind::AcquireFenced { ttl, .. }
            | OpKind::Extend { ttl }
            | OpKind::ReadAcquire { ttl, .. }
            | OpKind::ReadExtend { ttl, .. }
            | OpKind::Admit { ttl, .. } => Some(ttl),
            OpKind::Release
            | OpKind::RaiseFence { .. }
            | OpKind::ReadRelease
            | OpKind::Proclaim { .. } => None,
        }
    }
}

/// A server's definite answer to one [`Op`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Done: acquired, released, extended, or the fence raised.
    Yes,
    /// Refused: the key is held by another token, or is no longer ours.
    No,
    /// An acquire refused: the key holds another value. The engine
    /// compares `digest`s ([`Reply::held_by`]) to tell a new holder from
    /// the same one (a hint for the wake-ups: a waiter that lost a race to
    /// a new holder keeps its early wake-ups, see
    /// [`ReleaseListener`](super::ReleaseListener)), and a waiter that
    /// hears release notices waits for its next timed attempt until the
    /// key expires on enough nodes (`expires_in`, at most a second, see
    /// [`RetryPolicy`](crate::RetryPolicy)); it counts as
    /// [`No`](Self::No) otherwise. A backend that cannot read the value
    /// answers `No`.
    HeldBy {
        /// The digest of the value found ([`Reply::held_by`]).
        digest: u64,
        /// How long the key had left to live when the server answered
        /// (Redis: its `PTTL`), when known ([`Reply::expiring_in`]).
        expires_in: Option<Duration>,
    },
    /// A fenced acquire succeeded and the lock's fence counter read this.
    Fenced(u64),
    /// An acquire found the key already holding this op's token: the same
    /// server was reached under another configured name, which already
    /// counted its vote. Not a vote: one server casts one vote, also when
    /// the engine cannot tell who the server is.
    AlreadyOurs,
    /// A release deleted the key, and this many listeners for exactly this
    /// key's notices heard it (at least one; the releasing manager's own
    /// included, when it listens too): others are waiting for this lock,
    /// and the releaser's next lock of it lets them go first. Count only
    /// listeners for this key (Redis: `PUBSUB NUMSUB` of its channel),
    /// never catch-all ones (pattern subscribers) that wait for no lock.
    /// See [`ReleaseListener`](super::ReleaseListener).
    Notified(u64),
}

impl Reply {
    /// Whether the op was done by this call (a fenced acquire that
    /// succeeded included; [`AlreadyOurs`](Self::AlreadyOurs) is not).
    pub fn is_yes(self) -> bool {
        !matches!(self, Self::No | Self::HeldBy { .. } | Self::AlreadyOurs)
    }

    /// [`HeldBy`](Self::HeldBy) the digest of `value`, the value an
    /// acquire found in the key (not ours), with the time it has left
    /// unknown. The digest is stable within a process, never sent
    /// anywhere, and not a secret: tokens are random, and a released token
    /// is worth nothing.
    pub fn held_by(value: &[u8]) -> Self {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        Self::HeldBy {
            digest: BuildHasherDefault::<DefaultHasher>::default().hash_one(value),
            expires_in: None,
        }
    }

    /// The same [`HeldBy`](Self::HeldBy) refusal, with the time the key
    /// had left to live when the server answered; any other reply
    /// unchanged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorum_lock::backend::Reply;
    ///
    /// let refused = Reply::held_by(b"their token").expiring_in(Duration::from_millis(900));
    /// assert!(matches!(
    ///     refused,
    ///     Reply::HeldBy { expires_in: Some(left), .. } if left == Duration::from_millis(900)
    /// ));
    /// ```
    #[must_use]
    pub fn expiring_in(self, left: Duration) -> Self {
        match self {
            Self::HeldBy { digest, .. } => Self::HeldBy {
                digest,
                expires_in: Some(left),
            },
            other => other,
        }
    }

    /// The counter a fenced acquire read, if it succeeded.
    pub fn fence(self) -> Option<u64> {
        match self {
            Self::Fenced(n) => Some(n),
            _ => None,
        }
    }
}

impl From<bool> for Reply {
    fn from(yes: bool) -> Self {
        if yes { Self::Yes } else { Self::No }
    }
}
