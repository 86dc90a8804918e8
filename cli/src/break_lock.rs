//! `quorum-lock break NAME`: the operator's way to end a stuck lock during
//! an incident (what python-redis-lock's `reset`, or `redis-cli DEL` on
//! every node, does), with the care those lack: it first shows what it
//! breaks (per node: the holder's owner label and time left), asks on a
//! terminal unless `--force`, and refuses without either.
//!
//! Each node's key is read once (value and time left, in one atomic read)
//! and deleted only while it still holds the value read: the library's
//! release (compare-and-delete, which also wakes the waiters) with the
//! holder's value. A lock that changed hands between the read and the
//! answer is left alone. The fence counters are not touched, so the next
//! holder's fence is above the broken holder's.
//!
//! The danger: a holder that is still alive is not told. It goes on until
//! its next extend fails (up to the time left shown), while the next holder
//! runs too; only fencing checked by the resource keeps its late writes
//! out. `--help` and the README say so.

use std::io::{BufRead, IsTerminal, Write};

use quorum_lock::backend::Holding;

use crate::args::{BreakArgs, Global};
use crate::exit;
use crate::inspect::{self, Node};

/// What one node held under the key when it was read.
enum Seen {
    Free,
    /// A value, read whole: it can be compared, so deleted.
    Held(Holding),
    /// A value longer than what a read returns (no lock's value is): it
    /// cannot be compared, so it is left alone.
    TooLong(Holding),
    Failed(String),
}

pub(crate) fn break_lock(global: &Global, args: &BreakArgs) -> u8 {
    let name = &args.name;
    if !args.force && !std::io::stdin().is_terminal() {
        eprintln!(
            "quorum-lock: break {name}: no terminal to ask on: run it in one, or pass --force \
             (`quorum-lock status {name}` shows who holds it)"
        );
        return exit::USAGE;
    }
    // The settings are checked as `run` checks them; the manager gives the
    // key (the prefix and the name).
    let key = match global.manager(global.max_ttl, None) {
        Ok(locks) => locks.key_for(name),
        Err(e) => {
            eprintln!("quorum-lock: {}", crate::wording::flags(&e.to_string()));
            return exit::CONFIG;
        }
    };
    let nodes = match inspect::nodes(&global.nodes, global.node_timeout) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("quorum-lock: {e}");
            return exit::CONFIG;
        }
    };
    let seen: Vec<Seen> = nodes.iter().map(|node| read(node, &key)).collect();
    for (node, seen) in nodes.iter().zip(&seen) {
        println!("{}: {}", node.name, describe(seen));
    }
    let held = seen.iter().filter(|s| matches!(s, Seen::Held(_))).count();
    let mut left = seen
        .iter()
        .filter(|s| matches!(s, Seen::TooLong(_) | Seen::Failed(_)))
        .count();
    if held == 0 {
        println!("{name}: not held on any node that answered: nothing to break");
        return if left == 0 { 0 } else { exit::UNAVAILABLE };
    }
    println!(
        "{name}: breaking it deletes it on the {held} of {} nodes that hold it; a holder that \
         still runs is not told, and until its next extend fails only fencing keeps it from \
         the resource",
        nodes.len()
    );
    if !args.force && !confirmed(&format!("break {name} on {held} nodes? [y/N] ")) {
        eprintln!("quorum-lock: {name}: not broken");
        return 1;
    }
    for (node, seen) in nodes.iter().zip(&seen) {
        let Seen::Held(holding) = seen else {
            continue;
        };
        match node.delete_if_holds(&key, holding.value()) {
            Ok(true) => println!("{}: deleted", node.name),
            Ok(false) => println!(
                "{}: left alone: it expired or changed hands since it was read",
                node.name
            ),
            Err(e) => {
                eprintln!("quorum-lock: {}: not deleted: {e}", node.name);
                left += 1;
            }
        }
    }
    if left == 0 { 0 } else { exit::UNAVAILABLE }
}

fn read(node: &Node, key: &[u8]) -> Seen {
    match node.read(key) {
        Ok(None) => Seen::Free,
        Ok(Some(holding)) if holding.value().len() < holding.len() => Seen::TooLong(holding),
        Ok(Some(holding)) => Seen::Held(holding),
        Err(e) => Seen::Failed(e),
    }
}

fn describe(seen: &Seen) -> String {
    let expiry = |holding: &Holding| match holding.ttl() {
        Some(ttl) => format!("expires in {} ms", ttl.as_millis()),
        None => "without expiry (not a lock key?)".to_owned(),
    };
    match seen {
        Seen::Free => "free".to_owned(),
        Seen::Held(holding) => match holding.owner() {
            Some(owner) => format!("held by {owner}, {}", expiry(holding)),
            None => format!(
                "held by a client without an owner label, {}",
                expiry(holding)
            ),
        },
        Seen::TooLong(holding) => format!(
            "holds a value of {} bytes, too long for a lock's: left alone (delete it with \
             redis-cli DEL if it must go)",
            holding.len()
        ),
        Seen::Failed(e) => e.clone(),
    }
}

/// Asks `question` on stderr and reads the answer from the terminal on
/// stdin: only `y` or `yes` is a yes.
fn confirmed(question: &str) -> bool {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(question.as_bytes());
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
