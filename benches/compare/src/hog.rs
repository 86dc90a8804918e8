//! `--cpu-hog`: a process that keeps one core busy while the benchmark
//! runs, to measure on a loaded host (where thread hand-offs cost most).
//!
//! A child process, not a thread, so that the counters the benchmark reads
//! from its own process (context switches, CPU time) stay its own.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The argument that makes the benchmark binary the spinning child.
pub const CHILD_ARG: &str = "--cpu-hog-child";

/// The child spins at most this long, even if nobody stops it.
const MAX_SPIN: Duration = Duration::from_secs(3600);

/// The spinning child; killed (by pid) and reaped when dropped.
pub struct CpuHog(Child);

impl CpuHog {
    pub fn start() -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cpu hog: {e}"))?;
        Command::new(exe)
            .arg(CHILD_ARG)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map(Self)
            .map_err(|e| format!("cpu hog: {e}"))
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's loop: busy until its parent is gone (it then belongs to
/// another parent) or [`MAX_SPIN`] has passed.
pub fn spin() {
    let parent = std::os::unix::process::parent_id();
    let started = Instant::now();
    let mut x = 0u64;
    while started.elapsed() < MAX_SPIN && std::os::unix::process::parent_id() == parent {
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
}
