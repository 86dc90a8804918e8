//! [`RedisBackend`]: one Redis master (or any server speaking the Redis
//! protocol, such as Valkey) as a lock server.
//!
//! * acquire: `SET key token NX PX ttl_ms`
//! * release: compare-and-delete, one Lua script
//! * extend: compare-and-pexpire, one Lua script (never creates a key)
//!
//! Scripts run by `EVALSHA`; a `NOSCRIPT` reply (after a restart or a
//! `SCRIPT FLUSH`) re-runs the op by `EVAL`, which also caches the script
//! again. A [`batch`](Backend::batch) is written as one pipeline: one round
//! trip for any number of ops, with a second one only for ops that need a
//! follow-up (`NOSCRIPT`, or a `TYPE` check after a refused acquire).
//!
//! # Connections
//!
//! Connections are made lazily, in the calling thread, bounded by the
//! per-node timeout; up to four idle ones are kept for reuse. A connection
//! that saw anything but a complete set of replies (a timeout, an I/O error,
//! a reply that did not parse) is dropped at once and never reused, so a late
//! reply can never be read as the answer to a later command.

mod batch;
mod errors;
mod pool;
mod redact;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Client, ConnectionInfo, IntoConnectionInfo, Value};

use crate::backend::{Backend, BackendError, BackendErrorKind, Op, ServerInfo};

use self::batch::{ttl_millis, value_text};
use self::pool::{CachedInfo, IdleConn};
use self::redact::{describe_info, redact_raw_url, scrub};

/// Deletes `KEYS[1]` only if it holds `ARGV[1]`. Returns 1 or 0.
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// Sets the expiry of `KEYS[1]` to `ARGV[2]` ms only if it holds `ARGV[1]`.
/// `PEXPIRE` on a missing key does nothing, so this never creates a key.
const EXTEND_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// One Redis server, used as a lock node.
///
/// Cheap to clone: clones share the connection pool. All methods block for
/// at most about the per-node timeout given to [`open`](Self::open) (plus
/// DNS resolution, which the standard library cannot bound).
///
/// Its [`Debug`] output and every error it returns name the server by
/// [`url_redacted`](Self::url_redacted): the password never appears.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    redacted: String,
    /// Strings scrubbed from every message (the password, as written in the
    /// URL and decoded).
    secrets: Vec<String>,
    timeout: Duration,
    idle: Mutex<Vec<IdleConn>>,
    info: Mutex<Option<CachedInfo>>,
    release_sha: String,
    extend_sha: String,
}

