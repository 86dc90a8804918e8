//! [`RedisBackend`]: one Redis master (or any server speaking the Redis
//! protocol, such as Valkey) as a lock server.
//!
//! * acquire: `SET key token NX PX ttl_ms`; when refused, `GET key` tells a
//!   key that already holds our token (granted), another holder (refused)
//!   and a key of another type (`WRONGTYPE`)
//! * release: compare-and-delete, one Lua script, which also announces the
//!   release on the channel `quorum-lock:released:<key>` (for waiters in
//!   other processes: see [`ReleaseListener`]); on Valkey 9.0+ and Redis
//!   8.4+, the server's own `DELIFEQ` / `DELEX .. IFEQ`, announced in a
//!   second round trip only when it deleted and someone listens
//! * extend: compare-and-pexpire, one Lua script (never creates a key); on
//!   Valkey 8.1+ and Redis 8.4+, `SET key token IFEQ token PX ttl`
//!
//! Which form each op takes is chosen per server, from the version its
//! `INFO` gives when a connection opens, and by the [`Scripts`] setting
//! (`forms.rs`).
//!
//! Scripts run by `EVALSHA` with the digests the server gave for them
//! (`SCRIPT LOAD`, sent with the first batch that needs a script; no SHA-1
//! is computed in the client). A batch ([`send`](Backend::send)) is written as
//! one pipeline: one round trip for any number of ops, with a second one
//! only for ops that need a follow-up: a `GET` after a refused acquire, or,
//! after a `NOSCRIPT` (a restart, a `SCRIPT FLUSH`, a failover), the re-run
//! of that op and of every op after it, in order and by `EVAL`, so that a
//! node applies a batch in its order whatever its script cache holds.
//!
//! # Connections
//!
//! The backend owns its sockets (TCP, Unix, or TLS through rustls) and
//! speaks RESP2 itself, with the `redis` crate packing commands and parsing
//! replies. One deadline bounds each call: connecting, the TLS handshake,
//! `AUTH`/`SELECT`, writing, and every read, whatever the peer sends. A
//! reply is parsed only when all of it has arrived, and one larger than
//! 64 KiB (or announcing a larger string or a long array) is a
//! [`Protocol`](BackendErrorKind::Protocol) error, not an allocation.
//!
//! Connections are made lazily, in the calling thread; up to four idle ones
//! are kept for reuse. A connection that saw anything but a complete set of
//! replies (a timeout, an I/O error, a reply that did not parse) is dropped
//! at once and never reused, so a late reply can never be read as the
//! answer to a later command.
//!
//! # Identity
//!
//! Each pooled connection reads `INFO` (its default sections) when it
//! opens, in a round trip of its own before its first batch (the batch's
//! ops then go in the forms its server has), and keeps the server's `run_id` and uptime for its whole life
//! (a restarted server closes its connections); the settings that can
//! change at run time (`maxmemory`, `maxmemory_policy`, the role and
//! replication history, `evicted_keys`) are read again (`INFO memory`,
//! `replication`, `stats`) in the pipeline of the first batch once they
//! are `SETTINGS_MAX_AGE` (500 ms) old, and at every look of the engine
//! ([`Probe::server_info`](crate::backend::Probe::server_info)). The
//! [`Answers`](crate::backend::Answers) of a batch report the identity of
//! the connection that carried it. When that `INFO` is refused (an
//! ACL user without `+info` gets `NOPERM`) or its reply is unreadable, the
//! connection's identity is unknown (`None`) and `INFO` is not asked again
//! on it: with restart quarantine on, such a node's grants do not count.

mod asking;
mod batch;
mod bounded;
pub(crate) mod confirm;
mod conn;
mod decode;
mod encode;
mod errors;
mod fault;
mod flight;
mod forms;
pub(crate) mod frame;
mod info;
mod inspect;
mod notices;
mod pool;
mod redact;
pub(crate) mod redirect;
mod scripts;
mod scripts_election;
mod scripts_rw;
mod shard;
#[cfg(feature = "tls")]
mod tls;
mod transport;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use crate::backend::{
    Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, Op, Probe,
    ReleaseListener, ServerInfo,
};

