//! This process's own counters from `/proc` (Linux): context switches of
//! all its threads, read/write system calls, resident memory, and its
//! threads by name. Figures that do not depend on how noisy the machine
//! is. Every reader returns `None` where `/proc` is not there.

use std::collections::BTreeMap;
use std::fs;

/// A snapshot of the process-wide counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Summed over `/proc/self/task/*/status` (the threads alive now).
    pub voluntary: u64,
    pub involuntary: u64,
    /// `/proc/self/io`: read-class (`read`, `readv`, ...) and write-class
    /// (`write`, `writev`, ...) system calls of the whole process. The
    /// kernel does not count socket `send`/`recv`/`sendto`/`recvfrom`
    /// here (Rust's `TcpStream` uses those): what shows is pipe and
    /// eventfd traffic (wake-ups) and file reads.
    pub syscr: u64,
    pub syscw: u64,
    /// Threads alive.
    pub threads: u64,
}

impl Counters {
    pub fn now() -> Option<Self> {
        let mut c = Counters::default();
        for entry in fs::read_dir("/proc/self/task").ok()? {
            let Ok(entry) = entry else { continue };
            // A thread may end between the listing and the read.
            let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            c.threads += 1;
            c.voluntary += field(&status, "voluntary_ctxt_switches:").unwrap_or(0);
            c.involuntary += field(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0);
        }
        let io = fs::read_to_string("/proc/self/io").ok()?;
        c.syscr = field(&io, "syscr:")?;
        c.syscw = field(&io, "syscw:")?;
        Some(c)
    }

    /// `later - self`, per operation (`ops` operations in between).
    pub fn per_op(&self, later: &Counters, ops: usize) -> PerOp {
        let d = |a: u64, b: u64| b.saturating_sub(a) as f64 / ops.max(1) as f64;
        PerOp {
            voluntary: d(self.voluntary, later.voluntary),
            involuntary: d(self.involuntary, later.involuntary),
            syscr: d(self.syscr, later.syscr),
            syscw: d(self.syscw, later.syscw),
            threads_changed: self.threads != later.threads,
        }
    }
}

/// Counter deltas per operation.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerOp {
    pub voluntary: f64,
    pub involuntary: f64,
    pub syscr: f64,
    pub syscw: f64,
    /// A thread started or ended during the block: its switches may be
    /// missing from the sum.
    pub threads_changed: bool,
}

impl PerOp {
    pub fn switches(&self) -> f64 {
        self.voluntary + self.involuntary
    }
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

/// Resident memory of the process, in bytes (`VmRSS`).
pub fn rss_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?;
    Some(kb * 1024)
}

/// This process's threads, counted by name (`/proc/self/task/*/comm`).
pub fn threads_by_name() -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    if let Ok(dir) = fs::read_dir("/proc/self/task") {
        for entry in dir.flatten() {
            if let Ok(comm) = fs::read_to_string(entry.path().join("comm")) {
                *names.entry(comm.trim().to_string()).or_insert(0) += 1;
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_counters() {
        if !std::path::Path::new("/proc/self/io").exists() {
            return;
        }
        let c = Counters::now().expect("counters");
        assert!(c.threads >= 1);
        assert!(rss_bytes().expect("rss") > 0);
        assert!(!threads_by_name().is_empty());
        let later = Counters::now().expect("counters");
        assert!(c.per_op(&later, 1).syscr >= 0.0);
    }
}
