//! Transfers between accounts, each under a lock on both accounts at once
//! (`lock_all`): threads that move money in opposite directions never
//! deadlock, and no transfer ever sees another one half done.
//!
//! ```text
//! cargo run --example sets
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::{Arc, Mutex};
use std::thread;

use quorum_lock::{LockManager, LockOptions, MemoryBackend};

const ACCOUNTS: usize = 4;
const TRANSFERS: usize = 50;

/// `pub(crate)`: `tests/examples/in_process.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = LockManager::builder()
        .nodes((0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))))
        .build()?;
    // The balances stand for records in a shared store: only the holder of
    // both accounts' locks may touch them.
    let balances = Arc::new(Mutex::new(vec![100_i64; ACCOUNTS]));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (locks, balances) = (locks.clone(), Arc::clone(&balances));
            thread::spawn(move || -> Result<(), quorum_lock::Error> {
                for i in 0..TRANSFERS {
                    // Opposite directions on purpose: thread 0 moves a -> b
                    // while thread 1 moves b -> a.
                    let (from, to) = match (t + i) % 2 {
                        0 => (t % ACCOUNTS, (t + 1) % ACCOUNTS),
                        _ => ((t + 1) % ACCOUNTS, t % ACCOUNTS),
                    };
                    let names = [format!("account:{from}"), format!("account:{to}")];
                    let both = locks.lock_all(&names, &LockOptions::new())?;
                    {
                        let mut b = balances.lock().unwrap_or_else(|e| e.into_inner());
                        b[from] -= 1;
                        b[to] += 1;
                    }
                    both.release()?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")??;
    }
    let balances = balances.lock().unwrap_or_else(|e| e.into_inner());
    let total: i64 = balances.iter().sum();
    println!("balances {balances:?}, total {total}");
    if total != 100 * ACCOUNTS as i64 {
        return Err("money was created or lost".into());
    }
    println!(
        "ok: {} transfers, no deadlock, total preserved",
        4 * TRANSFERS
    );
    Ok(())
}
