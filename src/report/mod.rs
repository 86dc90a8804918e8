//! What each node did in a quorum round: the per-node [`Report`] that
//! every acquire, extend and release produces (and every error that a
//! round decided carries), with each node's [`NodeOutcome`]: granted,
//! refused, failed, timed out or skipped, in one line for people.
//!
//! For a program that acts on a round's details (logs, metrics, alerts);
//! a lock user who only needs the lock reads none of it.

use std::fmt;
use std::time::Duration;

pub use self::outcome::{NodeOutcome, NodeReport, Round};
use crate::words::{Shortened, human};

pub(crate) use self::name::Name;

mod name;
mod outcome;

/// The per-node account of one quorum round: who said yes, no, failed,
/// timed out or was skipped.
#[derive(Debug, Clone)]
pub struct Report {
    pub(crate) round: Round,
    pub(crate) resource: Name,
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
        self.resource.as_str()
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
        self.count(NodeOutcome::is_refused)
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
            .map(|n| n.node())
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
                _ => Said::of(&node.outcome, self.round, node.node()),
            };
            match groups.iter_mut().find(|(_, s)| s.same(&said)) {
                Some((names, s)) => {
                    names.push(node.node());
                    s.merge(&said);
                }
                None => groups.push((vec![node.node()], said)),
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
                Shortened(self.resource.as_str()),
                human(self.elapsed)
            );
        }
        write!(
            f,
            "{} {}: {}/{} nodes granted, {} needed",
            self.round,
            Shortened(self.resource.as_str()),
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
                    node: format!("mem-{i}").into(),
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
