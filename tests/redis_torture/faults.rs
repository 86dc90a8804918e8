//! The fault schedule: kills, restarts (a majority, under a holder),
//! SIGSTOP, proxy delays and blackholes, and the hang detector.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use testkit::proxy::Proxy;
use testkit::{RedisCluster, RedisServers, Rng};

use crate::config::*;
use crate::recorder::*;

/// Faults injected, by kind.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Faults {
    /// One node killed (`kill -9`) and restarted empty at once.
    pub(crate) restart_one: u64,
    /// Three nodes killed and restarted together...
    pub(crate) restart_majority: u64,
    /// ...of which while a client held the lock with time left.
    pub(crate) restart_majority_with_holder: u64,
    /// Longest majority restart (kill to all three answering `PING`).
    pub(crate) slowest_majority_restart: Duration,
    /// `SIGSTOP`, a pause, `SIGCONT`.
    pub(crate) sigstop: u64,
    /// The node's proxy delays each request chunk for a while.
    pub(crate) delay: u64,
    /// The node's proxy answers nothing for a while.
    pub(crate) blackhole: u64,
    /// An evicting policy switched on at run time, lock keys evicted,
    /// then `noeviction` again.
    pub(crate) eviction: u64,
    /// Lock keys evicted by those.
    pub(crate) evicted_keys: u64,
    /// The cluster arm: the master of the resource's slot killed, a
    /// replica promoted by the cluster, the old master back as a replica.
    pub(crate) shard_crash: u64,
    /// The cluster arm: `CLUSTER FAILOVER` of the resource's shard.
    pub(crate) shard_failover: u64,
}

impl Faults {
    pub(crate) fn total(&self) -> u64 {
        self.restart_one
            + self.restart_majority
            + self.sigstop
            + self.delay
            + self.blackhole
            + self.eviction
            + self.shard_crash
            + self.shard_failover
    }
}

/// Sets the stop flag when dropped, so the clients end even when the fault
/// schedule panics (the scope joins them before the panic goes on).
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The servers' current pids (the cluster's too, in the cluster arm), for
/// the hang detector.
pub(crate) fn record_pids(
    servers: &RedisServers,
    cluster: Option<&RedisCluster>,
    pids: &Mutex<Vec<u32>>,
) {
    let mut all: Vec<u32> = servers.iter().map(testkit::RedisServer::pid).collect();
    all.extend(cluster.map(RedisCluster::pids).unwrap_or_default());
    *pids.lock().unwrap() = all;
}

/// Kills the servers (by pid; and the fenced register's, when there is
/// one) and exits the process if the run has not reported back within
/// `limit`: a hung run must not hang CI or leave servers behind. Dropping
/// the returned sender (also on a panic) disarms it.
pub(crate) fn hang_detector(
    pids: Arc<Mutex<Vec<u32>>>,
    register: Option<u32>,
    limit: Duration,
) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    thread::Builder::new()
        .name("torture-hang-detector".into())
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let pids = pids
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                eprintln!("torture run hung for {limit:?}: killing servers {pids:?} and exiting");
                for pid in pids.iter().chain(register.as_ref()) {
                    let _ = std::process::Command::new("kill")
                        .arg("-KILL")
                        .arg(pid.to_string())
                        .status();
                }
                std::process::exit(3);
            }
        })
        .unwrap();
    tx
}

/// The fault schedule, until `deadline`: every 100-400 ms one fault, one
/// at a time (a paused node is resumed, a proxy set back to pass, before
/// the next). Kinds, by weight: kill -9 and restart of one node 20 %, of
/// three nodes under a holder 20 % (and at least every
/// [`MAJORITY_RESTART_EVERY`]), `SIGSTOP` for 50-600 ms 20 %, proxy delay
/// of 20-150 ms per request chunk for 200-800 ms 20 %, proxy blackhole for
/// 100-600 ms 10 %, an evicting policy switched on and back off at run
/// time with lock keys evicted in between 10 %.
///
/// In the cluster arm (`cluster`), node 0 is the cluster: its faults go to
/// the shard of the resource ([`cluster_fault`]), and a majority restart
/// that picks it crashes that shard's master.
#[allow(clippy::too_many_arguments)] // the run's parts, passed through
pub(crate) fn fault_schedule(
    servers: &mut RedisServers,
    proxies: &[Proxy],
    mut cluster: Option<&mut RedisCluster>,
    shared: &Shared,
    rng: &mut Rng,
    deadline: Instant,
    pids: &Mutex<Vec<u32>>,
) -> Faults {
    let mut faults = Faults::default();
    let mut last_majority = Instant::now();
    loop {
        let gap = rng.millis(100, 400);
        if Instant::now() + gap >= deadline {
            break;
        }
        thread::sleep(gap);
        let node = rng.below(NODES as u64) as usize;
        let mut kind = rng.below(100);
        if last_majority.elapsed() >= MAJORITY_RESTART_EVERY {
            kind = 20; // the deterministic pattern, repeated
        }
        if let (0, Some(cluster), false) = (node, cluster.as_deref_mut(), (20..40).contains(&kind))
        {
            cluster_fault(cluster, kind, rng, &mut faults);
            record_pids(servers, Some(cluster), pids);
            continue;
        }
        match kind {
            0..20 => {
                servers[node].restart(); // kill -9, then start again (empty)
                shared.restarts.fetch_add(1, Ordering::SeqCst);
                faults.restart_one += 1;
            }
            20..40 => {
                let cluster = cluster.as_deref_mut();
                restart_majority(servers, cluster, shared, rng, deadline, &mut faults);
                last_majority = Instant::now();
            }
            40..60 => {
                servers[node].pause();
                thread::sleep(rng.millis(50, 600));
                servers[node].resume();
                faults.sigstop += 1;
            }
            60..80 => {
                proxies[node].delay(rng.millis(20, 150));
                thread::sleep(rng.millis(200, 800));
                proxies[node].pass();
                faults.delay += 1;
            }
            80..90 => {
                proxies[node].blackhole();
                thread::sleep(rng.millis(100, 600));
                proxies[node].pass();
                faults.blackhole += 1;
            }
            _ => {
                faults.evicted_keys += evict_at_run_time(&servers[node]);
                faults.eviction += 1;
            }
        }
        record_pids(servers, cluster.as_deref(), pids);
    }
    faults
}

