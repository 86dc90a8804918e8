//! One member of a test cluster: the arguments it is started with (a
//! cluster bus port of its own) and what it says when asked (a `CONFIG
//! GET` value, its role, its `CLUSTER SLOTS`). Apart from
//! [`RedisCluster`](super::RedisCluster) because these ask one server and
//! know nothing of the others; the cluster's methods put the answers
//! together.

use redis::Value;

use crate::server::RedisServer;

/// The arguments of every member (a cluster bus port of its own).
pub(super) fn member_args(bus: &str) -> Vec<&str> {
    vec![
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        bus,
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        // A replica's first sync waits this long (5 s by
        // default) for other replicas to share it.
        "--repl-diskless-sync-delay",
        "0",
    ]
}

/// One `CONFIG GET` value.
pub(super) fn config(server: &RedisServer, name: &str) -> String {
    let pair: Vec<String> = server.cmd(redis::cmd("CONFIG").arg("GET").arg(name));
    pair.get(1).cloned().unwrap_or_default()
}

/// `role:` of `INFO replication` (`master` or `slave`).
pub(super) fn role(server: &RedisServer) -> String {
    let info: String = server.cmd(redis::cmd("INFO").arg("replication"));
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("role:"))
        .unwrap_or_default()
        .to_owned()
}

/// `CLUSTER SLOTS` as (start, end, master port, replicas).
pub(super) fn slot_map(server: &RedisServer) -> Vec<(usize, usize, u16, usize)> {
    let reply: Value = server.cmd(redis::cmd("CLUSTER").arg("SLOTS"));
    let Value::Array(entries) = reply else {
        panic!("CLUSTER SLOTS of {}: {reply:?}", server.describe());
    };
    let int = |v: &Value| match v {
        Value::Int(n) => usize::try_from(*n).unwrap(),
        other => panic!("CLUSTER SLOTS: {other:?}"),
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                panic!("CLUSTER SLOTS entry: {entry:?}");
            };
            let Value::Array(master) = &fields[2] else {
                panic!("CLUSTER SLOTS master: {:?}", fields[2]);
            };
            let port = u16::try_from(int(&master[1])).unwrap();
            (int(&fields[0]), int(&fields[1]), port, fields.len() - 3)
        })
        .collect()
}
