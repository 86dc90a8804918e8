//! `quorum-lock status NAME`: whether the lock's key is held on each node
//! (and for how long), and the quorum's verdict.
//!
//! Verdicts: `held` or `free` when a quorum of nodes says so; `split` when
//! a quorum of nodes answered but disagree; `unknown` when fewer than a
//! quorum answered (the others could say anything). Exit codes: 0 held,
//! 1 free, 3 split, 69 unknown (servers unavailable), 78 for a malformed
//! node URL.

use crate::args::{Global, StatusArgs};
use crate::exit;
use crate::inspect::{self, Node};
use crate::json::Json;

/// What one node says about the key.
enum KeyState {
    /// Held, with this many milliseconds left (`None`: no expiry at all,
    /// which a lock key never has).
    Held(Option<i64>),
    Free,
    /// No answer: why, in one phrase.
    Unreachable(String),
}

pub(crate) fn status(global: &Global, args: &StatusArgs) -> u8 {
    let nodes = match inspect::nodes(&global.nodes, global.node_timeout) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("quorum-lock: {e}");
            return exit::CONFIG;
        }
    };
    let key = [global.prefix.as_bytes(), args.name.as_bytes()].concat();
    let states: Vec<KeyState> = nodes.iter().map(|node| key_state(node, &key)).collect();
    let quorum = nodes.len() / 2 + 1;
    let held = states
        .iter()
        .filter(|s| matches!(s, KeyState::Held(_)))
        .count();
    let free = states
        .iter()
        .filter(|s| matches!(s, KeyState::Free))
        .count();
    let (verdict, code) = if held >= quorum {
        ("held", 0)
    } else if free >= quorum {
        ("free", 1)
    } else if held + free >= quorum {
        ("split", 3)
    } else {
        ("unknown", exit::UNAVAILABLE)
    };
    if args.json {
        let per_node = nodes
            .iter()
            .zip(&states)
            .map(|(node, state)| {
                let (held, pttl, error) = match state {
                    KeyState::Held(ms) => (Json::Bool(true), (*ms).into(), Json::Null),
                    KeyState::Free => (Json::Bool(false), Json::Null, Json::Null),
                    KeyState::Unreachable(e) => (Json::Null, Json::Null, e.clone().into()),
                };
                Json::Obj(vec![
                    ("node", node.name.clone().into()),
                    ("held", held),
                    ("pttl_ms", pttl),
                    ("error", error),
                ])
            })
            .collect();
        let out = Json::Obj(vec![
            ("name", args.name.clone().into()),
            ("verdict", verdict.into()),
            ("quorum", quorum.into()),
            ("nodes", Json::Arr(per_node)),
        ]);
        println!("{out}");
    } else {
        for (node, state) in nodes.iter().zip(&states) {
            let text = match state {
                KeyState::Held(Some(ms)) => format!("held, expires in {ms} ms"),
                KeyState::Held(None) => "held, without expiry (not a lock key?)".to_owned(),
                KeyState::Free => "free".to_owned(),
                KeyState::Unreachable(e) => e.clone(),
            };
            println!("{}: {text}", node.name);
        }
        println!(
            "{}: {verdict} (held on {held}, free on {free} of {} nodes; {quorum} needed)",
            args.name,
            nodes.len()
        );
    }
    code
}

fn key_state(node: &Node, key: &[u8]) -> KeyState {
    // First contact through the library, for its words ("unreachable: ...",
    // "authentication failed: ..."), the same as in `run`'s reports.
    if let Err(e) = node.probe() {
        return KeyState::Unreachable(e);
    }
    let mut conn = match node.connect() {
        Ok((conn, _)) => conn,
        Err(e) => return KeyState::Unreachable(format!("unreachable: {e}")),
    };
    match node.query::<i64>(&mut conn, redis::cmd("PTTL").arg(key)) {
        Ok(-2) => KeyState::Free,
        Ok(-1) => KeyState::Held(None),
        Ok(ms) => KeyState::Held(Some(ms)),
        Err(e) => KeyState::Unreachable(format!("PTTL failed: {e}")),
    }
}
