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

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use crate::backend::{Backend, BackendError, BackendErrorKind, Op, ServerInfo};

/// Deletes `KEYS[1]` only if it holds `ARGV[1]`. Returns 1 or 0.
const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// Sets the expiry of `KEYS[1]` to `ARGV[2]` ms only if it holds `ARGV[1]`.
/// `PEXPIRE` on a missing key does nothing, so this never creates a key.
const EXTEND_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// Idle connections kept per node. The engine calls a node from one worker
/// thread; the spare ones serve probes and other callers.
const MAX_IDLE_CONNECTIONS: usize = 4;

/// An idle connection older than this is closed instead of reused: it may
/// have been dropped silently by a firewall or NAT in between.
const MAX_IDLE_AGE: Duration = Duration::from_secs(30);

/// Largest TTL sent to the server (about 285 000 years). Redis refuses
/// expiries whose absolute time would overflow a signed 64-bit millisecond
/// count, so anything near `i64::MAX` is refused here before any network
/// call.
const MAX_TTL_MS: u64 = 1 << 53;

/// Longest server message kept in an error.
const MAX_MESSAGE_LEN: usize = 300;

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

struct IdleConn {
    conn: Connection,
    since: Instant,
}

/// A checked-out connection. Dropped (closed) on any failure.
struct Checkout {
    conn: Connection,
    /// Taken from the idle list (as opposed to freshly connected).
    reused: bool,
    /// Freshly connected and its `INFO server` not read yet.
    needs_info: bool,
}

#[derive(Clone)]
struct CachedInfo {
    run_id: Option<String>,
    uptime: Option<Duration>,
    fetched: Instant,
}

/// Why a round trip failed; the connection is dropped in every case.
struct Failure {
    error: BackendError,
    /// No reply at all was read and the peer had closed the connection:
    /// a stale pooled connection, worth one retry on a fresh one.
    stale: bool,
}

/// What an op needs in the second round trip.
enum Followup {
    /// A refused acquire: is the key a string (held) or another type?
    TypeCheck,
    /// The script was not cached: run it by `EVAL`.
    Eval,
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

    fn timeout_error(&self) -> BackendError {
        BackendError::new(
            BackendErrorKind::Timeout,
            format!(
                "{}: no answer within the timeout ({:?})",
                self.redacted, self.timeout
            ),
        )
    }

    /// Runs `f` on a connection: an idle one if any, else a new one. On
    /// failure the connection is dropped; if it was a stale idle connection
    /// that the server had closed (nothing was read), `f` runs once more on
    /// a fresh connection, within the same deadline.
    fn with_conn<T>(
        &self,
        deadline: Instant,
        mut f: impl FnMut(&mut Checkout) -> Result<T, Failure>,
    ) -> Result<T, BackendError> {
        let mut fresh_only = false;
        loop {
            let mut c = self.checkout(deadline, fresh_only)?;
            match f(&mut c) {
                Ok(value) => {
                    self.checkin(c);
                    return Ok(value);
                }
                Err(failure) => {
                    // Poisoned: `c` is dropped here, closing the socket, and
                    // never goes back to the idle list.
                    drop(c.conn);
                    self.invalidate_info();
                    if failure.stale {
                        // The server closed it: the other idle connections
                        // are most likely dead too (restart).
                        self.idle.lock().clear();
                    }
                    let retry = failure.stale && c.reused && !fresh_only;
                    if retry && Instant::now() < deadline {
                        fresh_only = true;
                        continue;
                    }
                    return Err(failure.error);
                }
            }
        }
    }

    fn checkout(&self, deadline: Instant, fresh_only: bool) -> Result<Checkout, BackendError> {
        if !fresh_only {
            let mut idle = self.idle.lock();
            while let Some(c) = idle.pop() {
                if c.since.elapsed() <= MAX_IDLE_AGE {
                    return Ok(Checkout {
                        conn: c.conn,
                        reused: true,
                        needs_info: false,
                    });
                }
            }
        }
        let remaining = remaining(deadline).ok_or_else(|| self.timeout_error())?;
        match self.client.get_connection_with_timeout(remaining) {
            Ok(conn) => Ok(Checkout {
                conn,
                reused: false,
                needs_info: true,
            }),
            Err(e) => {
                self.invalidate_info();
                Err(self.redis_error(&e, true))
            }
        }
    }

