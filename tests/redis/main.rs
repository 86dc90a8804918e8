//! The library against real lock servers: every test here starts its own
//! `redis-server`s (or `valkey-server`s, with `QUORUM_LOCK_SERVER=valkey`)
//! on free loopback ports through `testkit`, or hostile fake servers. One
//! module per area, as `src/` has them (the backend, the cluster backend,
//! the manager and each kind of lock). `scripts/test.sh` runs this binary
//! once more on each of three other servers (Valkey 8.1 and 9.1, Redis
//! 8.2), as it does `redis_torture`. A test that counts its process'
//! threads or reads its peak memory (`notice_threads`, most of `hostile`)
//! runs alone in a process of its own (`testkit::alone`).
//!
//! Needs the `redis` feature. Run one module with `cargo test --test redis
//! acl::`, one test with `cargo test --test redis -- --exact
//! lock::<name>`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod acl;
mod auto_extend;
mod backend;
mod cluster;
mod edges;
mod election;
mod exit;
mod fencing;
mod hostile;
mod identity;
mod inspect;
mod lock;
mod lock_all;
mod notice_threads;
mod readiness;
mod restarts;
mod rw;
mod script_free;
mod sentinel;
mod support;
mod wakeups;
