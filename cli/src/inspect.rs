//! Asking one Redis node directly, for `status`, `doctor` and `break`: a
//! connection bounded by the node timeout, and messages that never show a
//! password.

use std::time::{Duration, Instant};

use quorum_lock::backend::{self, Backend, Holding, ServerInfo};
use quorum_lock::{RedisBackend, RedisClusterBackend, RedisSentinelBackend};
use redis::{Connection, FromRedisValue, IntoConnectionInfo};

/// A sorted set's members and their scores, lowest score first.
pub(crate) type Members = Vec<(Vec<u8>, f64)>;

/// One configured node: a server, a whole cluster (`redis+cluster://`),
/// or a Sentinel-managed master set (`redis+sentinel://`: its direct
/// connections go to the master the sentinels name when it is opened).
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
    /// A Sentinel node's master (`host:port`), as a majority of its
    /// sentinels named it when the node was opened.
    pub(crate) master: Option<String>,
    secret: Option<String>,
    timeout: Duration,
    backend: Box<dyn Backend>,
}

impl Node {
    /// The node at `url`; a malformed URL is an error (without its
    /// password), and so is a Sentinel node whose sentinels name no master
    /// now ([`Unopened::NoMaster`]).
    pub(crate) fn open(url: &str, timeout: Duration) -> Result<Self, Unopened> {
        let cluster = ["redis+cluster://", "rediss+cluster://"]
            .iter()
            .any(|scheme| url.starts_with(scheme));
        let sentinel = ["redis+sentinel://", "rediss+sentinel://"]
            .iter()
            .any(|scheme| url.starts_with(scheme));
        let mut master = None;
        let (direct, backend): (String, Box<dyn Backend>) = if cluster {
            let node = RedisClusterBackend::open(url, timeout).map_err(Unopened::malformed)?;
            (url.replacen("+cluster", "", 1), Box::new(node))
        } else if sentinel {
            let node = RedisSentinelBackend::open(url, timeout).map_err(Unopened::malformed)?;
            let (host, port) = node.master_address().map_err(|e| {
                Unopened::NoMaster(NoMaster {
                    name: node.url_redacted().to_owned(),
                    why: e.to_string(),
                })
            })?;
            let direct = master_url(url, &host, port);
            master = Some(if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            });
            (direct, Box::new(node))
        } else {
            let node = RedisBackend::open(url, timeout).map_err(Unopened::malformed)?;
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
            master,
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
        .map_err(|e| e.to_string())
    }