    fn checkin(&self, c: Checkout) {
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(IdleConn {
                conn: c.conn,
                since: Instant::now(),
            });
        }
    }

    fn invalidate_info(&self) {
        *self.info.lock() = None;
    }

    fn store_info(&self, text: &str) -> ServerInfo {
        let (run_id, uptime) = parse_info(text);
        let cached = CachedInfo {
            run_id,
            uptime,
            fetched: Instant::now(),
        };
        let info = cached.now();
        *self.info.lock() = Some(cached);
        info
    }

    /// Writes `buf` (`n` packed commands) and reads `n` replies, each read
    /// bounded by what is left until `deadline`. Server error replies are
    /// returned as `Value::ServerError`; anything else that goes wrong is a
    /// [`Failure`].
    fn exchange(
        &self,
        conn: &mut Connection,
        buf: &[u8],
        n: usize,
        deadline: Instant,
    ) -> Result<Vec<Value>, Failure> {
        let timeout = || Failure {
            error: self.timeout_error(),
            stale: false,
        };
        let remaining_now = remaining(deadline).ok_or_else(timeout)?;
        conn.set_write_timeout(Some(remaining_now))
            .map_err(|e| self.failure(&e, 0))?;
        conn.send_packed_command(buf)
            .map_err(|e| self.failure(&e, 0))?;
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            let remaining_now = remaining(deadline).ok_or_else(timeout)?;
            conn.set_read_timeout(Some(remaining_now))
                .map_err(|e| self.failure(&e, replies.len()))?;
            match conn.recv_response() {
                // RESP3 out-of-band data is not a reply.
                Ok(Value::Push { .. }) => {}
                Ok(value) => replies.push(value),
                Err(e) => return Err(self.failure(&e, replies.len())),
            }
        }
        Ok(replies)
    }

    fn failure(&self, e: &redis::RedisError, replies_read: usize) -> Failure {
        let stale = replies_read == 0 && io_error(e).is_some_and(|io| is_dropped(io.kind()));
        Failure {
            error: self.redis_error(e, false),
            stale,
        }
    }

    fn run_batch(
        &self,
        c: &mut Checkout,
        ops: &[Op<'_>],
        ttls: &[u64],
        results: &mut [Option<Result<bool, BackendError>>],
        deadline: Instant,
    ) -> Result<(), Failure> {
        let want_info = c.needs_info;
        let mut buf = Vec::new();
        if want_info {
            redis::cmd("INFO")
                .arg("server")
                .write_packed_command(&mut buf);
        }
        let sent: Vec<usize> = (0..ops.len()).filter(|&i| results[i].is_none()).collect();
        for &i in &sent {
            self.pack_first(&ops[i], ttls[i], &mut buf);
        }
        let replies = self.exchange(
            &mut c.conn,
            &buf,
            sent.len() + usize::from(want_info),
            deadline,
        )?;
        let mut replies = replies.into_iter();
        if want_info {
            c.needs_info = false;
            if let Some(text) = replies.next().as_ref().and_then(value_text) {
                self.store_info(&text);
            }
        }
        let mut followups = Vec::new();
        for (&i, reply) in sent.iter().zip(replies) {
            let op = &ops[i];
            let token = op_token(op);
            let outcome = match (op, reply) {
                (Op::Acquire { .. }, Value::Okay) => Some(Ok(true)),
                (Op::Acquire { .. }, Value::Nil) => {
                    followups.push((i, Followup::TypeCheck));
                    None
                }
                (Op::Release { .. } | Op::Extend { .. }, Value::ServerError(e))
                    if e.code() == "NOSCRIPT" =>
                {
                    followups.push((i, Followup::Eval));
                    None
                }
                (_, Value::ServerError(e)) => Some(Err(self.server_error(&e, Some(token)))),
                (Op::Release { .. } | Op::Extend { .. }, Value::Int(n)) if n == 0 || n == 1 => {
                    Some(Ok(n == 1))
                }
                (op, other) => Some(Err(self.protocol_error(op_name(op), &other))),
            };
            results[i] = outcome;
        }
        if followups.is_empty() {
            return Ok(());
        }

        buf.clear();
        for (i, followup) in &followups {
            let op = &ops[*i];
            match followup {
                Followup::TypeCheck => redis::cmd("TYPE")
                    .arg(op_key(op))
                    .write_packed_command(&mut buf),
                Followup::Eval => self.pack_eval(op, ttls[*i], &mut buf),
            }
        }
        let replies = self
            .exchange(&mut c.conn, &buf, followups.len(), deadline)
            .map_err(|f| Failure {
                error: f.error,
                stale: false,
            })?;
        for ((i, followup), reply) in followups.iter().zip(replies) {
            let op = &ops[*i];
            let token = op_token(op);
            results[*i] = Some(match (followup, reply) {
                (_, Value::ServerError(e)) => Err(self.server_error(&e, Some(token))),
                (Followup::TypeCheck, value) => match value_text(&value).as_deref() {
                    // "none": the holder's key expired in between. Either
                    // way it was not ours: refused.
                    Some("string" | "none") => Ok(false),
                    Some(other) => Err(BackendError::new(
                        BackendErrorKind::WrongType,
                        format!(
                            "{}: key {} holds a {other}, not a lock",
                            self.redacted,
                            show_key(op_key(op))
                        ),
                    )),
                    None => Err(self.protocol_error("TYPE", &value)),
                },
                (Followup::Eval, Value::Int(n)) if n == 0 || n == 1 => Ok(n == 1),
                (Followup::Eval, other) => Err(self.protocol_error(op_name(op), &other)),
            });
        }
        Ok(())
    }

    fn pack_first(&self, op: &Op<'_>, ttl_ms: u64, buf: &mut Vec<u8>) {
        match *op {
            Op::Acquire { key, token, .. } => redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .write_packed_command(buf),
            Op::Release { key, token } => redis::cmd("EVALSHA")
                .arg(&self.release_sha)
                .arg(1)
                .arg(key)
                .arg(token)
                .write_packed_command(buf),
            Op::Extend { key, token, .. } => redis::cmd("EVALSHA")
                .arg(&self.extend_sha)
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(ttl_ms)
                .write_packed_command(buf),
        }
    }

    fn pack_eval(&self, op: &Op<'_>, ttl_ms: u64, buf: &mut Vec<u8>) {
        match *op {
            Op::Release { key, token } => redis::cmd("EVAL")
                .arg(RELEASE_SCRIPT)
                .arg(1)
                .arg(key)
                .arg(token)
                .write_packed_command(buf),
            Op::Extend { key, token, .. } => redis::cmd("EVAL")
                .arg(EXTEND_SCRIPT)
                .arg(1)
                .arg(key)
                .arg(token)
                .arg(ttl_ms)
                .write_packed_command(buf),
            // Acquire is never re-run by EVAL; keep the pipeline aligned.
            Op::Acquire { key, .. } => redis::cmd("TYPE").arg(key).write_packed_command(buf),
        }
    }

    fn scrub(&self, text: &str, token: Option<&[u8]>) -> String {
        scrub(text, &self.secrets, token)
    }

    fn server_error(&self, e: &redis::ServerError, token: Option<&[u8]>) -> BackendError {
        let code = e.code();
        let text = match e.details() {
            Some(details) => format!("{code} {details}"),
            None => code.to_owned(),
        };
        BackendError::new(
            kind_for_server_code(code),
            format!("{}: {}", self.redacted, self.scrub(&text, token)),
        )
    }

    fn protocol_error(&self, command: &str, value: &Value) -> BackendError {
        let shown = match value {
            Value::Nil => "nil".to_owned(),
            Value::Int(n) => format!("integer {n}"),
            Value::Okay => "OK".to_owned(),
            Value::SimpleString(_) => "a status reply".to_owned(),
            Value::BulkString(b) => format!("a {}-byte string", b.len()),
            Value::Array(a) => format!("an array of {}", a.len()),
            _ => "an unexpected reply type".to_owned(),
        };
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("{}: unexpected reply to {command}: {shown}", self.redacted),
        )
    }

    /// Maps a client-side error. `connecting`: it happened while opening the
    /// connection, where any I/O failure but a timeout means "unreachable".
    fn redis_error(&self, e: &redis::RedisError, connecting: bool) -> BackendError {
        let (kind, what) = classify(e, connecting);
        if kind == BackendErrorKind::Timeout {
            // The OS text for a socket timeout is "Resource temporarily
            // unavailable": say what happened instead.
            let phase = if connecting {
                "connecting"
            } else {
                "waiting for the reply"
            };
            return BackendError::new(
                kind,
                format!(
                    "{}: timed out {phase} (timeout {:?})",
                    self.redacted, self.timeout
                ),
            );
        }
        let detail = self.scrub(&e.to_string(), None);
        BackendError::new(kind, format!("{}: {what}: {detail}", self.redacted))
    }
}

