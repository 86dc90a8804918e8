//! Costs that do not depend on the machine's noise: per lock + release(),
//! 1 thread, N=3, the process's context switches (all its threads) and
//! read/write system calls, from its own counters (`procfs.rs`): the
//! delta over a block of K operations of one client, divided by K. The
//! clients' blocks take turns, in an order that changes every run
//! (`paired::order`: none always follows the same one).

use std::time::{Duration, Instant};

use crate::clients::{Client, Locker};
use crate::floor::Floor;
use crate::ours::{self, Ours};
use crate::peers::RslockSingle;
use crate::plan::Plan;
use crate::procfs::{Counters, PerOp};
use crate::stats::Spread;

/// Operations before each block's first snapshot (connections, scripts).
const WARMUP: usize = 20;

/// The counters of one client, one entry per run.
#[derive(Debug, Clone)]
pub struct ClientCounters {
    pub client: Client,
    pub runs: Vec<PerOp>,
    pub errors: usize,
    pub first_error: Option<String>,
}

impl ClientCounters {
    pub fn spread(&self, f: impl Fn(&PerOp) -> f64) -> Option<Spread> {
        Spread::of(&self.runs.iter().map(f).collect::<Vec<_>>())
    }
}

/// The clients measured here.
pub const CLIENTS: [Client; 4] = [
    Client::Floor,
    Client::Ours,
    Client::OursDrop,
    Client::Rslock,
];

/// Runs the blocks; `None` where `/proc` is not readable.
pub fn measure(urls: &[String], plan: &Plan) -> Result<Option<Vec<ClientCounters>>, String> {
    if Counters::now().is_none() {
        return Ok(None);
    }
    let settings = &plan.settings;
    let clients: Vec<Client> = CLIENTS.into_iter().filter(|c| plan.has(*c)).collect();
    let locks = ours::manager(urls, settings)?;
    let mut lockers: Vec<(Client, Box<dyn Locker + '_>)> = Vec::new();
    for &c in &clients {
        let locker: Box<dyn Locker + '_> = match c {
            Client::Floor => Box::new(Floor::connect(urls, settings)?),
            Client::Ours | Client::OursDrop => Box::new(Ours {
                locks: &locks,
                settings,
                drop_guard: c == Client::OursDrop,
            }),
            _ => Box::new(RslockSingle::new(urls, settings)?),
        };
        lockers.push((c, locker));
    }
    let mut out: Vec<ClientCounters> = clients
        .iter()
        .map(|&client| ClientCounters {
            client,
            runs: Vec::new(),
            errors: 0,
            first_error: None,
        })
        .collect();
    let k = lockers.len();
    for run in 0..plan.runs {
        for idx in crate::paired::order(run, k) {
            let (client, locker) = &mut lockers[idx];
            let key = format!("qbench:{}:counters", client.key()).into_bytes();
            for _ in 0..WARMUP {
                let _ = locker.lock_release(&key);
            }
            locks.flush(Duration::from_secs(2));
            let deadline = Instant::now() + plan.counters.budget;
            // Two snapshots back to back: what reading the counters costs
            // (its own read system calls), subtracted from the block's.
            let c0 = Counters::now().ok_or("cannot read /proc/self")?;
            let before = Counters::now().ok_or("cannot read /proc/self")?;
            let mut done = 0;
            for _ in 0..plan.counters.ops {
                if Instant::now() >= deadline {
                    break;
                }
                match locker.lock_release(&key) {
                    Ok(()) => {}
                    Err(e) => {
                        out[idx].errors += 1;
                        out[idx].first_error.get_or_insert(e);
                    }
                }
                done += 1;
            }
            // The queued releases of dropped guards are part of the cost
            // (one flush per block: a few wake-ups over K operations).
            if *client == Client::OursDrop {
                locks.flush(Duration::from_secs(2));
            }
            let after = Counters::now().ok_or("cannot read /proc/self")?;
            let mut per_op = before.per_op(&after, done);
            let snapshot = c0.per_op(&before, done);
            per_op.syscr = (per_op.syscr - snapshot.syscr).max(0.0);
            per_op.syscw = (per_op.syscw - snapshot.syscw).max(0.0);
            out[idx].runs.push(per_op);
        }
    }
    Ok(Some(out))
}
