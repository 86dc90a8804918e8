//! The read-write lock NAME (`run --shared` / `run --exclusive`) as
//! `status` and `break` see it. On each node it is two keys: the writer's
//! (a plain lock key, read as a lock's: its holder's value and time left,
//! in one atomic read through the library) and the readers' (a sorted set:
//! one member per reader, its value; scored by its expiry, in ms on the
//! server's clock), read with `ZRANGE ... WITHSCORES` and then `TIME` on
//! the same connection: a reader's time left is its score less the
//! server's now.
//!
//! The quorum's view follows the library's rules: a writer or a reader
//! holds the lock when its value is on a quorum of nodes (a reader only
//! where it has not expired); a writer whose key is on a quorum is
//! admitted where no reader is left, and waits (its key stops new readers)
//! while a quorum of its nodes still has readers. Stale by construction,
//! as every inspection: for people, never to decide that one may act.
//!
//! Nothing here prints a token: a holder is named by its owner label only.

use std::time::Duration;

use quorum_lock::LockManager;
use quorum_lock::backend::Holding;
use quorum_lock::inspection::Verdict;

use crate::inspect::{self, Node};

mod show;

/// One reader's entry on one node.
pub(crate) struct Reader {
    /// Its stored value (token and owner label): compared, never printed.
    pub(crate) value: Vec<u8>,
    /// Its owner label, when it has one.
    owner: Option<String>,
    /// Time left on the node's clock; `None`: past its expiry (it no
    /// longer counts, and goes at the next reader's entry).
    left: Option<Duration>,
}

/// What one node holds of the lock.
pub(crate) struct NodeState {
    /// The writer's key.
    pub(crate) writer: Option<Holding>,
    /// Every entry of the readers' set, the soonest to expire first.
    pub(crate) readers: Vec<Reader>,
}

impl NodeState {
    fn live(&self) -> impl Iterator<Item = &Reader> {
        self.readers.iter().filter(|r| r.left.is_some())
    }

    /// No writer, no reader that counts.
    fn is_free(&self) -> bool {
        self.writer.is_none() && self.live().next().is_none()
    }
}

/// One node's line.
pub(crate) struct NodeRw {
    /// The node's name (without credentials).
    pub(crate) node: String,
    pub(crate) state: Result<NodeState, String>,
}

/// A holder a quorum agrees on.
struct Holder {
    owner: Option<String>,
    /// The quorum-th longest time left among its nodes, less the drift.
    left: Duration,
    /// Nodes that hold it.
    on: usize,
}

/// The writer a quorum of nodes has.
struct Writer {
    holder: Holder,
    /// Whether a quorum of its nodes has no reader left (it is admitted,
    /// or is as soon as it asks again).
    admitted: bool,
}

/// The read-write lock NAME on every node, and the quorum's view of it.
pub(crate) struct RwView {
    name: String,
    quorum: usize,
    /// The readers' key and the writer's key on the nodes.
    pub(crate) keys: (Vec<u8>, Vec<u8>),
    pub(crate) nodes: Vec<NodeRw>,
    writer: Option<Writer>,
    /// The readers a quorum of nodes has, in the order first seen.
    readers: Vec<Holder>,
    verdict: Verdict,
}

/// The read-write lock `name` on `nodes`, or why it cannot be read (a name
/// no read-write lock can have).
pub(crate) fn read(
    locks: &LockManager,
    nodes: &[Node],
    name: &str,
) -> Result<RwView, quorum_lock::Error> {
    let rw = locks.rw_lock(name)?;
    let (readers, writer) = rw.keys();
    // In parallel: a node that does not answer costs its timeout once.
    let states: Vec<Result<NodeState, String>> = std::thread::scope(|scope| {
        let reading: Vec<_> = nodes
            .iter()
            .map(|node| scope.spawn(move || read_node(node, readers, writer)))
            .collect();
        reading
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err("reading it failed (the reader panicked)".to_owned()))
            })
            .collect()
    });
    let nodes = nodes
        .iter()
        .zip(states)
        .map(|(node, state)| NodeRw {
            node: node.name.clone(),
            state,
        })
        .collect();
    Ok(RwView::judge(
        name,
        (readers.to_vec(), writer.to_vec()),
        nodes,
        locks,
    ))
}

/// [`read`] for `status`: `None` when no node has either key (a plain
/// lock, or a free read-write lock: nothing to add), when no read-write
/// lock can have the name, or when the nodes cannot be opened (the
/// lock's own inspection says why).
pub(crate) fn look(
    locks: &LockManager,
    urls: &[String],
    timeout: Duration,
    name: &str,
) -> Option<RwView> {
    let nodes = inspect::nodes(urls, timeout).ok()?;
    read(locks, &nodes, name).ok().filter(RwView::exists)
}