impl CachedInfo {
    fn now(&self) -> ServerInfo {
        ServerInfo {
            run_id: self.run_id.clone(),
            uptime: self
                .uptime
                .map(|u| u.saturating_add(self.fetched.elapsed())),
        }
    }
}

/// The kind of a client-side error and a short description of it.
fn classify(e: &redis::RedisError, connecting: bool) -> (BackendErrorKind, &'static str) {
    use redis::ErrorKind as K;
    if let Some(io) = io_error(e) {
        if matches!(
            io.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) {
            return (BackendErrorKind::Timeout, "timed out");
        }
        if is_tls_error(io) {
            return (
                BackendErrorKind::Config,
                "TLS failed (does the server speak TLS on this port?)",
            );
        }
        if io.kind() == io::ErrorKind::ConnectionRefused {
            return (BackendErrorKind::Unreachable, "connection refused");
        }
        if connecting {
            return (BackendErrorKind::Unreachable, "cannot connect");
        }
        if is_dropped(io.kind()) {
            return (BackendErrorKind::Unreachable, "connection lost");
        }
        return (BackendErrorKind::Other, "I/O error");
    }
    match e.kind() {
        K::AuthenticationFailed => (BackendErrorKind::Auth, "authentication failed"),
        K::InvalidClientConfig => (BackendErrorKind::Config, "invalid configuration"),
        K::Parse | K::UnexpectedReturnType => (BackendErrorKind::Protocol, "unexpected reply"),
        // rustls errors raised outside I/O (e.g. building the TLS config).
        K::Client if connecting => (BackendErrorKind::Config, "client setup failed"),
        K::Server(_) | K::Extension => match e.code() {
            Some(code) => {
                let kind = kind_for_server_code(code);
                if kind == BackendErrorKind::Other && connecting {
                    // e.g. SELECT refused: the URL names a database the
                    // server does not have.
                    (
                        BackendErrorKind::Config,
                        "server refused the connection setup",
                    )
                } else {
                    (kind, "server error")
                }
            }
            None => (BackendErrorKind::Other, "server error"),
        },
        _ => (BackendErrorKind::Other, "error"),
    }
}

