//! `quorum-lock doctor`: each node checked for what the lock relies on:
//! reachable, a master, the rights for every command the crate sends
//! (the wake-ups' publish / subscribe included: a warning, as locks work
//! without them), memory policy, persistence and restart quarantine, round-trip time.
//!
//! Each node is also asked, through the library and with the tool's
//! settings (prefix, quarantine, eviction risk), to take and release a
//! probe lock of its own (`LockManager::check_ready` on that node alone):
//! a node whose grants would not count (its memory policy may evict, the
//! ACL denies the prefix, ...) fails, whatever the other checks found.
//!
//! One verdict line per node (`ok`, `warn`, `fail`). One server listed
//! under two names (the same `run_id`) fails from its second name on: it
//! would cast one vote, not two. Exit codes: 0 every node ok; 1 some node
//! warns or fails but a quorum of nodes can vote; 3 fewer than a quorum
//! can; 78 for a malformed node URL.

use std::time::{Duration, Instant};

use quorum_lock::backend::ServerVersion;
use quorum_lock::report::NodeOutcome;
use quorum_lock::{LockManager, RetryPolicy, Scripts};
use redis::Connection;

use crate::args::{DoctorArgs, Global};
use crate::exit;
use crate::inspect::{self, Node, info_field};
use crate::json::Json;
use crate::rights::{self, RELEASE_CHANNEL};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// A fact's value: text for people, and a typed value for `--json`.
enum Value {
    Text(String),
    /// Printed as `{:?}`; whole milliseconds in JSON, and whole
    /// microseconds under the second key.
    Millis(Duration, &'static str),
    /// Whole seconds.
    Secs(u64),
}

/// One fact about a node: its label for people, its JSON key, its value.
struct Fact {
    label: &'static str,
    key: &'static str,
    value: Value,
}

/// What was found on one node.
struct Checkup {
    verdict: Verdict,
    /// Its votes do not count yet (restart quarantine), but will.
    quarantined: bool,
    /// The server's `run_id`, to find one server under two names.
    run_id: Option<String>,
    facts: Vec<Fact>,
    /// Why the verdict is not ok.
    findings: Vec<String>,
}

impl Checkup {
    fn new() -> Self {
        Self {
            verdict: Verdict::Ok,
            quarantined: false,
            run_id: None,
            facts: Vec::new(),
            findings: Vec::new(),
        }
    }

    fn note(&mut self, verdict: Verdict, finding: String) {
        self.verdict = self.verdict.max(verdict);
        self.findings.push(finding);
    }

    fn fact(&mut self, label: &'static str, key: &'static str, value: Value) {
        self.facts.push(Fact { label, key, value });
    }

    fn text(&mut self, label: &'static str, key: &'static str, value: String) {
        self.fact(label, key, Value::Text(value));
    }
}

/// Marks every node whose server already appeared under an earlier name.
fn find_duplicates(nodes: &[Node], checkups: &mut [Checkup]) {
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
                nodes[first].name
            );
            checkups[i].note(Verdict::Fail, finding);
        }
    }
}

