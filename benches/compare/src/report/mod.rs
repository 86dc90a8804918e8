//! The results of a run and the markdown they print as: the machine, the
//! paired latency comparison (per run and summarized), the process's
//! counters, scaling, contention, a dead third node, memory per held lock.
//!
//! One file per section of the markdown, as the measurements have one
//! file each (`latency.rs` the paired comparison and a dead third node,
//! `counters.rs`, `scaling.rs`, `contention.rs` one key contended for,
//! `memory.rs`), `header.rs` the run's machine and plan; `results.rs`
//! what a run measured, `cells.rs` how a table cell writes a number.
//! This file only names them: `report::latency(..)` and the others are
//! called as before.

mod cells;
mod contention;
mod counters;
mod header;
mod latency;
mod memory;
mod results;
mod scaling;

pub use self::cells::clip;
pub use self::contention::{contention, cross, waiting};
pub use self::counters::{counters, futex, instructions, preemptions, switch_ratio, wakes};
pub use self::header::header;
pub use self::latency::{latency, third};
pub use self::memory::memory;
pub use self::results::Results;
pub use self::scaling::scaling;