/// Maps a Redis error code (the first word of an error reply).
fn kind_for_server_code(code: &str) -> BackendErrorKind {
    match code {
        "WRONGTYPE" => BackendErrorKind::WrongType,
        "READONLY" => BackendErrorKind::ReadOnly,
        "NOAUTH" | "WRONGPASS" | "NOPERM" => BackendErrorKind::Auth,
        _ => BackendErrorKind::Other,
    }
}

/// The `io::Error` inside `e`, if it wraps one.
///
/// `RedisError::source` hands out its inner `Arc<dyn Error + Send + Sync>`
/// itself, so look through that `Arc` as well.
fn io_error(e: &redis::RedisError) -> Option<&io::Error> {
    let source = e.source()?;
    if let Some(io) = source.downcast_ref::<io::Error>() {
        return Some(io);
    }
    source
        .downcast_ref::<Arc<dyn StdError + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<io::Error>())
}

fn is_tls_error(io: &io::Error) -> bool {
    #[cfg(feature = "tls")]
    {
        io.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = io;
        false
    }
}

/// The peer closed or reset the connection.
fn is_dropped(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}

fn remaining(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

/// `ttl` in whole milliseconds, rounded up, at least 1.
///
/// Rounding down would let the key expire before the deadline the client
/// computed from `ttl`.
fn ttl_millis(ttl: Duration) -> Result<u64, BackendError> {
    let nanos = ttl.as_nanos();
    let ms = nanos.div_ceil(1_000_000).max(1);
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_TTL_MS => Ok(ms),
        _ => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("TTL {ttl:?} is out of range for Redis"),
        )),
    }
}