use self::conn::Setup;
use self::frame::value_text;
use self::info::{Ask, parse_info};
use self::pool::{Failure, IdleConn};
use self::redact::{describe_info, redact_raw_url, scrub, url_secrets};
use self::scripts::Digests;

pub use self::forms::Scripts;
use self::transport::Target;

/// One Redis server, used as a lock node.
///
/// Cheap to clone: clones share the connection pool. All methods block for
/// at most about the per-node timeout given to [`open`](Self::open) (plus
/// DNS resolution, which the standard library cannot bound).
///
/// Its [`Debug`] output and every error it returns name the server by
/// [`url_redacted`](Self::url_redacted): the password never appears.
///
/// It has every capability of a [`Backend`]: a bound on each call (the
/// timeout), the server's identity ([`Probe`], reported with every batch
/// too), inspection ([`Inspect`]) and release notices
/// ([`ReleaseListener`], by pub/sub).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    setup: Setup,
    redacted: String,
    /// Strings scrubbed from every message (the password, as written in the
    /// URL and decoded).
    secrets: Vec<String>,
    timeout: Duration,
    idle: Mutex<Vec<IdleConn>>,
    /// The scripts' digests for `EVALSHA`, once a server has given them
    /// (shared: every batch takes them, and nine strings cloned per
    /// batch were a fifth of a lock's allocations).
    digests: Mutex<Option<Arc<Digests>>>,
    /// Whether ops may run as Lua scripts ([`RedisBackend::with_scripts`]).
    scripts: Scripts,
    /// Under [`Scripts::Auto`], whether the server refused one of its own
    /// commands (`NOPERM`, or unknown): scripts only, from then on.
    commands_refused: AtomicBool,
    /// How many replicas must acknowledge a batch's holds (`WAIT`) for
    /// them to count: a cluster shard's replicas (`shard.rs`); 0 for a
    /// server of its own.
    replicas: usize,
    /// A cluster's shard: its `PUBLISH` reaches the subscribers of every
    /// node, which its `PUBSUB NUMSUB` does not count (`forms/wire.rs`); its
    /// holds count only once every replica of the master has them
    /// (`confirm.rs`).
    cluster_shard: bool,
    /// The master counted another number of replicas than `replicas`
    /// (`confirm.rs`): the slot map that said it is out of date.
    replicas_differ: AtomicBool,
}

impl Inner {
    /// A new backend's state with this one's settings: its own pool,
    /// digests and fallback.
    fn derived(&self) -> Self {
        Self {
            target: self.target.clone(),
            setup: self.setup.clone(),
            redacted: self.redacted.clone(),
            secrets: self.secrets.clone(),
            timeout: self.timeout,
            idle: Mutex::new(Vec::new()),
            digests: Mutex::new(None),
            scripts: self.scripts,
            commands_refused: AtomicBool::new(false),
            replicas: self.replicas,
            cluster_shard: self.cluster_shard,
            replicas_differ: AtomicBool::new(false),
        }
    }
}

