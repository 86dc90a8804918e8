//! The library's spans through the `tracing` facade (feature `tracing`).
//!
//! quorum-lock records into whatever subscriber the program installs: in
//! production, for instance, `tracing-subscriber`'s registry with a
//! `tracing-opentelemetry` layer (docs/operations.md shows how); here
//! `tracing-subscriber`'s `fmt`, which prints each event with the spans
//! it is in, and each span when it closes, with its fields.
//!
//! A lock is held by another thread; this one waits for it (the `wait`
//! span ends on the holder's release notice), takes it with
//! auto-extension (the watchdog's `auto_extend` spans follow from the
//! `held` span), extends it by hand and releases it. One more call fails,
//! to show `error.type`. On three in-memory nodes, or on the Redis masters
//! of `QUORUM_LOCK_NODES` (with the `redis` feature).
//!
//! ```text
//! cargo run --example tracing --features tracing
//! QUORUM_LOCK_NODES=redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381 \
//!     cargo run --example tracing --features tracing
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, MemoryBackend};
use tracing::Level;
use tracing_subscriber::fmt::format::FmtSpan;

/// `pub(crate)`: `tests/examples/tracing.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Once per process, before the first lock. DEBUG shows the rounds, the
    // nodes' answers and the waits; INFO only the calls and the watchdog.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_thread_names(true)
        .with_target(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|_| "a tracing subscriber was already installed")?;

    let nodes = nodes();
    // Two managers, as two processes would have: the waiter hears the
    // holder's release as a release notice.
    let holder = manager(&nodes)?;
    let locks = manager(&nodes)?;

    let (taken, take) = mpsc::channel();
    let other = thread::Builder::new().name("other-holder".into()).spawn(
        move || -> Result<(), quorum_lock::Error> {
            let guard = holder.lock("orders:42")?;
            let _ = taken.send(());
            thread::sleep(Duration::from_millis(300));
            guard.release().map(drop)
        },
    )?;
    take.recv()?;

    println!("-- waiting for the other holder");
    let ttl = Duration::from_millis(900);
    let options = LockOptions::new().ttl(ttl).auto_extend(true);
    let mut guard = locks.lock_with("orders:42", &options)?;
    other.join().map_err(|_| "the other holder panicked")??;

    println!("-- held: the watchdog extends it at about a third of the TTL");
    thread::sleep(ttl / 2);
    println!("-- an extend and a release by hand");
    guard.extend(ttl)?;
    guard.release()?;

    println!("-- a call that fails: error.type and otel.status_code");
    let again = locks.try_lock("orders:42")?;
    let refused = locks.try_lock("orders:42");
    drop(again);
    if refused.is_ok() {
        return Err("a second holder of one lock".into());
    }
    // The answers the rounds did not wait for are events of their round
    // all the same, once the nodes have read them.
    locks.flush(Duration::from_secs(5));
    println!("ok");
    Ok(())
}

/// Where the locks are.
enum Nodes {
    /// Real Redis masters, from `QUORUM_LOCK_NODES`.
    #[cfg(feature = "redis")]
    Redis(Vec<String>),
    /// In-memory nodes, shared by the managers.
    Memory(Vec<MemoryBackend>),
}

/// The Redis masters of `QUORUM_LOCK_NODES`, or three in-memory nodes.
fn nodes() -> Nodes {
    #[cfg(feature = "redis")]
    if let Ok(urls) = std::env::var("QUORUM_LOCK_NODES") {
        println!("using Redis nodes from QUORUM_LOCK_NODES");
        let urls = urls.split(',').map(str::trim).filter(|u| !u.is_empty());
        return Nodes::Redis(urls.map(str::to_owned).collect());
    }
    println!("QUORUM_LOCK_NODES is not set: using three in-memory nodes");
    Nodes::Memory(
        (0..3)
            .map(|i| MemoryBackend::new(format!("mem-{i}")))
            .collect(),
    )
}

fn manager(nodes: &Nodes) -> Result<LockManager, quorum_lock::Error> {
    match nodes {
        #[cfg(feature = "redis")]
        Nodes::Redis(urls) => LockManager::builder().redis_nodes(urls)?.build(),
        Nodes::Memory(nodes) => LockManager::builder().nodes(nodes.iter().cloned()).build(),
    }
}
