//! "Who holds this lock, and for how long?": the [`Inspection`] that
//! [`LockManager::inspect`](crate::LockManager::inspect) returns, what it
//! read on every node ([`NodeView`], [`KeyState`]), and the quorum's
//! [`Verdict`] on it.
//!
//! An inspection is read-only and stale by construction: the answer is
//! about the moment each node was read, and a lock can be taken, released
//! or expire right after. It is for people and dashboards; a program that
//! must act alone takes the lock.

use std::fmt;
use std::time::Duration;

use crate::backend::{BackendError, Holding};
use crate::owner::owner_in;
use crate::words::human;

/// What the nodes that answered say, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of nodes holds the key with the same value: one holder.
    Held,
    /// A quorum of nodes does not hold the key.
    Free,
    /// A quorum of nodes answered, but neither of the above: some hold it
    /// (perhaps for different holders), some not. A lock being taken or
    /// released, or the remains of a failed attempt that expire with it.
    Split,
    /// Fewer than a quorum of nodes answered: the others could say
    /// anything.
    Unknown,
}

/// What one node holds under the key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum KeyState {
    /// The key does not exist.
    Free,
    /// The key holds a value.
    Held {
        /// The holder's owner label, when the value is a quorum-lock lock
        /// that carries one (never any part of its token).
        owner: Option<String>,
        /// Time left on this node's expiry; `None`: no expiry (not a lock
        /// key).
        ttl: Option<Duration>,
        /// Whether this is the holder a quorum agrees on
        /// ([`Verdict::Held`]).
        quorum_holder: bool,
    },
    /// The node gave no answer: why.
    Failed(BackendError),
}

/// One node's line in an [`Inspection`].
#[derive(Debug, Clone)]
pub struct NodeView {
    node: String,
    state: KeyState,
}

impl NodeView {
    /// The node's name (without credentials).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What it holds under the key.
    pub fn state(&self) -> &KeyState {
        &self.state
    }
}

/// What [`LockManager::inspect`](crate::LockManager::inspect) found: stale
/// by construction (see the module text in the docs of `inspect`).
#[derive(Debug, Clone)]
pub struct Inspection {
    resource: String,
    quorum: usize,
    verdict: Verdict,
    owner: Option<String>,
    time_left: Duration,
    nodes: Vec<NodeView>,
    took: Duration,
}

impl Inspection {
    /// Judges the nodes' answers (`(name, answer)` in configuration order)
    /// for a lock with this `quorum`. `drift(t)` is the clock drift allowed
    /// over a remaining time `t`; `took` is how long the inspection took.
    pub(crate) fn judge(
        resource: String,
        quorum: usize,
        answers: Vec<(String, Result<Option<Holding>, BackendError>)>,
        drift: impl Fn(Duration) -> Duration,
        took: Duration,
    ) -> Self {
        let holdings: Vec<Option<&Holding>> = answers
            .iter()
            .map(|(_, a)| a.as_ref().ok().and_then(Option::as_ref))
            .collect();
        // The value held on most nodes, and on which.
        let mut best: Option<(&Holding, Vec<usize>)> = None;
        for holding in holdings.iter().flatten() {
            let same: Vec<usize> = (0..holdings.len())
                .filter(|&j| holdings[j].is_some_and(|h| h.same_holder(holding)))
                .collect();
            if best.as_ref().is_none_or(|(_, b)| same.len() > b.len()) {
                best = Some((holding, same));
            }
        }
        let free = answers
            .iter()
            .filter(|(_, a)| matches!(a, Ok(None)))
            .count();
        let answered = answers.iter().filter(|(_, a)| a.is_ok()).count();
        let holder = best.filter(|(_, on)| on.len() >= quorum);
        let verdict = if holder.is_some() {
            Verdict::Held
        } else if free >= quorum {
            Verdict::Free
        } else if answered >= quorum {
            Verdict::Split
        } else {
            Verdict::Unknown
        };
        let (owner, time_left, on) = match &holder {
            Some((holding, on)) => {
                // Conservative: the quorum-th longest time left among the
                // holder's nodes (the holder keeps a quorum at least that
                // long), less the drift and the time the reads took.
                let mut ttls: Vec<Duration> = on
                    .iter()
                    .map(|&i| holdings[i].and_then(Holding::ttl).unwrap_or(Duration::MAX))
                    .collect();
                ttls.sort_unstable_by(|a, b| b.cmp(a));
                let nth = ttls[quorum - 1];
                let left = if nth == Duration::MAX {
                    Duration::MAX
                } else {
                    nth.saturating_sub(drift(nth)).saturating_sub(took)
                };
                (
                    owner_in(holding.value()).map(str::to_owned),
                    left,
                    on.clone(),
                )
            }
            None => (None, Duration::ZERO, Vec::new()),
        };
        let nodes = answers
            .into_iter()
            .enumerate()
            .map(|(i, (node, answer))| NodeView {
                node,
                state: match answer {
                    Ok(None) => KeyState::Free,
                    Ok(Some(h)) => KeyState::Held {
                        owner: owner_in(h.value()).map(str::to_owned),
                        ttl: h.ttl(),
                        quorum_holder: on.contains(&i),
                    },
                    Err(e) => KeyState::Failed(e),
                },
            })
            .collect();
        Self {
            resource,
            quorum,
            verdict,
            owner,
            time_left,
            nodes,
            took,
        }
    }

    /// Whether a quorum of nodes holds the lock for one holder
    /// ([`Verdict::Held`]). `false` is not "free": see
    /// [`verdict`](Self::verdict).
    pub fn is_held(&self) -> bool {
        self.verdict == Verdict::Held
    }

