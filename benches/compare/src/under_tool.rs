//! Blocks of this program run again under a tool that counts them
//! (callgrind for the instructions, `perf` for the futex calls and the
//! switches): the program's own path, a scratch folder for the tool's
//! output files, the blocks in turn, and a failed run's reason in one
//! line.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use crate::clients::Client;
use crate::paired::order;

/// Runs `count` with this program's path and a scratch folder named for
/// `tool` and this process, removed afterwards whatever `count` returns.
pub fn in_scratch<T>(
    tool: &str,
    count: impl FnOnce(&Path, &Path) -> Result<T, String>,
) -> Result<T, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let dir = std::env::temp_dir().join(format!("quorum-bench-{tool}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let counted = count(&exe, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    counted
}

/// Counts the 8-thread block at N=3 (`3:8:<client>`) of each of
/// `clients` `runs` times (the blocks in an order that turns run by run,
/// `paired::order`), each by `count` (this program's path, a scratch
/// folder for `tool`, the client and its block's name).
pub fn each_block<T>(
    tool: &str,
    clients: &[Client],
    runs: usize,
    count: impl Fn(&Path, &Path, Client, &str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    in_scratch(tool, |exe, dir| {
        let mut blocks = Vec::new();
        for run in 0..runs.max(1) {
            for i in order(run, clients.len()) {
                let client = clients[i];
                let block = format!("3:8:{}", client.key());
                blocks.push(count(exe, dir, client, &block)?);
            }
        }
        Ok(blocks)
    })
}

/// Runs `perf <args> -- <this program> --wakes 1 <block>`: one block
/// alone under perf, in a process of its own.
pub fn perf_on_block(args: &[&OsStr], exe: &Path, block: &str) -> Result<Output, String> {
    Command::new("perf")
        .args(args)
        .arg("--")
        .arg(exe)
        .args(["--wakes", "1", block])
        .output()
        .map_err(|e| format!("perf (Debian's package linux-perf) did not start: {e}"))
}

/// Why a tool's run of `what` failed, in one line: its status and the
/// last three lines of its standard error, then of `more` (a file the
/// tool wrote), newest first.
pub fn failed(what: &str, ran: &Output, more: &str) -> String {
    let err = String::from_utf8_lossy(&ran.stderr);
    let tail: Vec<&str> = err.lines().chain(more.lines()).rev().take(3).collect();
    format!("{what} failed ({}): {}", ran.status, tail.join(" / "))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    #[test]
    fn a_failure_is_one_line_of_the_last_lines_newest_first() {
        let ran = Output {
            status: ExitStatus::from_raw(256),
            stdout: Vec::new(),
            stderr: b"one\ntwo\n".to_vec(),
        };
        assert_eq!(
            failed("perf stat of the block 3:8:ours", &ran, "three\nfour\n"),
            "perf stat of the block 3:8:ours failed (exit status: 1): four / three / two"
        );
    }

    #[test]
    fn the_scratch_folder_is_removed_whatever_the_count_returns() {
        let mut seen = None;
        let got: Result<(), String> = in_scratch("test", |exe, dir| {
            assert!(exe.exists() && dir.is_dir());
            seen = Some(dir.to_path_buf());
            Err("counted nothing".into())
        });
        assert_eq!(got, Err("counted nothing".into()));
        assert!(!seen.unwrap().exists());
    }
}