impl RedisBackend {
    /// Prepares a backend for the server at `url`, without connecting.
    ///
    /// `url` is `redis://[user[:password]@]host[:port][/db]`,
    /// `rediss://...` for TLS (needs the `tls` feature; the server
    /// certificate is checked against the system's root certificates, or not
    /// at all with a `#insecure` fragment), or `unix:///path/to/socket`.
    /// `timeout` bounds each call: connecting (TCP and TLS handshake, `AUTH`,
    /// `SELECT`), writing the request and reading the replies all share it.
    ///
    /// No connection is made here: a node that is down does not make `open`
    /// fail; its first operation does.
    ///
    /// # Errors
    ///
    /// [`BackendErrorKind::Config`] when the URL is malformed, `timeout` is
    /// zero, or the URL is `rediss://` and the `tls` feature is off. The
    /// message names the URL with its password replaced by `***`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorum_lock::Backend;
    /// use quorum_lock::backend::redis::RedisBackend;
    ///
    /// let node = RedisBackend::open("redis://:secret@127.0.0.1:6379/0", Duration::from_millis(50))?;
    /// assert_eq!(node.describe(), "redis://:***@127.0.0.1:6379/0");
    /// let token = b"0123456789abcdefghij";
    /// if node.acquire(b"orders:42", token, Duration::from_secs(10))? {
    ///     // ... critical section ...
    ///     node.release(b"orders:42", token)?;
    /// }
    /// # Ok::<(), quorum_lock::BackendError>(())
    /// ```
    pub fn open(url: &str, timeout: Duration) -> Result<Self, BackendError> {
        let raw_redacted = redact_raw_url(url);
        let config_error = |what: &str| {
            BackendError::new(
                BackendErrorKind::Config,
                format!("invalid Redis URL `{raw_redacted}`: {what}"),
            )
        };
        let Some(parsed) = redis::parse_redis_url(url) else {
            return Err(config_error(
                "expected redis://[user[:password]@]host[:port][/db], \
                 rediss://... or unix:///path",
            ));
        };
        let tls = matches!(parsed.scheme(), "rediss" | "valkeys");
        if tls && !cfg!(feature = "tls") {
            return Err(config_error(
                "TLS URLs need the `tls` feature of quorum-lock",
            ));
        }
        let mut secrets = Vec::new();
        if let Some(password) = parsed.password().filter(|p| !p.is_empty()) {
            secrets.push(password.to_owned());
        }
        let info: ConnectionInfo = match parsed.into_connection_info() {
            Ok(info) => info,
            Err(e) => {
                let message = scrub(&e.to_string(), &secrets, None);
                return Err(config_error(&message));
            }
        };
        if let Some(password) = info.redis_settings().password().filter(|p| !p.is_empty())
            && !secrets.iter().any(|s| s == password)
        {
            secrets.push(password.to_owned());
        }
        if timeout.is_zero() {
            return Err(config_error(
                "the per-node timeout must be larger than zero",
            ));
        }
        let redacted = describe_info(&info);
        #[cfg(feature = "tls")]
        if tls {
            // redis' rustls needs a process-wide crypto provider. Install
            // ring unless the application installed one already (then this
            // returns Err, which is fine).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = Client::open(info).map_err(|e| {
            let message = scrub(&e.to_string(), &secrets, None);
            config_error(&message)
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                redacted,
                secrets,
                timeout,
                idle: Mutex::new(Vec::new()),
                info: Mutex::new(None),
                release_sha: redis::Script::new(RELEASE_SCRIPT).get_hash().to_owned(),
                extend_sha: redis::Script::new(EXTEND_SCRIPT).get_hash().to_owned(),
            }),
        })
    }

    /// The server's address without credentials, such as
    /// `redis://user:***@10.0.0.1:6379/0` (`***` stands for a password, when
    /// the URL has one). The same string as [`describe`](Backend::describe).
    pub fn url_redacted(&self) -> &str {
        &self.inner.redacted
    }

    /// The per-node timeout given to [`open`](Self::open).
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Asks the server for its `INFO server` now, bypassing the cache that
    /// [`server_info`](Backend::server_info) uses, and refreshes that cache.
    ///
    /// # Errors
    ///
    /// Any failure to reach the server, or its refusal (e.g. `NOPERM` for an
    /// ACL user without the `INFO` command).
    pub fn fetch_server_info(&self) -> Result<ServerInfo, BackendError> {
        let inner = &*self.inner;
        let deadline = inner.deadline();
        let mut buf = Vec::new();
        redis::cmd("INFO")
            .arg("server")
            .write_packed_command(&mut buf);
        let reply = inner.with_conn(deadline, |c| {
            let mut replies = inner.exchange(&mut c.conn, &buf, 1, deadline)?;
            c.needs_info = false;
            Ok(replies.pop())
        })?;
        match reply {
            Some(Value::ServerError(e)) => Err(inner.server_error(&e, None)),
            Some(value) => match value_text(&value) {
                Some(text) => Ok(inner.store_info(&text)),
                None => Err(inner.protocol_error("INFO", &value)),
            },
            None => Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("{}: no reply to INFO", inner.redacted),
            )),
        }
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.inner.redacted)
            .field("timeout", &self.inner.timeout)
            .field("idle_connections", &self.inner.idle.lock().len())
            .finish()
    }
}

impl Backend for RedisBackend {
    /// `SET key token NX PX ttl`, with `ttl` rounded up to whole
    /// milliseconds (at least 1 ms), so the key never expires before the
    /// deadline the engine computed.
    ///
    /// A refused `SET` is followed by a `TYPE` check: a key that holds a
    /// non-string value gives [`BackendErrorKind::WrongType`], not
    /// `Ok(false)`.
    fn acquire(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        self.single(Op::Acquire { key, token, ttl })
    }

    /// Compare-and-delete by script.
    fn release(&self, key: &[u8], token: &[u8]) -> Result<bool, BackendError> {
        self.single(Op::Release { key, token })
    }

    /// Compare-and-pexpire by script; `ttl` rounded up like
    /// [`acquire`](Backend::acquire). Never creates a missing key.
    fn extend(&self, key: &[u8], token: &[u8], ttl: Duration) -> Result<bool, BackendError> {
        self.single(Op::Extend { key, token, ttl })
    }

    fn describe(&self) -> String {
        self.inner.redacted.clone()
    }