pub(crate) fn doctor(global: &Global, args: &DoctorArgs) -> u8 {
    let nodes = match inspect::nodes(&global.nodes, global.node_timeout) {
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
    let mut checkups: Vec<Checkup> = nodes.iter().map(|n| check(n, global, drift)).collect();
    find_duplicates(&nodes, &mut checkups);
    let quorum = global.quorum();
    // A node that only warns can still vote (a quarantine ends by itself).
    let usable = checkups
        .iter()
        .filter(|c| c.verdict != Verdict::Fail)
        .count();
    let all_ok = checkups.iter().all(|c| c.verdict == Verdict::Ok);
    let code = if all_ok {
        0
    } else if usable >= quorum {
        1
    } else {
        3
    };
    if args.json {
        let per_node = nodes
            .iter()
            .zip(&checkups)
            .map(|(node, c)| {
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
                let findings = c.findings.iter().map(|f| f.clone().into()).collect();
                Json::Obj(vec![
                    ("node", node.name.clone().into()),
                    ("verdict", c.verdict.as_str().into()),
                    ("facts", Json::Obj(facts)),
                    ("findings", Json::Arr(findings)),
                ])
            })
            .collect();
        let out = Json::Obj(vec![
            ("quorum", quorum.into()),
            ("usable", usable.into()),
            ("nodes", Json::Arr(per_node)),
        ]);
        println!("{out}");
    } else {
        for (node, c) in nodes.iter().zip(&checkups) {
            println!("{}", node.name);
            for fact in &c.facts {
                match &fact.value {
                    Value::Text(text) => println!("  {}: {text}", fact.label),
                    Value::Millis(d, _) => println!("  {}: {d:?}", fact.label),
                    Value::Secs(secs) => println!("  {}: {secs} s", fact.label),
                }
            }
            let why = if c.findings.is_empty() {
                String::new()
            } else {
                format!(": {}", c.findings.join("; "))
            };
            println!("  verdict: {}{why}", c.verdict.as_str());
        }
        // Among the usable nodes only: a node that fails does not count
        // as usable, in quarantine or not.
        let in_quarantine = checkups
            .iter()
            .filter(|c| c.quarantined && c.verdict != Verdict::Fail)
            .count();
        let now = usable - in_quarantine;
        let verdict = if now >= quorum {
            "locks work"
        } else if usable >= quorum {
            "locks work once the quarantine ends"
        } else {
            "NO QUORUM"
        };
        println!(
            "{now} of {} nodes can vote now ({in_quarantine} in quarantine), {quorum} needed: {verdict}",
            nodes.len()
        );
    }
    code
}

fn check(node: &Node, global: &Global, drift: Duration) -> Checkup {
    let mut c = Checkup::new();
    // First contact through the library, so that a failure reads as it
    // does in `run` ("authentication failed: WRONGPASS ...").
    // The version as the library reads it (Valkey says
    // redis_version:7.2.4 in every release).
    let version = match node.probe() {
        Ok(info) => {
            c.run_id = info.run_id;
            info.version
        }
        Err(e) => {
            c.note(Verdict::Fail, e);
            return c;
        }
    };
    let (mut conn, connect_time) = match node.connect() {
        Ok(connected) => connected,
        Err(e) => {
            c.note(Verdict::Fail, format!("unreachable: {e}"));
            return c;
        }
    };
    c.fact(
        "connect",
        "connect_ms",
        Value::Millis(connect_time, "connect_us"),
    );
    let started = Instant::now();
    match node.query::<String>(&mut conn, &redis::cmd("PING")) {
        Ok(_) => c.fact(
            "round trip",
            "round_trip_ms",
            Value::Millis(started.elapsed(), "round_trip_us"),
        ),
        Err(e) => c.note(Verdict::Fail, format!("PING: {e}")),
    }
    check_identity(node, &mut conn, global, drift, version, &mut c);
    check_config(node, &mut conn, global, &mut c);
    check_rights(node, &mut conn, global, version, &mut c);
    check_probe_lock(node, global, &mut c);
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
            c.note(
                Verdict::Fail,
                format!("a lock cannot be taken here, so it does not vote: {why}"),
            );
        }
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

/// Version, role, uptime and what restart quarantine makes of it (`drift`:
/// the drift allowance over --max-ttl).
fn check_identity(
    node: &Node,
    conn: &mut Connection,
    global: &Global,
    drift: Duration,
    version: Option<ServerVersion>,
    c: &mut Checkup,
) {
    let server = match node.query::<String>(conn, redis::cmd("INFO").arg("server")) {
        Ok(text) => text,
        Err(e) => {
            let verdict = if global.no_restart_quarantine {
                Verdict::Warn
            } else {
                Verdict::Fail
            };
            c.note(
                verdict,
                format!("INFO refused ({e}): with restart quarantine on, its grants do not count"),
            );
            return;
        }
    };
    if let Some(version) = version {
        c.text("version", "version", version.to_string());
    }
    let uptime = info_field(&server, "uptime_in_seconds").and_then(|u| u.parse::<u64>().ok());
    if let Some(secs) = uptime {
        c.fact("uptime", "uptime_s", Value::Secs(secs));
        // The quarantine a manager meeting it now would apply: --max-ttl
        // plus drift, less the uptime it can vouch for.
        let quarantine = global.max_ttl + drift;
        let credited = Duration::from_secs(secs.saturating_sub(1));
        if !global.no_restart_quarantine && credited < quarantine {
            let left = quarantine - credited;
            c.quarantined = true;
            c.fact(
                "quarantine left",
                "quarantine_left_ms",
                Value::Millis(left, "quarantine_left_us"),
            );
            c.note(
                Verdict::Warn,
                format!(
                    "started {secs} s ago: quarantined for about {:.1} s more (--max-ttl + drift)",
                    left.as_secs_f64()
                ),
            );
        }
    }
    if let Ok(replication) = node.query::<String>(conn, redis::cmd("INFO").arg("replication")) {
        let role = info_field(&replication, "role")
            .unwrap_or("unknown")
            .to_owned();
        if role != "master" {
            c.note(
                Verdict::Fail,
                format!("role {role}: a replica refuses writes (READONLY); configure masters"),
            );
        }
        c.text("role", "role", role);
    }
}

/// Persistence and memory policy, when CONFIG is allowed.
fn check_config(node: &Node, conn: &mut Connection, global: &Global, c: &mut Checkup) {
    let get = |conn: &mut Connection, name: &str| -> Result<String, String> {
        let pair: Vec<String> = node.query(conn, redis::cmd("CONFIG").arg("GET").arg(name))?;
        Ok(pair.get(1).cloned().unwrap_or_default())
    };
    match get(conn, "maxmemory-policy") {
        Ok(policy) => {
            if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
                // As the library judges it: a limit and an evicting
                // policy; without a limit nothing is evicted yet.
                let limit = get(conn, "maxmemory")
                    .ok()
                    .and_then(|m| m.parse::<u64>().ok());
                let (verdict, finding) = match limit {
                    Some(limit) if limit > 0 && global.accept_eviction_risk => (
                        Verdict::Warn,
                        format!(
                            "maxmemory {limit} with maxmemory-policy {policy} can evict lock keys \
                             under memory pressure (a second holder can then take a held lock); \
                             its votes count because of --accept-eviction-risk"
                        ),
                    ),
                    Some(limit) if limit > 0 => (
                        Verdict::Fail,
                        format!(
                            "maxmemory {limit} with maxmemory-policy {policy} can evict lock keys \
                             under memory pressure, so its votes do not count: use noeviction \
                             (or --accept-eviction-risk)"
                        ),
                    ),
                    _ => (
                        Verdict::Warn,
                        format!(
                            "maxmemory-policy {policy} would evict lock keys once a maxmemory \
                             is set; use noeviction"
                        ),
                    ),
                };
                c.note(verdict, finding);
            }
            c.text("maxmemory-policy", "maxmemory_policy", policy);
        }
        Err(e) => c.text(
            "maxmemory-policy",
            "maxmemory_policy",
            format!("unknown ({e})"),
        ),
    }
    match (get(conn, "appendonly"), get(conn, "appendfsync")) {
        (Ok(aof), Ok(fsync)) => {
            let durable = aof == "yes" && fsync == "always";
            let meaning = if durable {
                "keys survive a crash: restarts are safe even without quarantine"
            } else if global.no_restart_quarantine {
                "a crash forgets keys and quarantine is off: a restart can let two holders in"
            } else {
                "a crash forgets keys; restart quarantine covers it"
            };
            if !durable && global.no_restart_quarantine {
                c.note(Verdict::Warn, meaning.to_owned());
            }
            c.text(
                "persistence",
                "persistence",
                format!("appendonly {aof}, appendfsync {fsync}: {meaning}"),
            );
        }
        (Err(e), _) | (_, Err(e)) => c.text("persistence", "persistence", format!("unknown ({e})")),
    }
}

