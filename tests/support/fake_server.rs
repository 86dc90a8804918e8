//! Hostile fake servers on loopback: they accept connections and answer
//! every request with something no Redis server would send.
//!
//! Each accepted connection gets its own thread, which reads the request
//! and then plays its [`Behavior`]. Every thread checks a stop flag at least
//! every [`POLL`], writes with a timeout, and sends a bounded number of
//! bytes ([`MAX_BYTES_PER_CONNECTION`]); all of them stop, and are joined,
//! when the [`FakeServer`] is dropped.
#![allow(dead_code, unreachable_pub)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    stop: AtomicBool,
    active: AtomicUsize,
    accepted: AtomicUsize,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A running fake server; stops on drop.
#[derive(Debug)]
pub struct FakeServer {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start(behavior: Behavior) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("fake server bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("fake server addr").port();
        let shared = Arc::new(Shared {
            behavior,
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            workers: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("fake-{port}-accept"))
                .spawn(move || accept_loop(&listener, &shared))
                .expect("spawn fake server thread")
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

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FakeServer {
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
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if shared.active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    continue; // dropped: closed at once
                }
                shared.active.fetch_add(1, Ordering::Relaxed);
                let worker = {
                    let shared = Arc::clone(shared);
                    std::thread::Builder::new()
                        .name("fake-conn".to_owned())
                        .spawn(move || {
                            serve(stream, &shared);
                            shared.active.fetch_sub(1, Ordering::Relaxed);
                        })
                };
                let mut workers = shared.workers.lock().unwrap();
                workers.retain(|w| !w.is_finished());
                if let Ok(worker) = worker {
                    workers.push(worker);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Waits for the first request bytes, then plays the behavior.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_write_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut buf = [0u8; 4096];
    // Wait for a request (or give up when stopped / closed).
    loop {
        if shared.stop.load(Ordering::Relaxed) {
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
        shared,
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
            while !shared.stop.load(Ordering::Relaxed) {
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
    shared: &'a Shared,
    sent: usize,
}

impl Sender<'_> {
    /// Writes all of `bytes`, retrying on write timeouts; false when the
    /// client went away, the server is stopping or the byte budget is spent.
    fn send(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.shared.stop.load(Ordering::Relaxed) || self.sent >= MAX_BYTES_PER_CONNECTION {
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
            if self.shared.stop.load(Ordering::Relaxed) {
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
