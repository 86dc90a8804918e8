//! The round-trip floor: what a lock + release cannot beat. One thread,
//! one plain `redis::Connection` per node; the acquire (`SET key token NX
//! PX ttl`) is written to every node and then every reply is read (one
//! parallel round trip), and the same for the release (compare-and-delete
//! by `EVALSHA`, the script loaded beforehand). No quorum logic, no
//! timeouts beyond the socket's, no threads.

use std::time::Duration;

use redis::{Client, Connection, Value};

use crate::clients::{Locker, Service, Settings, Tokens};

/// Compare-and-delete, as every Redlock client sends it.
pub const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// A connection to `url` (2 s timeouts) with [`RELEASE_SCRIPT`] loaded,
/// and the script's digest; `who` names the client in errors.
pub fn connect_loaded(url: &str, who: &str) -> Result<(Connection, String), String> {
    let mut conn = Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .map_err(|e| format!("{who}: cannot connect to {url}: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))
        .and_then(|()| conn.set_write_timeout(Some(Duration::from_secs(2))))
        .map_err(|e| format!("{who}: {url}: {e}"))?;
    let sha = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE_SCRIPT)
        .query(&mut conn)
        .map_err(|e| format!("{who}: SCRIPT LOAD on {url}: {e}"))?;
    Ok((conn, sha))
}

/// One thread's connections to every node.
pub struct Floor {
    conns: Vec<Connection>,
    release_sha: String,
    ttl_ms: u64,
    tokens: Tokens,
}

impl Floor {
    /// Connects to every node and loads the release script.
    pub fn connect(urls: &[String], settings: &Settings) -> Result<Self, String> {
        let mut conns = Vec::with_capacity(urls.len());
        let mut release_sha = String::new();
        for url in urls {
            let (conn, sha) = connect_loaded(url, "floor")?;
            release_sha = sha;
            conns.push(conn);
        }
        Ok(Self {
            conns,
            release_sha,
            ttl_ms: u64::try_from(settings.ttl.as_millis()).unwrap_or(u64::MAX),
            tokens: Tokens::new(),
        })
    }

    /// Writes `packed` to every node, then reads every reply; `Ok` when
    /// every reply is the expected one.
    fn round_trip(&mut self, packed: &[u8], expect: &Value) -> Result<(), String> {
        for conn in &mut self.conns {
            conn.send_packed_command(packed)
                .map_err(|e| format!("floor: send: {e}"))?;
        }
        let mut unexpected = None;
        for conn in &mut self.conns {
            let reply = conn
                .recv_response()
                .map_err(|e| format!("floor: receive: {e}"))?;
            if &reply != expect {
                unexpected.get_or_insert(reply);
            }
        }
        match unexpected {
            None => Ok(()),
            Some(reply) => Err(format!("floor: unexpected reply {reply:?}")),
        }
    }
}

impl Locker for Floor {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let token = self.tokens.next();
        let set = redis::cmd("SET")
            .arg(key)
            .arg(&token[..])
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .get_packed_command();
        self.round_trip(&set, &Value::Okay)?;
        let release = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(1)
            .arg(key)
            .arg(&token[..])
            .get_packed_command();
        self.round_trip(&release, &Value::Int(1))
    }
}

/// Each thread connects on its own.
pub struct FloorService<'a> {
    pub urls: &'a [String],
    pub settings: &'a Settings,
}

impl Service for FloorService<'_> {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(Floor::connect(self.urls, self.settings)?))
    }
}
