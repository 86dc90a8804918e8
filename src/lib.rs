//! Distributed mutual exclusion over N independent lock servers: the
//! **Redlock** algorithm as a blocking, synchronous Rust library.
//!
//! A lock is granted when a quorum (N/2 + 1) of independent servers agree,
//! so it keeps working while a minority of them fail. Each server holds the
//! lock as a key with an expiry (TTL) and our random token; the lock is
//! valid for `TTL - elapsed - clock drift`, measured on the monotonic clock
//! from before the first request.
//!
//! # Tutorial (on in-memory nodes)
//!
//! [`MemoryBackend`] is a lock server inside the process, with fault
//! injection: the same code runs against Redis with
//! `LockManagerBuilder::redis_nodes`.
//!
//! ```
//! use std::time::Duration;
//! use quorum_lock::{LockManager, MemoryBackend};
//!
//! // Five independent nodes; keep handles to break them later.
//! let nodes: Vec<MemoryBackend> = (0..5).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
//! let locks = LockManager::builder()
//!     .nodes(nodes.iter().cloned())
//!     .ttl(Duration::from_secs(5))
//!     .build()?;
//! assert_eq!(locks.quorum(), 3);
//!
//! // Take the lock: a guard, valid for at most the TTL minus the drift.
//! let guard = locks.lock("invoices:2026-11")?;
//! assert!(guard.is_valid());
//! assert!(guard.validity() <= Duration::from_secs(5));
//!
//! // Nobody else gets it meanwhile, and the error says why.
//! let err = locks.try_lock("invoices:2026-11").unwrap_err();
//! assert!(err.is_contended());
//!
//! // Releasing reports what each node did (or, with another thread of
//! // this manager waiting for the lock, that it was handed to that thread).
//! let report = guard.release()?;
//! assert_eq!(report.granted(), 5);
//!
//! // Two of five nodes fail: the lock still works...
//! nodes[0].set_down(true);
//! nodes[1].set_down(true);
//! let mut guard = locks.try_lock("invoices:2026-11")?;
//! guard.extend(Duration::from_secs(5))?;
//!
//! // ...but with three down there is no quorum, and the error names them.
//! nodes[2].set_down(true);
//! let err = locks.try_lock("other").unwrap_err();
//! assert!(err.is_no_quorum());
//! assert!(err.to_string().contains("mem-2"));
//!
//! // An extend that cannot reach a quorum means the lock may be lost.
//! assert!(guard.extend(Duration::from_secs(5)).unwrap_err().is_lost());
//! assert!(!guard.is_valid());
//! drop(guard); // queues releases everywhere and returns at once
//! # Ok::<(), quorum_lock::Error>(())
//! ```
//!
//! # Beyond one mutex
//!
//! Several resources as one lock, a semaphore, a read-write lock, who
//! holds what, fencing tokens, and the operator's view, all on the same
//! quorum:
//!
//! ```
//! use quorum_lock::{LockManager, LockOptions, MemoryBackend};
//!
//! let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
//! let locks = LockManager::builder()
//!     .nodes(nodes.iter().cloned())
//!     .owner("billing@host-1") // stored with every lock, shown by inspect and the CLI
//!     .build()?;
//!
//! // Both accounts or neither, never deadlocking with another transfer.
//! let transfer = locks.lock_all(["account:7", "account:9"], &LockOptions::new())?;
//! assert!(locks.try_lock("account:9").unwrap_err().is_contended());
//! transfer.release()?;
//!
//! // At most two uploads at a time, across every process on these nodes.
//! let uploads = locks.semaphore("uploads", 2)?;
//! let permit = uploads.acquire()?;
//!
//! // Shared readers, or one writer that later readers do not overtake;
//! // each reader expires on its own.
//! let config = locks.rw_lock("config")?;
//! let reader = config.read()?;
//! // No upgrade: this thread's own reader would keep its writer waiting.
//! assert!(matches!(config.try_write(), Err(quorum_lock::Error::Deadlock { .. })));
//! drop(reader);
//! let writer = config.write()?;
//! assert!(config.try_read().unwrap_err().is_contended());
//! drop(writer);
//!
//! // Who holds it, judged by quorum (a snapshot: never a reason to act).
//! let seen = locks.inspect(permit.resource())?;
//! assert!(seen.is_held());
//! assert_eq!(seen.owner(), Some("billing@host-1"));
//! drop(permit);
//!
//! // A fencing token that increases from one holder to the next: the
//! // protected store rejects a write with a token older than its last.
//! let first = locks.lock_with("ledger", &LockOptions::new().fencing(true))?;
//! let old_fence = first.fence().expect("fenced");
//! first.release()?;
//! let second = locks.lock_with("ledger", &LockOptions::new().fencing(true))?;
//! assert!(second.fence().expect("fenced") > old_fence);
//! second.release()?;
//!
//! // The operator's view: a free snapshot, and a readiness check that asks
//! // the servers.
//! assert!(locks.health().has_quorum());
//! locks.check_ready()?;
//! # Ok::<(), quorum_lock::Error>(())
//! ```
//!
//! # Layers
//!
//! * [`LockManager`]: the entry point (`Clone`, `Send + Sync`): options,
//!   retries with jitter, validity.
//! * The engine: one worker thread per node (and on Linux one reader
//!   thread for the batches of queued operations, over every node's
//!   socket), scatter-gather rounds that return as soon as the outcome is
//!   decided, per-node FIFO so a release always follows the acquire it
//!   undoes.
//! * [`backend::Backend`]: one lock server; [`MemoryBackend`] and
//!   (feature `redis`) `RedisBackend`, and `RedisClusterBackend` for a
//!   whole Redis or Valkey cluster as one node (`redis+cluster://`),
//!   `RedisSentinelBackend` for a Sentinel-managed master set as one
//!   node (`redis+sentinel://`).
//! * [`LockGuard`]: the held lock; released when dropped.
//!
//! # What is where
//!
//! The crate root holds what a lock user touches: the manager, its
//! builder and options, the guard, the errors, the semaphore, the
//! read-write lock, leader election, cancellation, the clocks and the backends. The rest has a module
//! of its own:
//!
//! * [`report`]: what each node did in a round (every release returns a
//!   [`Report`](report::Report), and errors carry one);
//! * [`health`]: the snapshot [`LockManager::health`] takes;
//! * [`inspection`]: what [`LockManager::inspect`] read, and its verdict;
//! * [`backend`]: the service-provider interface, for writers of a
//!   backend of their own (and [`BackendError`](backend::BackendError),
//!   the per-node error the reports carry).
//!
//! # Long work, restarts, and many threads
//!
//! * [`LockOptions::auto_extend`] and [`LockManager::with_lock`] keep a
//!   lock alive while the work runs (one timer thread per manager, bounded
//!   renewal); [`LockGuard::lost_signal`] tells the holder at once when a
//!   quorum no longer confirms.
//! * Restart quarantine (on by default): a Redis node that restarted, and
//!   may have forgotten the locks it held, does not vote until every such
//!   lock has expired ([`LockManagerBuilder::max_ttl`] plus drift).
//! * Threads of one manager waiting for the same resource take turns
//!   locally, and a dropped guard hands the lock to the next one; the line
//!   waits for a holder only while its lock is valid.
//! * Processes waiting for a lock held by another process are woken when
//!   it is released: the release announces itself on each node (Redis:
//!   `PUBLISH` from the release script), and a waiter tries again once
//!   notices from a quorum of nodes have arrived, instead of sleeping out
//!   its retry delay. A notice is a hint, never a grant (the next attempt
//!   is an ordinary quorum acquire), and the retry delay stays as the
//!   fallback (an expiry sends no notice; notices can be lost). A process
//!   that has just released a lock that others were waiting for lets them
//!   go first. `docs/lock-lifetime.md` has the details;
//!   `docs/operations.md` the ACL rights the notices need.

