//! One thread, lock + release, measured paired and interleaved: every
//! client takes its turn in each round (see `paired.rs`), on N = 1, 3 and
//! 5 nodes; and quorum-lock with the third of three nodes healthy, refused
//! or blackholed, the same way.

use std::time::{Duration, Instant};

use quorum_lock::LockManager;

use crate::clients::{Client, Locker};
use crate::floor::Floor;
use crate::ours::{self, Direct, Ours};
use crate::paired::{Arm, Paired};
use crate::peers::{RedlockService, RedsyncService, RslockSingle};
use crate::plan::Plan;
use testkit::Blackhole;

/// How long a dropped guard's queued release may take before the next
/// client's turn (untimed).
const FLUSH: Duration = Duration::from_secs(2);

/// The latency comparison on `urls` (N = `urls.len()`), and the clients
/// that could not be set up, with why.
pub fn by_nodes(urls: &[String], plan: &Plan) -> (Paired, Vec<(Client, String)>) {
    let n = urls.len();
    let settings = &plan.settings;
    let mut failed = Vec::new();
    let mut note = |c: Client, e: String| failed.push((c, e));
    let want = |c: Client| plan.has(c) && (c != Client::Backend || n == 1);

    let mut floor = want(Client::Floor)
        .then(|| Floor::connect(urls, settings))
        .and_then(|r| r.map_err(|e| note(Client::Floor, e)).ok());
    let locks = (want(Client::Ours) || want(Client::OursDrop))
        .then(|| ours::manager(urls, settings))
        .and_then(|r| r.map_err(|e| note(Client::Ours, e)).ok());
    let mut direct = want(Client::Backend)
        .then(|| Direct::open(urls, settings))
        .and_then(|r| r.map_err(|e| note(Client::Backend, e)).ok());
    let redlock = want(Client::Redlock).then(|| RedlockService::new(urls, settings));
    let redsync = want(Client::Redsync)
        .then(|| RedsyncService::new(urls, settings))
        .and_then(|r| r.map_err(|e| note(Client::Redsync, e)).ok());
    let mut rslock = want(Client::Rslock)
        .then(|| RslockSingle::new(urls, settings))
        .and_then(|r| r.map_err(|e| note(Client::Rslock, e)).ok());
    let mut redlock_locker = redlock.as_ref().and_then(|s| {
        crate::clients::Service::locker(s)
            .map_err(|e| note(Client::Redlock, e))
            .ok()
    });
    let mut redsync_locker = redsync.as_ref().and_then(|s| {
        crate::clients::Service::locker(s)
            .map_err(|e| note(Client::Redsync, e))
            .ok()
    });

    let key = |c: Client| format!("qbench:{}:lat:n{n}", c.key()).into_bytes();
    let mut arms: Vec<Arm<'_>> = Vec::new();
    if let Some(f) = floor.as_mut() {
        let k = key(Client::Floor);
        arms.push(Arm::new(Client::Floor.key(), move || f.lock_release(&k)));
    }
    if let Some(locks) = locks.as_ref() {
        if want(Client::Ours) {
            let mut o = Ours {
                locks,
                settings,
                drop_guard: false,
            };
            let k = key(Client::Ours);
            arms.push(Arm::new(Client::Ours.key(), move || o.lock_release(&k)));
        }
        if want(Client::OursDrop) {
            let k = key(Client::OursDrop);
            arms.push(
                Arm::new(Client::OursDrop.key(), move || ours::lock_drop(locks, &k)).after(
                    move || {
                        locks.flush(FLUSH);
                    },
                ),
            );
        }
    }
    if let Some(d) = direct.as_mut() {
        let k = key(Client::Backend);
        arms.push(Arm::new(Client::Backend.key(), move || d.lock_release(&k)));
    }
    for (client, locker) in [
        (Client::Redlock, redlock_locker.as_mut()),
        (Client::Redsync, redsync_locker.as_mut()),
    ] {
        if let Some(l) = locker {
            let k = key(client);
            arms.push(
                Arm::new(client.key(), move || l.lock_release(&k)).every(plan.latency.slow_every),
            );
        }
    }
    if let Some(r) = rslock.as_mut() {
        let k = key(Client::Rslock);
        arms.push(Arm::new(Client::Rslock.key(), move || r.lock_release(&k)));
    }
    let paired = Paired::measure(&mut arms, plan.runs, plan.latency.rounds);
    (paired, failed)
}

/// The labels of the third-node comparison: `healthy/release`, ...
pub fn third_label(third: &str, drop_guard: bool) -> String {
    format!("{third}/{}", if drop_guard { "drop" } else { "release" })
}

/// quorum-lock on N=3 with the third node healthy, refused (nothing
/// listens) or blackholed (accepts, never answers): six arms, interleaved.
pub fn third_node(urls: &[String], plan: &Plan) -> Result<Paired, String> {
    let blackhole = Blackhole::start();
    let thirds = [
        ("healthy", urls[2].clone()),
        (
            "refused",
            format!("redis://127.0.0.1:{}", testkit::free_port()),
        ),
        ("blackholed", blackhole.url()),
    ];
    let managers = thirds
        .iter()
        .map(|(name, third)| {
            let nodes = [urls[0].clone(), urls[1].clone(), third.clone()];
            ours::manager(&nodes, &plan.settings).map(|m| (*name, m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Warm up: connect, and let the engine mark a bad node down (two failed
    // round trips; each costs the node timeout on a blackholed node). At
    // least `warmup` and 20 operations per manager, at most 100 000
    // operations or `warmup` + 5 s in all.
    let now = Instant::now();
    let (warm_until, hard_stop) = (
        now + plan.third.warmup,
        now + plan.third.warmup + Duration::from_secs(5),
    );
    let mut warm_ops = 0u32;
    loop {
        let now = Instant::now();
        if (now >= warm_until && warm_ops >= 20) || now >= hard_stop || warm_ops >= 100_000 {
            break;
        }
        for (name, locks) in &managers {
            let _ = ours::lock_drop(locks, format!("qbench:third:{name}:warm").as_bytes());
        }
        warm_ops += 1;
    }
    for (_, locks) in &managers {
        locks.flush(FLUSH);
    }
    let mut arms = Vec::new();
    for (name, locks) in &managers {
        arms.push(release_arm(name, locks, plan));
        let k = format!("qbench:third:{name}:drop").into_bytes();
        arms.push(
            Arm::new(third_label(name, true), move || ours::lock_drop(locks, &k)).after(
                move || {
                    locks.flush(FLUSH);
                },
            ),
        );
    }
    let paired = Paired::measure(&mut arms, plan.runs, plan.third.rounds);
    drop(arms);
    drop(managers);
    drop(blackhole);
    Ok(paired)
}

fn release_arm<'a>(name: &str, locks: &'a LockManager, plan: &'a Plan) -> Arm<'a> {
    let mut o = Ours {
        locks,
        settings: &plan.settings,
        drop_guard: false,
    };
    let k = format!("qbench:third:{name}:release").into_bytes();
    Arm::new(third_label(name, false), move || o.lock_release(&k))
}
