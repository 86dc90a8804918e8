//! Signals: a signal reaches the command exactly once, whether it was sent
//! to the tool's process group or to the tool alone; a command that ignores
//! SIGTERM is killed after `--kill-after`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;

use common::{
    HANG, Leftover, free_everywhere, held_everywhere, lines, read_pid, send, tool, wait_for,
};
use testkit::{RedisServers, TempDir, wait_until};

/// A command that writes its pid, notes every SIGINT it gets in `log`,
/// and exits 3 on SIGTERM (after noting it too). Perl (essential on
/// Debian) rather than sh: its handler runs as soon as a signal arrives,
/// where sh runs traps only after the current `sleep`, so two SIGINTs
/// within one sleep would count once.
fn counting_command(pid: &Path, log: &Path) -> Vec<String> {
    let script = format!(
        "sub note {{ open my $f, '>>', '{log}' or die; print $f \"$_[0]\\n\"; close $f }} \
         $SIG{{INT}} = sub {{ note('int') }}; $SIG{{TERM}} = sub {{ note('term'); exit 3 }}; \
         open my $p, '>', '{pid}' or die; print $p $$; close $p; sleep 1 while 1;",
        pid = pid.display(),
        log = log.display()
    );
    vec!["perl".to_owned(), "-e".to_owned(), script]
}

/// Sends SIGINT to `target`, then, once the command noted it, SIGTERM to
/// the tool alone; returns what the command noted. The tool handles the
/// signals it caught in order, so a second SIGINT would reach the command
/// before the SIGTERM that ends it.
fn interrupt(target: &str, group_of_tool: bool) -> Vec<String> {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (pid_file, log) = (dir.path().join("pid"), dir.path().join("log"));
    let command = counting_command(&pid_file, &log);
    let mut args = vec!["run", "job", "--"];
    args.extend(command.iter().map(String::as_str));
    let mut cmd = tool(&servers, &args);
    if group_of_tool {
        // As a shell puts a job in its own process group, which the
        // terminal's Ctrl-C (or `kill -INT -PGID`) signals as a whole.
        cmd.process_group(0);
    }
    let child = cmd.spawn().unwrap();
    let tool_pid = child.id();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    // The mechanism: the command is not in the group a terminal's Ctrl-C
    // (or `kill -INT -PGID`) signals, so only the tool's copy reaches it.
    assert_ne!(process_group(pid), process_group(tool_pid), "one group");
    let target = target.replace("TOOL", &tool_pid.to_string());
    send("INT", &target);
    let noted = wait_until(HANG, || !lines(&log).is_empty());
    send("TERM", &tool_pid.to_string());
    let status = wait_for(child);
    assert!(noted, "the command never got SIGINT");
    assert_eq!(status, 3, "the command's TERM trap ran: {:?}", lines(&log));
    assert!(free_everywhere(&servers, b"job"));
    lines(&log)
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`).
fn process_group(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(2).unwrap().parse().unwrap()
}

#[test]
fn sigint_to_the_process_group_reaches_the_command_once() {
    assert_eq!(interrupt("-TOOL", true), ["int", "term"]);
}

#[test]
fn sigint_to_the_tool_alone_is_forwarded_once() {
    assert_eq!(interrupt("TOOL", false), ["int", "term"]);
}

/// After a forwarded SIGTERM, a command that ignores it is killed after
/// `--kill-after`, and the tool reports that it died of SIGKILL.
#[test]
fn a_command_that_ignores_sigterm_is_killed_after_kill_after() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pid_file = dir.path().join("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let child = tool(
        &servers,
        &[
            "run",
            "--kill-after",
            "1s",
            "job",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    send("TERM", &child.id().to_string());
    let status = wait_for(child);
    assert_eq!(status, 128 + 9, "killed by SIGKILL after --kill-after");
    assert!(free_everywhere(&servers, b"job"));
}

/// Regression: a signal that arrives while the tool is still waiting for
/// the lock ends the wait at once (not after `--wait`), the command never
/// starts, nothing the tool's attempts took is left behind, and the tool
/// exits 128+N. Before, the handlers were installed only once the lock was
/// taken: the signal killed the tool mid-wait.
#[test]
fn a_signal_while_waiting_for_the_lock_ends_the_wait_at_once() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let ran = dir.path().join("ran");
    for server in servers.iter() {
        let _: () = server.cmd(
            redis::cmd("SET")
                .arg("job")
                .arg("other")
                .arg("PX")
                .arg(60_000),
        );
    }
    let script = format!("touch {}", ran.display());
    let child = tool(
        &servers,
        &["run", "--wait", "60s", "job", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    // The tool is waiting once it has tried: a second SET (after the one
    // above) reached a server.
    let tried = |s: &testkit::RedisServer| {
        let stats: String = s.cmd(redis::cmd("INFO").arg("commandstats"));
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .is_some_and(|calls| calls >= 2)
    };
    assert!(
        wait_until(HANG, || servers.iter().any(tried)),
        "never tried"
    );
    let sent = std::time::Instant::now();
    send("TERM", &child.id().to_string());
    let status = wait_for(child);
    let took = sent.elapsed();
    assert_eq!(status, 128 + 15, "ended by SIGTERM while waiting");
    assert!(
        took < std::time::Duration::from_secs(10),
        "the wait went on for {took:?} after the signal (--wait 60s)"
    );
    assert!(!ran.exists(), "the command ran without the lock");
    for server in servers.iter() {
        assert_eq!(server.get(b"job").as_deref(), Some(&b"other"[..]));
    }
}
