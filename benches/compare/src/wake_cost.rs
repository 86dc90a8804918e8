//! `--wake-cost`: what waking a sleeping thread costs on this machine, the
//! price of every hand-off between threads that the other sections count
//! (a blocking caller woken when its round is decided, a node's thread
//! woken by its socket, a server woken by a send).
//!
//! Two threads take turns: each wakes the other (`Thread::unpark`, a futex
//! wake) and sleeps until it is woken back (`thread::park`). Three arms,
//! interleaved within every run: both threads pinned to one CPU (the
//! woken thread waits for the waker to sleep: no inter-processor
//! interrupt), pinned to two CPUs (the woken thread's CPU is idle and
//! must be woken too: on a VM, an interrupt that exits to the host), and
//! unpinned (where the scheduler puts them). Per wake-up: wall time, the
//! CPU time of both threads together (one wake-up and one sleep), and the
//! waker's CPU time inside `unpark` (less what reading the thread's clock
//! costs, taken off every column). No Redis, no quorum-lock: the
//! machine's figure alone.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::stats::Spread;

/// Turns per arm and run (two wake-ups each).
const TURNS: u32 = 20_000;

/// Where the two threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    OneCpu,
    TwoCpus,
    Unpinned,
}

impl Arm {
    const ALL: [Arm; 3] = [Arm::OneCpu, Arm::TwoCpus, Arm::Unpinned];

    fn name(self) -> &'static str {
        match self {
            Arm::OneCpu => "both threads on one CPU",
            Arm::TwoCpus => "on two CPUs (the woken one's CPU idle)",
            Arm::Unpinned => "unpinned",
        }
    }

    /// The CPU of thread `who` (0 or 1) among `cpus` (those this process
    /// may run on), if pinned.
    fn cpu(self, who: usize, cpus: &[usize]) -> Option<usize> {
        match self {
            Arm::OneCpu => cpus.first().copied(),
            Arm::TwoCpus => cpus.get(who).copied(),
            Arm::Unpinned => None,
        }
    }
}

/// One arm's block, per wake-up (microseconds), each less the clock
/// readings around the wake-up.
#[derive(Debug, Clone, Copy)]
struct Block {
    wall: f64,
    cpu: f64,
    waker: f64,
}

