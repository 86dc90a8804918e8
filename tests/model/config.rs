//! The shapes of the modelled cluster (nodes, TTL, `max_ttl`, clock steps)
//! and the walk's constants: clients, resources, the semaphore, steps and
//! seeds per run, the hand-over schedule and the evicting policies.
//! Everything else in the model reads its sizes from here.

use std::time::Duration;

/// The cluster and timing a run uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) name: &'static str,
    pub(crate) nodes: usize,
    pub(crate) ttl: Duration,
    pub(crate) max_ttl: Duration,
    /// Largest single clock advance, in ms.
    pub(crate) max_advance_ms: usize,
}

/// Five nodes, locks shorter than `max_ttl`, long clock steps.
pub(crate) const WIDE: Shape = Shape {
    name: "wide",
    nodes: 5,
    ttl: Duration::from_secs(1),
    max_ttl: Duration::from_secs(2),
    max_advance_ms: 600,
};

/// Three nodes, TTL = `max_ttl`, short clock steps: the quarantine and the
/// lock end close together, where off-by-a-second mistakes show.
pub(crate) const TIGHT: Shape = Shape {
    name: "tight",
    nodes: 3,
    ttl: Duration::from_secs(1),
    max_ttl: Duration::from_secs(1),
    max_advance_ms: 120,
};
pub(crate) const CLIENTS: usize = 3;
pub(crate) const RESOURCES: [&str; 2] = ["alpha", "beta"];
/// The semaphore of the walk, and its permits: three clients holding up
/// to two permits each contend for two.
pub(crate) const SEMAPHORE: &str = "gamma";
pub(crate) const PERMITS: u32 = 2;
pub(crate) const STEPS: usize = 300;

/// The read-write lock of the walks in mode `r` (`rw.rs`), its clients
/// (each with a manager of its own), and how many of them may crash in
/// one walk (a crashed client's manager lives on with its forgotten
/// guards: bounded, as it keeps its node threads).
pub(crate) const RW_LOCK: &str = "delta";
pub(crate) const RW_CLIENTS: usize = 3;
pub(crate) const RW_CRASHES: usize = 3;
/// In mode `r`, the step of every [`HAND_OVER_EVERY`] at which a writer
/// waits for readers to leave (scheduled, so that it never depends on
/// the draw).
pub(crate) const RW_WAIT_AT: usize = 3;
/// In mode `r`, the step of every [`HAND_OVER_EVERY`] at which a client
/// takes a side, each kind in turn.
pub(crate) const RW_TAKE_AT: usize = 7;

pub(crate) const SEEDS: u64 = 12;

/// Every this many steps the walk forces a hand-over (a held guard dropped
/// while another thread of its manager waits for it), and halfway between
/// two of them every client scans the semaphore, so these ingredients
/// never depend on the draw.
pub(crate) const HAND_OVER_EVERY: usize = 10;

/// The evicting policies the nodes may report (any of them drops idle lock
/// keys under memory pressure).
pub(crate) const EVICTING: [&str; 3] = ["volatile-lru", "allkeys-lru", "volatile-ttl"];
