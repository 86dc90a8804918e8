//! The read-write lock as `status` shows it: each node's state in words,
//! the quorum's view in one line, and both as JSON for scripts. Nothing
//! here prints a token: a holder is named by its owner label only.

use std::time::Duration;

use quorum_lock::inspection::Verdict;

use super::{NodeRw, NodeState, Reader, RwView};
use crate::json::Json;
use crate::wording::verdict_word;

/// Most readers one line names; the others are counted.
const NAMED: usize = 10;

impl RwView {
    /// One node's state, in words.
    pub(crate) fn node_text(node: &NodeRw) -> String {
        let state = match &node.state {
            Ok(state) => state,
            Err(e) => return format!("read-write lock: {e}"),
        };
        let writer = match &state.writer {
            None => "no writer".to_owned(),
            Some(holding) => {
                let expiry = match holding.ttl() {
                    Some(ttl) => format!("expires in {} ms", ttl.as_millis()),
                    None => "without expiry (not a lock key?)".to_owned(),
                };
                format!("writer {}, {expiry}", by(holding.owner()))
            }
        };
        let live: Vec<&Reader> = state.live().collect();
        let mut readers = match live.len() {
            0 => "no readers".to_owned(),
            n => {
                let named: Vec<String> = live
                    .iter()
                    .take(NAMED)
                    .map(|r| {
                        let left = r.left.unwrap_or_default().as_millis();
                        format!("{} (expires in {left} ms)", label(r.owner.as_deref()))
                    })
                    .collect();
                format!(
                    "{n} {}: {}{}",
                    plural(n, "reader"),
                    named.join(", "),
                    more(n)
                )
            }
        };
        let expired = state.readers.len() - live.len();
        if expired > 0 {
            readers.push_str(&format!(
                " ({expired} past {} expiry, no longer counted)",
                if expired == 1 { "its" } else { "their" }
            ));
        }
        format!("read-write lock: {writer}; {readers}")
    }

    /// One line: the quorum's view.
    pub(crate) fn summary(&self) -> String {
        let total = self.nodes.len();
        let quorum = self.quorum;
        let name = &self.name;
        let free = self
            .nodes
            .iter()
            .filter(|n| n.state.as_ref().is_ok_and(NodeState::is_free))
            .count();
        let said = match self.verdict {
            Verdict::Held => {
                let mut parts = Vec::new();
                if let Some(writer) = &self.writer {
                    let who = label(writer.holder.owner.as_deref());
                    parts.push(if writer.admitted {
                        format!("written by {who}{}", for_at_least(writer.holder.left))
                    } else {
                        format!(
                            "{who} waits to write (its claim on {} of {total} nodes stops new \
                             readers)",
                            writer.holder.on
                        )
                    });
                }
                let n = self.readers.len();
                if n > 0 {
                    let named: Vec<String> = self
                        .readers
                        .iter()
                        .take(NAMED)
                        .map(|r| format!("{}{}", label(r.owner.as_deref()), for_at_least(r.left)))
                        .collect();
                    parts.push(format!(
                        "read by {n} {}: {}{}",
                        plural(n, "reader"),
                        named.join(", "),
                        more(n)
                    ));
                }
                format!(
                    "{} (a quorum is {quorum} of {total} nodes)",
                    parts.join("; ")
                )
            }
            Verdict::Free => format!("free ({free} of {total} nodes; {quorum} needed)"),
            Verdict::Split => format!(
                "split: no quorum agrees on a writer or a reader (free on {free} of {total} \
                 nodes; {quorum} needed)"
            ),
            _ => format!("unknown: fewer than {quorum} of {total} nodes answered"),
        };
        format!("{name} (read-write lock): {said}")
    }

    /// The same, for scripts.
    pub(crate) fn json(&self) -> Json {
        let reader = |owner: Option<&str>, left: Duration| {
            Json::Obj(vec![
                ("owner", owner.map(str::to_owned).into()),
                ("time_left_ms", Json::millis(left)),
            ])
        };
        let writer = self.writer.as_ref().map_or(Json::Null, |w| {
            Json::Obj(vec![
                ("owner", w.holder.owner.clone().into()),
                ("admitted", w.admitted.into()),
                ("time_left_ms", millis_or_null(w.holder.left)),
                ("nodes", w.holder.on.into()),
            ])
        });
        let readers = self
            .readers
            .iter()
            .map(|r| reader(r.owner.as_deref(), r.left))
            .collect();
        let nodes = self
            .nodes
            .iter()
            .map(|node| {
                let (writer, readers, error) = match &node.state {
                    Ok(state) => (
                        state.writer.as_ref().map_or(Json::Null, |h| {
                            Json::Obj(vec![
                                ("owner", h.owner().map(str::to_owned).into()),
                                ("pttl_ms", h.ttl().map(Json::millis).into()),
                            ])
                        }),
                        Json::Arr(
                            state
                                .live()
                                .map(|r| reader(r.owner.as_deref(), r.left.unwrap_or_default()))
                                .collect(),
                        ),
                        Json::Null,
                    ),
                    Err(e) => (Json::Null, Json::Null, e.clone().into()),
                };
                Json::Obj(vec![
                    ("node", node.node.as_str().into()),
                    ("writer", writer),
                    ("readers", readers),
                    ("error", error),
                ])
            })
            .collect();
        Json::Obj(vec![
            ("verdict", verdict_word(self.verdict).into()),
            ("writer", writer),
            ("reader_count", self.readers.len().into()),
            ("readers", Json::Arr(readers)),
            ("quorum", self.quorum.into()),
            ("nodes", Json::Arr(nodes)),
        ])
    }
}

/// `held by LABEL`, or by a client without one.
fn by(owner: Option<&str>) -> String {
    match owner {
        Some(owner) => format!("held by {owner}"),
        None => "held by a client without an owner label".to_owned(),
    }
}

/// A holder's owner label, or what stands for it.
fn label(owner: Option<&str>) -> &str {
    owner.unwrap_or("a client without an owner label")
}

fn for_at_least(left: Duration) -> String {
    if left == Duration::MAX {
        " without expiry".to_owned()
    } else {
        format!(" for at least {} ms", left.as_millis())
    }
}

fn millis_or_null(left: Duration) -> Json {
    if left == Duration::MAX {
        Json::Null
    } else {
        Json::millis(left)
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// `, and N more` past the named ones.
fn more(n: usize) -> String {
    if n > NAMED {
        format!(", and {} more", n - NAMED)
    } else {
        String::new()
    }
}
