//! The resource side of fencing tokens: a write carries the lock's fence,
//! and the resource refuses a write whose fence is lower than one it has
//! already accepted.
//!
//! The scenario Kleppmann's critique of Redlock describes: holder A is
//! paused (GC, swap, SIGSTOP) past its lock's validity; B takes the lock
//! and writes; A wakes up and writes too. Without fencing A's stale write
//! lands; with fencing the resource refuses it.
//!
//! The resource here is a Redis key guarded by a Lua script, because the
//! check and the write must be one atomic step on the resource itself (a
//! check in the client, then a write, would race exactly like the lock
//! did). The same rule fits a SQL row (`UPDATE ... SET value = ?, fence =
//! ? WHERE id = ? AND fence <= ?`). With `QUORUM_LOCK_NODES` set the locks
//! and the register use those Redis servers (the register lives on the
//! first); without, the locks run on in-memory nodes and the register is
//! an in-process stand-in that applies the same rule.
//!
//! ```sh
//! cargo run --example fenced_write
//! QUORUM_LOCK_NODES=redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381 \
//!     cargo run --example fenced_write
//! ```
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // an example prints, and fails loudly

use std::sync::Mutex;
use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};

/// Accepts a write only if its fence is at least the highest accepted so
/// far; the same holder may write again with the same fence.
/// KEYS[1]: the highest fence; KEYS[2]: the value. ARGV[1]: the write's
/// fence; ARGV[2]: the value. Returns 1 (written) or 0 (stale, refused).
const FENCED_WRITE: &str = "\
    if tonumber(redis.call('get', KEYS[1]) or '0') > tonumber(ARGV[1]) then return 0 end \
    redis.call('set', KEYS[1], ARGV[1]) \
    redis.call('set', KEYS[2], ARGV[2]) \
    return 1";

/// The protected resource: a value that only accepts fenced writes.
enum Register {
    Redis(Mutex<redis::Connection>),
    InProcess(Mutex<(u64, i64)>),
}

impl Register {
    fn read(&self) -> i64 {
        match self {
            Self::Redis(conn) => {
                let value: Option<i64> = redis::cmd("GET")
                    .arg("example:register:value")
                    .query(&mut *conn.lock().unwrap())
                    .unwrap();
                value.unwrap_or(0)
            }
            Self::InProcess(state) => state.lock().unwrap().1,
        }
    }

    /// Writes `value` if `fence` is not stale; whether it was written.
    fn write(&self, fence: u64, value: i64) -> bool {
        match self {
            Self::Redis(conn) => {
                let written: i64 = redis::cmd("EVAL")
                    .arg(FENCED_WRITE)
                    .arg(2)
                    .arg("example:register:fence")
                    .arg("example:register:value")
                    .arg(fence)
                    .arg(value)
                    .query(&mut *conn.lock().unwrap())
                    .unwrap();
                written == 1
            }
            Self::InProcess(state) => {
                let mut state = state.lock().unwrap();
                if state.0 > fence {
                    return false;
                }
                *state = (fence, value);
                true
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_millis(500);
    let urls: Option<Vec<String>> = std::env::var("QUORUM_LOCK_NODES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let memory: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    // A and B are two processes in real life: two managers here.
    let manager = || -> Result<LockManager, quorum_lock::Error> {
        let builder = LockManager::builder()
            .ttl(ttl)
            .fencing(true)
            .retry(RetryPolicy::new().max_wait(Duration::from_secs(15)));
        match &urls {
            // Fresh servers are quarantined for max_ttl: keep it short here.
            Some(urls) => builder
                .redis_nodes(urls)?
                .max_ttl(Duration::from_secs(1))
                .build(),
            None => builder.nodes(memory.iter().cloned()).build(),
        }
    };
    let register = match &urls {
        Some(urls) => {
            let mut conn = redis::Client::open(urls[0].as_str())?.get_connection()?;
            redis::cmd("DEL")
                .arg("example:register:fence")
                .arg("example:register:value")
                .query::<()>(&mut conn)?;
            println!(
                "locks on {} Redis nodes; the register is a key on {}",
                urls.len(),
                urls[0]
            );
            Register::Redis(Mutex::new(conn))
        }
        None => {
            println!("locks on 3 in-memory nodes; the register is an in-process stand-in");
            Register::InProcess(Mutex::new((0, 0)))
        }
    };
    let (process_a, process_b) = (manager()?, manager()?);
    let fenced = LockOptions::new().fencing(true);

    // A takes the lock and reads the value...
    let a = process_a.lock_with("register", &fenced)?;
    let fence_a = a.fence().expect("fenced");
    let read_a = register.read();
    println!("A holds the lock with fence {fence_a}, reads {read_a}, and is paused...");
    // ...and is paused past its validity (its process stopped, say).
    std::thread::sleep(a.validity() + Duration::from_millis(100));
    assert!(!a.is_valid(), "A's lock has expired");

    // B takes the lock meanwhile and writes.
    let b = process_b.lock_with("register", &fenced)?;
    let fence_b = b.fence().expect("fenced");
    let read_b = register.read();
    assert!(register.write(fence_b, read_b + 1));
    println!(
        "B holds the lock with fence {fence_b} > {fence_a} and writes {}",
        read_b + 1
    );
    b.release()?;

    // A wakes up and writes what it computed before the pause.
    let accepted = register.write(fence_a, read_a + 1);
    println!(
        "A wakes up and writes {} with fence {fence_a}: {}",
        read_a + 1,
        if accepted {
            "ACCEPTED (lost update!)"
        } else {
            "refused as stale"
        }
    );
    assert!(!accepted, "the register must refuse the stale write");
    assert_eq!(register.read(), read_b + 1, "B's write stands");
    drop(a);
    Ok(())
}
