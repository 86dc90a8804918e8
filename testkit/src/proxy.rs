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
//! On top of the mode, a [`Cut`] per direction ([`Proxy::cut`]) partitions
//! the link: the requests (client to server), the replies (server to
//! client), or both are dropped ([`Cut::Drop`]: a link that loses them) or
//! held ([`Cut::Hold`]: the proxy stops reading that way, so the bytes
//! wait in the kernel's buffers and arrive, in order, once
//! [`Proxy::heal`] is called: a partition healed before the connection
//! gave up). A cut applies to the connections open at the time and to new
//! ones (whose connect still succeeds: the proxy accepts).
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
/// How often a held direction looks whether it was healed.
const HOLD_POLL: Duration = Duration::from_millis(1);

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

/// Which way of a link a cut applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Client to server.
    Requests,
    /// Server to client.
    Replies,
    /// Both ways.
    Both,
}

impl Link {
    fn covers(self, to_server: bool) -> bool {
        match self {
            Self::Requests => to_server,
            Self::Replies => !to_server,
            Self::Both => true,
        }
    }
}

/// What a cut does with the bytes that would cross it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Read and discarded: they never arrive.
    Drop,
    /// Not read until the cut heals, then delivered in order.
    Hold,
}

#[derive(Debug)]
struct Shared {
    mode: Mutex<Mode>,
    /// The cut of each direction: `[to server, to client]`.
    cuts: Mutex<[Option<Cut>; 2]>,
    target_port: AtomicU16,
    /// Bumped by `drop_connections`: pumps of older generations stop.
    generation: AtomicUsize,
    active: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    fn cut(&self, to_server: bool) -> Option<Cut> {
        self.cuts.lock().unwrap()[usize::from(!to_server)]
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
            cuts: Mutex::new([None, None]),
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

    /// Cuts `link` (the other direction keeps its cut, if any): its bytes
    /// are dropped or held from now on, until [`heal`](Self::heal).
    pub fn cut(&self, link: Link, how: Cut) {
        let mut cuts = self.shared.cuts.lock().unwrap();
        for (i, to_server) in [true, false].into_iter().enumerate() {
            if link.covers(to_server) {
                cuts[i] = Some(how);
            }
        }
    }

    /// Removes every cut: held bytes are delivered (within a millisecond),
    /// and traffic flows per the mode again.
    pub fn heal(&self) {
        *self.shared.cuts.lock().unwrap() = [None, None];
    }

    /// The cuts in place: (requests, replies).
    pub fn cuts(&self) -> (Option<Cut>, Option<Cut>) {
        let cuts = self.shared.cuts.lock().unwrap();
        (cuts[0], cuts[1])
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

/// Copies `from` to `to` per the cut and the mode until either side
/// closes or the proxy stops; then closes both. A held direction is not
/// read (a chunk read just before the cut waits for the heal).
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    to_server: bool,
    generation: usize,
    shared: &Shared,
    stop: &Stop,
) {
    let mut buf = [0u8; 16 * 1024];
    // Bytes read but held by a cut that came meanwhile.
    let mut held = 0;
    while !stop.stopped() && shared.generation.load(Ordering::Relaxed) == generation {
        let cut = shared.cut(to_server);
        if cut == Some(Cut::Hold) {
            std::thread::sleep(HOLD_POLL);
            continue;
        }
        let n = if held > 0 {
            std::mem::take(&mut held)
        } else {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue;
                }
                Err(_) => break,
            }
        };
        match shared.cut(to_server) {
            Some(Cut::Hold) => {
                held = n;
                continue;
            }
            Some(Cut::Drop) => continue,
            None => {}
        }
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use super::*;
    use crate::RedisServer;

    /// A raw connection through `proxy` whose reads give up after `wait`.
    fn connect(proxy: &Proxy, wait: Duration) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream.set_read_timeout(Some(wait)).unwrap();
        stream
    }

    /// The reply to an inline command, or `None` when none came in time.
    fn ask(stream: &mut TcpStream, command: &str) -> Option<String> {
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .unwrap();
        read_reply(stream)
    }

    fn read_reply(stream: &mut TcpStream) -> Option<String> {
        let mut buf = [0u8; 64];
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).trim_end().to_owned()),
            _ => None,
        }
    }

    /// Dropped requests never reach the server; dropped replies leave the
    /// command applied but unanswered; a healed link works again.
    #[test]
    fn a_dropped_direction_loses_its_bytes_and_heals() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let wait = Duration::from_millis(150);

        proxy.cut(Link::Requests, Cut::Drop);
        assert_eq!(proxy.cuts(), (Some(Cut::Drop), None));
        let mut stream = connect(&proxy, wait);
        assert_eq!(ask(&mut stream, "SET k 1"), None);
        assert_eq!(server.get(b"k"), None, "a dropped request never arrives");
        proxy.heal();
        assert_eq!(
            ask(&mut connect(&proxy, wait), "PING").as_deref(),
            Some("+PONG")
        );

        proxy.cut(Link::Replies, Cut::Drop);
        let mut stream = connect(&proxy, wait);
        assert_eq!(ask(&mut stream, "SET k 2"), None);
        assert_eq!(
            server.get(b"k").as_deref(),
            Some(&b"2"[..]),
            "applied, unanswered"
        );
        proxy.heal();
        assert_eq!(
            read_reply(&mut stream),
            None,
            "the dropped reply stays lost"
        );
        assert_eq!(ask(&mut stream, "PING").as_deref(), Some("+PONG"));

        proxy.cut(Link::Both, Cut::Drop);
        assert_eq!(ask(&mut connect(&proxy, wait), "SET k 3"), None);
        assert_eq!(server.get(b"k").as_deref(), Some(&b"2"[..]));
        proxy.heal();
    }

    /// Held requests arrive when the cut heals, held replies too: late,
    /// in order.
    #[test]
    fn a_held_direction_delivers_its_bytes_when_healed() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let wait = Duration::from_millis(150);

        let mut stream = connect(&proxy, wait);
        assert_eq!(ask(&mut stream, "PING").as_deref(), Some("+PONG"));
        proxy.cut(Link::Requests, Cut::Hold);
        assert_eq!(ask(&mut stream, "SET k 1"), None);
        assert_eq!(server.get(b"k"), None, "held, not arrived yet");
        proxy.heal();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(read_reply(&mut stream).as_deref(), Some("+OK"));
        assert_eq!(server.get(b"k").as_deref(), Some(&b"1"[..]));

        stream.set_read_timeout(Some(wait)).unwrap();
        proxy.cut(Link::Replies, Cut::Hold);
        assert_eq!(ask(&mut stream, "SET k 2"), None);
        assert_eq!(
            server.get(b"k").as_deref(),
            Some(&b"2"[..]),
            "applied at once"
        );
        proxy.cut(Link::Requests, Cut::Hold);
        assert_eq!(proxy.cuts(), (Some(Cut::Hold), Some(Cut::Hold)));
        proxy.heal();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(read_reply(&mut stream).as_deref(), Some("+OK"));
        assert_eq!(ask(&mut stream, "GET k").as_deref(), Some("$1\r\n2"));
    }
}
