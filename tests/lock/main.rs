//! The lock manager on in-memory nodes (no server, no feature needed): one
//! module per part of the library a user meets, as `src/` has them. The
//! other kinds of lock are in `tests/kinds/`, the same promises on real
//! servers in `tests/redis/`; docs/testing.md has the map. A test that
//! counts its process' threads or installs a global logger or recorder
//! (`watchdog`, `observability`, `metrics`) runs alone in a process of
//! its own (`testkit::alone`).
//!
//! Run one module with `cargo test --test lock api::`, one test with
//! `cargo test --test lock -- --exact guard::forget_leaves_the_lock_to_expire`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod api;
mod bad_input;
mod contention;
mod guard;
mod inspect;
#[cfg(feature = "metrics")]
mod metrics;
mod observability;
mod quarantine;
mod quorum;
mod regressions;
#[cfg(feature = "tracing")]
mod tracing;
mod validity;
mod waiting;
mod wakeups;
mod watchdog;
