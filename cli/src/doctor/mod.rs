//! `quorum-lock doctor`: each node checked for what the lock relies on:
//! reachable, a master, the rights for every command the crate sends
//! (`rights.rs`; the wake-ups' publish / subscribe included: a warning,
//! as locks work without them), memory policy, persistence and restart quarantine, round-trip time.
//!
//! Each node is also asked, through the library and with the tool's
//! settings (prefix, quarantine, eviction risk), to take and release a
//! probe lock of its own (`LockManager::check_ready` on that node alone):
//! a node whose grants would not count (its memory policy may evict, the
//! ACL denies the prefix, ...) fails, whatever the other checks found.
//!
//! A cluster node (`redis+cluster://`) is checked shard by shard
//! (`cluster.rs`): every master as a server of its own, its findings
//! named by shard, the node's verdict the worst of theirs, and one probe
//! lock through the library. A plain URL to a cluster member fails, naming
//! the `redis+cluster://` URL to use instead (`server.rs`).
//!
//! A Sentinel node (`redis+sentinel://`) whose sentinels name no master
//! by a majority now (too many of them out of reach, or they disagree)
//! fails with what each sentinel said, and the other nodes are checked.
//!
//! One verdict line per node (`ok`, `warn`, `fail`), with the cause of
//! its level in a few words; findings of a lesser level on lines of their
//! own above it, each said once (details, such as the probe lock's
//! per-node report, are in the facts). One server listed under two names
//! (the same `run_id`) fails from its second name on: it would cast one
//! vote, not two. Exit codes: 0 every node ok; 1 some node warns or fails
//! but a quorum of nodes can vote now; 3 fewer than a quorum can vote
//! now (failing, or in restart quarantine: the summary says when that
//! ends); 78 for a malformed node URL.

use std::time::Duration;

use quorum_lock::report::{NodeOutcome, Round};
use quorum_lock::{LockManager, RetryPolicy};

use crate::args::{DoctorArgs, Global};
use crate::checkup::{Checkup, Value, Verdict};
use crate::exit;
use crate::inspect::{self, NoMaster, Node};
use crate::json::Json;

mod cluster;
mod rights;
mod server;

/// Marks every node whose server already appeared under an earlier name
/// (`names`: the nodes' names, in order).
fn find_duplicates(names: &[&str], checkups: &mut [Checkup]) {
    for i in 0..checkups.len() {
        let Some(id) = checkups[i].run_id.clone() else {
            continue;
        };
        if let Some(first) = checkups[..i]
            .iter()
            .position(|c| c.run_id.as_deref() == Some(id.as_str()))
        {
            let finding = format!(
                "the same server as {} (same run_id): only one of them votes; list each server once",
                names[first]
            );
            checkups[i].note(Verdict::Fail, finding);
        }
    }
}

pub(crate) fn doctor(global: &Global, args: &DoctorArgs) -> u8 {
    let nodes = match inspect::each_node(&global.nodes, global.node_timeout) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("quorum-lock: {e}");
            return exit::CONFIG;
        }
    };
    // The settings are checked as `run` checks them (a --quorum below a
    // majority, a --drift-factor out of range), and give the drift.
    let drift = match global.manager(global.max_ttl, None) {
        Ok(locks) => locks.drift_for(global.max_ttl),
        Err(e) => {
            eprintln!("quorum-lock: {}", crate::wording::flags(&e.to_string()));
            return exit::CONFIG;
        }
    };
    let names: Vec<&str> = nodes
        .iter()
        .map(|node| match node {
            Ok(node) => node.name.as_str(),
            Err(no_master) => no_master.name.as_str(),
        })
        .collect();
    let mut checkups: Vec<Checkup> = nodes
        .iter()
        .map(|node| match node {
            Ok(node) => check(node, global, drift),
            Err(unopened) => no_master(unopened),
        })
        .collect();
    find_duplicates(&names, &mut checkups);
    let quorum = global.quorum();
    // A node that only warns can still vote (a quarantine ends by itself).
    let usable = checkups
        .iter()
        .filter(|c| c.verdict != Verdict::Fail)
        .count();
    // Among the usable nodes only: a node that fails does not count as
    // usable, in quarantine or not.
    let mut quarantines: Vec<Option<Duration>> = checkups
        .iter()
        .filter(|c| c.quarantined && c.verdict != Verdict::Fail)
        .map(|c| c.quarantine_left)
        .collect();
    let in_quarantine = quarantines.len();
    let voting = usable - in_quarantine;
    let all_ok = checkups.iter().all(|c| c.verdict == Verdict::Ok);
    // No lock can be taken now without a quorum of voting nodes, whatever
    // the reason: a deploy gate must not read that as "works".
    let code = if all_ok {
        0
    } else if voting >= quorum {
        1
    } else {
        3
    };
    // When enough quarantines end for a quorum: the k-th soonest.
    quarantines.sort_unstable();
    let quorum_at = (usable >= quorum && voting < quorum)
        .then(|| quarantines.get(quorum - voting - 1).copied().flatten())
        .flatten();
    if args.json {
        let per_node = names
            .iter()
            .zip(&checkups)
            .map(|(name, c)| {
                let facts = c
                    .facts
                    .iter()
                    .map(|fact| {
                        let value = match &fact.value {
                            Value::Text(text) => text.clone().into(),
                            Value::Millis(d, _) => Json::millis(*d),
                            Value::Secs(secs) => (*secs).into(),
                        };
                        (fact.key, value)
                    })
                    .chain(c.facts.iter().filter_map(|fact| match &fact.value {
                        Value::Millis(d, micros_key) => Some((*micros_key, Json::micros(*d))),
                        _ => None,
                    }))
                    .collect();
                let findings = c.findings.iter().map(|(_, f)| f.clone().into()).collect();
                Json::Obj(vec![
                    ("node", (*name).to_owned().into()),
                    ("verdict", c.verdict.as_str().into()),
                    ("facts", Json::Obj(facts)),
                    ("findings", Json::Arr(findings)),
                ])
            })
            .collect();
        let mut summary = vec![
            ("quorum", quorum.into()),
            ("usable", usable.into()),
            ("voting_now", voting.into()),
        ];
        if let Some(at) = quorum_at {
            summary.push(("quorum_in_ms", Json::millis(at)));
        }
        summary.push(("nodes", Json::Arr(per_node)));
        let out = Json::Obj(summary);
        println!("{out}");
    } else {
        for (name, c) in names.iter().zip(&checkups) {
            println!("{name}");
            for fact in &c.facts {
                match &fact.value {
                    Value::Text(text) => println!("  {}: {text}", fact.label),
                    Value::Millis(d, _) => println!("  {}: {d:?}", fact.label),
                    Value::Secs(secs) => println!("  {}: {secs} s", fact.label),
                }
            }
            let (lesser, verdict) = c.verdict_lines();
            for finding in lesser {
                println!("  {finding}");
            }
            println!("  verdict: {verdict}");
        }
        let verdict = if voting >= quorum {
            "locks work".to_owned()
        } else if let Some(at) = quorum_at {
            format!(
                "NO QUORUM until the quarantine ends in about {:.1} s (then locks work)",
                at.as_secs_f64()
            )
        } else if usable >= quorum {
            "NO QUORUM until the quarantine ends".to_owned()
        } else {
            "NO QUORUM".to_owned()
        };
        println!(
            "{voting} of {} nodes can vote now ({in_quarantine} in quarantine), {quorum} needed: {verdict}",
            nodes.len()
        );
    }
    code
}

