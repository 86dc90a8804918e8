//! `quorum-lock status NAME`: who holds the lock on each node (its owner
//! label, and for how long), and the quorum's verdict, through the
//! library's `LockManager::inspect` (one read-only script per node).
//!
//! Verdicts: `held` when a quorum of nodes holds the key for one holder;
//! `free` when a quorum of nodes does not hold it; `split` when a quorum of
//! nodes answered but neither is true; `unknown` when fewer than a quorum
//! answered (the others could say anything). Exit codes: 0 held, 1 free,
//! 3 split, 69 unknown (servers unavailable), 78 for a malformed node URL.
//!
//! When the read-write lock NAME (`run --shared` / `--exclusive`) has a
//! writer or readers on some node, it shows them too (`rw.rs`): per node
//! the writer's owner label and time left and each reader's, then the
//! quorum's view; JSON gets them as `read_write` (null otherwise). The
//! exit code is then 0 when either lock is held, else the more telling of
//! the two verdicts (69, 3, 1).
//!
//! With `-n K` it shows the K permits of the semaphore NAME, one line per
//! slot, and the count held; the exit code is the most telling of the
//! slots' (69 when any slot is unknown, else 3 when any is split, else 0
//! when any permit is held, else 1).

use std::time::Duration;

use quorum_lock::inspection::{Inspection, KeyState, Verdict};

use crate::args::{Global, StatusArgs};
use crate::exit;
use crate::json::Json;
use crate::rw::{self, RwView};
use crate::wording::verdict_word;

pub(crate) fn status(global: &Global, args: &StatusArgs) -> u8 {
    if let Some(permits) = args.permits {
        return permits_status(global, args, permits);
    }
    // The TTL is not used (nothing is locked); the longest one allowed is
    // valid with any other setting.
    let seen = global.manager(global.max_ttl, None).and_then(|locks| {
        let seen = locks.inspect(&args.name)?;
        let rw = rw::look(&locks, &global.nodes, global.node_timeout, &args.name);
        Ok((seen, rw))
    });
    let (seen, rw) = match seen {
        Ok(seen) => seen,
        Err(e) => {
            eprintln!("quorum-lock: {}", crate::wording::flags(&e.to_string()));
            return exit::CONFIG;
        }
    };
    if args.json {
        let mut out = json(&seen);
        if let Json::Obj(fields) = &mut out {
            fields.push(("read_write", rw.as_ref().map_or(Json::Null, RwView::json)));
        }
        println!("{out}");
    } else {
        for node in seen.nodes() {
            println!("{}: {}", node.node(), node_text(node.state(), node.node()));
        }
        println!("{seen}");
        if let Some(rw) = &rw {
            for node in &rw.nodes {
                println!("{}: {}", node.node, RwView::node_text(node));
            }
            println!("{}", rw.summary());
        }
    }
    match rw {
        None => verdict_code(seen.verdict()),
        Some(rw) => both_code(seen.verdict(), rw.verdict()),
    }
}

/// The exit code for a lock and the read-write lock of the same name: 0
/// when either is held, else the more telling of the others (unknown,
/// then split, then free).
fn both_code(lock: Verdict, rw: Verdict) -> u8 {
    let verdicts = [lock, rw];
    if verdicts.contains(&Verdict::Held) {
        0
    } else if verdicts
        .iter()
        .any(|v| !matches!(v, Verdict::Free | Verdict::Split))
    {
        exit::UNAVAILABLE
    } else if verdicts.contains(&Verdict::Split) {
        3
    } else {
        1
    }
}

fn verdict_code(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Held => 0,
        Verdict::Free => 1,
        Verdict::Split => 3,
        _ => exit::UNAVAILABLE,
    }
}

/// `status -n K NAME`: every slot of the semaphore, read as one lock each.
fn permits_status(global: &Global, args: &StatusArgs, permits: u32) -> u8 {
    let seen: Result<Vec<Inspection>, _> = global.manager(global.max_ttl, None).and_then(|locks| {
        let semaphore = locks.semaphore(&args.name, permits)?;
        (0..permits)
            .map(|slot| locks.inspect(semaphore.slot_resource(slot)))
            .collect()
    });
    let slots = match seen {
        Ok(slots) => slots,
        Err(e) => {
            eprintln!("quorum-lock: {}", crate::wording::flags(&e.to_string()));
            return exit::CONFIG;
        }
    };
    let held = slots.iter().filter(|s| s.is_held()).count();
    if args.json {
        let per_slot = slots.iter().map(json).collect();
        println!(
            "{}",
            Json::Obj(vec![
                ("name", args.name.as_str().into()),
                ("permits", u64::from(permits).into()),
                ("held", held.into()),
                ("slots", Json::Arr(per_slot)),
            ])
        );
    } else {
        for slot in &slots {
            println!("{slot}");
        }
        println!("{held} of {permits} permits of {} held", args.name);
    }
    let verdicts: Vec<Verdict> = slots.iter().map(Inspection::verdict).collect();
    if verdicts
        .iter()
        .any(|v| !matches!(v, Verdict::Held | Verdict::Free | Verdict::Split))
    {
        exit::UNAVAILABLE
    } else if verdicts.contains(&Verdict::Split) {
        3
    } else if held > 0 {
        0
    } else {
        1
    }
}

fn node_text(state: &KeyState, node: &str) -> String {
    match state {
        KeyState::Held { owner, ttl, .. } => {
            let by = owner
                .as_deref()
                .map_or_else(String::new, |o| format!(" by {o}"));
            match ttl {
                Some(ttl) => format!("held{by}, expires in {} ms", ttl.as_millis()),
                None => format!("held{by}, without expiry (not a lock key?)"),
            }
        }
        KeyState::Free => "free".to_owned(),
        KeyState::Failed(e) => crate::wording::flags(&e.reason(node)),
        _ => "unknown state".to_owned(),
    }
}

fn json(seen: &Inspection) -> Json {
    let per_node = seen
        .nodes()
        .iter()
        .map(|node| {
            let (held, owner, pttl, error) = match node.state() {
                KeyState::Held { owner, ttl, .. } => (
                    Json::Bool(true),
                    owner.clone().into(),
                    ttl.map(Json::millis).into(),
                    Json::Null,
                ),
                KeyState::Free => (Json::Bool(false), Json::Null, Json::Null, Json::Null),
                KeyState::Failed(e) => (
                    Json::Null,
                    Json::Null,
                    Json::Null,
                    e.reason(node.node()).into(),
                ),
                _ => (Json::Null, Json::Null, Json::Null, Json::Null),
            };
            Json::Obj(vec![
                ("node", node.node().into()),
                ("held", held),
                ("owner", owner),
                ("pttl_ms", pttl),
                ("error", error),
            ])
        })
        .collect();
    let time_left = match seen.time_left() {
        Duration::MAX => Json::Null,
        left if seen.is_held() => Json::millis(left),
        _ => Json::Null,
    };
    Json::Obj(vec![
        ("name", seen.resource().into()),
        ("verdict", verdict_word(seen.verdict()).into()),
        ("owner", seen.owner().into()),
        ("time_left_ms", time_left),
        ("quorum", seen.quorum().into()),
        ("nodes", Json::Arr(per_node)),
    ])
}
