//! The examples a user would copy run as written: `in_process` runs the
//! `main` of those that need no server in this process; `demo` (with the
//! `redis` feature) runs the multi-process demo and the README's snippet
//! on real servers. Not among the real-server passes of `scripts/test.sh`,
//! which run `tests/redis/` on other servers.
//!
//! (examples/metrics.rs installs the process's global metrics recorder:
//! its test is a binary of its own, `tests/metrics_example.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[cfg(feature = "redis")]
mod demo;
mod in_process;