fn op_key<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Acquire { key, .. } | Op::Release { key, .. } | Op::Extend { key, .. } => key,
    }
}

fn op_token<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Acquire { token, .. } | Op::Release { token, .. } | Op::Extend { token, .. } => token,
    }
}

fn op_name(op: &Op<'_>) -> &'static str {
    match op {
        Op::Acquire { .. } => "SET NX",
        Op::Release { .. } => "the release script",
        Op::Extend { .. } => "the extend script",
    }
}

/// A key for messages: escaped, at most 64 bytes shown.
fn show_key(key: &[u8]) -> String {
    let shown: String = key
        .iter()
        .take(64)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if key.len() > 64 {
        format!("\"{shown}...\" ({} bytes)", key.len())
    } else {
        format!("\"{shown}\"")
    }
}

/// The text of a status or bulk reply.
fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_owned()),
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// `run_id` and `uptime_in_seconds` from an `INFO` reply.
fn parse_info(text: &str) -> (Option<String>, Option<Duration>) {
    let mut run_id = None;
    let mut uptime = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(id) = line.strip_prefix("run_id:") {
            run_id = Some(id.to_owned()).filter(|id| !id.is_empty());
        } else if let Some(secs) = line.strip_prefix("uptime_in_seconds:") {
            uptime = secs.parse::<u64>().ok().map(Duration::from_secs);
        }
    }
    (run_id, uptime)
}

/// `text` with every secret replaced by `***` and the token (when it is
/// text) by `<token>`. Also truncates overly long server messages.
fn scrub(text: &str, secrets: &[String], token: Option<&[u8]>) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret.as_str(), "***");
    }
    if let Some(token) = token.and_then(|t| std::str::from_utf8(t).ok())
        && !token.is_empty()
    {
        out = out.replace(token, "<token>");
    }
    if out.len() > MAX_MESSAGE_LEN {
        let mut end = MAX_MESSAGE_LEN;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("...");
    }
    out
}

/// Redacts a URL that may not even parse: everything between `://` (or the
/// start) and the last `@` is credentials. Keeps the user name when the URL
/// is well-formed enough to tell it apart.
fn redact_raw_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let creds = &rest[..at];
    let host = &rest[at + 1..];
    let shown = match creds.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?', '#']) => format!("{user}:***"),
        Some(_) => "***".to_owned(),
        None => creds.to_owned(),
    };
    format!("{scheme}{shown}@{host}")
}