    /// The ACL user the URL names, if it names one (otherwise the
    /// server's `default` user).
    pub(crate) fn user(&self) -> Option<String> {
        let info = self.direct.as_str().into_connection_info().ok()?;
        info.redis_settings()
            .username()
            .map(str::to_owned)
            .filter(|user| !user.is_empty())
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

    /// The `last` members of the sorted set `key` with the highest scores,
    /// and their scores (`ZRANGE key -last -1 WITHSCORES`: bounded, however
    /// large a foreign value there is), and the server's clock in ms
    /// (`TIME`, asked right after on the same connection, so never before
    /// the members were read). On a cluster, asked of the shard that
    /// serves `key`.
    pub(crate) fn sorted_set(&self, key: &[u8], last: u32) -> Result<(Members, i64), String> {
        self.on_key(|conn| {
            let members: Members = redis::cmd("ZRANGE")
                .arg(key)
                .arg(-i64::from(last.max(1)))
                .arg(-1)
                .arg("WITHSCORES")
                .query(conn)?;
            let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(conn)?;
            Ok((members, seconds * 1000 + micros / 1000))
        })
    }

    /// Removes exactly `members` from the sorted set `key` (`ZREM`): how
    /// many were there. On a cluster, on the shard that serves `key`.
    pub(crate) fn remove_members(&self, key: &[u8], members: &[Vec<u8>]) -> Result<usize, String> {
        if members.is_empty() {
            return Ok(0);
        }
        self.on_key(|conn| redis::cmd("ZREM").arg(key).arg(members).query(conn))
    }

    /// Runs `work` on a connection to the server that serves the key it
    /// uses: this node's server, or for a cluster the shard a `MOVED`
    /// names (followed once: the slot map changes rarely, and a second
    /// one is reported as it came).
    fn on_key<T>(
        &self,
        work: impl Fn(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        let (mut conn, _) = self.connect()?;
        let e = match work(&mut conn) {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        let moved = matches!(
            e.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
        );
        let Some((address, _slot)) = e.redirect_node().filter(|_| self.cluster && moved) else {
            return Err(self.scrub(&e));
        };
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| self.scrub(&e))?;
        // An empty host is the one that was asked.
        let host = if host.is_empty() {
            self.seed_host()
        } else {
            host.to_owned()
        };
        let shard = self.shard(&host, port)?;
        let (mut conn, _) = shard.connect()?;
        work(&mut conn).map_err(|e| shard.scrub(&e))
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

/// The URL of the master at `host:port` with the data nodes' settings of
/// the Sentinel URL `url` (`redis+sentinel://[userinfo@]hosts/NAME[/db]
/// [?query][#fragment]`): its user-info, database, query (without the
/// sentinels' `sentinel_` settings) and fragment.
fn master_url(url: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("+sentinel://").unwrap_or(("redis", url));
    let (rest, fragment) = rest
        .split_once('#')
        .map_or((rest, String::new()), |(rest, f)| (rest, format!("#{f}")));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let userinfo = authority
        .rsplit_once('@')
        .map_or_else(String::new, |(userinfo, _)| format!("{userinfo}@"));
    let db = match path.split_once('/') {
        Some((_, db)) if !db.is_empty() => db,
        _ => "0",
    };
    let query: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("sentinel_"))
        .collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{userinfo}{host}:{port}/{db}{query}{fragment}")
}

/// Why a node could not be opened.
pub(crate) enum Unopened {
    /// A malformed URL: the message, without the password.
    Malformed(String),
    NoMaster(NoMaster),
}

/// A Sentinel node whose sentinels name no master by a majority now (too
/// many of them out of reach, or they disagree).
pub(crate) struct NoMaster {
    /// The node's URL without its passwords.
    pub(crate) name: String,
    /// Why, as `run` words it (naming the node, without passwords).
    pub(crate) why: String,
}

impl Unopened {
    fn malformed(e: impl std::fmt::Display) -> Self {
        Self::Malformed(e.to_string())
    }
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(message) => f.write_str(message),
            Self::NoMaster(no_master) => f.write_str(&no_master.why),
        }
    }
}

/// Every configured node, or the first error (a malformed URL, a
/// Sentinel node without a master).
pub(crate) fn nodes(urls: &[String], timeout: Duration) -> Result<Vec<Node>, String> {
    urls.iter()
        .map(|url| Node::open(url, timeout).map_err(|e| e.to_string()))
        .collect()
}

/// Every configured node, opened or why not, for checks that go on past
/// a node they cannot reach: only a malformed URL is an error (the
/// first one's).
pub(crate) fn each_node(
    urls: &[String],
    timeout: Duration,
) -> Result<Vec<Result<Node, NoMaster>>, String> {
    urls.iter()
        .map(|url| match Node::open(url, timeout) {
            Ok(node) => Ok(Ok(node)),
            Err(Unopened::NoMaster(no_master)) => Ok(Err(no_master)),
            Err(Unopened::Malformed(message)) => Err(message),
        })
        .collect()
}

/// `field:value` lines of an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_urls_master_has_the_data_nodes_settings() {
        let url = "redis+sentinel://u:pw@h1:26379,h2/main/3?sentinel_password=s&x=1#insecure";
        assert_eq!(
            master_url(url, "10.0.0.9", 6380),
            "redis://u:pw@10.0.0.9:6380/3?x=1#insecure"
        );
        assert_eq!(
            master_url("rediss+sentinel://h/main", "::1", 7),
            "rediss://[::1]:7/0"
        );
    }
}