fn read_node(node: &Node, readers: &[u8], writer: &[u8]) -> Result<NodeState, String> {
    let writer = node
        .read(writer)
        .map_err(|e| format!("the writer's key: {e}"))?;
    // The live readers have the highest scores (their expiries), and at
    // most `MAX_READERS` are live: the expired ones below them are no
    // readers any more (every step on the lock drops them).
    let (members, now) = node
        .sorted_set(readers, quorum_lock::MAX_READERS)
        .map_err(|e| format!("the readers: {e}"))?;
    let readers = members
        .into_iter()
        .filter_map(|(value, score)| {
            // Scores are whole ms (the scripts add integers): exact in an
            // f64, and far inside an i64.
            #[allow(clippy::cast_possible_truncation)]
            let left = score as i64 - now;
            let left = u64::try_from(left).ok().filter(|ms| *ms > 0)?;
            Some(Reader {
                owner: owner_of(&value),
                left: Some(Duration::from_millis(left)),
                value,
            })
        })
        .collect();
    Ok(NodeState { writer, readers })
}

/// The owner label in a stored value, as a lock key's is read: never any
/// part of the token.
fn owner_of(value: &[u8]) -> Option<String> {
    Holding::new(value, value.len(), None)
        .owner()
        .map(str::to_owned)
}

/// The `quorum`-th longest of `lefts` (`Duration::MAX`: no expiry), less
/// the drift over it.
fn quorum_th(mut lefts: Vec<Duration>, quorum: usize, locks: &LockManager) -> Duration {
    lefts.sort_unstable_by(|a, b| b.cmp(a));
    match lefts.get(quorum.saturating_sub(1)) {
        Some(&Duration::MAX) => Duration::MAX,
        Some(&left) => left.saturating_sub(locks.drift_for(left)),
        None => Duration::ZERO,
    }
}

impl RwView {
    fn judge(
        name: &str,
        keys: (Vec<u8>, Vec<u8>),
        nodes: Vec<NodeRw>,
        locks: &LockManager,
    ) -> Self {
        let quorum = locks.quorum();
        let states: Vec<&NodeState> = nodes.iter().filter_map(|n| n.state.as_ref().ok()).collect();
        // The writer's value on most nodes, when on a quorum.
        let mut writer: Option<Writer> = None;
        for holding in states.iter().filter_map(|s| s.writer.as_ref()) {
            let same: Vec<&&NodeState> = states
                .iter()
                .filter(|s| {
                    s.writer
                        .as_ref()
                        .is_some_and(|w| w.len() == holding.len() && w.value() == holding.value())
                })
                .collect();
            if same.len() < quorum || writer.as_ref().is_some_and(|w| w.holder.on >= same.len()) {
                continue;
            }
            let lefts = same
                .iter()
                .map(|s| {
                    s.writer
                        .as_ref()
                        .and_then(Holding::ttl)
                        .unwrap_or(Duration::MAX)
                })
                .collect();
            writer = Some(Writer {
                holder: Holder {
                    owner: holding.owner().map(str::to_owned),
                    left: quorum_th(lefts, quorum, locks),
                    on: same.len(),
                },
                admitted: same.iter().filter(|s| s.live().next().is_none()).count() >= quorum,
            });
        }
        // Each reader that is live on a quorum of nodes.
        let mut readers: Vec<(&[u8], Holder)> = Vec::new();
        for reader in states.iter().flat_map(|s| s.live()) {
            if readers
                .iter()
                .any(|(value, _)| *value == reader.value.as_slice())
            {
                continue;
            }
            let lefts: Vec<Duration> = states
                .iter()
                .filter_map(|s| s.live().find(|r| r.value == reader.value)?.left)
                .collect();
            if lefts.len() >= quorum {
                let on = lefts.len();
                readers.push((
                    &reader.value,
                    Holder {
                        owner: reader.owner.clone(),
                        left: quorum_th(lefts, quorum, locks),
                        on,
                    },
                ));
            }
        }
        let readers: Vec<Holder> = readers.into_iter().map(|(_, holder)| holder).collect();
        let free = states.iter().filter(|s| s.is_free()).count();
        let verdict = if writer.is_some() || !readers.is_empty() {
            Verdict::Held
        } else if free >= quorum {
            Verdict::Free
        } else if states.len() >= quorum {
            Verdict::Split
        } else {
            Verdict::Unknown
        };
        Self {
            name: name.to_owned(),
            quorum,
            keys,
            nodes,
            writer,
            readers,
            verdict,
        }
    }

    /// Whether any node has either key (a reader past its expiry counts:
    /// its entry is still there).
    pub(crate) fn exists(&self) -> bool {
        self.nodes.iter().any(|n| {
            n.state
                .as_ref()
                .is_ok_and(|s| s.writer.is_some() || !s.readers.is_empty())
        })
    }

    /// What the nodes say, taken together: held (by a writer, or by at
    /// least one reader), free, split or unknown, as a lock's inspection.
    pub(crate) fn verdict(&self) -> Verdict {
        self.verdict
    }
}