/// `redis://[user[:***]@]host:port/db` from parsed connection info.
fn describe_info(info: &ConnectionInfo) -> String {
    let settings = info.redis_settings();
    let creds = match (settings.username(), settings.password().is_some()) {
        (Some(user), true) => format!("{user}:***@"),
        (None, true) => ":***@".to_owned(),
        (Some(user), false) => format!("{user}@"),
        (None, false) => String::new(),
    };
    let db = settings.db();
    let host_port = |host: &str, port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            format!("redis://{creds}{}/{db}", host_port(host, *port))
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{creds}{}/{db}", host_port(host, *port))
        }
        ConnectionAddr::Unix(path) => format!("unix://{creds}{}?db={db}", path.display()),
        other => format!("redis://{creds}{other}/{db}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn ttl_rounds_up_to_whole_milliseconds() {
        assert_eq!(ttl_millis(Duration::ZERO).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(999)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_millis(Duration::from_micros(1001)).unwrap(), 2);
        assert_eq!(ttl_millis(Duration::from_secs(10)).unwrap(), 10_000);
        assert_eq!(
            ttl_millis(Duration::from_secs(10) + Duration::from_nanos(1)).unwrap(),
            10_001
        );
    }

    #[test]
    fn ttl_out_of_range_is_refused_before_any_call() {
        assert!(ttl_millis(Duration::from_millis(MAX_TTL_MS)).is_ok());
        let err = ttl_millis(Duration::from_millis(MAX_TTL_MS + 1)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Other);
        assert!(ttl_millis(Duration::MAX).is_err());
    }

    #[test]
    fn raw_url_redaction() {
        assert_eq!(
            redact_raw_url("redis://user:pa55@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_raw_url("redis://:pa55@host"), "redis://:***@host");
        assert_eq!(redact_raw_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_raw_url("redis://user@host"), "redis://user@host");
        // An unencoded '@' in the password: everything up to the last '@'.
        assert_eq!(
            redact_raw_url("redis://u:p@ss@host:x"),
            "redis://u:***@host:x"
        );
        assert_eq!(redact_raw_url("nonsense:pw@host"), "nonsense:***@host");
        assert!(!redact_raw_url("redis//:s3cret@h").contains("s3cret"));
    }

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
    fn server_codes_map_to_kinds() {
        assert_eq!(
            kind_for_server_code("WRONGTYPE"),
            BackendErrorKind::WrongType
        );
        assert_eq!(kind_for_server_code("READONLY"), BackendErrorKind::ReadOnly);
        assert_eq!(kind_for_server_code("NOAUTH"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("WRONGPASS"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("NOPERM"), BackendErrorKind::Auth);
        assert_eq!(kind_for_server_code("ERR"), BackendErrorKind::Other);
        assert_eq!(kind_for_server_code("LOADING"), BackendErrorKind::Other);
    }

    #[test]
    fn io_errors_map_to_kinds() {
        let err = |kind| redis::RedisError::from(io::Error::from(kind));
        let cases = [
            (io::ErrorKind::TimedOut, false, BackendErrorKind::Timeout),
            (io::ErrorKind::WouldBlock, false, BackendErrorKind::Timeout),
            (io::ErrorKind::TimedOut, true, BackendErrorKind::Timeout),
            (
                io::ErrorKind::ConnectionRefused,
                true,
                BackendErrorKind::Unreachable,
            ),
            (io::ErrorKind::Other, true, BackendErrorKind::Unreachable),
            (
                io::ErrorKind::UnexpectedEof,
                false,
                BackendErrorKind::Unreachable,
            ),
            (
                io::ErrorKind::ConnectionReset,
                false,
                BackendErrorKind::Unreachable,
            ),
            (io::ErrorKind::Other, false, BackendErrorKind::Other),
        ];
        for (io_kind, connecting, want) in cases {
            assert_eq!(classify(&err(io_kind), connecting).0, want, "{io_kind:?}");
        }
        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "no"));
        assert_eq!(classify(&auth, true).0, BackendErrorKind::Auth);
        let parse = redis::RedisError::from((redis::ErrorKind::Parse, "bad"));
        assert_eq!(classify(&parse, false).0, BackendErrorKind::Protocol);
    }

    #[test]
    fn scrub_removes_secrets_and_token() {
        let secrets = vec!["s3cret".to_owned()];
        let out = scrub("AUTH s3cret failed for tok-123", &secrets, Some(b"tok-123"));
        assert_eq!(out, "AUTH *** failed for <token>");
        let long = "x".repeat(1000);
        assert!(scrub(&long, &[], None).len() <= MAX_MESSAGE_LEN + 3);
    }

    #[test]
    fn info_parsing() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let (run_id, uptime) = parse_info(text);
        assert_eq!(run_id.as_deref(), Some("abc123"));
        assert_eq!(uptime, Some(Duration::from_secs(42)));
        assert_eq!(parse_info(""), (None, None));
    }

    #[test]
    fn keys_are_escaped_and_truncated_in_messages() {
        assert_eq!(show_key(b"a\xffb"), "\"a\\xffb\"");
        assert!(show_key(&[b'k'; 100]).ends_with("(100 bytes)"));
    }

    #[test]
    fn backend_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<RedisBackend>();
    }
}
