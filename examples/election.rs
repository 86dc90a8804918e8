//! Leader election: three workers (as three processes would, each with its
//! own manager) campaign for `scheduler`; the leader proclaims where it
//! can be reached, does its work with its term as a fence, and resigns; a
//! watcher follows the leaders with `wait_change`. A store that keeps the
//! highest term it has seen refuses a stale leader's write.
//!
//! ```text
//! cargo run --example election
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use quorum_lock::{LockManager, MemoryBackend};

const WORKERS: usize = 3;

/// The protected resource: it accepts a write only with a term at least
/// the highest it has seen (a fenced store).
#[derive(Default)]
struct Store {
    highest: u64,
    log: Vec<(u64, String)>,
}

impl Store {
    fn write(&mut self, term: u64, entry: String) -> bool {
        if term < self.highest {
            return false;
        }
        self.highest = term;
        self.log.push((term, entry));
        true
    }
}

/// `pub(crate)`: `tests/examples/in_process.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let manager = || LockManager::builder().nodes(nodes.iter().cloned()).build();
    let store = Arc::new(Mutex::new(Store::default()));
    let watcher = manager()?.election("scheduler")?;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (election, store) = (manager()?.election("scheduler")?, Arc::clone(&store));
            Ok(thread::spawn(move || -> Result<u64, quorum_lock::Error> {
                // Waits until this worker leads, then proclaims its address.
                let mut leading = election.campaign(format!("worker-{w}:8080").as_bytes())?;
                let term = leading.term();
                println!("worker {w} leads in term {term}");
                for step in 0..3 {
                    // Act only while leading, with the term as the fence.
                    leading.check()?;
                    let entry = format!("worker {w} step {step}");
                    let accepted = store.lock().is_ok_and(|mut s| s.write(term, entry));
                    assert!(accepted, "a current leader's write is accepted");
                    thread::sleep(Duration::from_millis(100));
                }
                leading.proclaim(format!("worker-{w}:8080 (done)").as_bytes())?;
                leading.resign()?;
                Ok(term)
            }))
        })
        .collect::<Result<_, quorum_lock::Error>>()?;

    // Follow the leaders as they change, for a while.
    let mut last = None;
    let mut changes = 0;
    while changes < WORKERS {
        let seen = watcher.wait_change(last, Duration::from_secs(1))?;
        let term = seen.as_ref().map(|leader| leader.term());
        if term == last {
            break; // nothing changed within the timeout: all are done
        }
        if let Some(leader) = &seen {
            println!(
                "watcher: term {} led by {}",
                leader.term(),
                String::from_utf8_lossy(leader.value())
            );
            changes += 1;
        }
        last = term;
    }

    let mut terms = Vec::new();
    for worker in workers {
        terms.push(worker.join().map_err(|_| "a worker panicked")??);
    }
    terms.sort_unstable();
    terms.dedup();
    if terms.len() != WORKERS {
        return Err(format!("two workers had the same term: {terms:?}").into());
    }
    // A leader paused past its validity writes with its old term: refused.
    let mut store = store.lock().map_err(|_| "the store's lock is poisoned")?;
    if store.write(terms[0], "a stale leader's write".into()) {
        return Err("the stale leader's write was accepted".into());
    }
    let ordered = store.log.windows(2).all(|w| w[0].0 <= w[1].0);
    println!(
        "{} writes by {WORKERS} leaders, terms in order: {ordered}; the stale write was refused",
        store.log.len()
    );
    if !ordered {
        return Err("the log has a lower term after a higher one".into());
    }
    Ok(())
}
