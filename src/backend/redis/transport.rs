//! The socket under one connection (TCP, Unix or TLS over TCP), with every
//! connect, read and write bounded by the call's deadline, and the
//! [`Fault`]s that can end a connection.
//!
//! A socket timeout bounds one `read()`; a peer that sends one byte just
//! before each timeout would keep a plain reader busy for ever. Here every
//! read and write first sets the socket timeout to the time *left* until
//! the deadline, and a deadline that has passed ends the call, whatever
//! the peer sends.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "tls")]
use super::tls::TlsStream;

/// Where a connection goes.
#[derive(Clone)]
pub(super) enum Target {
    Tcp {
        host: String,
        port: u16,
    },
    #[cfg(feature = "tls")]
    Tls {
        host: String,
        port: u16,
        config: Arc<rustls::ClientConfig>,
    },
    #[cfg(unix)]
    Unix(PathBuf),
}

/// What the connection was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// TCP connect (or Unix socket connect).
    Connect,
    /// The TLS handshake.
    #[cfg(feature = "tls")]
    Tls,
    /// `AUTH` / `SELECT`.
    Setup,
    /// Sending requests and reading their replies.
    Request,
}

/// Why a connection failed. The connection is dropped in every case.
#[derive(Debug)]
pub(super) enum Fault {
    /// The deadline passed; `received`: bytes read in this phase so far.
    Timeout { phase: Phase, received: usize },
    /// The peer closed or reset the connection.
    Closed { phase: Phase },
    /// The host name did not resolve.
    Resolve(io::Error),
    /// Any other I/O failure.
    Io { phase: Phase, error: io::Error },
    /// The peer does not speak RESP2, or its reply breaks the limits.
    Protocol(String),
    /// The TLS layer failed (certificate, handshake, protocol mismatch).
    #[cfg(feature = "tls")]
    Tls(String),
    /// The server answered a setup command (`AUTH` or `SELECT`) with an
    /// error.
    ErrorReply {
        command: &'static str,
        error: redis::ServerError,
    },
}

impl Fault {
    pub(super) fn io(phase: Phase, error: io::Error) -> Self {
        if is_dropped(error.kind()) {
            Self::Closed { phase }
        } else {
            Self::Io { phase, error }
        }
    }
}

/// An open socket. A TCP or Unix socket remembers the read and write
/// timeouts last set on it ([`Timeouts`]).
pub(super) enum Transport {
    Tcp(TcpStream, Timeouts),
    #[cfg(unix)]
    Unix(UnixStream, Timeouts),
    #[cfg(feature = "tls")]
    Tls(Box<TlsStream>),
}

impl Transport {
    /// Connects to `target` (and completes the TLS handshake) by `deadline`.
    ///
    /// Name resolution is the one step the standard library cannot bound;
    /// a Unix socket connect is local and does not wait for a peer.
    pub(super) fn connect(target: &Target, deadline: Instant) -> Result<Self, Fault> {
        match target {
            Target::Tcp { host, port } => Ok(Self::Tcp(
                connect_tcp(host, *port, deadline)?,
                Timeouts::default(),
            )),
            #[cfg(feature = "tls")]
            Target::Tls { host, port, config } => {
                let tcp = connect_tcp(host, *port, deadline)?;
                let tls = TlsStream::handshake(Arc::clone(config), host, tcp, deadline)?;
                Ok(Self::Tls(Box::new(tls)))
            }
            #[cfg(unix)]
            Target::Unix(path) => UnixStream::connect(path)
                .map(|s| Self::Unix(s, Timeouts::default()))
                .map_err(|e| Fault::io(Phase::Connect, e)),
        }
    }

    /// One read of at most `buf.len()` bytes, by `deadline`; `Ok(0)` when
    /// the peer closed the connection.
    pub(super) fn read_some(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
        phase: Phase,
    ) -> Result<usize, Fault> {
        match self {
            Self::Tcp(s, set) => read_bounded(s, buf, deadline, phase, &mut set.read),
            #[cfg(unix)]
            Self::Unix(s, set) => read_bounded(s, buf, deadline, phase, &mut set.read),
            #[cfg(feature = "tls")]
            Self::Tls(s) => s.read_some(buf, deadline, phase),
        }
    }

