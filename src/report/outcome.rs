//! What one node did in one round: the round ([`Round`]), the node's
//! outcome ([`NodeOutcome`]) and its line in a report ([`NodeReport`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::BackendError;
use crate::words::human;

/// Which quorum round a [`Report`](super::Report) describes.
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
    /// [`Report::handed_over`](super::Report::handed_over)).
    HandedOver,
}

impl NodeOutcome {
    /// Whether the node did the operation.
    pub fn is_granted(&self) -> bool {
        matches!(self, Self::Granted)
    }

    /// Whether the node said no: the key is another token's. The one
    /// definition behind a report's count of refusals and the rounds'
    /// verdicts (a refused node took nothing and needs no undo).
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self, Self::Refused)
    }

    /// The outcome in words, for the line of `node` in a report.
    pub(crate) fn describe(&self, op: Round, node: &str) -> String {
        match (self, op) {
            (Self::Granted, Round::Acquire) => "acquired".into(),
            (Self::Granted, Round::Extend) => "extended".into(),
            (Self::Granted, Round::Release) => "released".into(),
            (Self::Granted, Round::Proclaim) => "proclaimed".into(),
            (Self::Granted, Round::Observe) => "agrees".into(),
            (Self::Refused, Round::Acquire) => "held elsewhere".into(),
            (Self::Refused, Round::Observe) => "sees another leader, or none".into(),
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

/// One node's line in a [`Report`](super::Report).
#[derive(Debug, Clone)]
pub struct NodeReport {
    /// Shared with every report of the manager: no copy per round.
    pub(crate) node: Arc<str>,
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
