//! At most two uploads at a time, across every thread (and process) that
//! uses the same nodes: a quorum semaphore of two permits, each permit an
//! ordinary lock on one slot.
//!
//! ```text
//! cargo run --example semaphore
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use quorum_lock::{LockManager, MemoryBackend};

const PERMITS: u32 = 2;
const WORKERS: usize = 6;

/// `pub(crate)`: `tests/examples/in_process.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = LockManager::builder()
        .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
        .build()?;
    let uploads = locks.semaphore("uploads", PERMITS)?;
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (uploads, running, most) =
                (uploads.clone(), Arc::clone(&running), Arc::clone(&most));
            thread::spawn(move || -> Result<(), quorum_lock::Error> {
                // Waits, as `lock()` does, until a permit is free.
                let permit = uploads.acquire()?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let slot = String::from_utf8_lossy(permit.resource()).into_owned();
                println!("worker {w} uploads under {slot}");
                thread::sleep(Duration::from_millis(20));
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release()?;
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")??;
    }
    let most = most.load(Ordering::SeqCst);
    println!("at most {most} uploads ran at once ({PERMITS} permits)");
    if most > PERMITS as usize {
        return Err("more holders than permits".into());
    }
    println!("ok");
    Ok(())
}
