//! The machine a run happened on.

use std::process::Command;

/// The machine the run happened on.
#[derive(Debug, Clone)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
    pub kernel: String,
    pub redis: String,
    pub load: String,
    pub commit: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let output = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let redis = output("redis-server", &["--version"]).unwrap_or_else(|| "unknown".into());
        let commit = match output("git", &["rev-parse", "--short", "HEAD"]) {
            Some(c) => {
                let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"])
                    .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{c} (with uncommitted changes)")
                } else {
                    c
                }
            }
            None => "unknown".into(),
        };
        Self {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            kernel: read("/proc/sys/kernel/osrelease"),
            redis,
            load: read("/proc/loadavg"),
            commit,
        }
    }
}
