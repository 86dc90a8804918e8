//! The examples a user would copy run as written: `in_process` runs the
//! `main` of those that need no server in this process; `metrics` (with
//! the `metrics` feature) runs examples/metrics.rs alone in a process of
//! its own (it installs the global recorder), and `tracing` (with the
//! `tracing` feature) examples/tracing.rs (it installs the global
//! subscriber); `demo` (with the `redis`
//! feature) runs the multi-process demo and the README's snippet on real
//! servers; `design_map` holds docs/design.md's file map to `src/`. Not
//! among the real-server passes of `scripts/test.sh`, which
//! run `tests/redis/` on other servers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[cfg(feature = "redis")]
mod demo;
mod design_map;
mod in_process;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "tracing")]
mod tracing;