//!
//! # Waiting
//!
//! * [`LockManager::lock`] waits like `Mutex::lock`, within a bound (60 s
//!   by default); [`LockManager::try_lock`] makes one attempt.
//! * A [`CancellationToken`] given with [`LockOptions::cancellation`] stops
//!   a wait from another thread: [`Error::Cancelled`], holding nothing.
//! * Locks are not reentrant: a thread waiting again, through the same
//!   manager, for a lock it holds gets [`Error::Deadlock`] at once instead
//!   of waiting for itself.
//!
//! # When not to use this
//!
//! Redlock's safety rests on timing assumptions. It is **not** safe when:
//!
//! * clocks on the servers can jump or drift by more than the drift factor
//!   (the client side only uses its monotonic clock);
//! * the holding process can pause (GC, swapping, `SIGSTOP`, VM migration)
//!   for longer than the remaining validity: it may then act on a lock that
//!   has expired. Check [`LockGuard::is_valid`] right before each protected
//!   step, and prefer resources that accept a **fencing token** when
//!   correctness (not just efficiency) depends on exclusion;
//! * a server can restart without durable persistence and vote again at
//!   once (it forgot the locks it held).
//!
//! When two writers must never overlap whatever the timing, use a
//! consensus system (etcd, ZooKeeper) with fencing tokens instead. See
//! `docs/safety.md` (in the package) for the full safety model.
//!
//! # Features
//!
//! * `redis` (default): the Redis backends, `RedisBackend`,
//!   `RedisClusterBackend`, `RedisSentinelBackend` and
//!   `LockManagerBuilder::redis_nodes` (`redis://`, `redis+cluster://`,
//!   `redis+sentinel://`), on the `redis` crate's protocol
//!   code. Connections are pooled by the crate itself (no `r2d2`:
//!   `docs/design.md` says why).
//! * `tls`: `rediss://` URLs, via rustls with the `ring` provider.
//! * `metrics`: counters, timings and node gauges through the
//!   [`metrics`](https://docs.rs/metrics) facade (names in
//!   `docs/operations.md`); nothing is recorded without it.
//! * `tracing`: spans and events through the
//!   [`tracing`](https://docs.rs/tracing) facade: a span per call (`lock`,
//!   `try_lock`, `lock_all`, `acquire`, `read`, `write`, `campaign`,
//!   `extend`, `release`), a span per round with an event per node, the
//!   waits between attempts and why they ended, and the watchdog's extends
//!   and a loss on spans of their own (names and fields, and how to export
//!   them to OpenTelemetry, in `docs/operations.md`). Without it, `tracing`
//!   is not even a dependency.
//!
//! Features only add items; none changes behaviour. Without `redis` the
//! crate is the engine and [`MemoryBackend`], for your own
//! [`Backend`](backend::Backend)s.
//!
//! # Minimum supported Rust version
//!
//! Rust 1.88: the crate uses let chains (stable since 1.88, edition
//! 2024), and the `redis` crate 1.8 needs it too. Older toolchains were not
//! tried. Raising it is a minor-version change, never a patch release.
//!
//! # Versioning
//!
//! Semantic versioning. Before 1.0 a minor release (0.x to 0.(x+1)) may
//! break the API, a patch release never does; `CHANGELOG.md` lists every
//! user-visible change.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod builder;
mod canary;
mod cancel;
mod clock;
mod election;
mod engine;
mod error;
mod guard;
pub mod health;
mod inspect;
pub mod inspection;
mod lock_all;
mod lost;
mod mailbox;
mod manager;
mod metrics;
mod options;
mod owner;
mod ready;
mod redlock;
pub mod report;
mod resource;
mod rw;
mod semaphore;
mod spare;
mod sync;
mod token;
mod trace;
mod waiting;
mod with_lock;
mod words;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backend::cluster::RedisClusterBackend;
pub use backend::keyset::MAX_SET_SIZE;
pub use backend::memory::MemoryBackend;
pub use backend::op::MAX_READERS;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backend::redis::{RedisBackend, Scripts};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backend::sentinel::RedisSentinelBackend;
pub use builder::LockManagerBuilder;
pub use cancel::CancellationToken;
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use election::{Election, Leader, Leadership, MAX_LEADER_VALUE};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use lost::LostSignal;
pub use manager::LockManager;
pub use options::{LockOptions, RetryPolicy};
pub use owner::MAX_OWNER_LEN;
pub use resource::MAX_RESOURCE_LEN;
pub use rw::RwLock;
pub use semaphore::{MAX_PERMITS, Semaphore};
pub use token::Token;

// The Markdown guides' Rust examples run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
#[cfg(doctest)]
#[doc = include_str!("../docs/lock-lifetime.md")]
mod lock_lifetime {}
#[cfg(doctest)]
#[doc = include_str!("../docs/migrating.md")]
mod migrating {}
