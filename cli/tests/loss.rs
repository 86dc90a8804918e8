//! After the lock is lost, or the tool is killed, the command must be gone
//! before anyone else can hold the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Stdio;

use common::{
    HANG, Leftover, code, free_everywhere, held_everywhere, output, read_pid, running, stdout,
    still_running_check, tool, wait_output,
};
use testkit::{RedisServers, TempDir, wait_until};

/// `--ttl 3s` and the default `--kill-after 10s`; the servers stall, the
/// extend fails, and the command takes 8 s to clean up after SIGTERM. A
/// second client waits for the lock: when it gets it, the first command
/// must have ended (before the fix it still ran, for about 5 s).
#[test]
fn after_a_loss_the_command_is_gone_before_another_client_gets_the_lock() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (pid_file, term_file) = (dir.path().join("pid"), dir.path().join("term"));
    let script = format!(
        "echo $$ > {pid}; trap 'touch {term}; sleep 8; exit 0' TERM; \
         while :; do sleep 0.05; done",
        pid = pid_file.display(),
        term = term_file.display()
    );
    let first = tool(
        &servers,
        &["run", "--ttl", "3s", "job", "--", "sh", "-c", &script],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    // A stall (a VM pause, a partition): the next extend gets no answer.
    for server in servers.iter() {
        server.pause();
    }
    let stopped = wait_until(HANG, || term_file.exists());
    for server in servers.iter() {
        server.resume();
    }
    assert!(stopped, "the tool never sent SIGTERM");
    let check = still_running_check(&[pid]);
    let second = output(&mut tool(
        &servers,
        &["run", "--wait", "20s", "job", "--", "sh", "-c", &check],
    ));
    let first = wait_output(first);
    assert_eq!(code(&second), 0, "{second:?}");
    assert_eq!(
        stdout(&second).trim(),
        "",
        "the first command still ran when the second got the lock; first: {first:?}"
    );
    assert_eq!(code(&first), 75, "{first:?}");
    // Regression: the loss was said three times (the library's warning, the
    // SIGKILL notice, the end); now once, with what is done.
    let said = String::from_utf8_lossy(&first.stderr);
    assert_eq!(said.matches("lock lost").count(), 1, "{said}");
    assert!(!said.contains("may be lost"), "{said}");
    assert!(said.contains("lock lost: "), "{said}");
}

/// `kill -9` of the tool (the OOM killer, `KillMode=process`): nobody
/// extends the lock any more, so the command must not outlive the tool.
#[test]
fn the_command_dies_with_the_tool() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut tool_process = tool(
        &servers,
        &["run", "--ttl", "2s", "job", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    tool_process.kill().unwrap();
    tool_process.wait().unwrap();
    // Once the lock has expired anyone may take it: the command must be
    // gone by then.
    assert!(wait_until(HANG, || free_everywhere(&servers, b"job")));
    let orphan = running(pid);
    assert!(!orphan, "the command outlived the tool and its lock");
}
