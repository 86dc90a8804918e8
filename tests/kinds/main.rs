//! The other kinds of lock on in-memory nodes (no server, no feature
//! needed): sets of resources (`lock_all`), the semaphore, the
//! read-write lock and leader election, as `src/lock_all.rs`,
//! `src/semaphore.rs`, `src/rw.rs` and `src/election/` make them.
//! Their real-server tests are in `tests/redis/`.
//!
//! Run one module with `cargo test --test kinds rw::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod election;
mod lock_all;
mod rw;
mod semaphore;
mod support;
