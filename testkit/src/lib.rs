//! The test harness of `quorum-lock`, shared by the library's integration
//! tests, the command-line tool's tests and the comparison benchmark.
//!
//! * [`server`]: real lock servers (`redis-server`, or `valkey-server` with
//!   `QUORUM_LOCK_SERVER=valkey`) on free loopback ports: kill -9, SIGSTOP,
//!   restart in place, TLS. Every server is killed on drop, and a missing
//!   binary fails the test loudly: these tests are never skipped.
//! * [`clock`]: stepped server clocks (an `LD_PRELOAD` shim built with
//!   `cc`), for [`RedisServer::start_with_clock`].
//! * [`RedisCluster`]: a cluster of such servers (masters, replicas,
//!   failover) on loopback.
//! * [`SentinelSet`]: a master, a replica and three sentinels on
//!   loopback (failover, a sentinel killed, the replica paused).
//! * [`fake_server`]: hostile servers that answer with what no Redis sends.
//! * [`scripted`]: a fake server whose every answer the test writes.
//! * [`proxy`]: a TCP proxy for fault injection (delay, blackhole, cuts that
//!   drop or hold each direction, retarget).
//! * [`blackhole`]: a listener that accepts and never reads nor answers.
//! * [`memory_nodes`] and its kin: in-memory clusters; [`builder_on`]
//!   and [`cluster_on`]: managers over them on a manual clock.
//! * [`faces`]: memory nodes seen through a changed face.
//! * [`acceptor`]: the one loopback accept loop the three above run on.
//! * [`CountedNotices`]: any backend, its release listeners' polls counted.
//! * [`rng`]: the one seedable generator, so a failing seed replays.
//! * [`logs`]: the library's log events, captured in a test binary.
//! * [`alone`]: a test alone in a process of its own (it counts the
//!   process' threads, reads its memory, installs a global).
//! * [`wait_until`]: bounded polling for what a test cannot be told about;
//!   [`hold_settled`]: a lock every node has applied.
//!
//! Test code: failing loudly (panicking with a message) is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod acceptor;
mod alone;
pub mod blackhole;
pub mod clock;
pub mod commandstats;
mod counted;
pub mod faces;
pub mod fake_server;
pub mod logs;
mod memory;
pub mod proxy;
mod redis_cluster;
mod report;
pub mod rng;
pub mod scripted;
mod sentinel;
pub mod server;
mod wait;

pub use alone::alone;
pub use blackhole::Blackhole;
pub use counted::CountedNotices;
pub use memory::{builder_on, cluster_on, memory_nodes, memory_nodes_on, memory_nodes_with};
pub use redis_cluster::RedisCluster;
pub use report::said_of;
pub use rng::Rng;
pub use scripted::ScriptedServer;
pub use sentinel::{MASTER_NAME, SentinelSet};
pub use server::{
    RedisServer, RedisServers, SERVER_ENV, ServerKind, TempDir, connect, free_port, wheel_server,
};
pub use wait::{hold_settled, observed, until_listening, wait_until, wait_until_with};
