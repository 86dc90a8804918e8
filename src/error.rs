//! The crate's one error type.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::report::Report;

/// Everything that can go wrong, with what a caller needs to act on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held elsewhere: too many nodes refused for a quorum to be
    /// possible. Retry later, or give up: someone else is doing the work.
    Contended {
        /// Per-node outcomes of the last attempt.
        report: Box<Report>,
    },
    /// Too many nodes failed, timed out, were down or quarantined to reach a
    /// quorum. The lock may be free; the cluster is not healthy enough to
    /// say. Every node was sent a release.
    NoQuorum {
        /// Per-node outcomes of the last attempt.
        report: Box<Report>,
    },
    /// A quorum granted the lock, but the round took so long that no safe
    /// validity was left (TTL - elapsed - drift <= 0). The lock was released
    /// everywhere. Use a longer TTL or faster nodes.
    ValidityExpired {
        /// Per-node outcomes.
        report: Box<Report>,
    },
    /// The lock may be held by someone else now: an extend did not reach a
    /// quorum within the remaining validity, or the validity ran out. Stop
    /// the protected work; do not assume exclusivity.
    Lost {
        /// Why it was lost.
        reason: String,
        /// Per-node outcomes of the failing extend, when there was one.
        report: Option<Box<Report>>,
    },
    /// An argument was rejected before any node was contacted (empty
    /// resource, TTL zero, too large or not above the clock drift, ...).
    InvalidArgument {
        /// What was wrong.
        reason: String,
    },
    /// The manager's configuration is unusable (no nodes, the same node
    /// twice, quorum below a majority, malformed node URL, ...).
    Config {
        /// What was wrong, naming the node(s) involved.
        reason: String,
    },
    /// The wait was cancelled through the call's
    /// [`CancellationToken`](crate::CancellationToken) before a lock was
    /// taken. Nothing is held: an attempt in flight when the token was
    /// cancelled was released on every node (also one that succeeded).
    /// Not retryable: whoever cancelled wants the caller to stop.
    Cancelled {
        /// How long the call waited before it noticed.
        waited: Duration,
    },
    /// This thread already holds the lock on this resource through this
    /// manager (a guard it took is alive and valid), and asked for it again
    /// with a call that would wait: it would wait for itself. (One attempt,
    /// as in `try_lock`, reports [`Error::Contended`] instead.) Locks are not reentrant (see
    /// [`LockManager::lock`](crate::LockManager::lock)); release or drop
    /// the guard first, or pass it to the code that needs the lock. No
    /// node was contacted. As `std::io::ErrorKind::Deadlock`.
    Deadlock {
        /// The resource, as given (lossy UTF-8).
        resource: String,
    },
    /// From a readiness check
    /// ([`LockManager::check_ready`](crate::LockManager::check_ready),
    /// [`check_ready_all`](crate::LockManager::check_ready_all)): its
    /// probe lock was taken, kept and released by a quorum, but not
    /// every node serves locks as the check requires. For
    /// `check_ready`, a node's access rules refuse what locks need
    /// ([`NodeState::Refuses`](crate::health::NodeState::Refuses)): a
    /// configuration fault that does not pass by itself, and leaves every
    /// lock resting on the other nodes. For `check_ready_all`, also a node
    /// down, quarantined or failing. Locks work meanwhile, with less
    /// margin: fix the nodes named. Not retryable (no lock was refused).
    Degraded {
        /// Each node that falls short, and why (one line).
        reason: String,
        /// Per-node outcomes of the probe lock's release.
        report: Box<Report>,
    },
    /// The process could not provide what a lock needs: a thread could not
    /// be started, or the operating system's random source failed. Not a
    /// mistake in the input; it may pass once the system recovers.
    Runtime {
        /// What failed.
        reason: String,
    },
}

impl Error {
    /// Held elsewhere ([`Error::Contended`]).
    pub fn is_contended(&self) -> bool {
        matches!(self, Self::Contended { .. })
    }

    /// Too few healthy nodes ([`Error::NoQuorum`]).
    pub fn is_no_quorum(&self) -> bool {
        matches!(self, Self::NoQuorum { .. })
    }

