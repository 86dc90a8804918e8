//! Asking one Redis node directly, for `status` and `doctor`: a connection
//! bounded by the node timeout, and messages that never show a password.

use std::time::{Duration, Instant};

use quorum_lock::backend::{self, Backend, Holding, ServerInfo};
use quorum_lock::{RedisBackend, RedisClusterBackend};
use redis::{Connection, FromRedisValue, IntoConnectionInfo};

/// One configured node: a server, or a whole cluster
/// (`redis+cluster://`).
pub(crate) struct Node {
    /// The URL without its password.
    pub(crate) name: String,
    /// The URL as given (with its password: never printed).
    pub(crate) url: String,
    /// The URL of the one server a direct connection reaches (for a
    /// cluster, its seed), with its password.
    direct: String,
    /// Whether the node is a whole cluster.
    pub(crate) cluster: bool,
    secret: Option<String>,
    timeout: Duration,
    backend: Box<dyn Backend>,
}

impl Node {
    /// The node at `url`; a malformed URL is an error (without its password).
    pub(crate) fn open(url: &str, timeout: Duration) -> Result<Self, String> {
        let cluster = ["redis+cluster://", "rediss+cluster://"]
            .iter()
            .any(|scheme| url.starts_with(scheme));
        let (direct, backend): (String, Box<dyn Backend>) = if cluster {
            let node = RedisClusterBackend::open(url, timeout).map_err(|e| e.to_string())?;
            (url.replacen("+cluster", "", 1), Box::new(node))
        } else {
            let node = RedisBackend::open(url, timeout).map_err(|e| e.to_string())?;
            (url.to_owned(), Box::new(node))
        };
        let secret = direct
            .as_str()
            .into_connection_info()
            .ok()
            .and_then(|info| info.redis_settings().password().map(str::to_owned))
            .filter(|p| !p.is_empty());
        Ok(Self {
            name: backend.describe(),
            url: url.to_owned(),
            direct,
            cluster,
            secret,
            timeout,
            backend,
        })
    }

    /// The server at `host:port` with this node's credentials and TLS (a
    /// cluster's shard).
    pub(crate) fn shard(&self, host: &str, port: u16) -> Result<Self, String> {
        let (scheme, rest) = self.direct.split_once("://").unwrap_or(("redis", ""));
        let (userinfo, address) = match rest.rsplit_once('@') {
            Some((userinfo, address)) => (format!("{userinfo}@"), address),
            None => (String::new(), rest),
        };
        let tail = address
            .find(['/', '?', '#'])
            .map_or("", |at| &address[at..]);
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        Self::open(
            &format!("{scheme}://{userinfo}{host}:{port}{tail}"),
            self.timeout,
        )
    }

    /// The host of the server a direct connection reaches.
    pub(crate) fn seed_host(&self) -> String {
        let rest = self.direct.split_once("://").map_or("", |(_, rest)| rest);
        let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
        let address = &address[..address.find(['/', '?', '#']).unwrap_or(address.len())];
        match address.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default().to_owned(),
            None => address.split(':').next().unwrap_or_default().to_owned(),
        }
    }

    /// The server's identity, asked through the library: a failure is
    /// worded as in `run`'s reports (`authentication failed: WRONGPASS
    /// ...`, `unreachable: ...`), without the node's name.
    pub(crate) fn probe(&self) -> Result<ServerInfo, String> {
        let probe = self.backend.probe().ok_or("no identity")?;
        probe.server_info().map_err(|e| e.reason(&self.name))
    }

    /// What `key` holds (value and time left, one atomic read), through
    /// the library; a failure worded as [`probe`](Self::probe)'s.
    pub(crate) fn read(&self, key: &[u8]) -> Result<Option<Holding>, String> {
        let inspector = self.backend.inspector().ok_or("no inspection")?;
        inspector
            .inspect(key)
            .map_err(|e| crate::wording::flags(&e.reason(&self.name)))
    }

    /// Deletes `key` only while it holds exactly `value` (the library's
    /// release: compare-and-delete, which also wakes the waiters). Whether
    /// it was deleted (`false`: it held something else by then, or
    /// nothing).
    pub(crate) fn delete_if_holds(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        backend::release(&*self.backend, key, value)
            .map_err(|e| crate::wording::flags(&e.reason(&self.name)))
    }

    /// A connection to the server (a cluster's seed), and how long
    /// connecting took.
    pub(crate) fn connect(&self) -> Result<(Connection, Duration), String> {
        let started = Instant::now();
        let client = redis::Client::open(self.direct.as_str()).map_err(|e| self.scrub(&e))?;
        let conn = client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| self.scrub(&e))?;
        conn.set_read_timeout(Some(self.timeout))
            .map_err(|e| self.scrub(&e))?;
        conn.set_write_timeout(Some(self.timeout))
            .map_err(|e| self.scrub(&e))?;
        Ok((conn, started.elapsed()))
    }

    /// Runs `cmd` on `conn`.
    pub(crate) fn query<T: FromRedisValue>(
        &self,
        conn: &mut Connection,
        cmd: &redis::Cmd,
    ) -> Result<T, String> {
        cmd.query(conn).map_err(|e| self.scrub(&e))
    }

    /// One line, without the password.
    fn scrub(&self, e: &dyn std::fmt::Display) -> String {
        let text = e.to_string().replace(['\r', '\n'], " ");
        match &self.secret {
            Some(secret) => text.replace(secret.as_str(), "***"),
            None => text,
        }
    }
}

/// Every configured node, or the first malformed URL's error.
pub(crate) fn nodes(urls: &[String], timeout: Duration) -> Result<Vec<Node>, String> {
    urls.iter().map(|url| Node::open(url, timeout)).collect()
}

/// `field:value` lines of an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value)
}
