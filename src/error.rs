//! The crate's one error type, and the per-node report every outcome carries.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::backend::BackendError;

/// Which quorum round a [`Report`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Round {
    /// Acquiring a lock.
    Acquire,
    /// Extending a held lock.
    Extend,
    /// Releasing a held lock.
    Release,
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
        })
    }
}

/// What one node did in one round.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node did it: acquired, extended or released with our token.
    Granted,
    /// The node answered no: on acquire, the key is held by another token;
    /// on extend or release, the key is no longer ours (expired or taken).
    Refused,
    /// The node could not give a definite answer (maybe applied).
    Failed(BackendError),
    /// No answer within the per-node timeout (maybe applied; a late answer
    /// is cleaned up by the release queued behind it).
    TimedOut,
    /// The outcome was decided before this node answered, so it was not
    /// waited for. Its operation still runs in order on its worker.
    NotAwaited,
    /// Skipped: the node is marked down after repeated failures and is
    /// being probed in the background.
    Down,
    /// The node restarted recently and may have forgotten locks it held, so
    /// its vote does not count for `remaining` more.
    Quarantined {
        /// Time left before its votes count again.
        remaining: Duration,
    },
}

impl NodeOutcome {
    /// Whether the node did the operation.
    pub fn is_granted(&self) -> bool {
        matches!(self, Self::Granted)
    }

    /// The outcome in words, for the line of `node` in a report.
    fn describe(&self, op: Round, node: &str) -> String {
        match (self, op) {
            (Self::Granted, Round::Acquire) => "acquired".into(),
            (Self::Granted, Round::Extend) => "extended".into(),
            (Self::Granted, Round::Release) => "released".into(),
            (Self::Refused, Round::Acquire) => "held elsewhere".into(),
            (Self::Refused, _) => "not held by us".into(),
            (Self::Failed(e), _) => {
                // Backend messages name their node; the report line already
                // does, so it is not said twice.
                let message = e.message();
                let message = message
                    .strip_prefix(node)
                    .and_then(|rest| rest.strip_prefix(": "))
                    .unwrap_or(message);
                if message.is_empty() {
                    format!("failed ({})", e.kind())
                } else {
                    format!("failed ({}: {message})", e.kind())
                }
            }
            (Self::TimedOut, _) => "timed out".into(),
            (Self::NotAwaited, _) => "not awaited".into(),
            (Self::Down, _) => "skipped: marked down".into(),
            (Self::Quarantined { remaining }, _) => format!(
                "quarantined: started or restarted less than max_ttl + drift ago, it may have \
                 forgotten locks; votes again in {} (settings: max_ttl, restart_quarantine)",
                human(*remaining)
            ),
        }
    }
}

