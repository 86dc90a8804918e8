//! The service-provider interface: what a lock server must do for the
//! crate, and everything a writer of a [`Backend`] needs. A lock user
//! needs none of it beyond [`MemoryBackend`](crate::MemoryBackend) and
//! [`RedisBackend`](crate::RedisBackend) (and [`BackendError`], which the
//! per-node reports carry).
//!
//! A backend knows nothing about quorums: it answers for one server. The
//! engine runs one worker thread per backend and counts their votes.
//!
//! * The trait: [`Backend`], a name and one way to send a batch of
//!   [`Op`]s and read its [`Answers`] (through an [`InFlight`] handle),
//!   with the optional abilities as capabilities: a bound on a call
//!   ([`Backend::call_timeout`]), the server's identity ([`Probe`]),
//!   inspection ([`Inspect`]), release notices ([`ReleaseListener`]).
//! * The vocabulary: [`Op`], [`OpKind`], [`KeySet`], [`Reply`],
//!   [`ServerInfo`], [`Holding`], [`BackendError`], [`BackendErrorKind`].
//! * One op at a time, for tests and tools: [`run`], [`acquire`],
//!   [`release`], [`extend`], [`acquire_fenced`], [`raise_fence`].
//! * The in-memory node's test knobs' types: [`CallHook`], [`DenyRule`],
//!   [`UptimeReport`].
//!
//! # A node's state lags a round decided at a quorum
//!
//! An acquire or an extend returns as soon as a quorum has decided it; the
//! remaining nodes run their part later, on their worker threads (each
//! node runs its operations in the order they were queued). So right after
//! `lock` or `extend` returns, a node outside that quorum may not hold the
//! key yet, or may still show the old TTL, whether it is read through a
//! [`MemoryBackend`](crate::MemoryBackend) inspection method, a plain Redis
//! client or [`LockManager::health`](crate::LockManager::health). A
//! release waits for every node's answer, up to the per-node timeout.
//! [`LockManager::flush`](crate::LockManager::flush) waits until every
//! node has run what was queued before it: call it before reading a
//! node's state.

use std::sync::Arc;
use std::time::Duration;

mod abilities;
mod answers;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub(crate) mod cluster;
mod error;
mod holding;
pub(crate) mod keyset;
pub(crate) mod memory;
mod notices;
pub(crate) mod op;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub(crate) mod redis;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub(crate) mod sentinel;
mod server_info;
mod single;

pub use self::abilities::{Inspect, Probe};
pub(crate) use self::answers::Sources;
pub use self::answers::{Answers, InFlight};
pub use self::error::{BackendError, BackendErrorKind};
pub use self::holding::{Holding, MAX_INSPECTED_VALUE};
pub use self::keyset::KeySet;
pub use self::memory::{CallHook, DenyRule, UptimeReport};
#[cfg(feature = "redis")]
pub(crate) use self::notices::RELEASE_CHANNEL_PREFIX;
pub use self::notices::{NoticeWaker, ReleaseListener};
pub use self::op::{Op, OpKind, Reply};
pub(crate) use self::server_info::SETTINGS_MAX_AGE;
pub use self::server_info::{ServerInfo, ServerProduct, ServerVersion, WithoutScripts};
pub use self::single::{acquire, acquire_fenced, extend, raise_fence, release, run, unsupported};

