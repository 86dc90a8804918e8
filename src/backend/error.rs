//! [`BackendError`]: why one lock server could not give a definite
//! answer, and its broad class ([`BackendErrorKind`]) for callers that act
//! on it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// The broad class of a [`BackendError`], for callers that act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The server could not be reached (connection refused, DNS failure,
    /// node marked down).
    Unreachable,
    /// The server did not answer within the timeout. The operation may have
    /// been applied.
    Timeout,
    /// The key holds a value of another type (Redis `WRONGTYPE`): something
    /// other than a lock uses this key name.
    WrongType,
    /// The server is a read-only replica (Redis `READONLY`): configure
    /// masters only.
    ReadOnly,
    /// Authentication failed (`NOAUTH`, `WRONGPASS`, a refused `AUTH`):
    /// the node as a whole refuses this client.
    Auth,
    /// The server's access rules deny this command, key or channel to the
    /// authenticated user (Redis `NOPERM`): tied to what was asked (an ACL
    /// key pattern denies some keys, not all), not to the node. The engine
    /// then tries what every lock needs on a key of the crate's own: a
    /// node that denies it there is shown as
    /// [`NodeState::Refuses`](crate::health::NodeState::Refuses).
    Denied,
    /// The node's configuration is wrong (malformed URL, TLS mismatch, a
    /// database index the server does not have).
    Config,
    /// The server answered something the backend did not expect.
    Protocol,
    /// The backend panicked; the engine caught it.
    Panicked,
    /// Anything else (I/O errors, other server errors).
    Other,
}

impl BackendErrorKind {
    /// Whether this kind says the server is out of reach (so the engine may
    /// mark the node down), as opposed to an answer it gave.
    pub fn is_connectivity(self) -> bool {
        matches!(self, Self::Unreachable | Self::Timeout)
    }

    /// Whether this kind says the node as a whole cannot serve this client,
    /// whatever it is asked: out of reach, or refusing every request
    /// (authentication, its configuration, a peer that does not speak the
    /// protocol). Such a node does not count as voting in
    /// [`Health`](crate::health::Health). A failure tied to one key or
    /// command (`Denied`, `WrongType`, a script error) is not node-wide.
    pub fn is_node_wide(self) -> bool {
        self.is_connectivity() || matches!(self, Self::Auth | Self::Config | Self::Protocol)
    }

    /// Whether retrying the same request cannot help until someone changes
    /// the server, its configuration or the key: authentication or ACL,
    /// a key of another type, a read-only replica, a misconfigured node, a
    /// peer that does not speak the protocol.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            Self::Auth
                | Self::Denied
                | Self::WrongType
                | Self::ReadOnly
                | Self::Config
                | Self::Protocol
        )
    }
}

impl fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unreachable => "unreachable",
            Self::Timeout => "timed out",
            Self::WrongType => "key holds a non-lock value (WRONGTYPE)",
            Self::ReadOnly => "node is a read-only replica",
            Self::Auth => "authentication failed",
            Self::Denied => "denied by the server's access rules",
            Self::Config => "misconfigured",
            Self::Protocol => "unexpected reply",
            Self::Panicked => "backend panicked",
            Self::Other => "error",
        })
    }
}

/// An error from one lock server: it could not give a definite answer.
///
/// Cloneable so one failure can appear in several reports. The message never
/// contains credentials.
#[derive(Clone)]
pub struct BackendError {
    kind: BackendErrorKind,
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl BackendError {
    /// A new error of `kind` with a human-readable `message`.
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause, returned by
    /// [`source`](std::error::Error::source).
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The class of failure.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error in words for a line that already names `node`: the kind
    /// and the message, without the node's name that a backend's message
    /// may start with (`authentication failed: WRONGPASS ...`).
    pub fn reason(&self, node: &str) -> String {
        let message = self
            .message
            .strip_prefix(node)
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&self.message);
        if message.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}: {message}", self.kind)
        }
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.kind, self.message)
        }
    }
}

impl StdError for BackendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}