    /// One read of what has already arrived, without waiting: `Ok(None)`
    /// when nothing has, `Ok(Some(0))` when the peer closed the
    /// connection. (For the release notices, read between jobs by a node
    /// thread that must not block.)
    pub(super) fn read_now(
        &mut self,
        buf: &mut [u8],
        phase: Phase,
    ) -> Result<Option<usize>, Fault> {
        match self {
            Self::Tcp(s, _) => read_nonblocking(s, buf, phase),
            #[cfg(unix)]
            Self::Unix(s, _) => read_nonblocking(s, buf, phase),
            #[cfg(feature = "tls")]
            Self::Tls(s) => s.read_now(buf, phase),
        }
    }

    /// A second handle on the same socket, so that one thread can write
    /// while another blocks reading (the release notices' reader). TCP and
    /// Unix only: `None` for TLS, whose one session cannot be shared by two
    /// threads. The new handle has its own record of the timeouts set: the
    /// writer only ever sets the write timeout, the reader the read one.
    pub(super) fn try_clone(&self) -> Option<io::Result<Self>> {
        match self {
            Self::Tcp(s, _) => Some(s.try_clone().map(|s| Self::Tcp(s, Timeouts::default()))),
            #[cfg(unix)]
            Self::Unix(s, _) => Some(s.try_clone().map(|s| Self::Unix(s, Timeouts::default()))),
            #[cfg(feature = "tls")]
            Self::Tls(_) => None,
        }
    }

    /// Shuts the socket down both ways: a read blocked on it (on another
    /// handle) returns at once.
    pub(super) fn shutdown(&self) {
        let _ = match self {
            Self::Tcp(s, _) => s.shutdown(std::net::Shutdown::Both),
            #[cfg(unix)]
            Self::Unix(s, _) => s.shutdown(std::net::Shutdown::Both),
            #[cfg(feature = "tls")]
            Self::Tls(_) => Ok(()),
        };
    }

    /// Writes all of `data` by `deadline`.
    pub(super) fn write_all(
        &mut self,
        data: &[u8],
        deadline: Instant,
        phase: Phase,
    ) -> Result<(), Fault> {
        match self {
            Self::Tcp(s, set) => write_bounded(s, data, deadline, phase, &mut set.write),
            #[cfg(unix)]
            Self::Unix(s, set) => write_bounded(s, data, deadline, phase, &mut set.write),
            #[cfg(feature = "tls")]
            Self::Tls(s) => s.write_all(data, deadline, phase),
        }
    }
}

/// The timeouts last set on a socket. A read or write whose deadline
/// leaves at least that long keeps it (it ends by the deadline anyway)
/// instead of setting it again: one system call less per read and per
/// write. One that runs out early is followed by a read or write with the
/// exact time left.
#[derive(Debug, Default)]
pub(super) struct Timeouts {
    read: Option<Duration>,
    write: Option<Duration>,
}