/// One lock server (one Redis master, one in-memory node, ...).
///
/// Two methods are required: [`describe`](Self::describe) (a name) and
/// [`send`](Self::send) (run a batch of ops, and say which server
/// answered). The rest are capabilities a backend may have, each `None`
/// by default: a bound on a call ([`call_timeout`](Self::call_timeout)),
/// the server's identity ([`probe`](Self::probe)), inspection
/// ([`inspector`](Self::inspector)) and release notices
/// ([`release_listener`](Self::release_listener)).
///
/// Every call the engine makes comes from the node's own worker thread
/// or from a caller that drives a round while the node is idle, one at a
/// time and in the order the engine queued the operations. A backend
/// therefore needs no internal ordering of its own, but it must be
/// `Send + Sync` because fault-injection handles and probes may share it.
///
/// # Contract
///
/// * **Atomicity**: each operation is one atomic step on the server
///   (`SET NX PX`, or a compare-and-act script): there is no window in which
///   another client sees a half-done operation. An op on several keys is
///   one atomic step on all of them (see [`OpKind`]).
/// * **Answers**: [`Reply::Yes`] (and the other replies
///   [`is_yes`](Reply::is_yes) accepts) means the server did it;
///   [`Reply::No`] means the server answered and refused (the key is held
///   by another token, or is no longer ours). An `Err` means *could not
///   tell*: the operation may or may not have been applied. The engine
///   treats an `Err` on acquire as "maybe applied" and still sends the
///   release there.
/// * **Identity**: a grant counts only as the vote of the server that gave
///   it, so [`Answers`] carry that server's identity (see
///   [`probe`](Self::probe)).
/// * **Time**: each call must return within the timeout the backend was
///   configured with (for `RedisBackend`, the manager's per-node timeout).
///   A backend that blocks longer delays every later operation queued for
///   its node, and its answers come too late to count.
/// * **Retries**: acquire and release are safe to retry with the same token;
///   extend is too (it only pushes the expiry of a key that still holds our
///   token). A backend may retry internally only within its timeout.
/// * **Panics**: a panic inside a backend is caught by the engine and
///   reported as [`BackendErrorKind::Panicked`]; it never kills the engine.
///
/// # A backend of your own
///
/// Over some store with compare-and-set, answering at once:
///
/// ```
/// use quorum_lock::backend::{self, Answers, Backend, InFlight, Op, OpKind, Reply, unsupported};
///
/// struct Mine;
///
/// impl Backend for Mine {
///     fn describe(&self) -> String {
///         "mine".into()
///     }
///     fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
///         let results = ops
///             .iter()
///             .map(|op| match (op.kind, op.keys.single()) {
///                 // Here: SET NX PX, compare-and-delete, compare-and-expire
///                 // of the one key.
///                 (OpKind::Acquire { .. } | OpKind::Release | OpKind::Extend { .. }, Some(_key)) => {
///                     Ok(Reply::Yes)
///                 }
///                 // Fencing, several keys at once, kinds to come: not here.
///                 _ => Err(unsupported(self, op)),
///             })
///             .collect();
///         // Answered at once; no identity (see `Backend::probe`).
///         Box::new(Answers::new(results, None))
///     }
/// }
/// # assert!(backend::acquire(&Mine, b"k", b"t", std::time::Duration::from_secs(1)).unwrap());
/// ```
pub trait Backend: Send + Sync + 'static {
    /// A name for reports and logs, such as `redis://10.0.0.1:6379/0`.
    ///
    /// Must never contain a password or other secret. Two backends with the
    /// same description are treated as the same server.
    fn describe(&self) -> String;

    /// Sends `ops` to the server, to be run in order, and returns the
    /// batch in flight: [`InFlight::finish`] (called with the same `ops`)
    /// reads one result per op, in the same order, with the identity of
    /// the server that gave them. The one way the engine runs operations.
    ///
    /// The engine hands over everything queued for the node at once, so a
    /// backend can pipeline many operations into one round trip. An
    /// implementation must return exactly `ops.len()` results; the engine
    /// reports any missing result as an error. A kind the backend does not
    /// support (fencing, say, or a kind added later: [`OpKind`] is
    /// `#[non_exhaustive]`) gets [`unsupported`].
    ///
    /// Each op names the lock's keys ([`Op::keys`]): one key for a single
    /// lock, several for a lock on several resources
    /// ([`LockManager::lock_all`](crate::LockManager::lock_all)), which the
    /// backend runs as one atomic step on all of them, or answers
    /// [`unsupported`] for.
    ///
    /// A backend that answers at once (as the memory backend does) runs
    /// the whole batch here and returns its [`Answers`], which are their
    /// own `InFlight`: `Box::new(Answers::new(results, server))`. One that
    /// talks over a network writes the batch here and reads the answers in
    /// `finish`, so that the engine, driving one operation on several
    /// nodes from the caller's thread, sends to every idle node before it
    /// reads from any: one round trip and no thread hand-off. Either way
    /// the whole call (`send`, then `finish`) stays within the backend's
    /// timeout.
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight>;

    /// Capability: the longest any single call (or batch, `send` and
    /// `finish` together) can take, when the backend enforces such a
    /// bound; `None` when it does not (the default).
    ///
    /// With a bound no longer than a round's wait, the engine may run an
    /// operation on the calling thread when the node is idle, instead of
    /// handing it to the node's worker thread: the caller then waits no
    /// longer than it would have anyway. Backends that can block without
    /// bound (a paused [`MemoryBackend`](crate::MemoryBackend)) must
    /// return `None`.
    fn call_timeout(&self) -> Option<Duration> {
        None
    }

    /// Capability: the server's identity, on request ([`Probe`]); `None`
    /// (the default) for a backend that cannot tell who its server is.
    ///
    /// A backend that has a probe also reports, with every batch's
    /// [`Answers`], the identity of the server that gave them: read on
    /// the same connection (or under the same lock) as the answers, never
    /// a cached value that another connection or thread may have
    /// refreshed. Redis reads `INFO` once per connection, in the
    /// connection's first pipeline, and reports it with every batch that
    /// connection carries.
    ///
    /// With restart quarantine on (the default), a grant counts only when
    /// its server is identified (an answer whose
    /// [`Answers::server`] is `None` or has no `run_id` does **not**
    /// count: the server may have restarted and forgotten the locks it
    /// held). So [`LockManagerBuilder::build`](crate::LockManagerBuilder::build)
    /// refuses a node whose backend has no probe, naming the two fixes:
    /// report the identity, or switch the quarantine off where restarts
    /// are made safe another way (durable persistence, or restarts delayed
    /// by `max_ttl`). A backend with a probe may still fail to learn the
    /// identity at run time (say, an ACL user without `INFO`): it must
    /// then say `None` rather than guess; its grants do not count and
    /// `health()` shows the node as unidentified.
    ///
    /// The engine also probes a node it marked down
    /// ([`Probe::server_info`]), and reads the settings of a node that no
    /// batch has brought lately; without a probe a node marked down is
    /// taken back at its next probe time.
    fn probe(&self) -> Option<&dyn Probe> {
        None
    }

    /// Capability: reading what a key holds, changing nothing
    /// ([`Inspect`]), for [`LockManager::inspect`](crate::LockManager::inspect);
    /// `None` (the default) for a backend that cannot, whose nodes then
    /// report a [`BackendErrorKind::Config`] error that says so.
    fn inspector(&self) -> Option<&dyn Inspect> {
        None
    }

    /// Capability: a new subscriber to this server's release notices (see
    /// [`ReleaseListener`]), or `None` when the backend has none (the
    /// default): waiters then retry on their timer alone.
    ///
    /// The engine asks once per manager and node, from the node's thread,
    /// and only when some caller first waits for a lock. A backend that
    /// offers listeners also reports, for a release that deleted the key
    /// and was heard, [`Reply::Notified`] with the number of listeners for
    /// that key's notices (never catch-all ones, see the variant).
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        None
    }
}

impl<B: Backend + ?Sized> Backend for Arc<B> {
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        (**self).send(ops)
    }
    fn call_timeout(&self) -> Option<Duration> {
        (**self).call_timeout()
    }
    fn probe(&self) -> Option<&dyn Probe> {
        (**self).probe()
    }
    fn inspector(&self) -> Option<&dyn Inspect> {
        (**self).inspector()
    }
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        (**self).release_listener()
    }
}
