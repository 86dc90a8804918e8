//! The lock servers of a benchmark run, all on loopback: `redis-server`
//! processes on free ports, a dead port (nothing listens: connection
//! refused) and a blackhole (a listener that accepts and never answers).
//!
//! Everything started here is stopped by its `Drop`, which also runs while
//! a panic unwinds. A Ctrl-C reaches the redis-servers too: they share the
//! benchmark's process group and shut down on SIGINT themselves.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a fresh redis-server may take to answer `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Ports tried before giving up (another process may grab a free port
/// between our probe and the server's bind).
const START_ATTEMPTS: usize = 5;
/// Connections a blackhole keeps open at most (the oldest are closed).
const BLACKHOLE_MAX_HELD: usize = 4096;

/// One `redis-server` on `127.0.0.1`, without persistence. Killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers.
    pub fn start() -> Result<Self, String> {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            match Self::start_on(port) {
                Ok(server) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(format!(
            "could not start redis-server after {START_ATTEMPTS} attempts: {last_error}"
        ))
    }

    fn start_on(port: u16) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("quorum-bench-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .args(["--daemonize", "no"])
            .args(["--loglevel", "warning"])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server (is it installed and on PATH?): {e}"))?;
        // From here on, Drop stops the process whatever happens.
        let mut server = Self { child, port, dir };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server on port {} exited at start ({status})",
                    self.port
                ));
            }
            if ping(self.port) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "redis-server on port {} did not answer PING within {READY_WITHIN:?}",
            self.port
        ))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Our own child, by its pid: SIGKILL, then reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `PING` and expects `+PONG`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// A loopback port that nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot bind a loopback port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("cannot read the bound port: {e}"))
}

/// A URL whose port refuses connections (nothing listens there).
pub fn dead_url() -> Result<String, String> {
    Ok(format!("redis://127.0.0.1:{}", free_port()?))
}

/// A listener that accepts connections, never reads and never answers:
/// requests sent to it time out. Stopped (and its connections closed) on
/// drop.
#[derive(Debug)]
pub struct Blackhole {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Blackhole {
    /// Starts the listener on a free loopback port.
    pub fn start() -> Result<Self, String> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| format!("cannot bind the blackhole: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the blackhole's port: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("blackhole".into())
            .spawn(move || {
                let mut held: Vec<TcpStream> = Vec::new();
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = conn {
                        if held.len() >= BLACKHOLE_MAX_HELD {
                            held.remove(0);
                        }
                        held.push(stream);
                    }
                }
            })
            .map_err(|e| format!("cannot start the blackhole thread: {e}"))?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// `redis://127.0.0.1:PORT` of the blackhole.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