impl RedisBackend {
    /// Prepares a backend for the server at `url`, without connecting.
    ///
    /// `url` is `redis://[user[:password]@]host[:port][/db]`,
    /// `rediss://...` for TLS (needs the `tls` feature; the server
    /// certificate is checked against the system's root certificates, or not
    /// at all with a `#insecure` fragment), or
    /// `unix:///path/to/socket[?db=N][&user=U][&pass=P]`. The backend always
    /// speaks RESP2 (a `protocol=` query parameter is ignored).
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
    /// message names the URL with every password replaced by `***`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorum_lock::RedisBackend;
    /// use quorum_lock::backend::{self, Backend};
    ///
    /// let node = RedisBackend::open("redis://:secret@127.0.0.1:6379/0", Duration::from_millis(50))?;
    /// assert_eq!(node.describe(), "redis://:***@127.0.0.1:6379/0");
    /// let token = b"0123456789abcdefghij";
    /// if backend::acquire(&node, b"orders:42", token, Duration::from_secs(10))? {
    ///     // ... critical section ...
    ///     backend::release(&node, b"orders:42", token)?;
    /// }
    /// # Ok::<(), quorum_lock::backend::BackendError>(())
    /// ```
    pub fn open(url: &str, timeout: Duration) -> Result<Self, BackendError> {
        let mut secrets = url_secrets(url);
        let raw_redacted = scrub(&redact_raw_url(url), &secrets, None);
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
        let info: ConnectionInfo = match parsed.into_connection_info() {
            Ok(info) => info,
            Err(e) => {
                let message = scrub(&e.to_string(), &secrets, None);
                return Err(config_error(&message));
            }
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password().filter(|p| !p.is_empty())
            && !secrets.iter().any(|s| s == password)
        {
            secrets.push(password.to_owned());
        }
        if timeout.is_zero() {
            return Err(config_error(
                "the per-node timeout must be larger than zero",
            ));
        }
        let setup = Setup {
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
            asking: false,
        };
        let target = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Target::Tcp {
                host: host.clone(),
                port: *port,
            },
            #[cfg(feature = "tls")]
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => Target::Tls {
                host: host.clone(),
                port: *port,
                config: tls::client_config(*insecure).map_err(|e| config_error(&e))?,
            },
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Target::Unix(path.clone()),
            _ => return Err(config_error("unsupported address")),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                target,
                setup,
                redacted: describe_info(&info),
                secrets,
                timeout,
                idle: Mutex::new(Vec::new()),
                digests: Mutex::new(None),
                scripts: Scripts::Auto,
                commands_refused: AtomicBool::new(false),
                replicas: 0,
                cluster_shard: false,
                replicas_differ: AtomicBool::new(false),
            }),
        })
    }

    /// The same server, with ops run as Lua scripts as `scripts` says
    /// (default [`Scripts::Auto`]: the server's own commands where its
    /// version has them, scripts elsewhere). The backend returned has a
    /// connection pool of its own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorum_lock::{RedisBackend, Scripts};
    ///
    /// // An ACL user denied @scripting, on Valkey 9 or Redis 8.4.
    /// let node = RedisBackend::open("redis://127.0.0.1:6379", Duration::from_millis(50))?
    ///     .with_scripts(Scripts::Never);
    /// assert_eq!(node.scripts(), Scripts::Never);
    /// # Ok::<(), quorum_lock::backend::BackendError>(())
    /// ```
    #[must_use]
    pub fn with_scripts(self, scripts: Scripts) -> Self {
        Self {
            inner: Arc::new(Inner {
                scripts,
                ..self.inner.derived()
            }),
        }
    }

    /// Whether ops may run as Lua scripts: see [`with_scripts`](Self::with_scripts).
    pub fn scripts(&self) -> Scripts {
        self.inner.scripts
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

    /// Asks the server for its `INFO` now, on a connection (an idle
    /// one, or a new one), and returns the answer.
    ///
    /// A new connection reads its own identity first (every pooled
    /// connection does), so this asks the server once more: the answer is
    /// the server's as it is now.
    ///
    /// # Errors
    ///
    /// Any failure to reach the server, or its refusal (e.g. `NOPERM` for an
    /// ACL user without the `INFO` command).
    pub fn fetch_server_info(&self) -> Result<ServerInfo, BackendError> {
        let value = self.command(&redis::cmd("INFO"))?;
        match value_text(&value) {
            Some(text) => Ok(parse_info(&text)),
            None => Err(self.inner.protocol_error("INFO", &value)),
        }
    }
}

