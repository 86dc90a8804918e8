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

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::acceptor::{Acceptor, Stop};

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
    active: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }
}

/// A running proxy; stops on drop.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    acceptor: Acceptor,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Self {
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            target_port: AtomicU16::new(target_port),
            generation: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            Acceptor::start("proxy", move |client, stop| {
                if shared.active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    return; // dropped: closed at once
                }
                serve(
                    client,
                    shared.target_port.load(Ordering::Relaxed),
                    &shared,
                    stop,
                );
            })
        };
        Self { shared, acceptor }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.acceptor.port()
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

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port())
    }

    /// Switches the mode; applies to data read from now on.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// [`Mode::Pass`].
    pub fn pass(&self) {
        self.set_mode(Mode::Pass);
    }

    /// [`Mode::Delay`].
    pub fn delay(&self, per_chunk: Duration) {
        self.set_mode(Mode::Delay(per_chunk));
    }

    /// [`Mode::Blackhole`].
    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Connections accepted so far (including refused extra ones).
    pub fn accepted(&self) -> usize {
        self.acceptor.accepted()
    }

    /// Connections being served now.
    pub fn active(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }
}

fn serve(client: TcpStream, target_port: u16, shared: &Arc<Shared>, stop: &Arc<Stop>) {
    let Ok(upstream) = TcpStream::connect_timeout(
        &([127, 0, 0, 1], target_port).into(),
        Duration::from_secs(1),
    ) else {
        return; // target down: the client sees the connection closed
    };
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
    for (from, to, upstream_dir) in [(client, upstream, true), (upstream2, client2, false)] {
        let (shared, worker_stop) = (Arc::clone(shared), Arc::clone(stop));
        let done = Arc::clone(&done);
        stop.spawn("proxy-pipe", move || {
            pump(from, to, upstream_dir, generation, &shared, &worker_stop);
            if done.fetch_add(1, Ordering::Relaxed) == 1 {
                shared.active.fetch_sub(1, Ordering::Relaxed);
            }
        });
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
    stop: &Stop,
) {
    let mut buf = [0u8; 16 * 1024];
    while !stop.stopped() && shared.generation.load(Ordering::Relaxed) == generation {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        match shared.mode() {
            Mode::Blackhole => continue,
            Mode::Delay(d) if to_server && !sleep_unless_stopped(d, stop) => break,
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
fn sleep_unless_stopped(d: Duration, stop: &Stop) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if stop.stopped() {
            return false;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(POLL));
    }
}