fn check(node: &Node, global: &Global, drift: Duration) -> Checkup {
    let mut c = if node.cluster {
        cluster::check(node, global, drift)
    } else {
        server::check(node, global, drift, false)
    };
    check_probe_lock(node, global, &mut c);
    c
}

/// A Sentinel node whose sentinels name no master now: it fails, with
/// what the sentinels said, and is not reached otherwise.
fn no_master(node: &NoMaster) -> Checkup {
    let mut c = Checkup::new();
    c.note(
        Verdict::Fail,
        format!(
            "{}; it does not vote until a majority of its sentinels name one master",
            node.why
        ),
    );
    c
}

/// Takes and releases a probe lock on this node alone, through the
/// library with the tool's settings: what `run` would get from it. A
/// quarantined node refuses it (already a warning: it votes once the
/// quarantine ends); any other refusal means its grants would not count.
fn check_probe_lock(node: &Node, global: &Global, c: &mut Checkup) {
    let single = LockManager::builder()
        .redis_nodes([&node.url])
        .and_then(|b| {
            b.node_timeout(global.node_timeout)
                .max_ttl(global.max_ttl)
                .ttl(global.max_ttl.min(PROBE_TTL))
                .prefix(&global.prefix)
                .drift_factor(global.drift_factor)
                .restart_quarantine(!global.no_restart_quarantine)
                .accept_eviction_risk(global.accept_eviction_risk)
                .scripts(global.scripts)
                .retry(RetryPolicy::none())
                .build()
        });
    let taken = match single {
        Ok(single) => single.check_ready(),
        Err(e) => Err(e),
    };
    match taken {
        Ok(_) => c.text(
            "probe lock",
            "probe_lock",
            "taken and released, as a lock would be".to_owned(),
        ),
        Err(e) if quarantined(&e) && c.quarantined => c.text(
            "probe lock",
            "probe_lock",
            "refused: quarantined (see above)".to_owned(),
        ),
        Err(e) => {
            let why = crate::wording::flags(&e.to_string());
            c.text("probe lock", "probe_lock", format!("refused: {why}"));
            // A cause found above explains it already (the details are in
            // the fact): said once.
            if !c.failed() {
                c.note(Verdict::Fail, probe_failure(&e));
            }
        }
    }
}

/// What a refused probe lock means, by the round that failed, with the
/// node's reason (not the whole report).
fn probe_failure(error: &quorum_lock::Error) -> String {
    let Some(report) = error.report() else {
        return format!(
            "the probe lock failed: {}",
            crate::wording::flags(&error.to_string())
        );
    };
    let what = match report.round() {
        Round::Acquire => "a lock cannot be taken here, so it does not vote",
        Round::Extend => "a lock taken here cannot be extended, so it does not vote",
        Round::Release => "a lock taken here cannot be released",
        _ => "the probe lock failed",
    };
    let cause = report.nodes().iter().find_map(|n| match n.outcome() {
        NodeOutcome::Failed(e) => Some(e.reason(n.node())),
        NodeOutcome::TimedOut => Some("timed out".to_owned()),
        NodeOutcome::Down => Some("marked down".to_owned()),
        NodeOutcome::Refused => Some("the key is held by another token".to_owned()),
        _ => None,
    });
    match cause {
        Some(cause) => format!("{what}: {}", crate::wording::flags(&cause)),
        None => format!("{what}: {}", crate::wording::flags(&error.to_string())),
    }
}

/// The TTL of the probe lock (released at once; capped by --max-ttl).
const PROBE_TTL: Duration = Duration::from_secs(5);

/// Whether every node of `error`'s report was quarantined.
fn quarantined(error: &quorum_lock::Error) -> bool {
    error.report().is_some_and(|report| {
        report
            .nodes()
            .iter()
            .all(|n| matches!(n.outcome(), NodeOutcome::Quarantined { .. }))
    })
}
