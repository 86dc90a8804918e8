//! The quorum semaphore under faults: clients of their own managers take
//! permits of one 2-permit semaphore on five real servers while one node
//! at a time is killed and restarted empty or frozen (`SIGSTOP`); every
//! permit's window (from an observed valid start to the deadline last
//! observed, or the let-go) is recorded, and the checker finds the most
//! windows open at once: never more than the permits, never two on one
//! slot. The checker has its own tests on synthetic windows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockManager, LockOptions};
use testkit::{RedisServers, Rng};

use crate::clients::{client_manager, observe};
use crate::config::NODES;

const NAME: &str = "torture-semaphore";
const PERMITS: u32 = 2;
const CLIENTS: usize = 5;
const RUN: Duration = Duration::from_secs(6);

/// One permit held: its slot, and when its holder relied on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permit {
    pub(crate) client: usize,
    pub(crate) slot: Vec<u8>,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// The most permit windows open at one instant, and the windows of the
/// first instant with more than `permits` (or with two on one slot).
pub(crate) fn most_open(windows: &[Permit], permits: usize) -> (usize, Option<Vec<Permit>>) {
    let mut most = 0;
    let mut starts: Vec<&Permit> = windows.iter().filter(|w| w.start < w.end).collect();
    starts.sort_by_key(|w| w.start);
    for (i, w) in starts.iter().enumerate() {
        // Open when `w` starts: it, and those that started before and end
        // after its start.
        let open: Vec<Permit> = starts[..=i]
            .iter()
            .filter(|o| o.end > w.start)
            .map(|o| (*o).clone())
            .collect();
        most = most.max(open.len());
        let mut slots: Vec<&[u8]> = open.iter().map(|o| &o.slot[..]).collect();
        slots.sort();
        slots.dedup();
        if open.len() > permits || slots.len() < open.len() {
            return (most, Some(open));
        }
    }
    (most, None)
}

/// One client until `stop`: permits taken with a short wait, held a few
/// milliseconds, released or dropped; each window recorded.
fn client(id: usize, locks: &LockManager, stop: &AtomicBool, record: &Mutex<Vec<Permit>>) {
    let semaphore = locks.semaphore(NAME, PERMITS).unwrap();
    let mut rng = Rng::new(0x5e_u64 + id as u64);
    let options = LockOptions::new().wait(Duration::from_millis(500));
    let mut turn = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Ok(permit) = semaphore.acquire_with(&options) else {
            continue;
        };
        turn += 1;
        let start = Instant::now();
        let Some(mut end) = observe(&permit, false) else {
            continue;
        };
        thread::sleep(rng.millis(1, 15));
        let now = Instant::now();
        if let Some(deadline) = observe(&permit, turn.is_multiple_of(2)) {
            end = deadline.min(now);
        }
        let slot = permit.resource().to_vec();
        if turn.is_multiple_of(3) {
            drop(permit);
        } else {
            let _ = permit.release();
        }
        let window = Permit {
            client: id,
            slot,
            start,
            end: end.min(now),
        };
        record.lock().unwrap().push(window);
    }
    let _ = locks.flush(Duration::from_secs(2));
}

#[test]
fn the_semaphore_never_has_more_holders_than_permits_under_faults() {
    let _serial = crate::serial();
    let mut servers = RedisServers::start(NODES);
    let urls = servers.urls();
    let record = Arc::new(Mutex::new(Vec::new()));
    // Scheduled, not drawn: two clients take both permits and hold them
    // together before anything else happens (the semaphore full).
    let opening = Arc::new(Barrier::new(2));
    let openers: Vec<_> = (0..2)
        .map(|id| {
            let (urls, opening, record) = (urls.clone(), Arc::clone(&opening), Arc::clone(&record));
            thread::spawn(move || {
                let locks = client_manager(&urls, true, false, 0);
                let semaphore = locks.semaphore(NAME, PERMITS).unwrap();
                let permit = semaphore
                    .acquire_with(&LockOptions::new().wait(Duration::from_secs(10)))
                    .unwrap();
                let start = Instant::now();
                opening.wait();
                let end = observe(&permit, true).expect("held through the opening");
                let window = Permit {
                    client: 100 + id,
                    slot: permit.resource().to_vec(),
                    start,
                    end: end.min(Instant::now()),
                };
                opening.wait();
                permit.release().unwrap();
                record.lock().unwrap().push(window);
            })
        })
        .collect();
    openers.into_iter().for_each(|o| o.join().unwrap());

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (urls, stop, record) = (urls.clone(), Arc::clone(&stop), Arc::clone(&record));
            thread::spawn(move || {
                client(
                    id,
                    &client_manager(&urls, true, false, id as u64),
                    &stop,
                    &record,
                )
            })
        })
        .collect();
    // One node at a time: restarted empty, or frozen for a while.
    let mut rng = Rng::new(0xfa17);
    let end = Instant::now() + RUN;
    let (mut restarts, mut freezes) = (0, 0);
    while Instant::now() < end {
        thread::sleep(rng.millis(150, 400));
        let node = rng.below(NODES as u64) as usize;
        if rng.below(2) == 0 {
            servers[node].restart();
            restarts += 1;
        } else {
            servers[node].pause();
            thread::sleep(rng.millis(50, 400));
            servers[node].resume();
            freezes += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    clients.into_iter().for_each(|c| c.join().unwrap());

    let windows = record.lock().unwrap().clone();
    let (most, violation) = most_open(&windows, PERMITS as usize);
    println!(
        "semaphore: {} permits held, at most {most} at once, {restarts} restarts, {freezes} \
         freezes",
        windows.len()
    );
    assert_eq!(violation, None, "more holders than permits");
    assert_eq!(most, PERMITS as usize, "the opening filled the semaphore");
    assert!(windows.len() > 2, "permits were taken under faults");
}

#[cfg(test)]
mod checker {
    use super::*;

    fn window(client: usize, slot: &str, from_ms: u64, to_ms: u64, at: Instant) -> Permit {
        Permit {
            client,
            slot: slot.as_bytes().to_vec(),
            start: at + Duration::from_millis(from_ms),
            end: at + Duration::from_millis(to_ms),
        }
    }

    #[test]
    fn k_overlapping_permits_pass_and_the_most_open_is_counted() {
        let t = Instant::now();
        let windows = [
            window(0, "s:0", 0, 10, t),
            window(1, "s:1", 5, 20, t),
            window(2, "s:0", 10, 30, t),
        ];
        assert_eq!(most_open(&windows, 2), (2, None));
    }

    #[test]
    fn one_more_holder_than_permits_is_caught_and_shown() {
        let t = Instant::now();
        let windows = [
            window(0, "s:0", 0, 10, t),
            window(1, "s:1", 2, 20, t),
            window(2, "s:2", 5, 30, t),
        ];
        let (most, shown) = most_open(&windows, 2);
        assert_eq!(most, 3);
        assert_eq!(shown.map(|w| w.len()), Some(3));
    }

    #[test]
    fn two_holders_of_one_slot_are_caught_even_within_the_permits() {
        let t = Instant::now();
        let windows = [window(0, "s:0", 0, 10, t), window(1, "s:0", 5, 20, t)];
        assert!(most_open(&windows, 2).1.is_some());
    }
}
