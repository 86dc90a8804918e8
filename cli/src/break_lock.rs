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
//! `--writer` and `--readers` break the read-write lock NAME instead
//! (`rw.rs` reads it): the writer's key is deleted as a lock's (the same
//! compare-and-delete, which wakes waiting readers), and exactly the
//! readers' entries shown are removed (`ZREM` of those members: a reader
//! that came since stays). Waiting writers are not woken by that (the
//! library has no call that removes another's reader and announces it):
//! they see it at their next try. The operator names which side is stuck,
//! since breaking a healthy writer that only waits for a stuck reader (or
//! the other way round) is the wrong repair; a plain `break NAME` only
//! says when the read-write lock has holders.
//!
//! The danger: a holder that is still alive is not told. It goes on until
//! its next extend fails (up to the time left shown), while the next holder
//! runs too; only fencing checked by the resource keeps its late writes
//! out. `--help` and the README say so.

use std::io::{BufRead, IsTerminal, Write};

use quorum_lock::LockManager;
use quorum_lock::backend::Holding;

use crate::args::{BreakArgs, Global};
use crate::exit;
use crate::inspect::{self, Node};
use crate::rw::{self, RwView};

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
    // keys (the prefix and the name).
    let locks = match global.manager(global.max_ttl, None) {
        Ok(locks) => locks,
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
    if args.writer || args.readers {
        return break_rw(&locks, &nodes, args);
    }
    let key = locks.key_for(name);
    let seen: Vec<Seen> = nodes.iter().map(|node| read(node, &key)).collect();
    for (node, seen) in nodes.iter().zip(&seen) {
        println!("{}: {}", node.name, describe(seen));
    }
    // The read-write lock of the same name is another lock, never broken
    // without naming it; but an operator who looks for a stuck `run
    // --exclusive` here is told where it is.
    if let Ok(rw) = rw::read(&locks, &nodes, name)
        && rw.exists()
    {
        println!(
            "{name}: the read-write lock {name} has a writer or readers, left alone here \
             (`quorum-lock status {name}` shows them; --writer and --readers break them)"
        );
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

/// What `break --writer` / `--readers` removes on one node: the writer's
/// value, the readers' entries.
type Target<'a> = (Option<&'a [u8]>, Vec<Vec<u8>>);

/// `break --writer` / `--readers`: the read-write lock NAME's writer's
/// key and readers, as the flags name them, after showing both on every
/// node.
fn break_rw(locks: &LockManager, nodes: &[Node], args: &BreakArgs) -> u8 {
    let name = &args.name;
    let view = match rw::read(locks, nodes, name) {
        Ok(view) => view,
        Err(e) => {
            eprintln!("quorum-lock: {}", crate::wording::flags(&e.to_string()));
            return exit::CONFIG;
        }
    };
    for node in &view.nodes {
        println!("{}: {}", node.node, RwView::node_text(node));
    }
    // Per node: the writer's value to delete, the readers' entries to
    // remove.
    let mut left = 0;
    let mut targets: Vec<Target<'_>> = Vec::new();
    for node in &view.nodes {
        let Ok(state) = &node.state else {
            left += 1;
            targets.push((None, Vec::new()));
            continue;
        };
        let writer = match &state.writer {
            Some(holding) if args.writer && holding.value().len() < holding.len() => {
                println!(
                    "{}: the writer's key holds a value of {} bytes, too long for a lock's: \
                     left alone (delete it with redis-cli DEL if it must go)",
                    node.node,
                    holding.len()
                );
                left += 1;
                None
            }
            Some(holding) if args.writer => Some(holding.value()),
            _ => None,
        };
        let readers = if args.readers {
            state.readers.iter().map(|r| r.value.clone()).collect()
        } else {
            Vec::new()
        };
        targets.push((writer, readers));
    }
    let writers = targets.iter().filter(|(w, _)| w.is_some()).count();
    let mut readers: Vec<&[u8]> = targets
        .iter()
        .flat_map(|(_, r)| r.iter().map(Vec::as_slice))
        .collect();
    readers.sort_unstable();
    readers.dedup();
    let what = match (args.writer, args.readers) {
        (true, true) => "no writer and no readers",
        (true, false) => "no writer",
        _ => "no readers",
    };
    if writers == 0 && readers.is_empty() {
        println!("{name} (read-write lock): {what} on any node that answered: nothing to break");
        return if left == 0 { 0 } else { exit::UNAVAILABLE };
    }
    let total = nodes.len();
    let mut breaks = Vec::new();
    let mut dangers = Vec::new();
    if writers > 0 {
        breaks.push(format!(
            "deletes the writer's key on the {writers} of {total} nodes that have it"
        ));
        dangers.push(
            "a writer that still runs is not told, and until its next extend fails only \
             fencing keeps it from the resource",
        );
    }
    if !readers.is_empty() {
        let n = readers.len();
        breaks.push(format!(
            "removes the {n} {} shown",
            if n == 1 { "reader" } else { "readers" }
        ));
        dangers.push(
            "a reader that still runs is not told, and has no fence: a writer may be \
             admitted while it still reads",
        );
    }
    println!(
        "{name} (read-write lock): breaking it {}; {}",
        breaks.join(" and "),
        dangers.join("; ")
    );
    let question = match (writers, readers.len()) {
        (0, n) => format!("remove the {n} readers of {name}? [y/N] "),
        (w, 0) => format!("break the writer of {name} on {w} nodes? [y/N] "),
        (w, n) => {
            format!("break the writer of {name} on {w} nodes and remove its {n} readers? [y/N] ")
        }
    };
    if !args.force && !confirmed(&question) {
        eprintln!("quorum-lock: {name}: not broken");
        return 1;
    }
    let (readers_key, writer_key) = &view.keys;
    for (node, (writer, readers)) in nodes.iter().zip(&targets) {
        if let Some(value) = writer {
            match node.delete_if_holds(writer_key, value) {
                Ok(true) => println!("{}: writer deleted", node.name),
                Ok(false) => println!(
                    "{}: writer left alone: it expired or changed hands since it was read",
                    node.name
                ),
                Err(e) => {
                    eprintln!("quorum-lock: {}: writer not deleted: {e}", node.name);
                    left += 1;
                }
            }
        }
        if readers.is_empty() {
            continue;
        }
        match node.remove_members(readers_key, readers) {
            Ok(removed) if removed == readers.len() => {
                println!(
                    "{}: {removed} of {} readers removed",
                    node.name,
                    readers.len()
                );
            }
            Ok(removed) => println!(
                "{}: {removed} of {} readers removed (the others left since they were read)",
                node.name,
                readers.len()
            ),
            Err(e) => {
                eprintln!("quorum-lock: {}: readers not removed: {e}", node.name);
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
