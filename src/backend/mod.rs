//! The [`Backend`] trait: one lock server, and the errors it reports.
//!
//! A backend knows nothing about quorums: it answers for one server. The
//! engine runs one worker thread per backend and counts their votes.
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

mod answers;
mod error;
mod holding;
mod keyset;
pub(crate) mod memory;
mod notices;
mod op;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub(crate) mod redis;
mod server_info;

use self::answers::Answered;
pub use self::answers::{Answers, InFlight};
pub use self::error::{BackendError, BackendErrorKind};
pub use self::holding::{Holding, MAX_INSPECTED_VALUE};
pub use self::keyset::{KeySet, MAX_SET_SIZE};
#[cfg(feature = "redis")]
pub(crate) use self::notices::RELEASE_CHANNEL_PREFIX;
pub use self::notices::ReleaseListener;
pub use self::op::{Op, OpKind, Reply};
pub(crate) use self::server_info::SETTINGS_MAX_AGE;
pub use self::server_info::ServerInfo;

/// One lock server (one Redis master, one in-memory node, ...).
///
/// Every method is called from the node's own worker thread, one call at a
/// time, in the order the engine queued the operations. A backend therefore
/// needs no internal ordering of its own, but it must be `Send + Sync`
/// because fault-injection handles and probes may share it.
///
/// # Contract
///
/// * **Atomicity**: each operation is one atomic step on the server
///   (`SET NX PX`, or a compare-and-act script): there is no window in which
///   another client sees a half-done operation.
/// * **Answers**: `Ok(true)` means the server did it; `Ok(false)` means the
///   server answered and refused (the key is held by another token, or is no
///   longer ours). `Err` means *could not tell*: the operation may or may not
///   have been applied. The engine treats an `Err` on acquire as "maybe
///   applied" and still sends the release there.
/// * **Time**: each call must return within the timeout the backend was
///   configured with (for `RedisBackend`,
///   the manager's per-node timeout). A backend that blocks longer delays
///   every later operation queued for its node, and its answers come too
///   late to count.
/// * **Retries**: acquire and release are safe to retry with the same token;
///   extend is too (it only pushes the expiry of a key that still holds our
///   token). A backend may retry internally only within its timeout.
/// * **Panics**: a panic inside a backend is caught by the engine and
///   reported as [`BackendErrorKind::Panicked`]; it never kills the engine.
pub trait Backend: Send + Sync + 'static {
    /// Sets `key` to `token` with an expiry of `ttl`, only if `key` does not
    /// exist (`SET key token NX PX ttl`).
    ///
    /// `Ok(true)`: this call set the key to `token`. `Ok(false)`: the key
    /// exists: held by another token, or already by `token` (set through
    /// another name of the same server: that server's vote was counted
    /// under its other name, and one server casts one vote; a backend that
    /// can tell this case apart reports [`Reply::AlreadyOurs`] from
    /// [`batch`](Self::batch)). `Err`: unknown: the key may have been set.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer from the server.
    ///
    /// Provided: one [`batch`](Self::batch) of [`Op::acquire`].
    fn acquire(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        single(self, Op::acquire(&KeySet::one(key), token, ttl)).map(Reply::is_yes)
    }

    /// Deletes `key` only if it still holds `token` (compare-and-delete).
    ///
    /// `Ok(true)`: deleted. `Ok(false)`: the key was absent or held by
    /// another token, and was left alone.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer from the server.
    ///
    /// Provided: one [`batch`](Self::batch) of [`Op::release`].
    fn release(&self, key: &[u8], token: &[u8]) -> Result<bool, BackendError> {
        single(self, Op::release(&KeySet::one(key), token)).map(Reply::is_yes)
    }

    /// Sets the expiry of `key` to `ttl` from now, only if it still holds
    /// `token` (compare-and-pexpire). Never creates a missing key.
    ///
    /// `Ok(true)`: extended. `Ok(false)`: the key was absent or held by
    /// another token, and was left alone.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer from the server.
    ///
    /// Provided: one [`batch`](Self::batch) of [`Op::extend`].
    fn extend(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        single(self, Op::extend(&KeySet::one(key), token, ttl)).map(Reply::is_yes)
    }

    /// [`acquire`](Self::acquire), and when this call set the key, reads
    /// the lock's fence counter (0 when it has none), in the same atomic
    /// step. For fencing tokens (`LockOptions::fencing`).
    ///
    /// `counter` names the hash that holds every fence counter of the node
    /// (one field per lock key, no expiry), `<prefix>{quorum-lock}:fences`:
    /// in the crate's own namespace, which no resource may enter, so no
    /// lock ever collides with a counter. A value of
    /// another type there, or a field that is not a number, is an error
    /// ([`BackendErrorKind::WrongType`]), never a fence.
    ///
    /// `Ok(Some(n))`: this call set the key and the counter read `n`.
    /// `Ok(None)`: the key already existed (see [`acquire`](Self::acquire)).
    /// `Err`: unknown.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer; a backend without fencing
    /// answers [`unsupported`] for this kind.
    ///
    /// Provided: one [`batch`](Self::batch) of [`Op::acquire_fenced`].
    fn acquire_fenced(
        &self,
        key: &[u8],
        token: &[u8],
        ttl: Duration,
        counter: &[u8],
    ) -> Result<Option<u64>, BackendError> {
        single(
            self,
            Op::acquire_fenced(&KeySet::one(key), token, ttl, counter),
        )
        .map(Reply::fence)
    }

    /// Raises the lock's fence counter (the field `key` of the hash
    /// `counter`, see [`acquire_fenced`](Self::acquire_fenced)) to at least
    /// `fence`, only while `key` still holds `token` (one atomic step). The
    /// counter never goes down and is never given an expiry.
    ///
    /// `Ok(true)`: the key is ours and the counter is now `>= fence`.
    /// `Ok(false)`: the key is no longer ours; nothing was written.
    ///
    /// # Errors
    ///
    /// As [`acquire_fenced`](Self::acquire_fenced).
    ///
    /// Provided: one [`batch`](Self::batch) of [`Op::raise_fence`].
    fn raise_fence(
        &self,
        key: &[u8],
        token: &[u8],
        counter: &[u8],
        fence: u64,
    ) -> Result<bool, BackendError> {
        single(
            self,
            Op::raise_fence(&KeySet::one(key), token, counter, fence),
        )
        .map(Reply::is_yes)
    }

    /// A name for reports and logs, such as `redis://10.0.0.1:6379/0`.
    ///
    /// Must never contain a password or other secret. Two backends with the
    /// same description are treated as the same server.
    fn describe(&self) -> String;

    /// Runs `ops` in order and returns one result per op, in the same order:
    /// with [`describe`](Self::describe), the one method a backend must
    /// implement (the single-op methods are provided on top of it).
    ///
    /// The engine hands over everything queued for the node at once, so a
    /// backend can pipeline many operations into one round trip. An
    /// implementation must return exactly `ops.len()` results; the engine
    /// reports any missing result as an error. A kind the backend does not
    /// support (fencing, say) gets [`unsupported`].
    ///
    /// Each op names the lock's keys ([`Op::keys`]): one key for a single
    /// lock, several for a lock on several resources
    /// ([`LockManager::lock_all`](crate::LockManager::lock_all)), which the
    /// backend runs as one atomic step on all of them, or answers
    /// [`unsupported`] for.
    ///
    /// A backend of your own, over some store with compare-and-set:
    ///
    /// ```
    /// use quorum_lock::{Backend, BackendError, Op, OpKind, Reply, unsupported};
    ///
    /// struct Mine;
    ///
    /// impl Backend for Mine {
    ///     fn describe(&self) -> String {
    ///         "mine".into()
    ///     }
    ///     fn batch(&self, ops: &[Op<'_>]) -> Vec<Result<Reply, BackendError>> {
    ///         ops.iter()
    ///             .map(|op| match (op.kind, op.keys.single()) {
    ///                 // Here: SET NX PX, compare-and-delete, compare-and-expire
    ///                 // of the one key.
    ///                 (OpKind::Acquire { .. } | OpKind::Release | OpKind::Extend { .. }, Some(_key)) => {
    ///                     Ok(Reply::Yes)
    ///                 }
    ///                 // Fencing, and several keys at once: not here.
    ///                 _ => Err(unsupported(self, op)),
    ///             })
    ///             .collect()
    ///     }
    /// }
    /// # assert!(Mine.acquire(b"k", b"t", std::time::Duration::from_secs(1)).unwrap());
    /// ```
    fn batch(&self, ops: &[Op<'_>]) -> Vec<Result<Reply, BackendError>>;

    /// Runs `ops` like [`batch`](Self::batch) and says which server
    /// answered them: this is what the engine calls.
    ///
    /// A grant counts only as a vote of the server that gave it, so the
    /// identity must describe *that* server, read on the same connection
    /// (or under the same lock) as the answers, never a cached value that
    /// another connection or thread may have refreshed. Redis reads
    /// `INFO server` once per connection, in the connection's first
    /// pipeline, and reports it with every batch that connection carries.
    ///
    /// With restart quarantine on, a grant whose [`Answers::server`] is
    /// `None` or has no `run_id` does **not** count: the server may have
    /// restarted and forgotten the locks it held. A backend that cannot
    /// tell who answered must say so (`None`) rather than guess; its users
    /// then switch quarantine off and make restarts safe another way
    /// (durable persistence, or restarts delayed by `max_ttl`).
    ///
    /// The default runs [`batch`](Self::batch) and then asks
    /// [`server_info`](Self::server_info): right only for a backend that
    /// always talks to one server incarnation (or reports none).
    fn identified_batch(&self, ops: &[Op<'_>]) -> Answers {
        let results = self.batch(ops);
        Answers::new(results, self.server_info().ok())
    }

    /// Starts [`identified_batch`](Self::identified_batch): sends `ops` and
    /// returns at once, before reading the answers, which
    /// [`InFlight::finish`] reads (called with the same `ops`).
    ///
    /// The engine uses this to run one operation on several nodes from the
    /// caller's thread: it sends to every idle node first, then reads the
    /// answers, so the round costs one round trip and no thread hand-off.
    /// The default runs the whole batch here and keeps the answers for
    /// `finish`: right for a backend that answers at once (as the memory
    /// backend does), and for any backend whose calls are not bounded (it
    /// is never run on a caller's thread then; see
    /// [`call_timeout`](Self::call_timeout)). Redis writes the pipeline
    /// here and reads it in `finish`, bounded by its timeout.
    fn send_batch(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        Box::new(Answered(self.identified_batch(ops)))
    }

    /// The longest any single call (or batch) can take, when the backend
    /// enforces such a bound; `None` when it does not (the default).
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

    /// The server's identity and uptime, when the backend can learn them.
    ///
    /// The engine uses this to probe a node that was marked down; restart
    /// quarantine and duplicate detection use the identity that comes with
    /// each batch ([`identified_batch`](Self::identified_batch)). The
    /// default knows nothing and contacts nobody: with restart quarantine
    /// on, such a backend's grants do not count (see
    /// [`identified_batch`](Self::identified_batch)).
    ///
    /// # Errors
    ///
    /// Any failure to reach the server.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        Ok(ServerInfo::default())
    }

    /// Reads what `key` holds, changing nothing: its value and time left,
    /// in one atomic step (Redis: `GET` and `PTTL` in one script). For
    /// [`LockManager::inspect`](crate::LockManager::inspect).
    ///
    /// `Ok(None)`: the key does not exist. A key of another type is a
    /// [`BackendErrorKind::WrongType`] error.
    ///
    /// # Errors
    ///
    /// Any failure to get a definite answer; the default (a backend that
    /// cannot inspect) is a [`BackendErrorKind::Config`] error that says
    /// so.
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        let _ = key;
        Err(BackendError::new(
            BackendErrorKind::Config,
            format!(
                "{}: this backend does not support inspection (Backend::inspect)",
                self.describe()
            ),
        ))
    }

    /// A new subscriber to this server's release notices (see
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

    /// Whether this backend reports the identity of the server behind each
    /// batch (a `run_id` in [`Answers::server`], through
    /// [`identified_batch`](Self::identified_batch) or
    /// [`server_info`](Self::server_info)). Default `false`: a backend of
    /// your own that says nothing about its server.
    ///
    /// With restart quarantine on (the default), a grant counts only when
    /// the server that gave it is identified, so
    /// [`LockManagerBuilder::build`](crate::LockManagerBuilder::build)
    /// refuses a node whose backend returns `false` here, naming the two
    /// fixes: report the identity (and return `true`), or switch the
    /// quarantine off where restarts are made safe another way. A backend
    /// that returns `true` may still fail to learn the identity at run
    /// time (say, an ACL user without `INFO`); its grants then do not count
    /// and `health()` shows the node as unidentified.
    fn reports_identity(&self) -> bool {
        false
    }

    /// How many times this backend *knows* its server came back after
    /// being unreachable (a fault-injection handle that brought it up, as
    /// [`MemoryBackend::set_down(false)`](crate::MemoryBackend::set_down)
    /// does); 0 when it cannot tell (the default, and Redis).
    ///
    /// The engine skips a node it marked down and probes it in the
    /// background (after 50 ms, then backing off to 2 s). When this count
    /// changes, the next round probes the node first instead and, if it
    /// answers, uses it at once: test doubles then take effect on the next
    /// round, without sleeping.
    fn recoveries(&self) -> u64 {
        0
    }
}