    /// Every call shares one deadline of the configured timeout (DNS
    /// resolution aside).
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.inner.timeout)
    }

    /// All ops in one pipeline (one round trip; a second one only for
    /// `NOSCRIPT` re-runs and `TYPE` checks after refused acquires). Each op
    /// gets its own result: one op's server error (e.g. `WRONGTYPE`) leaves
    /// the others alone. A timeout or I/O error fails every op that has no
    /// answer yet, with the same error.
    fn batch(&self, ops: &[Op<'_>]) -> Vec<Result<bool, BackendError>> {
        let inner = &*self.inner;
        let deadline = inner.deadline();
        let mut results: Vec<Option<Result<bool, BackendError>>> = Vec::with_capacity(ops.len());
        let mut ttls = Vec::with_capacity(ops.len());
        for op in ops {
            let ttl = match *op {
                Op::Acquire { ttl, .. } | Op::Extend { ttl, .. } => Some(ttl),
                Op::Release { .. } => None,
            };
            match ttl.map(ttl_millis).transpose() {
                Ok(ms) => {
                    results.push(None);
                    ttls.push(ms.unwrap_or(0));
                }
                Err(e) => {
                    results.push(Some(Err(e)));
                    ttls.push(0);
                }
            }
        }
        if results.iter().any(Option::is_none) {
            let outcome = inner.with_conn(deadline, |c| {
                inner.run_batch(c, ops, &ttls, &mut results, deadline)
            });
            if let Err(e) = outcome {
                for slot in results.iter_mut().filter(|r| r.is_none()) {
                    *slot = Some(Err(e.clone()));
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(BackendError::new(
                        BackendErrorKind::Protocol,
                        format!("{}: no reply for this op", inner.redacted),
                    ))
                })
            })
            .collect()
    }

    /// The server's `run_id` and uptime.
    ///
    /// Every new connection reads `INFO server` in the same round trip as
    /// its first request, so this normally costs nothing: it answers from
    /// that cache, with the uptime advanced by the time since it was read.
    /// Any connection failure clears the cache, and the next call asks the
    /// server (like [`RedisBackend::fetch_server_info`]).
    ///
    /// A restarted server closes every connection, so the first request
    /// after a restart runs on a new connection and refreshes the cache
    /// before its ops run: calling this *after* a batch tells which server
    /// incarnation answered that batch.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        if let Some(cached) = self.inner.info.lock().clone() {
            return Ok(cached.now());
        }
        self.fetch_server_info()
    }
}

impl RedisBackend {
    fn single(&self, op: Op<'_>) -> Result<bool, BackendError> {
        self.batch(&[op]).pop().unwrap_or_else(|| {
            Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("{}: no reply for this op", self.inner.redacted),
            ))
        })
    }
}

impl Inner {
    fn deadline(&self) -> Instant {
        let now = Instant::now();
        now.checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(86_400))
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn describe_never_shows_the_password() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/0"),
            ("redis://127.0.0.1", "redis://127.0.0.1:6379/0"),
            (
                "redis://:s3cret@127.0.0.1:7000/2",
                "redis://:***@127.0.0.1:7000/2",
            ),
            (
                "redis://bob:s3cret@localhost:7000",
                "redis://bob:***@localhost:7000/0",
            ),
            ("redis://bob@localhost:7000", "redis://bob@localhost:7000/0"),
            ("redis://[::1]:7000", "redis://[::1]:7000/0"),
        ];
        for (url, want) in cases {
            let b = RedisBackend::open(url, Duration::from_millis(50)).unwrap();
            assert_eq!(b.describe(), want);
            assert_eq!(b.url_redacted(), want);
            assert!(!format!("{b:?}").contains("s3cret"));
        }
    }

    #[test]
    fn malformed_urls_are_config_errors_without_the_password() {
        for url in [
            "redis://user:s3cret@host:notaport",
            "http://user:s3cret@host:6379",
            "redis://:s3cret@0.0.0.0:6379",
            "redis://:s3cret@host:6379/notadb",
            "",
        ] {
            let err = RedisBackend::open(url, Duration::from_millis(50)).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Config, "{url}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
            assert!(!format!("{err:?}").contains("s3cret"), "{err:?}");
        }
    }

    #[test]
    fn zero_timeout_is_a_config_error() {
        let err = RedisBackend::open("redis://127.0.0.1", Duration::ZERO).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Config);
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_url_without_the_feature_says_so() {
        let err = RedisBackend::open("rediss://:s3cret@127.0.0.1", Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Config);
        assert!(err.to_string().contains("`tls` feature"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_url_with_the_feature_opens() {
        let b = RedisBackend::open("rediss://:s3cret@127.0.0.1:6380", Duration::from_millis(50))
            .unwrap();
        assert_eq!(b.describe(), "rediss://:***@127.0.0.1:6380/0");
    }

    #[test]
    fn backend_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<RedisBackend>();
    }
}
