//! CPU time used during a measured block, by this process and by the
//! redis-server processes the benchmark started.
//!
//! This process: `getrusage(RUSAGE_SELF)`, user and system time of every
//! thread, including the threads that ended during the block (the kernel
//! adds a thread's times to its process's totals when it exits). Readings
//! from `/proc` would not do: `/proc/self/task/*/schedstat` lists only the
//! threads alive at the reading, so the callers of a scaling block (joined
//! before its end) would be missing; `/proc/self/stat`'s utime + stime do
//! count ended threads, but in clock ticks (10 ms here), too coarse for
//! blocks of a few hundred milliseconds of CPU. getrusage gives the same
//! totals in microseconds.
//!
//! The servers: nanoseconds on a CPU of each of their threads,
//! `/proc/<pid>/task/*/schedstat`. A redis-server's threads live as long as
//! it does, so the live ones are all of them; a change in their count
//! during a block is reported, since an ended thread's time would be lost.
//!
//! Context switches too: this process's from the same `getrusage`
//! (voluntary and involuntary, ended threads included), the servers'
//! from the same `schedstat` lines (their third field, how many times the
//! thread was put on a CPU: once after each of its switches out). They are
//! counts, which the machine's noise barely moves, where the CPU times
//! move with it.
//!
//! Neither side sees what no task is charged for: with this kernel's tick
//! accounting the loopback TCP stack runs in the context of whichever task
//! sends (so a client's send pays for part of the server's receive, and
//! the other way round), except when the kernel defers it to `ksoftirqd`,
//! which belongs to neither.

use std::fs;
use std::time::Duration;

/// One reading, taken at a block's start.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    user: Duration,
    system: Duration,
    /// This process's context switches so far.
    switches: u64,
    /// The servers' threads (`None` where a server's `/proc` could not
    /// be read).
    servers: Option<Tasks>,
}

/// What one block used.
#[derive(Debug, Clone, Copy)]
pub struct CpuUse {
    /// This process, every thread (ended ones too).
    pub user: Duration,
    pub system: Duration,
    /// The benchmark's own work inside the block (the thread census), to
    /// be taken off this process's total.
    pub excluded: Duration,
    /// This process's context switches, voluntary and involuntary, every
    /// thread (ended ones too).
    pub switches: u64,
    /// The servers, every thread of each.
    pub servers: Option<Duration>,
    /// The servers' context switches (times their threads were put on a
    /// CPU), every thread of each.
    pub server_switches: Option<u64>,
    /// A server's thread count changed during the block: an ended thread's
    /// time may be missing from `servers`.
    pub server_threads_changed: bool,
}

impl CpuUse {
    /// This process's user + system time, less the benchmark's own work.
    pub fn process(&self) -> Duration {
        (self.user + self.system).saturating_sub(self.excluded)
    }
}

/// Reads this process's CPU time and that of the given server processes.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    servers: Vec<u32>,
}

impl CpuMeter {
    /// `servers`: the pids of the redis-servers a block uses.
    pub fn new(servers: &[u32]) -> Self {
        Self {
            servers: servers.to_vec(),
        }
    }

    /// The servers first, then this process: what reading the servers'
    /// files costs this process falls before its own reading.
    pub fn start(&self) -> Option<Reading> {
        let servers = self.servers();
        let (user, system, switches) = rusage_self()?;
        Some(Reading {
            user,
            system,
            switches,
            servers,
        })
    }

    /// This process first, then the servers (the same reason, the other
    /// way round). `excluded`: the benchmark's own CPU inside the block.
    pub fn stop(&self, start: Option<Reading>, excluded: Duration) -> Option<CpuUse> {
        let start = start?;
        let (user, system, switches) = rusage_self()?;
        let servers = self.servers();
        let (servers, server_switches, server_threads_changed) = match (start.servers, servers) {
            (Some(a), Some(b)) => (
                Some(Duration::from_nanos(b.ns.saturating_sub(a.ns))),
                Some(b.runs.saturating_sub(a.runs)),
                a.threads != b.threads,
            ),
            _ => (None, None, false),
        };
        Some(CpuUse {
            user: user.saturating_sub(start.user),
            system: system.saturating_sub(start.system),
            excluded,
            switches: switches.saturating_sub(start.switches),
            servers,
            server_switches,
            server_threads_changed,
        })
    }

    /// Every thread of every server, summed.
    fn servers(&self) -> Option<Tasks> {
        let mut total = Tasks::default();
        for &pid in &self.servers {
            let tasks = tasks(&format!("/proc/{pid}/task"))?;
            total.ns += tasks.ns;
            total.runs += tasks.runs;
            total.threads += tasks.threads;
        }
        Some(total)
    }
}

