//! [`Results`]: everything a run measured, section by section, which the
//! section writers read. Apart from them because `main.rs` fills it and
//! the charts read it too.

use std::collections::BTreeMap;

use crate::clients::Client;
use crate::contention;
use crate::counters::ClientCounters;
use crate::paired::Paired;
use crate::scaling::Scaling;

/// The latency comparison on N nodes, and the clients that could not start.
pub type LatencyAtN = (usize, Paired, Vec<(Client, String)>);
/// Locks asked for, and (bytes per lock, locks held) or why not.
pub type MemoryAt = (usize, Result<(f64, usize), String>);

/// Everything a run measured (a section not run is `None` / empty).
#[derive(Debug, Default)]
pub struct Results {
    /// Per N: the paired comparison and the clients that could not start.
    pub latency: Vec<LatencyAtN>,
    pub counters: Option<Result<Option<Vec<ClientCounters>>, String>>,
    pub scaling: Option<Scaling>,
    /// quorum-lock's threads while 128 auto-extended locks are held.
    pub auto_census: Option<Result<BTreeMap<String, usize>, String>>,
    pub contention: Vec<contention::Row>,
    pub third: Option<Result<Paired, String>>,
    /// Locks asked for, and (bytes per lock, locks held) or why not.
    pub memory: Vec<MemoryAt>,
    /// The process's CPU while one thread waits for a held key.
    pub waiting: Option<Result<crate::waiting::Waiting, String>>,
    /// Processes (each its own client) contending for one key.
    pub cross: Option<Result<crate::cross::Cross, String>>,
    /// Context switches and allocations per lock (`--wakes`).
    pub wakes: Option<Result<crate::wakes::Wakes, String>>,
    /// Instructions per lock + release, under callgrind (with `--wakes`).
    pub instructions: Option<Result<crate::instructions::Instructions, String>>,
    /// futex calls per lock + release, 8 threads, under perf (with `--wakes`).
    pub futex: Option<Result<crate::futex::Futex, String>>,
    /// Context switches by kind of thread, 8 threads, under perf (with
    /// `--wakes`).
    pub preemptions: Option<Result<crate::preemptions::Preemptions, String>>,
}
