//! The distributed part, on one machine: several processes contend for one
//! lock over three real Redis servers, and one server is killed midway.
//! Each process adds to a counter in a file, read-modify-write with a pause
//! in the middle, under the lock: the final count is exact only because no
//! two processes ever held the lock at once, even while a server died.
//!
//! The example starts the servers itself (it needs `redis-server` on the
//! `PATH`; `scripts/test.sh` installs it) on free ports, and stops them.
//!
//! ```text
//! cargo run --example processes
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use quorum_lock::{LockManager, LockOptions};

const PROCESSES: usize = 4;
const ADDS: u64 = 20;
/// Set in the children: the node URLs and the counter file.
const CHILD: &str = "QUORUM_LOCK_DEMO_CHILD";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match env::var(CHILD) {
        Ok(spec) => child(&spec),
        Err(_) => parent(),
    }
}

/// One contending process: `ADDS` times, lock, read, pause, write, release.
fn child(spec: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (urls, file) = spec.split_once('|').ok_or("bad child spec")?;
    let locks = LockManager::builder()
        .redis_nodes(urls.split(','))?
        .ttl(Duration::from_secs(2))
        // The servers were started a moment ago and are never restarted
        // here: quarantine would only make the demo wait (docs/safety.md).
        .restart_quarantine(false)
        .build()?;
    let wait = LockOptions::new().wait(Duration::from_secs(30));
    for _ in 0..ADDS {
        let guard = locks.lock_with("demo:counter", &wait)?;
        let n: u64 = fs::read_to_string(file)?.trim().parse()?;
        thread::sleep(Duration::from_millis(5)); // a lost update, were the lock not exclusive
        guard.check()?; // still ours before the write
        // Replaced whole (write, then rename), so the parent, which
        // watches the count without the lock, never reads half a file.
        let next = format!("{file}.{}", std::process::id());
        fs::write(&next, (n + 1).to_string())?;
        fs::rename(&next, file)?;
        guard.release()?;
    }
    Ok(())
}

/// A server of our own, stopped on drop.
struct Server {
    process: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn start_server(dir: &Path) -> Result<Server, Box<dyn std::error::Error>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let process = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server (is it on the PATH?): {e}"))?;
    let server = Server { process, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("redis-server on port {port} did not start").into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

fn parent() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = env::temp_dir().join(format!("quorum-lock-demo-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let counter = dir.join("counter");
    fs::write(&counter, "0")?;
    let mut servers: Vec<Option<Server>> = Vec::new();
    for _ in 0..3 {
        servers.push(Some(start_server(&dir)?));
    }
    let urls: Vec<String> = servers
        .iter()
        .flatten()
        .map(|s| format!("redis://127.0.0.1:{}", s.port))
        .collect();
    println!("3 redis-servers: {}", urls.join(", "));
    let spec = format!("{}|{}", urls.join(","), counter.display());
    let me = env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(Command::new(&me).env(CHILD, &spec).spawn()?);
    }
    println!("{PROCESSES} processes each add {ADDS} under the lock");
    // Midway, one server of three dies: the other two are a quorum.
    let count = || -> u64 {
        fs::read_to_string(&counter)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count() < ADDS && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    servers[0] = None;
    println!("server {} killed; the lock goes on with 2 of 3", urls[0]);
    let mut failed = 0;
    for mut child in children {
        if !child.wait()?.success() {
            failed += 1;
        }
    }
    let total = count();
    drop(servers);
    let _ = fs::remove_dir_all(&dir);
    println!("counter: {total} (expected {})", PROCESSES as u64 * ADDS);
    if failed > 0 || total != PROCESSES as u64 * ADDS {
        return Err(format!("{failed} processes failed; counter {total}").into());
    }
    println!("ok: no update lost, across processes and a server's death");
    Ok(())
}