/// The calling thread's time on a CPU so far (`/proc/thread-self/schedstat`).
pub fn thread_cpu() -> Option<Duration> {
    let stat = fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    first_ns(&stat).map(Duration::from_nanos)
}

/// The CPU time `work` took on the calling thread (zero where it cannot be
/// read).
pub fn on_this_thread(work: impl FnOnce()) -> Duration {
    let before = thread_cpu();
    work();
    match (before, thread_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    }
}

/// The first field of a `schedstat` line: nanoseconds on a CPU.
fn first_ns(stat: &str) -> Option<u64> {
    stat.split_whitespace().next()?.parse().ok()
}

/// The third field of a `schedstat` line: how many times the thread was
/// put on a CPU.
fn runs(stat: &str) -> Option<u64> {
    stat.split_whitespace().nth(2)?.parse().ok()
}

/// Threads' `schedstat` figures, summed.
#[derive(Debug, Clone, Copy, Default)]
struct Tasks {
    /// Nanoseconds on a CPU.
    ns: u64,
    /// Times put on a CPU.
    runs: u64,
    /// How many threads were read.
    threads: usize,
}

/// The threads listed in `dir` (a `/proc/<pid>/task`), summed.
fn tasks(dir: &str) -> Option<Tasks> {
    let mut total = Tasks::default();
    for entry in fs::read_dir(dir).ok()? {
        let Ok(entry) = entry else { continue };
        // A thread may end between the listing and the read.
        let Ok(stat) = fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        total.ns += first_ns(&stat)?;
        total.runs += runs(&stat)?;
        total.threads += 1;
    }
    Some(total)
}

/// This process's user and system time and its context switches
/// (voluntary and involuntary) so far, every thread, ended ones included
/// (`getrusage(RUSAGE_SELF)`).
#[cfg(unix)]
fn rusage_self() -> Option<(Duration, Duration, u64)> {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C
    // struct; getrusage writes into it and keeps no pointer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let time = |t: &libc::timeval| {
        let (sec, usec) = (
            u64::try_from(t.tv_sec).ok()?,
            u64::try_from(t.tv_usec).ok()?,
        );
        Some(Duration::from_secs(sec) + Duration::from_micros(usec))
    };
    let switches = u64::try_from(usage.ru_nvcsw).ok()? + u64::try_from(usage.ru_nivcsw).ok()?;
    Some((time(&usage.ru_utime)?, time(&usage.ru_stime)?, switches))
}

/// Elsewhere the figure is not measured.
#[cfg(not(unix))]
fn rusage_self() -> Option<(Duration, Duration, u64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Spins until the calling thread has had `cpu` on a CPU (or 5 s of
    /// wall time went by).
    fn burn(cpu: Duration) {
        let start = thread_cpu().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(5);
        while thread_cpu().unwrap_or_default().saturating_sub(start) < cpu
            && Instant::now() < deadline
        {
            std::hint::black_box((0..1000u64).sum::<u64>());
        }
    }

    /// The point of using getrusage: a thread that ended inside the block
    /// still counts.
    #[test]
    fn counts_a_thread_that_ended_during_the_block() {
        if !std::path::Path::new("/proc/thread-self/schedstat").exists() {
            return;
        }
        let meter = CpuMeter::new(&[std::process::id()]);
        let start = meter.start().expect("a reading");
        let burned = std::thread::spawn(|| {
            let before = thread_cpu().expect("thread cpu");
            burn(Duration::from_millis(50));
            thread_cpu().expect("thread cpu") - before
        })
        .join()
        .expect("the thread");
        let used = meter.stop(Some(start), Duration::ZERO).expect("a reading");
        assert!(burned >= Duration::from_millis(50), "burned {burned:?}");
        // Other tests run beside this one: more, never less.
        assert!(
            used.process() + Duration::from_millis(1) >= burned,
            "getrusage: {used:?}, the ended thread burned {burned:?}"
        );
        // Read as a "server", this process's live threads no longer have
        // the ended thread: the figure is there, the thread count moved or
        // not depending on the other tests.
        assert!(used.servers.is_some());
        assert!(used.server_switches.is_some());
        // The main thread slept in `join` for the 50 ms the other burned.
        assert!(used.switches >= 1, "{used:?}");
    }

    #[test]
    fn excluded_work_is_taken_off() {
        let used = CpuUse {
            user: Duration::from_millis(3),
            system: Duration::from_millis(2),
            excluded: Duration::from_millis(1),
            switches: 0,
            servers: None,
            server_switches: None,
            server_threads_changed: false,
        };
        assert_eq!(used.process(), Duration::from_millis(4));
        assert_eq!(first_ns("123 45 6\n"), Some(123));
        assert_eq!(runs("123 45 6\n"), Some(6));
    }
}