impl<B: Backend + ?Sized> Backend for Arc<B> {
    fn acquire(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        (**self).acquire(key, token, ttl)
    }
    fn release(&self, key: &[u8], token: &[u8]) -> Result<bool, BackendError> {
        (**self).release(key, token)
    }
    fn extend(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        (**self).extend(key, token, ttl)
    }
    fn acquire_fenced(
        &self,
        key: &[u8],
        token: &[u8],
        ttl: Duration,
        counter: &[u8],
    ) -> Result<Option<u64>, BackendError> {
        (**self).acquire_fenced(key, token, ttl, counter)
    }
    fn raise_fence(
        &self,
        key: &[u8],
        token: &[u8],
        counter: &[u8],
        fence: u64,
    ) -> Result<bool, BackendError> {
        (**self).raise_fence(key, token, counter, fence)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn batch(&self, ops: &[Op<'_>]) -> Vec<Result<Reply, BackendError>> {
        (**self).batch(ops)
    }
    fn identified_batch(&self, ops: &[Op<'_>]) -> Answers {
        (**self).identified_batch(ops)
    }
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        (**self).server_info()
    }
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        (**self).inspect(key)
    }
    fn call_timeout(&self) -> Option<Duration> {
        (**self).call_timeout()
    }
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        (**self).release_listener()
    }
    fn recoveries(&self) -> u64 {
        (**self).recoveries()
    }
    fn reports_identity(&self) -> bool {
        (**self).reports_identity()
    }
    fn send_batch(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        (**self).send_batch(ops)
    }
}

