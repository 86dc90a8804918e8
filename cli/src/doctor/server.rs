//! One server's checks: reachable, a master (and not a cluster member
//! behind a plain URL), its identity and restart quarantine, memory
//! policy and persistence, and the rights for every command the crate
//! sends.

use std::time::{Duration, Instant};

use quorum_lock::backend::ServerVersion;
use redis::Connection;

use super::rights;
use crate::args::Global;
use crate::checkup::{Checkup, Value, Verdict};
use crate::inspect::{Node, info_field};

/// One server: reachable, its identity, settings and rights (`shard`: a
/// cluster's master, reached through its cluster node).
pub(super) fn check(node: &Node, global: &Global, drift: Duration, shard: bool) -> Checkup {
    let mut c = Checkup::new();
    // First contact through the library, so that a failure reads as it
    // does in `run` ("authentication failed: WRONGPASS ...").
    // The version as the library reads it (Valkey says
    // redis_version:7.2.4 in every release).
    let version = match node.probe() {
        Ok(info) => {
            c.run_id = info.run_id.as_deref().map(str::to_owned);
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
    if !shard {
        check_cluster_member(node, &mut conn, &mut c);
    }
    check_identity(node, &mut conn, global, drift, version, &mut c);
    check_config(node, &mut conn, global, &mut c);
    rights::check_rights(node, &mut conn, global, version, &mut c);
    c
}

/// A plain URL to a member of a cluster reaches only that member's
/// slots: every other key gets `MOVED`.
fn check_cluster_member(node: &Node, conn: &mut Connection, c: &mut Checkup) {
    let Ok(info) = node.query::<String>(conn, redis::cmd("INFO").arg("cluster")) else {
        return;
    };
    if info_field(&info, "cluster_enabled") == Some("1") {
        let whole = node.name.replacen("://", "+cluster://", 1);
        c.note(
            Verdict::Fail,
            format!(
                "a member of a cluster: a plain URL reaches only its own slots (MOVED for the \
                 others); name the whole cluster as one node: {whole}"
            ),
        );
    }
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
            c.quarantine_left = Some(left);
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
    if let Some(master) = &node.master {
        c.text(
            "master",
            "master",
            format!("{master} (named by a majority of the sentinels)"),
        );
    }
}

/// The memory policy: its name, the `maxmemory` limit when known, and
/// where they were read.
struct Policy {
    name: String,
    limit: Option<u64>,
}

/// The memory policy from `CONFIG GET`, else from `INFO memory` (the
/// documented user may not run `CONFIG GET`; `INFO` gives both fields).
fn read_policy(node: &Node, conn: &mut Connection) -> Result<Policy, (String, String)> {
    let config = config_get(node, conn, "maxmemory-policy").map(|name| Policy {
        limit: config_get(node, conn, "maxmemory")
            .ok()
            .and_then(|m| m.parse().ok()),
        name,
    });
    let config_error = match config {
        Ok(policy) => return Ok(policy),
        Err(e) => e,
    };
    match node.query::<String>(conn, redis::cmd("INFO").arg("memory")) {
        Ok(info) => match info_field(&info, "maxmemory_policy") {
            Some(name) => Ok(Policy {
                name: name.to_owned(),
                limit: info_field(&info, "maxmemory").and_then(|m| m.parse().ok()),
            }),
            None => Err((
                config_error,
                "INFO memory has no maxmemory_policy".to_owned(),
            )),
        },
        Err(e) => Err((config_error, e)),
    }
}

/// `appendonly` and `appendfsync` from `CONFIG GET`, else `appendonly`
/// from `INFO persistence` (`aof_enabled`; `INFO` does not show
/// `appendfsync`: `None`).
fn read_persistence(
    node: &Node,
    conn: &mut Connection,
) -> Result<(String, Option<String>), (String, String)> {
    let config = config_get(node, conn, "appendonly")
        .and_then(|aof| Ok((aof, Some(config_get(node, conn, "appendfsync")?))));
    let config_error = match config {
        Ok(found) => return Ok(found),
        Err(e) => e,
    };
    match node.query::<String>(conn, redis::cmd("INFO").arg("persistence")) {
        Ok(info) => match info_field(&info, "aof_enabled") {
            Some("1") => Ok(("yes".to_owned(), None)),
            Some("0") => Ok(("no".to_owned(), None)),
            _ => Err((
                config_error,
                "INFO persistence has no aof_enabled".to_owned(),
            )),
        },
        Err(e) => Err((config_error, e)),
    }
}

/// `CONFIG GET name`'s value.
fn config_get(node: &Node, conn: &mut Connection, name: &str) -> Result<String, String> {
    let pair: Vec<String> = node.query(conn, redis::cmd("CONFIG").arg("GET").arg(name))?;
    Ok(pair.get(1).cloned().unwrap_or_default())
}

/// Persistence and memory policy, from `CONFIG GET` or else `INFO`; a
/// warning naming the right to add when neither tells.
fn check_config(node: &Node, conn: &mut Connection, global: &Global, c: &mut Checkup) {
    let mut unknown = Vec::new();
    match read_policy(node, conn) {
        Ok(Policy {
            name: policy,
            limit,
        }) => {
            if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
                // As the library judges it: a limit and an evicting
                // policy; without a limit nothing is evicted yet.
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
        Err((config, info)) => {
            c.text(
                "maxmemory-policy",
                "maxmemory_policy",
                format!("unknown (CONFIG GET: {config}; INFO: {info})"),
            );
            unknown.push("maxmemory-policy");
        }
    }
    match read_persistence(node, conn) {
        Ok((aof, fsync)) => {
            let durable = aof == "yes" && fsync.as_deref() == Some("always");
            let fsync_unknown = aof == "yes" && fsync.is_none();
            let meaning = if durable {
                "keys survive a crash: restarts are safe even without quarantine"
            } else if fsync_unknown && global.no_restart_quarantine {
                "whether keys survive a crash depends on appendfsync, which INFO does not show: \
                 add +config|get to the user to know it"
            } else if global.no_restart_quarantine {
                "a crash forgets keys and quarantine is off: a restart can let two holders in"
            } else {
                "a crash forgets keys; restart quarantine covers it"
            };
            if !durable && global.no_restart_quarantine {
                c.note(Verdict::Warn, meaning.to_owned());
            }
            let settings = match (fsync, aof.as_str()) {
                (Some(fsync), _) => format!("appendonly {aof}, appendfsync {fsync}"),
                // Without the log appendfsync does not matter.
                (None, "no") => "appendonly no (INFO)".to_owned(),
                (None, _) => format!("appendonly {aof} (INFO; appendfsync not shown)"),
            };
            c.text(
                "persistence",
                "persistence",
                format!("{settings}: {meaning}"),
            );
        }
        Err((config, info)) => {
            c.text(
                "persistence",
                "persistence",
                format!("unknown (CONFIG GET: {config}; INFO: {info})"),
            );
            unknown.push("persistence");
        }
    }
    if !unknown.is_empty() {
        c.note(
            Verdict::Warn,
            format!(
                "{} unknown: neither INFO nor CONFIG GET is allowed; add +info to the user \
                 (docs/operations.md, Access rights)",
                unknown.join(" and ")
            ),
        );
    }
}
