//! Asking one Redis node directly, for `status` and `doctor`: a connection
//! bounded by the node timeout, and messages that never show a password.

use std::time::{Duration, Instant};

use quorum_lock::RedisBackend;
use quorum_lock::backend::{self, Backend, Holding, Inspect, Probe, ServerInfo};
use redis::{Connection, FromRedisValue, IntoConnectionInfo};

/// One configured node.
pub(crate) struct Node {
    /// The URL without its password.
    pub(crate) name: String,
    /// The URL as given (with its password: never printed).
    pub(crate) url: String,
    secret: Option<String>,
    timeout: Duration,
    backend: RedisBackend,
}

impl Node {
    /// The node at `url`; a malformed URL is an error (without its password).
    pub(crate) fn open(url: &str, timeout: Duration) -> Result<Self, String> {
        let backend = RedisBackend::open(url, timeout).map_err(|e| e.to_string())?;
        let secret = url
            .into_connection_info()
            .ok()
            .and_then(|info| info.redis_settings().password().map(str::to_owned))
            .filter(|p| !p.is_empty());
        Ok(Self {
            name: backend.describe(),
            url: url.to_owned(),
            secret,
            timeout,
            backend,
        })
    }

    /// The server's identity, asked through the library: a failure is
    /// worded as in `run`'s reports (`authentication failed: WRONGPASS
    /// ...`, `unreachable: ...`), without the node's name.
    pub(crate) fn probe(&self) -> Result<ServerInfo, String> {
        self.backend.server_info().map_err(|e| e.reason(&self.name))
    }

    /// What `key` holds (value and time left, one atomic read), through
    /// the library; a failure worded as [`probe`](Self::probe)'s.
    pub(crate) fn read(&self, key: &[u8]) -> Result<Option<Holding>, String> {
        self.backend
            .inspect(key)
            .map_err(|e| crate::wording::flags(&e.reason(&self.name)))
    }

    /// Deletes `key` only while it holds exactly `value` (the library's
    /// release: compare-and-delete, which also wakes the waiters). Whether
    /// it was deleted (`false`: it held something else by then, or
    /// nothing).
    pub(crate) fn delete_if_holds(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        backend::release(&self.backend, key, value)
            .map_err(|e| crate::wording::flags(&e.reason(&self.name)))
    }

    /// A connection, and how long connecting took.
    pub(crate) fn connect(&self) -> Result<(Connection, Duration), String> {
        let started = Instant::now();
        let client = redis::Client::open(self.url.as_str()).map_err(|e| self.scrub(&e))?;
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