/// A duration for people: `812 µs`, `15.3 ms`, `1.53 s`, `2 min 5 s`.
pub(crate) fn human(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 10_000 {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if micros < 1_000_000 {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else if d.as_secs() < 60 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} min {} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// One node's line in a [`Report`].
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub(crate) node: String,
    pub(crate) outcome: NodeOutcome,
}

impl NodeReport {
    /// The node's name (its [`Backend::describe`](crate::Backend::describe),
    /// without credentials).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What it did.
    pub fn outcome(&self) -> &NodeOutcome {
        &self.outcome
    }
}

/// The per-node account of one quorum round: who said yes, no, failed,
/// timed out or was skipped.
#[derive(Debug, Clone)]
pub struct Report {
    pub(crate) round: Round,
    pub(crate) resource: String,
    pub(crate) quorum: usize,
    pub(crate) nodes: Vec<NodeReport>,
    pub(crate) elapsed: Duration,
    pub(crate) attempts: u32,
    pub(crate) waited: Duration,
}

impl Report {
    /// The round: acquire, extend or release.
    pub fn round(&self) -> Round {
        self.round
    }

    /// The resource, lossily as UTF-8 (messages cut it after 64 characters;
    /// this is the whole name).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Votes needed.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// One entry per configured node, in configuration order.
    pub fn nodes(&self) -> &[NodeReport] {
        &self.nodes
    }

    /// Time the (last) round took, on the manager's clock.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Attempts made (acquire with retries); 1 for a single round.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time from the start of the first attempt to the end of the last
    /// one; equal to [`elapsed`](Self::elapsed) for a single round.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Nodes that granted the operation.
    pub fn granted(&self) -> usize {
        self.count(NodeOutcome::is_granted)
    }

    /// Nodes that answered no.
    pub fn refused(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Refused))
    }

    /// Nodes that failed, timed out, were down or quarantined.
    pub fn unavailable(&self) -> usize {
        self.count(|o| {
            !matches!(
                o,
                NodeOutcome::Granted | NodeOutcome::Refused | NodeOutcome::NotAwaited
            )
        })
    }

    /// The names of nodes whose outcome matches `pred`.
    pub fn nodes_where(&self, pred: impl Fn(&NodeOutcome) -> bool) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|n| pred(&n.outcome))
            .map(|n| n.node.as_str())
            .collect()
    }

    /// Whether failures that retrying cannot fix (authentication, ACL,
    /// wrong key type, read-only replica, misconfiguration, protocol
    /// mismatch) leave too few nodes for a quorum: then another attempt
    /// cannot succeed either.
    pub fn quorum_out_of_reach(&self) -> bool {
        let permanent =
            self.count(|o| matches!(o, NodeOutcome::Failed(e) if e.kind().is_permanent()));
        self.nodes.len() - permanent < self.quorum
    }

    fn count(&self, pred: impl Fn(&NodeOutcome) -> bool) -> usize {
        self.nodes.iter().filter(|n| pred(&n.outcome)).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}/{} nodes granted, {} needed",
            self.round,
            Shortened(&self.resource),
            self.granted(),
            self.nodes.len(),
            self.quorum,
        )?;
        let not_awaited = self.count(|o| matches!(o, NodeOutcome::NotAwaited));
        if not_awaited > 0 {
            write!(f, " ({not_awaited} not awaited: decided without them)")?;
        }
        if self.attempts > 1 {
            write!(
                f,
                ", {} attempts over {} (the last took {})",
                self.attempts,
                human(self.waited),
                human(self.elapsed)
            )?;
        } else {
            write!(f, ", in {}", human(self.elapsed))?;
        }
        f.write_str(" [")?;
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", n.node, n.outcome.describe(self.round, &n.node))?;
        }
        f.write_str("]")
    }
}

/// Longest resource name shown in full in messages; longer ones are cut
/// (the report keeps the whole name).
const SHOWN_RESOURCE_CHARS: usize = 64;

/// A resource name for a one-line message: quoted, cut after
/// [`SHOWN_RESOURCE_CHARS`] characters with the full length said.
pub(crate) struct Shortened<'a>(pub(crate) &'a str);

impl fmt::Display for Shortened<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars = self.0.chars().count();
        if chars <= SHOWN_RESOURCE_CHARS {
            return write!(f, "{:?}", self.0);
        }
        let head: String = self.0.chars().take(SHOWN_RESOURCE_CHARS).collect();
        write!(f, "{head:?}... ({} bytes)", self.0.len())
    }
}

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
            | Self::ValidityExpired { report } => Some(report),
            Self::Lost { report, .. } => report.as_deref(),
            Self::InvalidArgument { .. } | Self::Config { .. } | Self::Runtime { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Self::Runtime { reason } => write!(f, "runtime failure: {reason}"),
        }
    }
}

/// `Display` already names every node and its reason in one line, so no
/// single node's error is chained as the `source`: a round can fail on
/// several nodes for different reasons. [`Error::report`] gives them all,
/// typed ([`NodeOutcome::Failed`] holds each [`BackendError`]).
impl StdError for Error {}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendErrorKind;

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

    /// Issue 10, item 7: failures that retrying cannot fix end the retries.
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

    /// Issue 10, item 8: a huge resource name does not make a huge message.
    #[test]
    fn long_resource_names_are_cut_in_messages() {
        let mut r = report();
        r.resource = "x".repeat(1 << 20);
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
    fn durations_read_like_people_write_them() {
        let ms = Duration::from_millis;
        assert_eq!(human(Duration::from_micros(812)), "812 µs");
        assert_eq!(human(Duration::from_micros(1530)), "1.53 ms");
        assert_eq!(human(ms(15) + Duration::from_micros(300)), "15.3 ms");
        assert_eq!(human(ms(1530)), "1.53 s");
        assert_eq!(human(Duration::from_secs(125)), "2 min 5 s");
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