/// `--wake-cost R`: R runs of the three arms, in an order that turns by
/// run; the report's table.
pub fn wake_cost(runs: usize) -> Result<String, String> {
    let cpus = allowed_cpus()?;
    let arms: Vec<Arm> = Arm::ALL
        .into_iter()
        .filter(|a| *a != Arm::TwoCpus || cpus.len() >= 2)
        .collect();
    let mut blocks: Vec<Vec<Block>> = vec![Vec::new(); arms.len()];
    // Warm-up: the threads' stacks, the scheduler's view of them.
    for &arm in &arms {
        block(arm, &cpus, TURNS / 10)?;
    }
    for run in 0..runs.max(1) {
        for k in 0..arms.len() {
            let i = (run + k) % arms.len();
            eprintln!("[wake-cost: {}, run {}/{}]", arms[i].name(), run + 1, runs);
            blocks[i].push(block(arms[i], &cpus, TURNS)?);
        }
    }
    let mut out = format!(
        "### What a thread's wake-up costs on this machine (`--wake-cost`)\n\n\
         Two threads wake each other in turn (`unpark`, a futex wake) and sleep until woken \
         back (`park`), {TURNS} turns per block, the arms interleaved; {} CPUs. Per wake-up, \
         median (min-max) of {runs} runs, in us: wall time; the CPU time of both threads \
         (one wake-up and one sleep); the waker's CPU time inside `unpark`.\n\n\
         | where the threads run | wall | CPU, both threads | the waker's, in `unpark` |\n\
         |---|---:|---:|---:|\n",
        cpus.len()
    );
    for (arm, blocks) in arms.iter().zip(&blocks) {
        let cell = |f: fn(&Block) -> f64| {
            Spread::of(&blocks.iter().map(f).collect::<Vec<_>>()).map_or_else(
                || "-".into(),
                |s| format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            arm.name(),
            cell(|b| b.wall),
            cell(|b| b.cpu),
            cell(|b| b.waker)
        );
    }
    Ok(out)
}

/// One block of `turns` turns in `arm`, on `cpus`.
fn block(arm: Arm, cpus: &[usize], turns: u32) -> Result<Block, String> {
    let (cpu_1, cpu_2) = (arm.cpu(0, cpus), arm.cpu(1, cpus));
    // Odd: the second thread's turn; even: the first's. Each waits for its
    // value, sets the other's, wakes the other.
    let turn = Arc::new(AtomicU32::new(0));
    let (first_ready, first_handle) = std::sync::mpsc::channel::<thread::Thread>();
    let second = {
        let turn = Arc::clone(&turn);
        thread::Builder::new()
            .name("wake-cost-2".into())
            .spawn(move || -> Result<(Duration, Duration), String> {
                pin(cpu_2)?;
                let other = first_handle.recv().map_err(|e| e.to_string())?;
                let (cpu0, mut waker) = (thread_cpu(), Duration::ZERO);
                for i in 0..turns {
                    wait_for(&turn, 2 * i + 1);
                    turn.store(2 * i + 2, Ordering::Release);
                    let before = thread_cpu();
                    other.unpark();
                    waker += thread_cpu().saturating_sub(before);
                }
                Ok((thread_cpu().saturating_sub(cpu0), waker))
            })
            .map_err(|e| e.to_string())?
    };
    let other = second.thread().clone();
    let first = {
        let turn = Arc::clone(&turn);
        thread::Builder::new()
            .name("wake-cost-1".into())
            .spawn(move || -> Result<(Duration, Duration, Duration), String> {
                pin(cpu_1)?;
                first_ready
                    .send(thread::current())
                    .map_err(|e| e.to_string())?;
                let (start, cpu0, mut waker) = (Instant::now(), thread_cpu(), Duration::ZERO);
                for i in 0..turns {
                    turn.store(2 * i + 1, Ordering::Release);
                    let before = thread_cpu();
                    other.unpark();
                    waker += thread_cpu().saturating_sub(before);
                    wait_for(&turn, 2 * i + 2);
                }
                Ok((start.elapsed(), thread_cpu().saturating_sub(cpu0), waker))
            })
            .map_err(|e| e.to_string())?
    };
    // Both joined before either result is looked at: a thread that could
    // not be pinned says so, where the other only timed out waiting.
    let (first, second) = (first.join(), second.join());
    let (cpu2, waker2) = second.map_err(|_| "a thread panicked")??;
    let (wall, cpu1, waker1) = first.map_err(|_| "a thread panicked")??;
    let wakes = f64::from(turns) * 2.0;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / wakes;
    // The two clock readings around each unpark, taken off: both are in
    // the wall time and the threads' CPU time; the waker's span from one
    // to the other holds one reading's cost.
    let reading = reading_cost();
    Ok(Block {
        wall: (per(wall) - 2.0 * reading).max(0.0),
        cpu: (per(cpu1 + cpu2) - 2.0 * reading).max(0.0),
        waker: (per(waker1 + waker2) - reading).max(0.0),
    })
}

/// Parks until `turn` reads `value` (a wake-up meant for an earlier turn,
/// or a spurious one, only makes it look again). Bounded: a turn not
/// reached within 10 s panics the thread, which the block reports.
fn wait_for(turn: &AtomicU32, value: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while turn.load(Ordering::Acquire) != value {
        assert!(Instant::now() < deadline, "turn {value} never came");
        thread::park_timeout(Duration::from_secs(1));
    }
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: an all-zero `cpu_set_t` is the empty set; sched_getaffinity
    // writes the calling thread's mask into it and keeps no pointer;
    // CPU_ISSET reads a bit inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(format!(
                "reading the CPUs this process may use: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}

/// Pins the calling thread to `cpu` (nothing for `None`).
fn pin(cpu: Option<usize>) -> Result<(), String> {
    let Some(cpu) = cpu else { return Ok(()) };
    // SAFETY: an all-zero `cpu_set_t` is the empty set; CPU_SET writes a
    // bit inside it; sched_setaffinity reads it and keeps no pointer.
    let done = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if done == 0 {
        Ok(())
    } else {
        Err(format!(
            "pinning to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// The calling thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`): one
/// system call, where `cpu::thread_cpu` reads a `/proc` file (several
/// system calls), too dear to read around every wake-up.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; the call keeps no pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// What one reading of [`thread_cpu`] costs, in us: the span from one
/// reading to the next with nothing between them.
fn reading_cost() -> f64 {
    const N: u32 = 10_000;
    let mut added = Duration::ZERO;
    for _ in 0..N {
        let before = thread_cpu();
        added += thread_cpu().saturating_sub(before);
    }
    added.as_secs_f64() * 1e6 / f64::from(N)
}