/// How old a node's settings may be when a grant counts, and how soon a
/// holder without traffic reads them (docs/safety.md): the schedule below
/// keeps to those bounds, as the crate documents it must.
const SETTINGS_MAX_AGE: Duration = Duration::from_millis(500);
const HOLDER_READS_WITHIN: Duration = Duration::from_millis(1000);

/// An operator switches an evicting policy on at run time (`maxmemory`
/// just above what is used, `volatile-lru`), waits the settings' age,
/// writes cache entries with an expiry until the lock keys are evicted,
/// leaves the policy on until every holder has read it, and switches
/// `noeviction` back on. Returns how many keys the server evicted.
fn evict_at_run_time(server: &testkit::RedisServer) -> u64 {
    let stat = |section: &str, field: &str| -> u64 {
        let info: String = server.cmd(redis::cmd("INFO").arg(section));
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let config = |name: &str, value: &str| {
        let _: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut server.conn());
    };
    let before = stat("stats", "evicted_keys:");
    let used = stat("memory", "used_memory:");
    config("maxmemory", &(used + (2 << 20)).to_string());
    config("maxmemory-policy", "volatile-lru");
    thread::sleep(SETTINGS_MAX_AGE);
    let value = vec![b'x'; 32 * 1024];
    for i in 0..200 {
        // Short-lived: the cache is gone soon after the fault.
        let _: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("cache:{i}"))
            .arg(&value)
            .arg("PX")
            .arg(2000)
            .query(&mut server.conn());
    }
    thread::sleep(HOLDER_READS_WITHIN);
    config("maxmemory-policy", "noeviction");
    config("maxmemory", "0");
    stat("stats", "evicted_keys:").saturating_sub(before)
}

/// Kills and restarts three nodes at once, preferring the ones that hold
/// the lock key, after asking for a long hold and waiting (bounded) for a
/// holder with at least [`HOLDER_LEFT`] of its hold left: the pattern that
/// lets a second client in when the restarted nodes vote at once.
pub(crate) fn restart_majority(
    servers: &mut RedisServers,
    mut cluster: Option<&mut RedisCluster>,
    shared: &Shared,
    rng: &mut Rng,
    deadline: Instant,
    faults: &mut Faults,
) {
    shared.want_long_hold.store(true, Ordering::Relaxed);
    let wait_end = (Instant::now() + HOLDER_WAIT).min(deadline);
    let mut with_holder = false;
    while Instant::now() < wait_end {
        if shared.holder_left().is_some_and(|left| left >= HOLDER_LEFT) {
            with_holder = true;
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    shared.want_long_hold.store(false, Ordering::Relaxed);
    let mut order: Vec<usize> = (0..NODES).collect();
    for i in (1..NODES).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    // Holders of the key first (the unfenced clients' key, then the fenced
    // clients'), so that the restart empties a majority.
    order.sort_by_key(|&i| {
        let holds = |key: &str| match (i, cluster.as_deref()) {
            (0, Some(cluster)) => cluster.get(key.as_bytes()).is_some(),
            _ => servers[i].get(key.as_bytes()).is_some(),
        };
        if holds(RESOURCE) {
            0
        } else if holds(FENCED_RESOURCE) {
            1
        } else {
            2
        }
    });
    let chosen = &order[..3];
    let started = Instant::now();
    thread::scope(|scope| {
        // In the cluster arm, node 0 is the cluster: its shard's master
        // crashes instead.
        let mut cluster = cluster.take().filter(|_| chosen.contains(&0));
        for (i, server) in servers.iter_mut().enumerate() {
            if i == 0
                && let Some(cluster) = cluster.take()
            {
                scope.spawn(move || cluster.crash_master_of(RESOURCE.as_bytes()));
                faults.shard_crash += 1;
            } else if chosen.contains(&i) {
                scope.spawn(move || server.restart());
            }
        }
    });
    shared.restarts.fetch_add(1, Ordering::SeqCst);
    faults.slowest_majority_restart = faults.slowest_majority_restart.max(started.elapsed());
    faults.restart_majority += 1;
    if with_holder {
        faults.restart_majority_with_holder += 1;
    }
}

/// A fault of the cluster arm's cluster node, on the shard that serves
/// the resource (`kind` as drawn by the schedule): its master crashed and
/// replaced by a replica, 20 %; paused, 20 %; failed over by `CLUSTER
/// FAILOVER`, 30 %; nothing (the proxy and eviction faults have no
/// cluster form), the rest.
fn cluster_fault(cluster: &mut RedisCluster, kind: u64, rng: &mut Rng, faults: &mut Faults) {
    let key = RESOURCE.as_bytes();
    match kind {
        0..20 => {
            cluster.crash_master_of(key);
            faults.shard_crash += 1;
        }
        40..60 => {
            let master = cluster.server_for_key(key);
            master.pause();
            thread::sleep(rng.millis(50, 600));
            master.resume();
            faults.sigstop += 1;
        }
        60..90 => {
            if let Some(replica) = cluster.replica_of(cluster.server_for_key(key)) {
                cluster.failover(replica);
                faults.shard_failover += 1;
            }
        }
        _ => {}
    }
}
