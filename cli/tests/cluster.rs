//! The tool on a cluster node (`redis+cluster://`): `doctor` checks it
//! shard by shard, a plain URL to a member is told to name the whole
//! cluster, `run` locks through it and `status` shows the holder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use common::{code, output, stdout, tool_on};
use testkit::RedisCluster;

#[test]
fn doctor_checks_a_cluster_node_shard_by_shard() {
    let cluster = RedisCluster::start(3, 0);
    let out = output(&mut tool_on(&[cluster.seed_url()], &["doctor"]));
    let text = stdout(&out);
    assert!(
        text.contains("cluster: 3 masters (0 replicas each), 16384 of 16384 slots served"),
        "{text}"
    );
    let shards = text
        .lines()
        .find(|l| l.trim_start().starts_with("shards:"))
        .unwrap_or_else(|| panic!("no shards line: {text}"));
    for master in cluster.masters() {
        assert!(
            shards.contains(&format!("127.0.0.1:{}", master.port())),
            "{text}"
        );
    }
    assert!(!text.contains("verdict: fail"), "{text}");
    assert_ne!(code(&out), 3, "{text}");
}

#[test]
fn doctor_tells_a_plain_url_to_a_cluster_member_to_name_the_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let port = cluster.masters()[0].port();
    let out = output(&mut tool_on(
        &[format!("redis://127.0.0.1:{port}")],
        &["doctor"],
    ));
    let text = stdout(&out);
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(verdict.contains("fail"), "{text}");
    assert!(
        verdict.contains(&format!("redis+cluster://127.0.0.1:{port}")),
        "names the URL to use: {text}"
    );
}

/// `run` holds a lock through a cluster node, `status` shows it held on
/// the key's master, and `break --force` releases it there: the tool's
/// every command takes a `redis+cluster://` node.
#[test]
fn run_status_and_break_work_through_a_cluster_node() {
    let cluster = RedisCluster::start(3, 0);
    common::run_status_break(&[cluster.seed_url()], |key| cluster.get(key));
}