/// The rights for every command the crate sends (`rights.rs`), judged.
///
/// The plain commands (a lock, its refusal's reading, inspection) are
/// needed everywhere: one missing fails the node. A missing script right
/// fails it too where locks need scripts: with `--scripts always`, or a
/// server (`version`) without the commands for release and extend (or
/// of unknown version). On a server whose own commands do them, it is a
/// warning: fenced locks fail there. With `--scripts never` the scripts'
/// rights are not asked for, and the commands are the only way.
fn check_rights(
    node: &Node,
    conn: &mut Connection,
    global: &Global,
    version: Option<ServerVersion>,
    c: &mut Checkup,
) {
    let prefix = global.prefix.as_str();
    let key = format!("{prefix}quorum-lock:doctor:{}", std::process::id());
    let mut rights = rights::check(node, conn, &key, global.scripts, version);
    let denied = &rights.denied;
    let all: Vec<&str> = denied
        .plain
        .iter()
        .chain(&denied.commands)
        .chain(&denied.scripts)
        .copied()
        .collect();
    if all.is_empty() {
        c.text(
            "rights",
            "rights",
            format!("{}: ok", rights.checked.join(", ")),
        );
    } else if !denied.plain.is_empty()
        || (!rights.by_commands && (global.scripts == Scripts::Never || !denied.scripts.is_empty()))
    {
        c.note(
            Verdict::Fail,
            format!("missing ACL rights for {}", all.join(", ")),
        );
    } else if rights.by_commands {
        c.note(
            Verdict::Warn,
            format!(
                "missing ACL rights for {}: fenced locks fail on this node (release and \
                 extend go by the server's own commands)",
                all.join(", ")
            ),
        );
    } else {
        // Only the commands are denied: the library uses the scripts.
        let commands = denied.commands.clone();
        rights.checked.retain(|name| !commands.contains(name));
        c.text(
            "rights",
            "rights",
            format!("{}: ok", rights.checked.join(", ")),
        );
        c.text(
            "own commands",
            "own_commands",
            format!(
                "{} not allowed: the scripts do that work",
                commands.join(", ")
            ),
        );
    }
    if !rights.denied.wake_ups.is_empty() {
        c.note(
            Verdict::Warn,
            format!(
                "missing ACL rights for {} on {RELEASE_CHANNEL}{prefix}*: release notices \
                 (wake-ups) are off on this node, waiters retry on their timer \
                 (docs/operations.md, Access rights)",
                rights.denied.wake_ups.join(", ")
            ),
        );
    }
}
