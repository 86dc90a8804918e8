//! A cluster node (`redis+cluster://`): its slot map from the seed
//! (`CLUSTER SLOTS`: the masters, their replicas, how many of the 16384
//! slots some master serves), then every master checked as a server of
//! its own.

use std::time::Duration;

use redis::{Connection, Value};

use super::server;
use crate::args::Global;
use crate::checkup::{Checkup, Verdict};
use crate::inspect::Node;

/// The number of hash slots in a cluster.
const SLOTS: usize = 16384;

/// One master and the replicas the cluster lists for it.
struct Master {
    host: String,
    port: u16,
    replicas: usize,
}

/// The slot map, as the seed reported it.
struct Shards {
    /// Each master once, in the order of their first slot.
    masters: Vec<Master>,
    /// Slots some master serves.
    served: usize,
}

impl Shards {
    /// Reads `CLUSTER SLOTS` on `conn` (the seed of `node`). A master
    /// announced without a host is on the seed's host.
    fn read(node: &Node, conn: &mut Connection) -> Result<Self, String> {
        let reply: Value = node.query(conn, redis::cmd("CLUSTER").arg("SLOTS"))?;
        let Value::Array(entries) = reply else {
            return Err(format!("CLUSTER SLOTS answered {reply:?}"));
        };
        let seed_host = node.seed_host();
        let mut shards = Self {
            masters: Vec::new(),
            served: 0,
        };
        for entry in &entries {
            let (start, end, host, port, replicas) = entry_of(entry).ok_or_else(|| {
                format!("CLUSTER SLOTS answered an entry not understood: {entry:?}")
            })?;
            shards.served += usize::from(end.saturating_sub(start)) + 1;
            let host = if host.is_empty() || host == "?" {
                seed_host.clone()
            } else {
                host
            };
            if !shards
                .masters
                .iter()
                .any(|m| m.host == host && m.port == port)
            {
                shards.masters.push(Master {
                    host,
                    port,
                    replicas,
                });
            }
        }
        Ok(shards)
    }

    /// `3 masters (1 replica each), 16384 of 16384 slots served`.
    fn summary(&self) -> String {
        let mut replicas: Vec<usize> = self.masters.iter().map(|m| m.replicas).collect();
        replicas.sort_unstable();
        replicas.dedup();
        let each = match replicas[..] {
            [n] => format!("{n} replica{} each", if n == 1 { "" } else { "s" }),
            _ => format!("{replicas:?} replicas"),
        };
        format!(
            "{} masters ({each}), {} of {SLOTS} slots served",
            self.masters.len(),
            self.served
        )
    }
}

/// `[start, end, [host, port, ...], replica...]`.
fn entry_of(entry: &Value) -> Option<(u16, u16, String, u16, usize)> {
    let Value::Array(fields) = entry else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let Value::Array(master) = fields.get(2)? else {
        return None;
    };
    let host = match master.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    Some((
        number(fields.first()?)?,
        number(fields.get(1)?)?,
        host,
        number(master.get(1)?)?,
        fields.len() - 3,
    ))
}

/// A cluster node: its slot map from the seed, then every master
/// checked as a server of its own (a finding names its shard), the node's
/// verdict the worst of theirs.
pub(super) fn check(node: &Node, global: &Global, drift: Duration) -> Checkup {
    let mut c = Checkup::new();
    let shards = match node.connect() {
        Ok((mut conn, _)) => Shards::read(node, &mut conn),
        Err(e) => Err(format!("unreachable: {e}")),
    };
    let shards = match shards {
        Ok(shards) => shards,
        Err(e) => {
            c.note(Verdict::Fail, format!("the seed: {e}"));
            return c;
        }
    };
    c.text("cluster", "cluster", shards.summary());
    if shards.served < SLOTS {
        c.note(
            Verdict::Fail,
            format!(
                "{} slots have no master: locks on their keys fail until they have one",
                SLOTS - shards.served
            ),
        );
    }
    let mut seen = Vec::new();
    for master in &shards.masters {
        let address = format!("{}:{}", master.host, master.port);
        let shard = match node.shard(&master.host, master.port) {
            Ok(shard) => server::check(&shard, global, drift, true),
            Err(e) => {
                c.note(Verdict::Fail, format!("shard {address}: {e}"));
                continue;
            }
        };
        c.quarantined |= shard.quarantined;
        c.quarantine_left = c.quarantine_left.max(shard.quarantine_left);
        for (level, finding) in shard.findings {
            c.note(level, format!("shard {address}: {finding}"));
        }
        seen.push(format!("{address} {}", shard.verdict.as_str()));
    }
    c.text("shards", "shards", seen.join(", "));
    c
}