/// A socket whose timeouts can be set (TCP or Unix).
pub(super) trait Socket: Read + Write {
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
    fn nonblocking(&self, on: bool) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

#[cfg(unix)]
impl Socket for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

/// One `read()` on `s` of what has already arrived (`None`: nothing). The
/// socket is non-blocking for that read only: every other read and write
/// on it is bounded by a deadline through the socket timeouts, which a
/// non-blocking socket ignores.
pub(super) fn read_nonblocking<S: Socket>(
    s: &mut S,
    buf: &mut [u8],
    phase: Phase,
) -> Result<Option<usize>, Fault> {
    s.nonblocking(true).map_err(|e| Fault::io(phase, e))?;
    let read = s.read(buf);
    s.nonblocking(false).map_err(|e| Fault::io(phase, e))?;
    match read {
        Ok(n) => Ok(Some(n)),
        Err(e) if is_wait(e.kind()) => Ok(None),
        Err(e) => Err(Fault::io(phase, e)),
    }
}

/// The time left until `deadline`, `None` once it has passed.
pub(super) fn remaining(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

/// One `read()` on `s` bounded by `deadline`. `set` is the read timeout
/// already set on `s`, if known (see [`Timeouts`]).
pub(super) fn read_bounded<S: Socket>(
    s: &mut S,
    buf: &mut [u8],
    deadline: Instant,
    phase: Phase,
    set: &mut Option<Duration>,
) -> Result<usize, Fault> {
    let mut exact = false;
    loop {
        let left = remaining(deadline).ok_or(Fault::Timeout { phase, received: 0 })?;
        if exact || set.is_none_or(|t| t > left) {
            s.read_timeout(left).map_err(|e| Fault::io(phase, e))?;
            *set = Some(left);
        }
        match s.read(buf) {
            Ok(n) => return Ok(n),
            // Timed out (or woke early): the loop checks the deadline,
            // and reads again with the exact time left.
            Err(e) if is_wait(e.kind()) => exact = true,
            Err(e) => return Err(Fault::io(phase, e)),
        }
    }
}

/// Writes all of `data` to `s` by `deadline`. `set` is the write timeout
/// already set on `s`, if known (see [`Timeouts`]).
pub(super) fn write_bounded<S: Socket>(
    s: &mut S,
    mut data: &[u8],
    deadline: Instant,
    phase: Phase,
    set: &mut Option<Duration>,
) -> Result<(), Fault> {
    let mut exact = false;
    while !data.is_empty() {
        let left = remaining(deadline).ok_or(Fault::Timeout { phase, received: 0 })?;
        if exact || set.is_none_or(|t| t > left) {
            s.write_timeout(left).map_err(|e| Fault::io(phase, e))?;
            *set = Some(left);
        }
        match s.write(data) {
            Ok(0) => return Err(Fault::Closed { phase }),
            Ok(n) => data = &data[n..],
            Err(e) if is_wait(e.kind()) => exact = true,
            Err(e) => return Err(Fault::io(phase, e)),
        }
    }
    Ok(())
}

fn connect_tcp(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Fault> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(Fault::Resolve)?
        .collect();
    let mut last = None;
    for addr in addrs {
        let Some(left) = remaining(deadline) else {
            break;
        };
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => {
                // Requests are small and latency-bound.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    let timeout = Fault::Timeout {
        phase: Phase::Connect,
        received: 0,
    };
    Err(match last {
        Some(e) if is_wait(e.kind()) => timeout,
        Some(e) => Fault::io(Phase::Connect, e),
        None if remaining(deadline).is_none() => timeout,
        None => Fault::Resolve(io::Error::new(
            io::ErrorKind::NotFound,
            "no address for this host",
        )),
    })
}

/// A socket timeout (or a spurious wake-up).
pub(super) fn is_wait(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The peer closed or reset the connection.
pub(super) fn is_dropped(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::cell::RefCell;

    use super::*;

    /// A socket that records the read timeouts set on it and answers each
    /// read from a script: `None` is a timeout, `Some(n)` reads n bytes.
    struct Scripted {
        sets: RefCell<Vec<Duration>>,
        reads: Vec<Option<usize>>,
    }

    impl Read for Scripted {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            match self.reads.remove(0) {
                Some(n) => Ok(n),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    impl Write for Scripted {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Socket for Scripted {
        fn read_timeout(&self, t: Duration) -> io::Result<()> {
            self.sets.borrow_mut().push(t);
            Ok(())
        }
        fn write_timeout(&self, _: Duration) -> io::Result<()> {
            Ok(())
        }
        fn nonblocking(&self, _: bool) -> io::Result<()> {
            Ok(())
        }
    }

    /// A kept timeout never outlasts the deadline: it is kept only when
    /// the deadline leaves at least that long, set anew when it leaves
    /// less, and set to the exact time left after it ran out early.
    #[test]
    fn a_kept_timeout_never_outlasts_the_deadline() {
        let mut sock = Scripted {
            sets: RefCell::new(Vec::new()),
            reads: vec![Some(1), Some(1), Some(1), None, Some(1)],
        };
        let mut set = None;
        let read = |sock: &mut Scripted, set: &mut Option<Duration>, left_ms| {
            let deadline = Instant::now() + Duration::from_millis(left_ms);
            read_bounded(sock, &mut [0u8; 4], deadline, Phase::Request, set).unwrap()
        };
        read(&mut sock, &mut set, 100); // first read: set
        read(&mut sock, &mut set, 200); // 100 ms kept (it ends before 200)
        assert_eq!(
            sock.sets.borrow().len(),
            1,
            "kept: {:?}",
            sock.sets.borrow()
        );
        read(&mut sock, &mut set, 10); // 10 ms left: must shrink
        let sets = sock.sets.borrow().clone();
        assert_eq!(sets.len(), 2);
        assert!(sets[1] <= Duration::from_millis(10), "{sets:?}");
        // The 10 ms kept runs out early on a 500 ms deadline: the read
        // goes on with the exact time left.
        read(&mut sock, &mut set, 500);
        let sets = sock.sets.borrow().clone();
        assert_eq!(sets.len(), 3, "{sets:?}");
        assert!(sets[2] > Duration::from_millis(400), "{sets:?}");
    }
}