/// `url` with every password in it replaced by `***`, whether or not it
/// parses: for the messages of a node made of several servers
/// (`backend/sentinel`).
pub(crate) fn redact_url(url: &str) -> String {
    scrub(&redact_raw_url(url), &url_secrets(url), None)
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
    fn describe(&self) -> String {
        self.inner.redacted.clone()
    }

    /// Writes all ops in one pipeline on a pooled connection and returns;
    /// [`InFlight::finish`] reads the answers, bounded by the same
    /// deadline (one node timeout from now). A second round trip only for
    /// `NOSCRIPT` re-runs and `GET` checks after refused acquires. Each op
    /// gets its own result: one op's server error (e.g. `WRONGTYPE`)
    /// leaves the others alone. A timeout or I/O error fails every op that
    /// has no answer yet, with the same error.
    ///
    /// The answers carry the identity of the connection that carried the
    /// batch: the `INFO` that connection read when it opened (the
    /// uptime advanced by the time since), or `None` when that `INFO` was
    /// refused or unreadable, or no connection answered. See `flight.rs`.
    ///
    /// TTLs are rounded up to whole milliseconds (at least 1 ms), so a key
    /// never expires before the deadline the engine computed. A refused
    /// `SET NX` is followed by `GET key`: our own token means the key is
    /// already ours ([`Reply::AlreadyOurs`](crate::backend::Reply::AlreadyOurs),
    /// e.g. the same server under another name); another value, or none
    /// (expired in between), is a refusal; a key of another type gives
    /// [`BackendErrorKind::WrongType`].
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        let now = Instant::now();
        flight::send(&self.inner, ops, now, self.inner.deadline_from(now))
    }

    /// Every call shares one deadline of the configured timeout (DNS
    /// resolution aside).
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.inner.timeout)
    }

    /// The backend itself: every batch reports the identity its
    /// connection read (or `None` when the server refused `INFO`).
    fn probe(&self) -> Option<&dyn Probe> {
        Some(self)
    }

    fn inspector(&self) -> Option<&dyn Inspect> {
        Some(self)
    }

    /// A subscriber on its own connection (not a pooled one: a connection
    /// in subscribed mode cannot carry lock operations), opened at its
    /// first [`listen`](ReleaseListener::listen). The release script
    /// publishes on `quorum-lock:released:<key>`; the ACL rights needed
    /// are in `docs/operations.md`.
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        Some(Box::new(notices::Subscriber::new(Arc::clone(&self.inner))))
    }
}

impl Probe for RedisBackend {
    /// The identity of a connection, after checking that the server
    /// answers on it: its settings read again (a new connection has read
    /// its identity as it opened), a `PING` on a server that refuses
    /// `INFO`.
    ///
    /// `Ok` with no `run_id` when the server answers but refuses `INFO`
    /// (e.g. `NOPERM`) or its reply was unreadable.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        let inner = &*self.inner;
        let deadline = inner.deadline();
        inner.with_conn(deadline, |c| {
            // The identity on a new connection, the settings on a known
            // one, however fresh: the engine looks (while locks may be
            // held, or at a node it marked down) when it wants them read.
            let ask = c.conn.look();
            let mut buf = Vec::new();
            ask.pack(&mut buf);
            if ask == Ask::Nothing {
                redis::cmd("PING").write_packed_command(&mut buf);
            }
            let replies = c
                .conn
                .exchange(&buf, ask.replies().max(1), deadline)
                .map_err(|(fault, read)| inner.failure(&fault, read))?;
            if let Some(Value::ServerError(e)) =
                replies.iter().find(|r| matches!(r, Value::ServerError(_)))
                && !(ask != Ask::Nothing && e.code() == "NOPERM")
            {
                // NOAUTH and the like: reached, but nothing is allowed.
                return Err(Failure {
                    error: inner.server_error(e, None),
                    stale: false,
                });
            }
            c.conn.learn(ask, &mut replies.into_iter());
            Ok(c.conn.server(Instant::now()).unwrap_or_default())
        })
    }
}

impl Inspect for RedisBackend {
    /// `GET` and `PTTL` in one `EVAL` (the first
    /// [`MAX_INSPECTED_VALUE`](crate::backend::MAX_INSPECTED_VALUE) bytes
    /// of the value only).
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        self.inner.inspect(key)
    }
}

impl Inner {
    fn deadline(&self) -> Instant {
        self.deadline_from(Instant::now())
    }

    /// One timeout after `now`.
    fn deadline_from(&self, now: Instant) -> Instant {
        now.checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(86_400))
    }
}

#[cfg(test)]
mod tests;
