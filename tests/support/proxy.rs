//! A TCP proxy for fault injection: pass-through, added delay, blackhole.
//!
//! Listens on a free loopback port and forwards each accepted connection to
//! a target port on 127.0.0.1. The mode can be switched at any time and
//! applies to data read after the switch:
//!
//! * [`Mode::Pass`]: forwards both ways.
//! * [`Mode::Delay`]: sleeps that long before forwarding each chunk read
//!   from the client (replies are not delayed).
//! * [`Mode::Blackhole`]: keeps accepting and reading, but forwards nothing
//!   in either direction (the bytes are dropped): clients see a server that
//!   never answers.
//!
//! [`Proxy::retarget`] sends *new* connections to another port (connections
//! already open keep their server); [`Proxy::drop_connections`] closes every
//! open connection (clients see them reset, like after a server restart).
//!
//! At most [`MAX_CONNECTIONS`] connections at once (two threads each, plus
//! the accept thread); more are closed at once. Everything stops, and every
//! thread is joined, on drop.
#![allow(dead_code, unreachable_pub)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// What the proxy does with the data it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Sleep this long before forwarding each chunk from the client.
    Delay(Duration),
    /// Read and drop everything; never answer.
    Blackhole,
}

#[derive(Debug)]
struct Shared {
    mode: Mutex<Mode>,
    target_port: AtomicU16,
    /// Bumped by `drop_connections`: pumps of older generations stop.
    generation: AtomicUsize,
    stop: AtomicBool,
    active: AtomicUsize,
    accepted: AtomicUsize,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A running proxy; stops on drop.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("proxy addr").port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            target_port: AtomicU16::new(target_port),
            generation: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            workers: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("proxy-{port}-accept"))
                .spawn(move || accept_loop(&listener, &shared))
                .expect("spawn proxy thread")
        };
        Self {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where new connections go.
    pub fn target_port(&self) -> u16 {
        self.shared.target_port.load(Ordering::Relaxed)
    }

    /// Sends connections accepted from now on to `127.0.0.1:port`; open
    /// connections keep their server.
    pub fn retarget(&self, port: u16) {
        self.shared.target_port.store(port, Ordering::Relaxed);
    }

    /// Closes every open connection (within one poll interval).
    pub fn drop_connections(&self) {
        self.shared.generation.fetch_add(1, Ordering::Relaxed);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    pub fn pass(&self) {
        self.set_mode(Mode::Pass);
    }

    pub fn delay(&self, per_chunk: Duration) {
        self.set_mode(Mode::Delay(per_chunk));
    }

    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Connections accepted so far (including refused extra ones).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections being served now.
    pub fn active(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let workers = std::mem::take(&mut *self.shared.workers.lock().unwrap());
        for worker in workers {
            let _ = worker.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if shared.active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    drop(client);
                    continue;
                }
                serve(client, shared.target_port.load(Ordering::Relaxed), shared);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn serve(client: TcpStream, target_port: u16, shared: &Arc<Shared>) {
    let Ok(upstream) = TcpStream::connect_timeout(
        &([127, 0, 0, 1], target_port).into(),
        Duration::from_secs(1),
    ) else {
        return; // target down: the client sees the connection closed
    };
    let _ = client.set_nonblocking(false);
    for s in [&client, &upstream] {
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_nodelay(true);
    }
    let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    shared.active.fetch_add(1, Ordering::Relaxed);
    let done = Arc::new(AtomicUsize::new(0));
    let generation = shared.generation.load(Ordering::Relaxed);
    let mut workers = shared.workers.lock().unwrap();
    // Forget finished workers so the list stays bounded.
    workers.retain(|w| !w.is_finished());
    for (from, to, upstream_dir) in [(client, upstream, true), (upstream2, client2, false)] {
        let shared = Arc::clone(shared);
        let done = Arc::clone(&done);
        let spawned = std::thread::Builder::new()
            .name("proxy-pipe".to_owned())
            .spawn(move || {
                pump(from, to, upstream_dir, generation, &shared);
                if done.fetch_add(1, Ordering::Relaxed) == 1 {
                    shared.active.fetch_sub(1, Ordering::Relaxed);
                }
            });
        if let Ok(handle) = spawned {
            workers.push(handle);
        }
    }
}

/// Copies `from` to `to` per the mode until either side closes or the
/// proxy stops; then closes both.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    to_server: bool,
    generation: usize,
    shared: &Shared,
) {
    let mut buf = [0u8; 16 * 1024];
    while !shared.stopped() && shared.generation.load(Ordering::Relaxed) == generation {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        match shared.mode() {
            Mode::Blackhole => continue,
            Mode::Delay(d) if to_server && !sleep_unless_stopped(d, shared) => break,
            _ => {}
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Sleeps `d` in slices; false when the proxy stopped meanwhile.
fn sleep_unless_stopped(d: Duration, shared: &Shared) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if shared.stopped() {
            return false;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(POLL));
    }
}
