//! 8 threads contending for one key, N=3: the total time of a fixed number
//! of critical sections, each client's block right after the others' in an
//! order that changes every run (`paired::order`), so a per-run ratio compares neighbours.

use crate::clients::{Client, Service};
use crate::ours::{self, OursService};
use crate::peers::{self, RedlockService, RedsyncService};
use crate::plan::Plan;
use crate::scenarios;
use crate::stats::{Spread, Throughput};

/// The clients measured here (the floor has no waiting).
pub const CLIENTS: [Client; 5] = [
    Client::Ours,
    Client::OursDrop,
    Client::Rslock,
    Client::Redlock,
    Client::Redsync,
];

/// One client's runs.
#[derive(Debug, Clone)]
pub struct Row {
    pub client: Client,
    pub runs: Vec<Result<Throughput, String>>,
}

impl Row {
    /// Per run, the wall time in seconds of a clean run (every section
    /// done, the counter exact), else `None`.
    pub fn walls(&self, expected: u64) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| match r {
                Ok(t) if t.errors == 0 && t.counter == Some(expected) => Some(t.wall.as_secs_f64()),
                _ => None,
            })
            .collect()
    }

    /// Runs whose counter ended exact, out of all.
    pub fn exact(&self, expected: u64) -> (usize, usize) {
        let good = self.walls(expected).iter().flatten().count();
        (good, self.runs.len())
    }
}

/// Per run, `a`'s wall time / `b`'s.
pub fn ratio(rows: &[Row], a: Client, b: Client, expected: u64) -> Option<Spread> {
    let find = |c: Client| rows.iter().find(|r| r.client == c);
    let (a, b) = (find(a)?, find(b)?);
    let v: Vec<f64> = a
        .walls(expected)
        .into_iter()
        .zip(b.walls(expected))
        .filter_map(|(x, y)| Some(x? / y?))
        .collect();
    Spread::of(&v)
}

pub fn measure(urls: &[String], plan: &Plan, log: &dyn Fn(&str)) -> Vec<Row> {
    let clients: Vec<Client> = CLIENTS.into_iter().filter(|c| plan.has(*c)).collect();
    let mut rows: Vec<Row> = clients
        .iter()
        .map(|&client| Row {
            client,
            runs: Vec::new(),
        })
        .collect();
    for run in 0..plan.runs {
        for idx in crate::paired::order(run, rows.len()) {
            let client = rows[idx].client;
            log(&format!(
                "contention, {client}, run {}/{}",
                run + 1,
                plan.runs
            ));
            let key = format!("qbench:{}:contend:r{run}", client.key());
            rows[idx].runs.push(one(client, urls, plan, &key));
        }
    }
    rows
}

fn one(client: Client, urls: &[String], plan: &Plan, key: &str) -> Result<Throughput, String> {
    let settings = &plan.settings;
    let c = &plan.contention;
    let (threads, sections, budget) = (c.threads, c.sections_per_thread, c.budget);
    Ok(match client {
        Client::Ours | Client::OursDrop => {
            let service = OursService {
                locks: ours::manager(urls, settings)?,
                settings: settings.clone(),
                drop_guard: client == Client::OursDrop,
            };
            // Connect every node before the clock starts.
            service.locker()?.lock_release(b"qbench:ours:connect")?;
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Redlock => {
            let service = RedlockService::new(urls, settings);
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Redsync => {
            let service = RedsyncService::new(urls, settings)?;
            scenarios::contention(&service, threads, sections, budget, key)
        }
        Client::Rslock => peers::rslock_contention(urls, settings, threads, sections, budget, key)?,
        Client::Floor | Client::Backend | Client::SharedReader | Client::CallersRead => {
            return Err("not measured".into());
        }
    })
}