    /// What the nodes say, taken together.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The holder's owner label
    /// ([`LockManagerBuilder::owner`](crate::LockManagerBuilder::owner)),
    /// when held by a quorum-lock client that stores one; `None` otherwise
    /// (free, or held by another client).
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// How long the holder keeps the lock at least, counted from the end
    /// of the inspection: the quorum-th longest time left among the nodes
    /// that hold it, less the clock drift and the time the inspection
    /// took. Zero when not held; `Duration::MAX` when held without expiry
    /// (a key some other program set). The holder's own
    /// [`LockGuard::validity`](crate::LockGuard::validity) counts from
    /// before its request reached the nodes, so it may read a little less.
    pub fn time_left(&self) -> Duration {
        self.time_left
    }

    /// The resource, lossily as UTF-8.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Nodes that must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// One line per configured node, in configuration order.
    pub fn nodes(&self) -> &[NodeView] {
        &self.nodes
    }

    /// How long the inspection took.
    pub fn took(&self) -> Duration {
        self.took
    }
}

impl fmt::Display for Inspection {
    /// One line: `report: held by build-7:4211 for at least 28.9 s (3 of 3
    /// nodes hold it; 2 needed)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holding = self
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.state,
                    KeyState::Held {
                        quorum_holder: true,
                        ..
                    }
                )
            })
            .count();
        let free = self
            .nodes
            .iter()
            .filter(|n| matches!(n.state, KeyState::Free))
            .count();
        let total = self.nodes.len();
        let quorum = self.quorum;
        write!(f, "{}: ", self.resource)?;
        match self.verdict {
            Verdict::Held => {
                let owner = self.owner.as_deref().unwrap_or("a client without a label");
                if self.time_left == Duration::MAX {
                    write!(f, "held by {owner} without expiry")?;
                } else {
                    write!(f, "held by {owner} for at least {}", human(self.time_left))?;
                }
                write!(f, " ({holding} of {total} nodes hold it; {quorum} needed)")
            }
            Verdict::Free => write!(f, "free ({free} of {total} nodes; {quorum} needed)"),
            Verdict::Split => write!(
                f,
                "split: no quorum agrees (free on {free} of {total} nodes; {quorum} needed)"
            ),
            Verdict::Unknown => {
                let failed: Vec<String> = self
                    .nodes
                    .iter()
                    .filter_map(|n| match &n.state {
                        KeyState::Failed(e) => Some(format!("{}: {}", n.node, e.reason(&n.node))),
                        _ => None,
                    })
                    .collect();
                write!(
                    f,
                    "unknown: fewer than {quorum} of {total} nodes answered ({})",
                    failed.join("; ")
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendErrorKind;
    use crate::owner::{push_value, value_suffix};
    use crate::token::Token;

    fn value(token: &Token, owner: &str) -> Vec<u8> {
        let mut v = Vec::new();
        push_value(token, &value_suffix(owner), &mut v);
        v
    }

    fn held(v: &[u8], ms: u64) -> Result<Option<Holding>, BackendError> {
        Ok(Some(Holding::new(
            v,
            v.len(),
            Some(Duration::from_millis(ms)),
        )))
    }

    fn judge(answers: Vec<Result<Option<Holding>, BackendError>>) -> Inspection {
        let named = answers
            .into_iter()
            .enumerate()
            .map(|(i, a)| (format!("n{i}"), a))
            .collect::<Vec<_>>();
        let quorum = named.len() / 2 + 1;
        Inspection::judge(
            "r".into(),
            quorum,
            named,
            |_| Duration::from_millis(10),
            Duration::from_millis(5),
        )
    }

    fn down() -> Result<Option<Holding>, BackendError> {
        Err(BackendError::new(BackendErrorKind::Unreachable, "refused"))
    }

    #[test]
    fn a_quorum_of_one_holder_is_held_with_the_quorum_th_longest_time_left() {
        let t = Token::random().unwrap();
        let v = value(&t, "a:1");
        let seen = judge(vec![held(&v, 9_000), held(&v, 5_000), held(&v, 7_000)]);
        assert!(seen.is_held());
        assert_eq!(seen.owner(), Some("a:1"));
        // Second longest of 9 s, 7 s, 5 s, less drift (10 ms) and took (5 ms).
        assert_eq!(seen.time_left(), Duration::from_millis(7_000 - 15));
        let text = seen.to_string();
        assert!(text.contains("held by a:1"), "{text}");
        let full: String = t.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert!(!format!("{text} {seen:?}").contains(&full));
    }

    #[test]
    fn two_holders_each_on_a_minority_is_split_not_held() {
        let (a, b) = (Token::random().unwrap(), Token::random().unwrap());
        let seen = judge(vec![
            held(&value(&a, "a:1"), 9_000),
            held(&value(&b, "b:2"), 9_000),
            Ok(None),
        ]);
        assert_eq!(seen.verdict(), Verdict::Split);
        assert!(!seen.is_held());
        assert_eq!(seen.owner(), None);
        assert_eq!(seen.time_left(), Duration::ZERO);
    }

    #[test]
    fn too_few_answers_is_unknown_and_names_the_failed_nodes() {
        let seen = judge(vec![Ok(None), down(), down()]);
        assert_eq!(seen.verdict(), Verdict::Unknown);
        let text = seen.to_string();
        assert!(text.contains("n1") && text.contains("n2"), "{text}");
        let free = judge(vec![Ok(None), Ok(None), down()]);
        assert_eq!(free.verdict(), Verdict::Free);
    }

    #[test]
    fn a_foreign_value_is_held_without_an_owner() {
        let v = b"6f1c2a9e-0000-4000-8000-1234567890ab".to_vec();
        let seen = judge(vec![held(&v, 3_000), held(&v, 3_000), down()]);
        assert!(seen.is_held());
        assert_eq!(seen.owner(), None);
    }
}
