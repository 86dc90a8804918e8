//! The fault schedule: kills, restarts (a majority, under a holder),
//! SIGSTOP, proxy delays and blackholes, and the hang detector.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use testkit::proxy::Proxy;
use testkit::{RedisServers, Rng};

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
}

impl Faults {
    pub(crate) fn total(&self) -> u64 {
        self.restart_one + self.restart_majority + self.sigstop + self.delay + self.blackhole
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

/// The servers' current pids, for the hang detector.
pub(crate) fn record_pids(servers: &RedisServers, pids: &Mutex<Vec<u32>>) {
    *pids.lock().unwrap() = servers.iter().map(testkit::RedisServer::pid).collect();
}

/// Kills the servers (by pid) and exits the process if the run has not
/// reported back within `limit`: a hung run must not hang CI or leave
/// servers behind. Dropping the returned sender (also on a panic) disarms
/// it.
pub(crate) fn hang_detector(
    pids: Arc<Mutex<Vec<u32>>>,
    register: u32,
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
                for pid in pids.iter().chain([&register]) {
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
/// 100-600 ms 20 %.
pub(crate) fn fault_schedule(
    servers: &mut RedisServers,
    proxies: &[Proxy],
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
        match kind {
            0..20 => {
                servers[node].restart(); // kill -9, then start again (empty)
                shared.restarts.fetch_add(1, Ordering::SeqCst);
                faults.restart_one += 1;
            }
            20..40 => {
                restart_majority(servers, shared, rng, deadline, &mut faults);
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
            _ => {
                proxies[node].blackhole();
                thread::sleep(rng.millis(100, 600));
                proxies[node].pass();
                faults.blackhole += 1;
            }
        }
        record_pids(servers, pids);
    }
    faults
}

/// Kills and restarts three nodes at once, preferring the ones that hold
/// the lock key, after asking for a long hold and waiting (bounded) for a
/// holder with at least [`HOLDER_LEFT`] of its hold left: the pattern that
/// lets a second client in when the restarted nodes vote at once.
pub(crate) fn restart_majority(
    servers: &mut RedisServers,
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
        let holds = |key: &str| servers[i].get(key.as_bytes()).is_some();
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
        for (i, server) in servers.iter_mut().enumerate() {
            if chosen.contains(&i) {
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