    /// The lock may have been lost ([`Error::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// The wait was cancelled ([`Error::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled { .. })
    }

    /// This thread asked again for a lock it holds ([`Error::Deadlock`]).
    pub fn is_deadlock(&self) -> bool {
        matches!(self, Self::Deadlock { .. })
    }

    /// A readiness check found a node that falls short
    /// ([`Error::Degraded`]).
    pub fn is_degraded(&self) -> bool {
        matches!(self, Self::Degraded { .. })
    }

    /// Bad input or configuration ([`Error::InvalidArgument`],
    /// [`Error::Config`]): retrying will not help.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Self::InvalidArgument { .. } | Self::Config { .. })
    }

    /// Whether another attempt could succeed (contention or passing
    /// faults). Not when failures that retrying cannot fix (wrong password,
    /// missing ACL rights, a key of another type, a replica, a port that
    /// does not speak Redis) leave too few nodes for a quorum: see
    /// [`Report::quorum_out_of_reach`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Contended { .. } | Self::ValidityExpired { .. } => true,
            Self::NoQuorum { report } => !report.quorum_out_of_reach(),
            _ => false,
        }
    }

    /// The per-node report, when the error came from a quorum round.
    pub fn report(&self) -> Option<&Report> {
        match self {
            Self::Contended { report }
            | Self::NoQuorum { report }
            | Self::ValidityExpired { report }
            | Self::Degraded { report, .. } => Some(report),
            Self::Lost { report, .. } => report.as_deref(),
            Self::InvalidArgument { .. }
            | Self::Config { .. }
            | Self::Cancelled { .. }
            | Self::Deadlock { .. }
            | Self::Runtime { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Contended { report } if report.held_here => write!(
                f,
                "lock is held by this thread (through this manager; locks are not reentrant): \
                 {report}"
            ),
            Self::Contended { report } if report.writer_here => write!(
                f,
                "a writer of this process waits for the lock, and readers stand back: {report}"
            ),
            Self::Contended { report } => write!(f, "lock is held elsewhere: {report}"),
            Self::NoQuorum { report } => write!(f, "no quorum of healthy nodes: {report}"),
            Self::ValidityExpired { report } => write!(
                f,
                "quorum reached too slowly, no validity left (released): {report}"
            ),
            Self::Lost {
                reason,
                report: Some(report),
            } => write!(f, "lock lost: {reason}: {report}"),
            Self::Lost { reason, .. } => write!(f, "lock lost: {reason}"),
            Self::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Self::Config { reason } => write!(f, "invalid configuration: {reason}"),
            Self::Cancelled { waited } => {
                write!(
                    f,
                    "cancelled after waiting {}",
                    crate::words::human(*waited)
                )
            }
            Self::Deadlock { resource } => write!(
                f,
                "deadlock: this thread already holds the lock on {} through this manager \
                 (locks are not reentrant: release or drop that guard first)",
                crate::words::Shortened(resource)
            ),
            Self::Degraded { reason, report } => write!(
                f,
                "not every node serves locks: {reason} (the probe lock: {report})"
            ),
            Self::Runtime { reason } => write!(f, "runtime failure: {reason}"),
        }
    }
}

/// `Display` already names every node and its reason in one line, so no
/// single node's error is chained as the `source`: a round can fail on
/// several nodes for different reasons. [`Error::report`] gives them all,
/// typed ([`NodeOutcome::Failed`](crate::report::NodeOutcome::Failed) holds each
/// [`BackendError`](crate::backend::BackendError)).
impl StdError for Error {}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use crate::backend::{BackendError, BackendErrorKind};
    use crate::error::*;
    use crate::report::{NodeOutcome, NodeReport, Round};

    fn report() -> Report {
        Report {
            round: Round::Acquire,
            resource: "orders:42".into(),
            quorum: 2,
            nodes: vec![
                NodeReport {
                    node: "mem-a".into(),
                    outcome: NodeOutcome::Granted,
                },
                NodeReport {
                    node: "mem-b".into(),
                    outcome: NodeOutcome::Failed(BackendError::new(
                        BackendErrorKind::Unreachable,
                        "connection refused",
                    )),
                },
                NodeReport {
                    node: "mem-c".into(),
                    outcome: NodeOutcome::TimedOut,
                },
            ],
            elapsed: Duration::from_millis(3),
            attempts: 1,
            waited: Duration::from_millis(3),
            held_here: false,
            writer_here: false,
        }
    }

    #[test]
    fn display_names_every_node_and_its_reason() {
        let e = Error::NoQuorum {
            report: Box::new(report()),
        };
        let text = e.to_string();
        for part in [
            "mem-a: acquired",
            "mem-b: failed (unreachable: connection refused)",
            "mem-c: timed out",
            "1/3",
            "2 needed",
        ] {
            assert!(text.contains(part), "{text:?} lacks {part:?}");
        }
        assert!(e.source().is_none(), "Display names every cause already");
        assert!(e.is_no_quorum() && e.is_retryable() && !e.is_invalid());
    }

    /// Failures that retrying cannot fix end the retries.
    #[test]
    fn permanent_failures_that_rule_out_a_quorum_are_not_retryable() {
        let mut r = report();
        let auth = || {
            NodeOutcome::Failed(BackendError::new(
                BackendErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
            ))
        };
        r.nodes[1].outcome = auth();
        assert!(
            Error::NoQuorum {
                report: Box::new(r.clone())
            }
            .is_retryable(),
            "one of three"
        );
        r.nodes[2].outcome = auth();
        assert!(
            !Error::NoQuorum {
                report: Box::new(r)
            }
            .is_retryable(),
            "two of three"
        );
    }

    /// A huge resource name does not make a huge message.
    #[test]
    fn long_resource_names_are_cut_in_messages() {
        let mut r = report();
        r.resource = "x".repeat(1 << 20).into();
        let text = Error::NoQuorum {
            report: Box::new(r),
        }
        .to_string();
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert!(text.contains("(1048576 bytes)"), "{text}");
    }

    /// A backend error that names its node is not named twice.
    #[test]
    fn a_failed_node_is_named_once() {
        let mut r = report();
        r.nodes[1].outcome = NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Unreachable,
            "mem-b: connection refused",
        ));
        let text = r.to_string();
        assert!(
            text.contains("mem-b: failed (unreachable: connection refused)"),
            "{text}"
        );
    }

    #[test]
    fn retries_report_the_whole_wait_and_the_last_round() {
        let mut r = report();
        r.attempts = 10;
        r.waited = Duration::from_millis(1410);
        let text = r.to_string();
        assert!(
            text.contains("10 attempts over 1.41 s (the last took 3.00 ms)"),
            "{text}"
        );
    }

    /// Errors travel in `Result`s on every call: keep them small.
    #[test]
    fn the_error_is_small() {
        assert!(
            std::mem::size_of::<Error>() <= 40,
            "{}",
            std::mem::size_of::<Error>()
        );
    }

    #[test]
    fn counts() {
        let r = report();
        assert_eq!((r.granted(), r.refused(), r.unavailable()), (1, 0, 2));
        assert_eq!(
            r.nodes_where(|o| matches!(o, NodeOutcome::TimedOut)),
            ["mem-c"]
        );
    }
}
