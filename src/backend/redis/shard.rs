//! What a cluster node (`backend/cluster`) needs of a `RedisBackend`:
//! one backend per shard master, made from the seed's settings, whose
//! holds count only once the shard's replicas have them; and one plain
//! command (`CLUSTER SLOTS`); each, for a cluster's call bounded as a
//! whole, also ended by a deadline of the caller's.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::transport::Target;
use super::{Inner, RedisBackend, flight};
use crate::backend::{BackendError, BackendErrorKind, InFlight, Op};

impl RedisBackend {
    /// The server at `host:port` with this backend's settings (user,
    /// password, TLS, timeout, scripts) and a pool of its own, whose
    /// acquires, extends and fence raises count only when every replica
    /// of the master acknowledged them: the `replicas` the slot map lists
    /// and as many as the master counts (`INFO replication` and `WAIT`, in
    /// the same pipeline: `confirm.rs`), and whose
    /// releases by `DELIFEQ` / `DELEX` are announced whenever they delete
    /// (the cluster carries a `PUBLISH` to every node's subscribers, which
    /// the shard's `PUBSUB NUMSUB` cannot count).
    ///
    /// # Errors
    ///
    /// [`BackendErrorKind::Config`] for a backend on a Unix socket: a
    /// cluster announces TCP addresses.
    pub(crate) fn shard_at(
        &self,
        host: &str,
        port: u16,
        replicas: usize,
    ) -> Result<Self, BackendError> {
        let seed = &*self.inner;
        let (target, scheme) = match &seed.target {
            Target::Tcp { .. } => (
                Target::Tcp {
                    host: host.to_owned(),
                    port,
                },
                "redis",
            ),
            #[cfg(feature = "tls")]
            Target::Tls { config, .. } => (
                Target::Tls {
                    host: host.to_owned(),
                    port,
                    config: Arc::clone(config),
                },
                "rediss",
            ),
            #[cfg(unix)]
            Target::Unix(_) => {
                return Err(seed.node_error(
                    BackendErrorKind::Config,
                    "a cluster is reached over TCP, not a Unix socket",
                    None,
                ));
            }
        };
        let creds = match (&seed.setup.username, seed.setup.password.is_some()) {
            (Some(user), true) => format!("{user}:***@"),
            (None, true) => ":***@".to_owned(),
            (Some(user), false) => format!("{user}@"),
            (None, false) => String::new(),
        };
        let host_port = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            inner: Arc::new(Inner {
                target,
                redacted: format!("{scheme}://{creds}{host_port}/{}", seed.setup.db),
                replicas,
                cluster_shard: true,
                ..seed.derived()
            }),
        })
    }

    /// [`Backend::send`](crate::backend::Backend::send), every round
    /// trip of the batch ended by `until` when that comes before the
    /// timeout does: for a cluster's call, bounded as a whole.
    pub(crate) fn send_by(&self, ops: &[Op<'_>], until: Instant) -> Box<dyn InFlight> {
        let now = Instant::now();
        flight::send(
            &self.inner,
            ops,
            now,
            self.inner.deadline_from(now).min(until),
        )
    }

    /// The same server, every command sent after `ASKING` (a connection
    /// of its own): for the ops a cluster redirected with `ASK` to this
    /// master, which is importing their slot.
    pub(crate) fn asking(&self) -> Self {
        let mut inner = self.inner.derived();
        inner.setup.asking = true;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// `timeouts` node timeouts from now: the deadline of a call that
    /// takes several round trips (a cluster's, a Sentinel node's).
    pub(crate) fn deadline_in(&self, timeouts: u32) -> Instant {
        let now = Instant::now();
        let span = self.inner.timeout.saturating_mul(timeouts);
        now.checked_add(span)
            .unwrap_or_else(|| now + std::time::Duration::from_secs(86_400))
    }

    /// How many replicas must acknowledge a hold ([`shard_at`](Self::shard_at)).
    pub(crate) fn replicas(&self) -> usize {
        self.inner.replicas
    }

    /// Whether the master, asked with a hold, counted another number of
    /// replicas than [`replicas`](Self::replicas) (the slot map's): the
    /// map is out of date, and is to be read again. Taken: the next call
    /// says `false` until a batch sees it again.
    pub(crate) fn replicas_differ(&self) -> bool {
        self.inner
            .replicas_differ
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// The host and port this backend connects to (`None` for a Unix
    /// socket).
    pub(crate) fn host_port(&self) -> Option<(&str, u16)> {
        match &self.inner.target {
            Target::Tcp { host, port } => Some((host, *port)),
            #[cfg(feature = "tls")]
            Target::Tls { host, port, .. } => Some((host, *port)),
            #[cfg(unix)]
            Target::Unix(_) => None,
        }
    }

    /// Runs one command on a pooled connection, within the timeout, and
    /// returns its reply (an error reply as an error).
    ///
    /// # Errors
    ///
    /// The server out of reach, or its error reply.
    pub(crate) fn command(&self, cmd: &redis::Cmd) -> Result<Value, BackendError> {
        self.command_by(cmd, self.inner.deadline())
    }

    /// [`command`](Self::command), ended by `until` when that comes
    /// before the timeout does.
    ///
    /// # Errors
    ///
    /// The server out of reach (also: `until` passed), or its error reply.
    pub(crate) fn command_by(
        &self,
        cmd: &redis::Cmd,
        until: Instant,
    ) -> Result<Value, BackendError> {
        let inner = &*self.inner;
        let deadline = inner.deadline().min(until);
        let mut buf = Vec::new();
        cmd.write_packed_command(&mut buf);
        let reply = inner.with_conn(deadline, |c| {
            let mut replies = c
                .conn
                .exchange(&buf, 1, deadline)
                .map_err(|(fault, read)| inner.failure(&fault, read))?;
            Ok(replies.pop())
        })?;
        match reply {
            Some(Value::ServerError(e)) => Err(inner.server_error(&e, None)),
            Some(value) => Ok(value),
            None => Err(inner.node_error(BackendErrorKind::Protocol, "no reply", None)),
        }
    }
}
