//! What each node did in a quorum round: the per-node [`Report`] that
//! every acquire, extend and release produces (and every error that a
//! round decided carries), with each node's [`NodeOutcome`]: granted,
//! refused, failed, timed out or skipped, in one line for people.
//!
//! For a program that acts on a round's details (logs, metrics, alerts);
//! a lock user who only needs the lock reads none of it.

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
    /// A leader's proclaim: its value written beside the election's lock
    /// key, where that key still holds its token
    /// ([`Leadership::proclaim`](crate::Leadership::proclaim)).
    Proclaim,
    /// Reading who leads an election
    /// ([`Election::observe`](crate::Election::observe)): a node is
    /// granted when its view is the one a quorum agrees on.
    Observe,
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
            Self::Proclaim => "proclaim",
            Self::Observe => "observe",
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
    /// Not contacted: [`LockGuard::release`](crate::LockGuard::release)
    /// handed the lock to a thread of the same manager waiting for it, so
    /// the key stays on the node, now held by that thread's guard (see
    /// [`Report::handed_over`]).
    HandedOver,
}

impl NodeOutcome {
    /// Whether the node did the operation.
    pub fn is_granted(&self) -> bool {
        matches!(self, Self::Granted)
    }

    /// The outcome in words, for the line of `node` in a report.
    pub(crate) fn describe(&self, op: Round, node: &str) -> String {
        match (self, op) {
            (Self::Granted, Round::Acquire) => "acquired".into(),
            (Self::Granted, Round::Extend) => "extended".into(),
            (Self::Granted, Round::Release) => "released".into(),
            (Self::Granted, Round::Proclaim) => "proclaimed".into(),
            (Self::Granted, Round::Observe) => "agrees".into(),
            (Self::Refused, Round::Observe) => "sees another leader, or none".into(),
            (Self::Refused, Round::Acquire) => "held elsewhere".into(),
            (Self::Refused, _) => "not held by us".into(),
            (Self::Failed(e), _) => {
                // Backend messages name their node; the report line already
                // does, so it is not said twice.
                format!("failed ({})", e.reason(node))
            }
            (Self::TimedOut, _) => "timed out".into(),
            (Self::NotAwaited, _) => "not awaited".into(),
            (Self::Down, _) => "skipped: marked down".into(),
            (Self::HandedOver, _) => "kept: handed to a waiting thread".into(),
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
    /// The node's name (its [`Backend::describe`](crate::backend::Backend::describe),
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
    /// The lock was refused because this thread holds it, through the
    /// same manager (a `try_lock` of a lock it holds): said so, rather
    /// than "held elsewhere".
    pub(crate) held_here: bool,
    /// A reader stood back without asking the nodes: a writer of the same
    /// manager is on its way (see `RwLock`).
    pub(crate) writer_here: bool,
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
                NodeOutcome::Granted
                    | NodeOutcome::Refused
                    | NodeOutcome::NotAwaited
                    | NodeOutcome::HandedOver
            )
        })
    }

    /// Whether [`LockGuard::release`](crate::LockGuard::release) handed
    /// the lock to a thread of the same manager that was waiting for it,
    /// instead of releasing it on the nodes: no node was contacted (each
    /// shows [`NodeOutcome::HandedOver`]), the keys stay under the same
    /// token until the new holder's guard ends, and that guard's validity
    /// is what was left of this one's. Never for a lost lock, a fenced
    /// one, a waiter that asked for a fence or another TTL, or a lock with
    /// less than half of its TTL left.
    pub fn handed_over(&self) -> bool {
        !self.nodes.is_empty()
            && self.count(|o| matches!(o, NodeOutcome::HandedOver)) == self.nodes.len()
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

    /// The nodes grouped by what they did, in the order each outcome
    /// first appears: each reason once, with the names of the nodes that
    /// gave it.
    fn groups(&self) -> Vec<(Vec<&str>, Said)> {
        let mut groups: Vec<(Vec<&str>, Said)> = Vec::new();
        for node in &self.nodes {
            let said = match node.outcome {
                NodeOutcome::Refused if self.held_here && self.round == Round::Acquire => {
                    Said::Text("held by this thread".into())
                }
                _ if self.writer_here => {
                    Said::Text("not asked: a writer of this process waits".into())
                }
                _ => Said::of(&node.outcome, self.round, &node.node),
            };
            match groups.iter_mut().find(|(_, s)| s.same(&said)) {
                Some((names, s)) => {
                    names.push(&node.node);
                    s.merge(&said);
                }
                None => groups.push((vec![&node.node], said)),
            }
        }
        groups
    }
}

/// What one or more nodes did, as a report says it.
enum Said {
    /// Quarantined: the shortest and the longest time left (one reason;
    /// the times differ by the servers' start times).
    Quarantined(Duration, Duration),
    /// Any other outcome, in words.
    Text(String),
}

impl Said {
    fn of(outcome: &NodeOutcome, round: Round, node: &str) -> Self {
        match outcome {
            NodeOutcome::Quarantined { remaining } => Self::Quarantined(*remaining, *remaining),
            other => Self::Text(other.describe(round, node)),
        }
    }

    fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Quarantined(..), Self::Quarantined(..)) => true,
            (Self::Text(a), Self::Text(b)) => a == b,
            _ => false,
        }
    }

    fn merge(&mut self, other: &Self) {
        if let (Self::Quarantined(soonest, latest), Self::Quarantined(s, l)) = (self, other) {
            *soonest = (*soonest).min(*s);
            *latest = (*latest).max(*l);
        }
    }

    /// The words for several nodes (`they vote again`), or for one.
    fn text(&self, several: bool) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Quarantined(soonest, latest) if several => {
                let (soonest, latest) = (human(*soonest), human(*latest));
                let when = if soonest == latest {
                    latest
                } else {
                    format!("{soonest} to {latest}")
                };
                format!(
                    "quarantined: started or restarted less than max_ttl + drift ago, they may \
                     have forgotten locks; they vote again in {when} (settings: max_ttl, \
                     restart_quarantine)"
                )
            }
            Self::Quarantined(remaining, _) => NodeOutcome::Quarantined {
                remaining: *remaining,
            }
            .describe(Round::Acquire, ""),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.handed_over() {
            return write!(
                f,
                "{} {}: handed to a thread of this manager waiting for it (no node contacted; \
                 the lock stays on the nodes under the new holder), in {}",
                self.round,
                Shortened(&self.resource),
                human(self.elapsed)
            );
        }
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
        // Each reason once: when every node (two or more) gave the same,
        // without the names; otherwise each reason after the names of the
        // nodes that gave it.
        f.write_str(" [")?;
        let groups = self.groups();
        if let [(names, said)] = groups.as_slice()
            && names.len() > 1
        {
            let n = names.len();
            return match said {
                Said::Quarantined(..) => write!(f, "all {n} nodes {}]", said.text(true)),
                Said::Text(text) => write!(f, "all {n} nodes: {text}]"),
            };
        }
        for (i, (names, said)) in groups.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", names.join(", "), said.text(names.len() > 1))?;
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

#[cfg(test)]
mod tests {
    use crate::backend::{BackendError, BackendErrorKind};
    use crate::report::*;

    fn report(outcomes: Vec<NodeOutcome>) -> Report {
        Report {
            round: Round::Acquire,
            resource: "job".into(),
            quorum: outcomes.len() / 2 + 1,
            nodes: outcomes
                .into_iter()
                .enumerate()
                .map(|(i, outcome)| NodeReport {
                    node: format!("mem-{i}"),
                    outcome,
                })
                .collect(),
            elapsed: Duration::from_millis(3),
            attempts: 1,
            waited: Duration::from_millis(3),
            held_here: false,
            writer_here: false,
        }
    }

    fn quarantined(secs: f64) -> NodeOutcome {
        NodeOutcome::Quarantined {
            remaining: Duration::from_secs_f64(secs),
        }
    }

    fn refused_connection() -> NodeOutcome {
        NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Unreachable,
            "connection refused",
        ))
    }

    /// Regression: a report that gave the same reason for every node said
    /// it once per node.
    #[test]
    fn one_reason_shared_by_every_node_is_said_once() {
        let text = report(vec![quarantined(31.6); 3]).to_string();
        assert!(
            text.ends_with(
                "[all 3 nodes quarantined: started or restarted less than max_ttl + drift ago, \
                 they may have forgotten locks; they vote again in 31.60 s (settings: max_ttl, \
                 restart_quarantine)]"
            ),
            "{text}"
        );
        assert!(!text.contains("mem-"), "{text}");
        let spread = report(vec![
            quarantined(58.6),
            quarantined(59.6),
            quarantined(60.0),
        ]);
        assert!(
            spread
                .to_string()
                .contains("they vote again in 58.60 s to 1 min 0 s"),
            "{spread}"
        );
        let down = report(vec![refused_connection(), refused_connection()]).to_string();
        assert!(
            down.ends_with("[all 2 nodes: failed (unreachable: connection refused)]"),
            "{down}"
        );
    }

    /// The round stops once a quorum is out of reach: two nodes said
    /// quarantined, the third was not awaited, and the reason was said
    /// twice.
    #[test]
    fn nodes_that_share_a_reason_are_named_together_and_it_is_said_once() {
        let text = report(vec![
            quarantined(60.0),
            quarantined(59.0),
            NodeOutcome::NotAwaited,
        ])
        .to_string();
        assert!(
            text.ends_with(
                "[mem-0, mem-1: quarantined: started or restarted less than max_ttl + drift \
                 ago, they may have forgotten locks; they vote again in 59.00 s to 1 min 0 s \
                 (settings: max_ttl, restart_quarantine); mem-2: not awaited]"
            ),
            "{text}"
        );
        let failed = report(vec![
            refused_connection(),
            NodeOutcome::Granted,
            refused_connection(),
        ])
        .to_string();
        assert!(
            failed.ends_with(
                "[mem-0, mem-2: failed (unreachable: connection refused); mem-1: acquired]"
            ),
            "{failed}"
        );
    }

    #[test]
    fn different_reasons_name_every_node() {
        let text = report(vec![
            quarantined(3.0),
            refused_connection(),
            NodeOutcome::TimedOut,
        ])
        .to_string();
        for part in [
            "mem-0: quarantined: started or restarted less than max_ttl + drift ago, it may \
             have forgotten locks; votes again in 3.00 s",
            "mem-1: failed (unreachable: connection refused)",
            "mem-2: timed out",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        assert!(!text.contains("all 3"), "{text}");
        let one = report(vec![quarantined(3.0)]).to_string();
        assert!(one.contains("mem-0: quarantined"), "{one}");
        let mixed = report(vec![NodeOutcome::Granted, NodeOutcome::TimedOut]).to_string();
        assert!(
            mixed.contains("mem-0: acquired; mem-1: timed out"),
            "{mixed}"
        );
    }
}