/// The error a backend gives for an op kind it does not support (say,
/// fencing): a configuration error naming the backend and the kind.
pub fn unsupported<B: Backend + ?Sized>(backend: &B, op: &Op<'_>) -> BackendError {
    let kind = match (op.kind, op.keys.len() > 1) {
        (OpKind::Acquire { .. }, false) => "acquire",
        (OpKind::AcquireFenced { .. }, false) => "fenced acquire (fencing tokens)",
        (OpKind::Extend { .. }, false) => "extend",
        (OpKind::Release, false) => "release",
        (OpKind::RaiseFence { .. }, false) => "fence raise (fencing tokens)",
        (OpKind::Acquire { .. }, true) => "acquire of several keys (lock_all)",
        (OpKind::AcquireFenced { .. }, true) => "fenced acquire of several keys (lock_all)",
        (OpKind::Extend { .. }, true) => "extend of several keys (lock_all)",
        (OpKind::Release, true) => "release of several keys (lock_all)",
        (OpKind::RaiseFence { .. }, true) => "fence raise of several keys (lock_all)",
    };
    BackendError::new(
        BackendErrorKind::Config,
        format!(
            "{}: this backend does not support the {kind} operation",
            backend.describe()
        ),
    )
}

/// One op through [`Backend::batch`].
fn single<B: Backend + ?Sized>(backend: &B, op: Op<'_>) -> Result<Reply, BackendError> {
    backend.batch(&[op]).pop().unwrap_or_else(|| {
        Err(BackendError::new(
            BackendErrorKind::Protocol,
            "the backend returned no result for the op",
        ))
    })
}
