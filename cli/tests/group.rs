//! No process of a `run` command works without the lock: the processes a
//! shell script leaves in the command's process group die with the tool
//! (`kill -9` of the tool, or of the tool's whole process group), are
//! stopped before the lock is released when the command ends (or waited for
//! with `--wait-group`, or let go with `--leave-group`), and are killed
//! before the lock's validity ends after a loss.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{
    HANG, Leftover, code, free_everywhere, held_everywhere, output, read_pid, running, send,
    stderr, stdout, still_running_check, tool, wait_output,
};
use testkit::{RedisServers, TempDir, wait_until};

/// The pid files a script writes, and a guard that kills what is left of
/// them when the test ends (passing or not).
struct Pids {
    files: Vec<(&'static str, PathBuf)>,
}

impl Pids {
    fn new(dir: &Path, names: &[&'static str]) -> Self {
        let files = names.iter().map(|n| (*n, dir.join(n))).collect();
        Self { files }
    }

    fn path(&self, name: &str) -> &Path {
        &self.files.iter().find(|(n, _)| *n == name).unwrap().1
    }

    /// Every pid, once the script wrote them all, each with a leftover
    /// guard.
    fn read(&self) -> Vec<(&'static str, u32, Leftover)> {
        self.files
            .iter()
            .map(|(name, file)| {
                let pid = read_pid(file);
                (*name, pid, Leftover::of(pid))
            })
            .collect()
    }
}

/// A script that does not `exec`: two children in the background (as
/// `sleep 300 & sleep 301`), then the shell waits for them.
fn non_exec_script(pids: &Pids) -> String {
    format!(
        "exec >/dev/null 2>&1; sleep 300 & echo $! > {bg}; sleep 301 & echo $! > {fg}; \
         echo $$ > {sh}; wait",
        bg = pids.path("bg").display(),
        fg = pids.path("fg").display(),
        sh = pids.path("sh").display(),
    )
}

/// A command for a second `run`: prints one line per pid of `pids` that
/// still runs when it got the lock (see [`still_running_check`]).
fn survivors_check(pids: &[(&'static str, u32, Leftover)]) -> String {
    let pids: Vec<u32> = pids.iter().map(|(_, pid, _)| *pid).collect();
    still_running_check(&pids)
}

/// The names of `pids` that the output of [`survivors_check`] lists.
fn survivors<'a>(pids: &'a [(&'static str, u32, Leftover)], printed: &str) -> Vec<&'a str> {
    let listed: Vec<&str> = printed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    pids.iter()
        .filter(|(_, pid, _)| listed.contains(&pid.to_string().as_str()))
        .map(|(name, _, _)| *name)
        .collect()
}

/// `kill -9` of the tool (or of its process group) while it runs a script
/// that does not `exec`: when a second `run` gets the lock, none of the
/// script's processes may still run.
fn tool_killed(whole_group: bool) {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pids = Pids::new(dir.path(), &["sh", "bg", "fg"]);
    let script = non_exec_script(&pids);
    let mut cmd = tool(
        &servers,
        &["run", "--ttl", "2s", "job", "--", "sh", "-c", &script],
    );
    // As a shell starts a job: in a process group of its own, which
    // `kill -9 -PGID` kills as a whole.
    cmd.process_group(0).stderr(Stdio::piped());
    let first = cmd.spawn().unwrap();
    let tool_pid = first.id();
    let running_pids = pids.read();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    if whole_group {
        send("KILL", &format!("-{tool_pid}"));
    } else {
        send("KILL", &tool_pid.to_string());
    }
    let killed_at = std::time::Instant::now();
    let first = wait_output(first);
    let second = output(&mut tool(
        &servers,
        &[
            "run",
            "--wait",
            "20s",
            "job",
            "--",
            "sh",
            "-c",
            &survivors_check(&running_pids),
        ],
    ));
    let checked_after = killed_at.elapsed();
    assert_eq!(code(&second), 0, "{second:?}");
    let printed = stdout(&second);
    let names = survivors(&running_pids, &printed);
    let listed: Vec<String> = running_pids
        .iter()
        .map(|(name, pid, _)| format!("{name}={pid}"))
        .collect();
    assert!(
        names.is_empty(),
        "still running when a second run got the lock, {checked_after:?} after the kill: \
         {names:?} of {listed:?}:\n{printed}the tool: {first:?}"
    );
}

#[test]
fn kill_9_of_the_tool_kills_every_process_of_the_script() {
    tool_killed(false);
}

#[test]
fn kill_9_of_the_tools_process_group_kills_every_process_of_the_script() {
    tool_killed(true);
}

/// A script that leaves a background child behind, as
/// `sh -c 'sleep 123 & echo started'` does, writing the pids of the shell
/// and of its background child.
fn background_child_script(pids: &Pids, child: &str) -> String {
    format!(
        "echo $$ > {sh}; {child} >/dev/null 2>&1 & echo $! > {bg}; echo started",
        sh = pids.path("sh").display(),
        bg = pids.path("bg").display(),
    )
}

/// By default a background child left by the command is stopped before
/// the lock is released: when the tool has exited (the lock free), it no
/// longer runs.
#[test]
fn a_background_child_is_stopped_before_the_lock_is_released() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pids = Pids::new(dir.path(), &["sh", "bg"]);
    let script = background_child_script(&pids, "sleep 123");
    let run = tool(&servers, &["run", "job", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let running_pids = pids.read();
    let out = wait_output(run);
    assert_eq!(code(&out), 0, "the command's status: {out:?}");
    assert_eq!(stdout(&out).trim(), "started");
    assert!(free_everywhere(&servers, b"job"));
    let bg = running_pids[1].1;
    assert!(
        !running(bg),
        "the background child runs on after the lock was released: {out:?}"
    );
    assert!(
        stderr(&out).contains("--wait-group"),
        "the tool says what it did and how to change it: {out:?}"
    );
}

/// `--wait-group`: the lock is kept (and extended) until the last process
/// of the command's group has ended.
#[test]
fn wait_group_keeps_the_lock_until_the_background_child_ends() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pids = Pids::new(dir.path(), &["sh", "bg"]);
    let go = dir.path().join("go");
    let child = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let script = background_child_script(&pids, &child);
    let run = tool(
        &servers,
        &[
            "run",
            "--ttl",
            "2s",
            "--wait-group",
            "job",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let running_pids = pids.read();
    let (sh, bg) = (running_pids[0].1, running_pids[1].1);
    // The tool has collected the shell's status (its /proc entry is gone,
    // not a zombie): from here on, only the background child runs.
    let reaped = wait_until(HANG, || !Path::new(&format!("/proc/{sh}")).exists());
    assert!(reaped, "the shell never ended");
    assert!(running(bg));
    // Longer than the TTL: the lock is extended while the child runs.
    let other = output(&mut tool(
        &servers,
        &["run", "--wait", "3s", "job", "--", "true"],
    ));
    assert_eq!(
        code(&other),
        1,
        "another run got the lock while the background child ran: {other:?}"
    );
    std::fs::write(&go, b"").unwrap();
    let out = wait_output(run);
    assert_eq!(code(&out), 0, "{out:?}");
    assert!(!running(bg));
    assert!(free_everywhere(&servers, b"job"));
}

/// `--leave-group`: a command that starts a daemon on purpose; the daemon
/// runs on after the tool released the lock.
#[test]
fn leave_group_lets_the_background_child_run_on() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pids = Pids::new(dir.path(), &["sh", "bg"]);
    let script = background_child_script(&pids, "sleep 123");
    let run = tool(
        &servers,
        &["run", "--leave-group", "job", "--", "sh", "-c", &script],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let running_pids = pids.read();
    let out = wait_output(run);
    assert_eq!(code(&out), 0, "{out:?}");
    assert!(free_everywhere(&servers, b"job"));
    assert!(
        running(running_pids[1].1),
        "the daemon was stopped: {out:?}"
    );
}

/// After a loss the shell ends on SIGTERM at once, but a child that
/// ignores SIGTERM runs on: it too must be gone before another client
/// can hold the lock.
#[test]
fn after_a_loss_a_child_that_ignores_sigterm_is_gone_before_another_client_gets_the_lock() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pids = Pids::new(dir.path(), &["sh", "bg"]);
    let term = dir.path().join("term");
    let script = format!(
        "sh -c \"trap '' TERM; exec sleep 300\" >/dev/null 2>&1 & echo $! > {bg}; \
         trap 'touch {term}; exit 0' TERM; echo $$ > {sh}; while :; do sleep 0.05; done",
        bg = pids.path("bg").display(),
        sh = pids.path("sh").display(),
        term = term.display(),
    );
    let first = tool(
        &servers,
        &["run", "--ttl", "3s", "job", "--", "sh", "-c", &script],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The shell writes its pid once its trap is set.
    let running_pids = pids.read();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    for server in servers.iter() {
        server.pause();
    }
    let stopped = wait_until(HANG, || term.exists());
    for server in servers.iter() {
        server.resume();
    }
    assert!(stopped, "the tool never sent SIGTERM");
    let second = output(&mut tool(
        &servers,
        &[
            "run",
            "--wait",
            "20s",
            "job",
            "--",
            "sh",
            "-c",
            &survivors_check(&running_pids),
        ],
    ));
    let first = wait_output(first);
    assert_eq!(code(&second), 0, "{second:?}");
    assert_eq!(
        stdout(&second).trim(),
        "",
        "still running when the second run got the lock; first: {first:?}"
    );
    assert_eq!(code(&first), 75, "{first:?}");
}
