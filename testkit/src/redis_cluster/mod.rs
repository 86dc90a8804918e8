//! A Redis (or Valkey) cluster on loopback for the tests: masters and
//! replicas started as [`RedisServer`]s with `--cluster-enabled yes` and
//! a cluster bus port of their own (the default, port + 10000, often
//! collides with ephemeral ports), joined with `CLUSTER MEET`, given their
//! slots with `CLUSTER ADDSLOTSRANGE` and their masters with `CLUSTER
//! REPLICATE`: no `redis-cli --cluster` needed (the Valkey wheels ship
//! none). Every process stops on drop, as every `RedisServer` does.
//!
//! This file holds [`RedisCluster`], the cluster as a whole (one type,
//! its methods together); what a single member is started with and what
//! it says of itself and of the slots (`CONFIG GET`, its role, `CLUSTER
//! SLOTS`) is in `member.rs`.

use std::time::{Duration, Instant};

use self::member::{config, member_args, role, slot_map};
use crate::server::{RedisServer, TempDir, certificate, free_port};
use crate::wait::wait_until_with;

mod member;

/// The number of hash slots in a cluster.
const SLOTS: usize = 16384;

/// How long the cluster may take to agree (start, failover).
const AGREE: Duration = Duration::from_secs(30);

/// How often agreement is asked (each time, a few connections per node:
/// gently, on a 2-core machine).
const POLL: Duration = Duration::from_millis(100);

/// When a `CLUSTER FAILOVER` that has not promoted its replica is asked
/// again. The server aborts a manual failover that has not finished in
/// 5 s (`CLUSTER_MF_TIMEOUT` in Redis, the default of Valkey's
/// `cluster-manual-failover-timeout`): the replica stays a replica and
/// says nothing, so a harness that asks once may wait out [`AGREE`] for a
/// failover nobody is running any more (seen in a torture run on a
/// loaded machine). Asked again after this long, within [`AGREE`].
const FAILOVER_AGAIN: Duration = Duration::from_secs(8);

/// Polls `done` every [`POLL`] for at most [`AGREE`].
fn agrees(done: impl FnMut() -> bool) -> bool {
    wait_until_with(AGREE, POLL, || false, done)
}

/// A cluster of `masters` masters with `replicas` replicas each (and
/// the replicas [`add_replica`](RedisCluster::add_replica) added since).
#[derive(Debug)]
pub struct RedisCluster {
    servers: Vec<RedisServer>,
    /// The TLS certificate the members share (removed on drop).
    _certs: Option<TempDir>,
}

