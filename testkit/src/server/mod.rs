//! Test harness: real lock servers on free loopback ports.
//!
//! The server is `redis-server` by default; `QUORUM_LOCK_SERVER=valkey`
//! runs the same tests against `valkey-server` ([`ServerKind`]). Every
//! server is killed (SIGKILL, by pid) and its temporary directory removed
//! when its [`RedisServer`] is dropped, also when the test panics. A
//! missing server binary fails the test loudly, naming the server: these
//! tests are never skipped.
//!
//! The parts: [`RedisServer`], one server process, and its
//! [`RedisServers`] (`redis_server.rs`, `redis_servers.rs`); which binary
//! runs ([`ServerKind`], `binary.rs`); starting a process and waiting for
//! it (`spawn.rs`); a temporary directory ([`TempDir`], `temp_dir.rs`);
//! inspection connections ([`connect`], `inspect.rs`); the test
//! certificate of TLS servers (`tls.rs`). This file only names them, so
//! that `testkit::server::...` and `crate::server::...` paths stay as they
//! were.

mod binary;
mod inspect;
mod redis_server;
mod redis_servers;
mod spawn;
mod temp_dir;
mod tls;

pub use self::binary::{SERVER_ENV, ServerKind, TLS_SERVER_ENV, wheel_server};
pub use self::inspect::connect;
pub use self::redis_server::RedisServer;
pub use self::redis_servers::RedisServers;
pub use self::spawn::free_port;
pub(crate) use self::spawn::{signal, started};
pub use self::temp_dir::TempDir;
pub(crate) use self::tls::certificate;
