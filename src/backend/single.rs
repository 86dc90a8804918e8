//! One batch, or one op, through any [`Backend`], waiting for the answer:
//! for tests, tools and backends that wrap another. The engine never
//! calls these (it sends batches and reads them later).

use std::time::Duration;

use super::{Answers, Backend, BackendError, BackendErrorKind, KeySet, Op, OpKind, Reply};

/// Runs `ops` on `backend` and waits for the answers:
/// [`Backend::send`], then [`InFlight::finish`](super::InFlight::finish).
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::MemoryBackend;
/// use quorum_lock::backend::{self, KeySet, Op, Reply};
///
/// let node = MemoryBackend::new("mem-0");
/// let job = KeySet::one("job");
/// let ops = [Op::acquire(&job, b"token-a", Duration::from_secs(1)), Op::release(&job, b"token-a")];
/// let answers = backend::run(&node, &ops);
/// assert!(matches!(answers.results(), [Ok(Reply::Yes), Ok(Reply::Yes)]));
/// assert!(answers.server().is_some_and(|s| s.run_id.is_some()));
/// ```
pub fn run<B: Backend + ?Sized>(backend: &B, ops: &[Op<'_>]) -> Answers {
    backend.send(ops).finish(ops)
}

/// Sets `key` to `token` with an expiry of `ttl`, only if `key` does not
/// exist (`SET key token NX PX ttl`): one [`Op::acquire`].
///
/// `Ok(true)`: this call set the key to `token`. `Ok(false)`: the key
/// exists: held by another token, or already by `token` (set through
/// another name of the same server, [`Reply::AlreadyOurs`]). `Err`:
/// unknown: the key may have been set.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::MemoryBackend;
/// use quorum_lock::backend;
///
/// let node = MemoryBackend::new("mem-0");
/// assert!(backend::acquire(&node, b"job", b"token-a", Duration::from_secs(1))?);
/// assert!(!backend::acquire(&node, b"job", b"token-b", Duration::from_secs(1))?);
/// assert!(!backend::release(&node, b"job", b"token-b")?); // not the holder: untouched
/// assert!(backend::release(&node, b"job", b"token-a")?);
/// # Ok::<(), quorum_lock::backend::BackendError>(())
/// ```
///
/// # Errors
///
/// Any failure to get a definite answer from the server.
pub fn acquire<B: Backend + ?Sized>(
    backend: &B,
    key: &[u8],
    token: &[u8],
    ttl: Duration,
) -> Result<bool, BackendError> {
    single(backend, Op::acquire(&KeySet::one(key), token, ttl)).map(Reply::is_yes)
}

/// Deletes `key` only if it still holds `token` (compare-and-delete): one
/// [`Op::release`].
///
/// `Ok(true)`: deleted. `Ok(false)`: the key was absent or held by
/// another token, and was left alone.
///
/// # Errors
///
/// Any failure to get a definite answer from the server.
pub fn release<B: Backend + ?Sized>(
    backend: &B,
    key: &[u8],
    token: &[u8],
) -> Result<bool, BackendError> {
    single(backend, Op::release(&KeySet::one(key), token)).map(Reply::is_yes)
}

/// Sets the expiry of `key` to `ttl` from now, only if it still holds
/// `token` (compare-and-pexpire; never creates a missing key): one
/// [`Op::extend`].
///
/// `Ok(true)`: extended. `Ok(false)`: the key was absent or held by
/// another token, and was left alone.
///
/// # Errors
///
/// Any failure to get a definite answer from the server.
pub fn extend<B: Backend + ?Sized>(
    backend: &B,
    key: &[u8],
    token: &[u8],
    ttl: Duration,
) -> Result<bool, BackendError> {
    single(backend, Op::extend(&KeySet::one(key), token, ttl)).map(Reply::is_yes)
}

/// [`acquire`], and when this call set the key, the lock's fence counter
/// (0 when it has none), read in the same atomic step: one
/// [`Op::acquire_fenced`] (see [`OpKind::AcquireFenced`] for `counter`).
///
/// `Ok(Some(n))`: this call set the key and the counter read `n`.
/// `Ok(None)`: the key already existed (see [`acquire`]). `Err`: unknown.
///
/// # Errors
///
/// Any failure to get a definite answer; a backend without fencing
/// answers [`unsupported`].
pub fn acquire_fenced<B: Backend + ?Sized>(
    backend: &B,
    key: &[u8],
    token: &[u8],
    ttl: Duration,
    counter: &[u8],
) -> Result<Option<u64>, BackendError> {
    single(
        backend,
        Op::acquire_fenced(&KeySet::one(key), token, ttl, counter),
    )
    .map(Reply::fence)
}

/// Raises the lock's fence counter (the field `key` of the hash `counter`)
/// to at least `fence`, only while `key` still holds `token`: one
/// [`Op::raise_fence`].
///
/// `Ok(true)`: the key is ours and the counter is now `>= fence`.
/// `Ok(false)`: the key is no longer ours; nothing was written.
///
/// # Errors
///
/// As [`acquire_fenced`].
pub fn raise_fence<B: Backend + ?Sized>(
    backend: &B,
    key: &[u8],
    token: &[u8],
    counter: &[u8],
    fence: u64,
) -> Result<bool, BackendError> {
    single(
        backend,
        Op::raise_fence(&KeySet::one(key), token, counter, fence),
    )
    .map(Reply::is_yes)
}

/// The error a backend gives for an op kind it does not support (say,
/// fencing, or a kind added after it was written): a configuration error
/// naming the backend and the kind.
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
        (OpKind::ReadAcquire { .. }, _) => "read-write lock's reader acquire",
        (OpKind::ReadExtend { .. }, _) => "read-write lock's reader extend",
        (OpKind::ReadRelease, _) => "read-write lock's reader release",
        (OpKind::Admit { .. }, _) => "read-write lock's writer admission",
        (OpKind::Proclaim { .. }, _) => "leader election's proclaim",
    };
    BackendError::new(
        BackendErrorKind::Config,
        format!(
            "{}: this backend does not support the {kind} operation",
            backend.describe()
        ),
    )
}

/// One op through [`run`], its one result.
fn single<B: Backend + ?Sized>(backend: &B, op: Op<'_>) -> Result<Reply, BackendError> {
    run(backend, &[op]).into_results().pop().unwrap_or_else(|| {
        Err(BackendError::new(
            BackendErrorKind::Protocol,
            "the backend returned no result for the op",
        ))
    })
}