impl RedisCluster {
    /// Starts the servers and makes them one cluster whose every slot is
    /// served and every replica attached; panics (naming the step) when
    /// that does not happen within 30 s.
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_in(masters, replicas, false)
    }

    /// [`start`](Self::start), every member also listening for TLS (a
    /// self-signed certificate; `redis-server` whatever
    /// [`SERVER_ENV`](crate::SERVER_ENV) says, as
    /// [`RedisServer::start_tls`]), the cluster bus and replication over
    /// TLS too (`tls-cluster`, `tls-replication`): a TLS client is told
    /// the members' TLS ports.
    pub fn start_tls(masters: usize, replicas: usize) -> Self {
        Self::start_in(masters, replicas, true)
    }

    fn start_in(masters: usize, replicas: usize, tls: bool) -> Self {
        assert!(masters > 0, "a cluster needs a master");
        // One certificate for all: the members check each other's on the
        // cluster bus.
        let certs = tls.then(|| TempDir::new("quorum-lock-cluster-tls"));
        let (cert, key) = certs.as_ref().map_or_else(Default::default, |dir| {
            let (cert, key) = certificate(dir.path());
            let text = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
            (text(cert), text(key))
        });
        let servers: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                let bus = free_port().to_string();
                let mut args = member_args(&bus);
                if tls {
                    args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                    args.extend(["--tls-cert-file", &cert, "--tls-key-file", &key]);
                    args.extend(["--tls-ca-cert-file", &cert]);
                    RedisServer::start_tls_with(&args)
                } else {
                    RedisServer::start_with(&args)
                }
            })
            .collect();
        let cluster = Self {
            servers,
            _certs: certs,
        };
        cluster.join(masters);
        cluster
    }

    fn join(&self, masters: usize) {
        let first = &self.servers[0];
        for other in &self.servers[1..] {
            let bus: String = config(other, "cluster-port");
            let _: () = first.cmd(
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(other.port())
                    .arg(bus),
            );
        }
        for (i, master) in self.servers[..masters].iter().enumerate() {
            let (start, end) = (i * SLOTS / masters, (i + 1) * SLOTS / masters - 1);
            let _: () = master.cmd(
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(start)
                    .arg(end),
            );
        }
        let n = self.servers.len();
        let all_met = || {
            self.servers.iter().all(|s| {
                let nodes: String = s.cmd(redis::cmd("CLUSTER").arg("NODES"));
                nodes.lines().count() == n && !nodes.contains("handshake")
            })
        };
        assert!(agrees(all_met), "the cluster's nodes never all met");
        for (i, replica) in self.servers[masters..].iter().enumerate() {
            let master = &self.servers[i % masters];
            let id: String = master.cmd(redis::cmd("CLUSTER").arg("MYID"));
            let _: () = replica.cmd(redis::cmd("CLUSTER").arg("REPLICATE").arg(id));
        }
        assert!(
            agrees(|| self.agreed(masters)),
            "the cluster never agreed: {}",
            self.servers[0].cmd::<String>(redis::cmd("CLUSTER").arg("NODES"))
        );
    }

    /// Whether every live node says the cluster is ok and shows every slot
    /// served by `masters` masters (in one range or more each), every
    /// other live server listed as a replica of one of them, in sync.
    fn agreed(&self, masters: usize) -> bool {
        let running = self.servers.iter().filter(|s| s.is_running()).count();
        self.servers.iter().filter(|s| s.is_running()).all(|s| {
            let info: String = s.cmd(redis::cmd("CLUSTER").arg("INFO"));
            let shards = slot_map(s);
            // Each master once (a master of several ranges lists its
            // replicas in each).
            let mut by_master: Vec<(u16, usize)> = shards.iter().map(|r| (r.2, r.3)).collect();
            by_master.sort_unstable();
            by_master.dedup();
            info.contains("cluster_state:ok")
                && shards.iter().map(|r| r.1 - r.0 + 1).sum::<usize>() == SLOTS
                && by_master.len() == masters
                && by_master.iter().map(|m| m.1).sum::<usize>() + masters == running
        }) && self.replicas_in_sync()
    }

    /// Starts one more server, joins it to the cluster as a replica of
    /// `master` (`CLUSTER MEET`, `CLUSTER REPLICATE`), and waits until its
    /// first sync is done and every node lists it in `CLUSTER SLOTS`: a
    /// shard scaled out. Returns its port. Panics (naming the step) when
    /// that does not happen within 30 s. Not for a TLS cluster.
    pub fn add_replica(&mut self, master: u16) -> u16 {
        assert!(self._certs.is_none(), "add_replica: not for a TLS cluster");
        let masters = self.masters().len();
        let bus = free_port().to_string();
        let replica = RedisServer::start_with(&member_args(&bus));
        let port = replica.port();
        let _: () = self.any_running().cmd(
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(port)
                .arg(&bus),
        );
        self.servers.push(replica);
        let n = self.servers.iter().filter(|s| s.is_running()).count();
        let met = || {
            self.servers.iter().filter(|s| s.is_running()).all(|s| {
                let nodes: String = s.cmd(redis::cmd("CLUSTER").arg("NODES"));
                nodes.lines().count() == n && !nodes.contains("handshake")
            })
        };
        assert!(agrees(met), "the new member :{port} never met the cluster");
        let id: String = self.by_port(master).cmd(redis::cmd("CLUSTER").arg("MYID"));
        let _: () = self
            .by_port(port)
            .cmd(redis::cmd("CLUSTER").arg("REPLICATE").arg(id));
        assert!(
            agrees(|| self.agreed(masters)),
            "the new replica :{port} of :{master} never synced: {}",
            self.servers[0].cmd::<String>(redis::cmd("CLUSTER").arg("NODES"))
        );
        port
    }

    /// Whether every replica has finished its first sync.
    fn replicas_in_sync(&self) -> bool {
        self.replicas().iter().all(|r| {
            let info: String = r.cmd(redis::cmd("INFO").arg("replication"));
            info.contains("master_link_status:up")
        })
    }

    /// `redis+cluster://127.0.0.1:<port>` of the first server started.
    pub fn seed_url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.servers[0].port())
    }

    /// `rediss+cluster://127.0.0.1:<TLS port>/0#insecure` of the first
    /// server, for a cluster from [`start_tls`](Self::start_tls).
    pub fn tls_seed_url(&self) -> String {
        let port = self.servers[0]
            .tls_port()
            .expect("not started with start_tls");
        format!("rediss+cluster://127.0.0.1:{port}/0#insecure")
    }

    /// The servers that are masters now (a failover changes them).
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.servers
            .iter()
            .filter(|s| s.is_running() && role(s) == "master")
            .collect()
    }

    /// The servers that are replicas now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.servers
            .iter()
            .filter(|s| s.is_running() && role(s) == "slave")
            .collect()
    }

    /// The master that serves `key`'s slot now.
    pub fn server_for_key(&self, key: &[u8]) -> &RedisServer {
        let slot = self.slot_of(key);
        let (_, _, port, _) = slot_map(self.any_running())
            .into_iter()
            .find(|r| r.0 <= slot && slot <= r.1)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"));
        self.by_port(port)
    }

    /// A replica of `master`, if it has one.
    pub fn replica_of(&self, master: &RedisServer) -> Option<&RedisServer> {
        self.replicas().into_iter().find(|r| {
            let info: String = r.cmd(redis::cmd("INFO").arg("replication"));
            info.lines()
                .any(|l| l.trim_end() == format!("master_port:{}", master.port()))
        })
    }

    /// `GET key` on the master of its slot.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.server_for_key(key).get(key)
    }

    /// Every key on every master, sorted (for leak checks).
    pub fn keys_everywhere(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.masters().iter().flat_map(|m| m.keys()).collect();
        keys.sort();
        keys
    }

    /// `CLUSTER FAILOVER` on `replica`, and waits until it is the master
    /// of its slots on every node and its old master follows it; asked
    /// again every [`FAILOVER_AGAIN`] while `replica` is still a replica
    /// (the server gave the failover up).
    pub fn failover(&self, replica: &RedisServer) {
        // Counted before: for a moment both the replica and its master
        // say they are masters.
        let masters = self.masters().len().max(1);
        let _: () = replica.cmd(redis::cmd("CLUSTER").arg("FAILOVER"));
        let mut asked_at = Instant::now();
        let mut asked = 1;
        let promoted = || {
            if role(replica) != "master" {
                if asked_at.elapsed() >= FAILOVER_AGAIN {
                    // A refusal here ("Master is down or failed") means
                    // the cluster is failing it over on its own: waited
                    // for all the same.
                    let _ = redis::cmd("CLUSTER")
                        .arg("FAILOVER")
                        .query::<()>(&mut replica.conn());
                    asked_at = Instant::now();
                    asked += 1;
                }
                return false;
            }
            self.servers
                .iter()
                .filter(|s| s.is_running())
                .all(|s| slot_map(s).iter().any(|r| r.2 == replica.port()))
                && self.agreed(masters)
        };
        if !agrees(promoted) {
            let seen: Vec<String> = self
                .servers
                .iter()
                .filter(|s| s.is_running())
                .map(|s| {
                    let info: String = s.cmd(redis::cmd("INFO").arg("replication"));
                    let link = info.lines().find(|l| l.starts_with("master_link_status"));
                    let state: String = s.cmd(redis::cmd("CLUSTER").arg("INFO"));
                    let link = (link, state.lines().next().map(str::to_owned));
                    format!(
                        "{}: role {}, {link:?}, slots {:?}",
                        s.describe(),
                        role(s),
                        slot_map(s)
                    )
                })
                .collect();
            panic!(
                "{} was not promoted ({asked} x CLUSTER FAILOVER):\n{}",
                replica.describe(),
                seen.join("\n")
            );
        }
    }

    /// Kills (`kill -9`) the master of `key`'s slot, waits until the
    /// cluster promotes one of its replicas on its own (after the node
    /// timeout, 2 s here), and starts the killed server again, which
    /// rejoins as a replica of the new master. Returns the new master's
    /// port. Panics (naming the step) when the cluster does not recover
    /// within 30 s.
    pub fn crash_master_of(&mut self, key: &[u8]) -> u16 {
        let masters = self.masters().len();
        let old = self.server_for_key(key).port();
        let at = self.servers.iter().position(|s| s.port() == old).unwrap();
        self.servers[at].kill9();
        let took_over = || {
            let now = self.server_for_key_among_running(key);
            now.is_some_and(|p| p != old)
        };
        assert!(agrees(took_over), "no replica took over from :{old}");
        self.servers[at].restart();
        assert!(
            agrees(|| self.agreed(masters)),
            "the cluster never agreed again after the crash of :{old}"
        );
        self.server_for_key(key).port()
    }

    /// Kills (`kill -9`) a replica of the master of `key`'s slot, and
    /// leaves it dead (the cluster marks it failed after its node
    /// timeout). Returns its port.
    pub fn kill_replica_for(&mut self, key: &[u8]) -> u16 {
        let port = self
            .replica_of(self.server_for_key(key))
            .expect("a replica")
            .port();
        let at = self.servers.iter().position(|s| s.port() == port).unwrap();
        self.servers[at].kill9();
        port
    }

    /// The port of the master that every running node says serves
    /// `key`'s slot, if they agree.
    fn server_for_key_among_running(&self, key: &[u8]) -> Option<u16> {
        let slot = self.slot_of(key);
        let mut seen = self.servers.iter().filter(|s| s.is_running()).map(|s| {
            slot_map(s)
                .into_iter()
                .find(|r| r.0 <= slot && slot <= r.1)
                .map(|r| r.2)
        });
        let first = seen.next()??;
        let running = |port: u16| {
            self.servers
                .iter()
                .any(|s| s.port() == port && s.is_running())
        };
        (seen.all(|p| p == Some(first)) && running(first)).then_some(first)
    }

    /// Starts moving the slot of `key` from its master to another master
    /// (`CLUSTER SETSLOT .. IMPORTING` on the target, `MIGRATING` on the
    /// source), moving no key: the source then answers `ASK` for the keys
    /// of that slot it does not have. Returns (source, target) ports.
    pub fn begin_migration(&self, key: &[u8]) -> (u16, u16) {
        let slot = self.slot_of(key);
        let source = self.server_for_key(key);
        let target = *self
            .masters()
            .iter()
            .find(|m| m.port() != source.port())
            .expect("another master");
        let id = |s: &RedisServer| -> String { s.cmd(redis::cmd("CLUSTER").arg("MYID")) };
        let setslot = |on: &RedisServer, state: &str, node: &RedisServer| {
            let _: () = on.cmd(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id(node)),
            );
        };
        setslot(target, "IMPORTING", source);
        setslot(source, "MIGRATING", target);
        (source.port(), target.port())
    }

    /// Ends a migration [`begin_migration`](Self::begin_migration) began:
    /// the slot's keys still on the source move (`MIGRATE`), and every
    /// master is told the slot's new owner.
    pub fn end_migration(&self, key: &[u8], (source, target): (u16, u16)) {
        let slot = self.slot_of(key);
        let (source, target) = (self.by_port(source), self.by_port(target));
        let keys: Vec<Vec<u8>> = source.cmd(
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(1000),
        );
        if !keys.is_empty() {
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(target.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS");
            for k in &keys {
                migrate.arg(k);
            }
            let _: () = source.cmd(&migrate);
        }
        let owner: String = target.cmd(redis::cmd("CLUSTER").arg("MYID"));
        for master in self.masters() {
            let _: () = master.cmd(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&owner),
            );
        }
        let masters = self.masters().len();
        assert!(
            agrees(|| self.agreed(masters) && self.server_for_key(key).port() == target.port()),
            "the slot of the migration never settled"
        );
    }

    fn slot_of(&self, key: &[u8]) -> usize {
        let slot: i64 = self
            .any_running()
            .cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key));
        usize::try_from(slot).unwrap()
    }

    /// The pids of its running servers (for a hang detector that must
    /// kill them).
    pub fn pids(&self) -> Vec<u32> {
        self.servers
            .iter()
            .filter(|s| s.is_running())
            .map(RedisServer::pid)
            .collect()
    }

    fn any_running(&self) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.is_running())
            .expect("a running server")
    }

    fn by_port(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no server of this cluster on port {port}"))
    }
}
