//! The socket under one connection (TCP, Unix or TLS over TCP): where it
//! goes ([`Target`]), and the open socket ([`Transport`]) whose every
//! connect, read and write is bounded by the call's deadline (each read
//! and write through `bounded.rs`; TLS's through `tls.rs`).

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bounded::{is_wait, read_bounded, read_nonblocking, remaining, write_bounded};
use super::fault::{Fault, Phase};
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

    /// The socket of a plain connection (TCP or Unix); `None` for TLS,
    /// whose session buffers what it has read from the socket.
    #[cfg(unix)]
    pub(super) fn plain_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Self::Tcp(stream, _) => Some(stream.as_fd()),
            Self::Unix(stream, _) => Some(stream.as_fd()),
            #[cfg(feature = "tls")]
            Self::Tls(_) => None,
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
