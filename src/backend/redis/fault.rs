//! Why a connection failed ([`Fault`]), and what it was doing then
//! ([`Phase`]): the one account of a connection's end that the pool, the
//! connection and the error messages share.

use std::io;

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

/// The peer closed or reset the connection.
fn is_dropped(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}
