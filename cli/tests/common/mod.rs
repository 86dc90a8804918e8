//! What every test of the `quorum-lock` binary shares: running the tool
//! against the harness' servers, waiting for it with a bound, and looking
//! at the processes it started.
#![allow(dead_code)] // each test file uses part of this

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use testkit::{RedisServer, RedisServers, wait_until};

pub const BIN: &str = env!("CARGO_BIN_EXE_quorum-lock");
/// Generous bound for something that must happen by itself (a hang
/// detector, not a timing assertion).
pub const HANG: Duration = Duration::from_secs(30);

/// The tool with `--nodes` set and quarantine off (the servers were just
/// started), plus `args`.
pub fn tool(servers: &RedisServers, args: &[&str]) -> Command {
    tool_on(&servers.urls(), args)
}

/// The tool on these node URLs, quarantine off, plus `args`.
pub fn tool_on(urls: &[String], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--nodes")
        .arg(urls.join(","))
        .arg("--no-restart-quarantine")
        .args(args)
        .stdin(Stdio::null());
    cmd
}

pub fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits for `child` at most [`HANG`]; kills it and fails if it hangs.
/// The exit code, or -1 when a signal ended it.
pub fn wait_for(child: Child) -> i32 {
    code(&wait_output(child))
}

/// [`wait_for`], keeping what the child printed (when piped).
pub fn wait_output(mut child: Child) -> Output {
    let end = Instant::now() + HANG;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("the tool did not exit within {HANG:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn held_everywhere(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().all(|s| s.get(key).is_some())
}

pub fn free_everywhere(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().all(|s| s.get(key).is_none())
}

/// The pid a command wrote to `file` (`echo $$ > file`), waiting for it.
pub fn read_pid(file: &Path) -> u32 {
    let mut pid = None;
    let found = wait_until(HANG, || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    });
    assert!(found, "no pid in {}", file.display());
    pid.unwrap()
}

/// Whether process `pid` still runs (a zombie has ended: it only waits
/// for its parent, or init, to collect its status).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

/// A shell command that prints one line per pid of `pids` that still
/// runs, nothing when they are all gone: the pid, then its
/// `/proc/<pid>/stat` and command line, so that a failure tells a real
/// survivor (its process group, its command) from a pid the kernel gave
/// to another process. For a second `run` to execute once it has the lock.
///
/// Each pid's state comes from one read of its `stat`: a killed process
/// whose parent died stays a zombie until init collects it (here, up to
/// two seconds later, in a sweep), and a check in two steps (the file
/// exists, then its state) saw a zombie collected in between as running.
pub fn still_running_check(pids: &[u32]) -> String {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    format!(
        "for p in {}; do st=$(cat /proc/$p/stat 2>/dev/null); case \"$st\" in \
         '' | *') Z '* | *') X '*) ;; \
         *) echo \"$p stat: $st cmdline: $(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)\" ;; \
         esac; done",
        list.join(" ")
    )
}

/// When process `pid` started (field 22 of `/proc/PID/stat`, in clock
/// ticks since boot): with the pid, it names one process, where the pid
/// alone may name another once the first was collected (`pid_max` is 32768
/// on many machines, and a busy run wraps it within minutes).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    after_name.split(' ').nth(19)?.parse().ok()
}

/// Sends `signal` (`TERM`, `INT`, ...) to `target` with kill(1): a pid,
/// or `-PGID` for a whole process group.
pub fn send(signal: &str, target: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(target)
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} -- {target}");
}

/// The lines of `file` (none when it does not exist yet).
pub fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Kills process `pid` on drop if it still runs: a failing test (a panic)
/// leaves no command behind. Only that process: by the time the guard
/// drops, the pid may belong to another (a server of a test running
/// beside this one, once the kernel wrapped around its pids), so the
/// process must still have the start time it had when the guard was made.
pub struct Leftover {
    pid: u32,
    started: Option<u64>,
}

impl Leftover {
    /// A guard for `pid`, the process that has it now.
    pub fn of(pid: u32) -> Self {
        Self {
            pid,
            started: start_time(pid),
        }
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        let same = self.started.is_some() && start_time(self.pid) == self.started;
        if same && running(self.pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}

// The ACL users of docs/operations.md, made on the harness' servers.

/// The documentation the line is read from (compiled in, so an edit of
/// the docs rebuilds the test).
pub const OPERATIONS: &str = include_str!("../../../docs/operations.md");
const PLACEHOLDER: &str = ">CHANGE-ME";
pub const PASSWORD: &str = "acl-test-pw";

/// The one `ACL SETUSER` line between the `<name>` markers.
pub fn acl_line(name: &str) -> &'static str {
    let start = OPERATIONS.find(&format!("<!-- {name}: begin")).unwrap();
    let end = start
        + OPERATIONS[start..]
            .find(&format!("<!-- {name}: end -->"))
            .unwrap();
    let lines: Vec<&str> = OPERATIONS[start..end]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines[0]
}

/// The documented user.
pub fn documented_line() -> &'static str {
    acl_line("acl-user")
}

/// The documented user denied `@scripting` (for Valkey 9.1).
pub fn no_scripts_line() -> &'static str {
    acl_line("acl-user-no-scripts")
}

/// Creates the user of `line` (its password replaced) on `server`, with
/// the rights in `without` left out; its URL.
pub fn user_url(server: &RedisServer, line: &str, without: &[&str]) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let user = words[2];
    let password = format!(">{PASSWORD}");
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        if without.contains(word) {
            continue;
        }
        cmd.arg(if *word == PLACEHOLDER {
            password.as_str()
        } else {
            *word
        });
    }
    let _: () = cmd.query(&mut server.conn()).unwrap();
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", server.port())
}

/// `run` holds `job` through the node at `urls` (a command that sleeps),
/// `status` shows it held, `get` (the key as the server that serves it
/// has it) finds it, and `break --force` releases it there; the run is
/// then stopped. For the nodes made of several servers (a cluster, a
/// Sentinel node), whose every command goes where the key lives.
pub fn run_status_break(urls: &[String], get: impl Fn(&[u8]) -> Option<Vec<u8>>) {
    let holder = tool_on(urls, &["run", "job", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let held = || code(&output(&mut tool_on(urls, &["status", "job"]))) == 0;
    assert!(wait_until(HANG, held), "the lock was never held");
    let text = stdout(&output(&mut tool_on(urls, &["status", "job"])));
    assert!(text.contains("job: held by "), "{text}");
    assert!(get(b"job").is_some(), "held where the key lives");
    let broken = output(&mut tool_on(urls, &["break", "--force", "job"]));
    assert_eq!(code(&broken), 0, "{broken:?}");
    assert_eq!(get(b"job"), None, "broken where the key lives");
    // The run stops its command: its lock is gone, or on SIGTERM (it
    // may have exited already, so the signal's outcome does not matter).
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(holder.id().to_string())
        .status();
    let _ = wait_for(holder);
}
