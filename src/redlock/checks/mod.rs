//! The exhaustive explorers (tests only): each runs every order of the
//! steps of a small model, breadth- or depth-first with the states already
//! seen merged, checks its properties in every state reached, and stops at
//! the first violation with a shortest schedule that shows it. Where the
//! model can, it calls the crate's own code, so the check covers what
//! ships.
//!
//! - [`protocol`]: two clients, three nodes, key expiry, restarts that
//!   forget, first contact, restart quarantine and fencing, every schedule
//!   of 8 steps. Proves never two valid holders, fences strictly
//!   increasing, a valid guard never claiming more than a quorum holds,
//!   and an inspection seeing a quorum-backed holder. Runs the crate's
//!   validity, drift, tally, identity judgement, fence choice and
//!   inspection.
//! - [`lease`]: one lease's extends (watchdog and holder, two TTLs), the
//!   nodes applying them in FIFO order, release, forget, hand-over, expiry
//!   and clock steps, every order of 8 events, on the crate's own
//!   `LeaseState` and verdicts. Proves a valid lease never claims a
//!   deadline later than a quorum holds its key, no extend after a
//!   release, lost never cleared.
//! - [`line`]: three threads taking turns for one key in the crate's own
//!   `LocalQueue` (`turns.rs`), every order of its critical sections.
//!   Proves at most one valid lock, hand-overs only to a matching waiter,
//!   the turn only past an expired or lost holder, no lost turn, and the
//!   line gone at the end.
//! - [`semaphore`]: three clients' acquires on three nodes, permits K = 2.
//!   Proves the crate's design (K slot locks) and per-node counts with the
//!   larger quorum never exceed K holders; the naive rule must fail.
//! - [`set`]: two clients with overlapping resource sets (`lock_all`) on
//!   three nodes, each node applying each script at its own moment.
//!   Proves no two holders of sets that share a resource.
//! - [`rw`]: a read-write lock (a writer's intent on `W`, then admission
//!   once readers drain) for two readers and two writers on three nodes,
//!   each node applying each op at its own moment, with restarts,
//!   quarantine, expiry and a fast clock, every schedule of 4 rounds.
//!   Proves no valid writer beside another valid lock, reader entries that
//!   expire on their own, no reader overtaking a held intent, and a stopped
//!   writer's key gone a TTL after its last send.
//!
//! Canaries: each protection the explorers rely on, undone, must make its
//! explorer fail (tests named `*_is_found`, `canaries_are_caught`, ...).
//! The protections in the crate's own code are undone through
//! [`crate::canary`] (a switch that is `false` outside tests); those of a
//! model (protocol, semaphore, set) are the model's own rule choices.
//!
//! They are CPU-bound: `scripts/test.sh` runs them once, optimized, and
//! its debug passes skip them. Run them alone with
//! `cargo test --release --no-default-features --lib redlock::checks::`
//! (add `-- --nocapture` for the state counts and counterexamples).

mod lease;
mod line;
mod protocol;
mod rw;
mod semaphore;
mod set;
