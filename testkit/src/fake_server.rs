//! Hostile fake servers on loopback: they accept connections and answer
//! every request with something no Redis server would send.
//!
//! Each accepted connection gets its own thread, which reads the request
//! and then plays its [`Behavior`]. Every thread checks a stop flag at least
//! every [`POLL`], writes with a timeout, and sends a bounded number of
//! bytes ([`MAX_BYTES_PER_CONNECTION`]); all of them stop, and are joined,
//! when the [`FakeServer`] is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::acceptor::{Acceptor, Stop};

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(10);
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 16;
/// No connection is sent more than this.
pub const MAX_BYTES_PER_CONNECTION: usize = 256 << 20;

/// What the fake server answers to anything it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// A multi-line HTTP error page, then it closes: not RESP at all.
    Garbage,
    /// A simple-string reply that never ends (`+aaaa...` with no CRLF),
    /// sent as fast as the client reads it.
    Endless,
    /// A valid-looking bulk reply (`$4000\r\n` then `x`...) sent one byte
    /// per interval: each read gets a byte well within any per-read timeout.
    Trickle(Duration),
    /// An array header announcing 99 999 999 999 elements, then `+x\r\n`
    /// elements sent as fast as the client reads them.
    HugeArray,
    /// A bulk header announcing 99 999 999 999 bytes, then bytes as fast as
    /// the client reads them.
    HugeBulk,
    /// Reads everything, never answers.
    Silent,
}

#[derive(Debug)]
struct Shared {
    behavior: Behavior,
    active: AtomicUsize,
}

/// A running fake server; stops on drop.
#[derive(Debug)]
pub struct FakeServer {
    acceptor: Acceptor,
}

impl FakeServer {
    /// Starts a fake server on a free loopback port.
    pub fn start(behavior: Behavior) -> Self {
        let shared = Arc::new(Shared {
            behavior,
            active: AtomicUsize::new(0),
        });
        let acceptor = Acceptor::start("fake", move |stream, stop| {
            if shared.active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                return; // dropped: closed at once
            }
            shared.active.fetch_add(1, Ordering::Relaxed);
            let (shared, worker_stop) = (Arc::clone(&shared), Arc::clone(stop));
            stop.spawn("fake-conn", move || {
                serve(stream, &shared, &worker_stop);
                shared.active.fetch_sub(1, Ordering::Relaxed);
            });
        });
        Self { acceptor }
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.acceptor.port()
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.acceptor.accepted()
    }
}

/// Waits for the first request bytes, then plays the behavior.
fn serve(mut stream: TcpStream, shared: &Shared, stop: &Stop) {
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_write_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut buf = [0u8; 4096];
    // Wait for a request (or give up when stopped / closed).
    loop {
        if stop.stopped() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
    let mut out = Sender {
        stream: &mut stream,
        stop,
        sent: 0,
    };
    match shared.behavior {
        Behavior::Garbage => {
            let page = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\
                        Connection: close\r\n\r\n<html>\n<body>\nnot redis\n</body>\n</html>\n";
            out.send(page.as_bytes());
            // Keep the socket open a moment so the reply is read, not a reset.
            out.idle(Duration::from_millis(200));
        }
        Behavior::Endless => {
            if out.send(b"+") {
                let chunk = [b'a'; 16 * 1024];
                while out.send(&chunk) {}
            }
        }
        Behavior::Trickle(every) => {
            if out.send(b"$4000\r\n") {
                for _ in 0..4000 {
                    if !out.idle(every) || !out.send(b"x") {
                        break;
                    }
                }
            }
        }
        Behavior::HugeArray => {
            if out.send(b"*99999999999\r\n") {
                let chunk = b"+x\r\n".repeat(4096);
                while out.send(&chunk) {}
            }
        }
        Behavior::HugeBulk => {
            if out.send(b"$99999999999\r\n") {
                let chunk = [b'y'; 16 * 1024];
                while out.send(&chunk) {}
            }
        }
        Behavior::Silent => {
            // Read and drop until the client closes or we are stopped.
            while !stop.stopped() {
                match out.stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

struct Sender<'a> {
    stream: &'a mut TcpStream,
    stop: &'a Stop,
    sent: usize,
}

impl Sender<'_> {
    /// Writes all of `bytes`, retrying on write timeouts; false when the
    /// client went away, the server is stopping or the byte budget is spent.
    fn send(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.stop.stopped() || self.sent >= MAX_BYTES_PER_CONNECTION {
                return false;
            }
            match self.stream.write(bytes) {
                Ok(0) => return false,
                Ok(n) => {
                    self.sent += n;
                    bytes = &bytes[n..];
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Sleeps `d` in slices, draining what the client sends; false when
    /// stopped or the client closed.
    fn idle(&mut self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut buf = [0u8; 1024];
        loop {
            if self.stop.stopped() {
                return false;
            }
            if Instant::now() >= end {
                return true;
            }
            let _ = self.stream.set_read_timeout(Some(
                end.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
                    .min(POLL),
            ));
            match self.stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return false,
            }
        }
    }
}
