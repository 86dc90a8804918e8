//! The examples of cli/README.md run as written: the CI recipe, and the
//! `ExecStart=` line of the systemd unit. Each is read from the file
//! itself, so the manual cannot drift from what works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, HANG, code, lines, output, stderr, stdout, wait_output};
use testkit::{RedisServers, TempDir, wait_until};

fn manual() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The first ```` ```lang ```` block after the line `heading`.
fn block(doc: &str, heading: &str, lang: &str) -> String {
    let at = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no heading {heading:?} in cli/README.md"));
    let fence = format!("```{lang}\n");
    let start = at + doc[at..].find(&fence).unwrap() + fence.len();
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_owned()
}

/// A directory to put first in `PATH`: `quorum-lock` (the binary under
/// test) and an executable stand-in `job` with the shell `body`.
fn bin_dir(dir: &Path, job: &str, body: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    symlink(BIN, bin.join("quorum-lock")).unwrap();
    executable(&bin.join(job), body);
    bin
}

fn executable(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `bin` first.
fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The CI recipe, run by a shell as a CI runner does, against servers
/// started a moment before (as CI service containers are): it rides out
/// their short quarantine, prints nothing, exits 0, and two pipelines at
/// once take turns.
#[test]
fn the_ci_recipe_prints_nothing_on_success_and_one_deploy_runs_at_a_time() {
    let recipe = block(&manual(), "## In CI", "sh");
    let commands: Vec<&str> = recipe
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 1, "one command: {recipe}");
    let line = commands[0];
    assert!(line.contains("./ci/deploy-staging.sh"), "{line}");

    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let log = dir.path().join("deploys");
    // Silent, as a deploy that went well; it notes when it starts and ends.
    let work = dir.path().join("work");
    executable(
        &work.join("ci/deploy-staging.sh"),
        &format!(
            "echo start >> {log}; sleep 1; echo end >> {log}",
            log = log.display()
        ),
    );
    let bin = bin_dir(dir.path(), "unused", "exit 1");
    let pipeline = || {
        Command::new("sh")
            .args(["-c", line])
            .current_dir(&work)
            .env("PATH", path_with(&bin))
            .env("QUORUM_LOCK_NODES", servers.urls().join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (pipeline(), pipeline());
    for out in [wait_output(a), wait_output(b)] {
        assert_eq!(code(&out), 0, "{out:?}");
        assert_eq!(stdout(&out), "", "nothing on stdout: {out:?}");
        assert_eq!(stderr(&out), "", "nothing on stderr: {out:?}");
    }
    assert_eq!(
        lines(&log),
        ["start", "end", "start", "end"],
        "both deployed, one after the other"
    );
}

/// The unit's `ExecStart=` line as a plain command (systemd splits it at
/// whitespace; the line has no quotes, variables or specifiers), with
/// `QUORUM_LOCK_NODES` from the harness instead of the unit's
/// `Environment=`. The unit does not switch restart quarantine off, so the
/// servers first serve longer than `--max-ttl`, as long-lived servers do.
#[test]
fn the_systemd_units_exec_start_runs_as_written() {
    let unit = block(&manual(), "## Under systemd", "ini");
    assert!(unit.contains("\n[Service]\n"), "{unit}");
    assert!(
        unit.lines()
            .any(|l| l.starts_with("Environment=QUORUM_LOCK_NODES=")),
        "{unit}"
    );
    assert!(unit.lines().any(|l| l == "KillMode=mixed"), "{unit}");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("no ExecStart= in {unit}"));
    assert!(
        !exec.contains(['"', '\'', '$', '%', '\\', ';']),
        "a plain line: {exec}"
    );
    let argv: Vec<&str> = exec.split_whitespace().collect();
    let job = *argv.last().unwrap();

    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let log = dir.path().join("runs");
    let bin = bin_dir(
        dir.path(),
        job,
        &format!(
            "echo start >> {log}; sleep 2; echo end >> {log}",
            log = log.display()
        ),
    );
    // The tool where the manual's install puts it, under a temporary
    // directory standing in for the install root.
    let installed = argv[0]
        .strip_prefix("/usr/local/bin/")
        .unwrap_or_else(|| panic!("the tool by its installed path: {exec}"));
    let program = dir.path().join("usr/local/bin").join(installed);
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    symlink(BIN, &program).unwrap();
    let nodes = servers.urls().join(",");
    let voting = || {
        let doctor = output(Command::new(BIN).args(["--nodes", &nodes, "doctor"]));
        stdout(&doctor).contains("3 of 3 nodes can vote now")
    };
    assert!(
        wait_until(Duration::from_secs(150), voting),
        "the servers' quarantine never ended"
    );
    let unit_run = || {
        Command::new(&program)
            .args(&argv[1..])
            .env("PATH", path_with(&bin))
            .env("QUORUM_LOCK_NODES", &nodes)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = unit_run();
    assert!(wait_until(HANG, || lines(&log) == ["start"]));
    // Another machine's timer fires meanwhile: it succeeds without running.
    let second = wait_output(unit_run());
    assert_eq!(
        code(&second),
        0,
        "-E 0: held elsewhere is a success: {second:?}"
    );
    let first = wait_output(first);
    assert_eq!(code(&first), 0, "{first:?}");
    assert_eq!(lines(&log), ["start", "end"], "the job ran once");
}

/// The pids whose parent is `pid` (from `/proc/*/stat`).
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, not ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// The cron line of "Once per period", run as cron runs it: its command
/// (the line less the five schedule fields) by `/bin/sh -c` in cron's
/// environment (`env -i PATH=/usr/bin:/bin`, as Debian's cron gives
/// jobs). The binary is where the manual's install puts it, under a
/// temporary directory standing in for the install root (`/usr/local`),
/// and the nodes are the harness' servers instead of 10.0.0.x; the rest
/// is the manual's line. The job runs, and the tool stays in the
/// foreground for the hold (SIGTERM then ends it, quietly under `-q`,
/// with the job's status).
#[test]
fn the_cron_line_runs_as_written_under_crons_environment() {
    let doc = manual();
    let root = "/usr/local";
    let cron = block(&doc, "## Once per period: `--min-hold`", "cron");
    let entries: Vec<&str> = cron.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(entries.len(), 1, "one cron line: {cron}");
    let command = entries[0]
        .split_whitespace()
        .skip(5)
        .collect::<Vec<_>>()
        .join(" ");
    let nodes = "redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379";
    assert!(command.contains(nodes), "{command}");

    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let stand_in = format!("{}{root}", dir.path().display());
    let bin = PathBuf::from(format!("{stand_in}/bin"));
    std::fs::create_dir_all(&bin).unwrap();
    symlink(BIN, bin.join("quorum-lock")).unwrap();
    let log = dir.path().join("runs");
    executable(
        &bin.join("sync-invoices"),
        &format!("echo \"ran with PATH=$PATH\" >> {}", log.display()),
    );
    let command = command
        .replace(nodes, &servers.urls().join(","))
        .replace(&format!("{root}/bin/"), &format!("{stand_in}/bin/"));
    // The unit does not switch restart quarantine off, and neither does
    // the cron line: the servers first serve longer than --max-ttl.
    let urls = servers.urls().join(",");
    let voting = || {
        let doctor = output(Command::new(BIN).args(["--nodes", &urls, "doctor"]));
        stdout(&doctor).contains("3 of 3 nodes can vote now")
    };
    assert!(
        wait_until(Duration::from_secs(150), voting),
        "the servers' quarantine never ended"
    );
    let shell = Command::new("/bin/sh")
        .args(["-c", &command])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("SHELL", "/bin/sh")
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sh = shell.id();
    let _leftover = common::Leftover::of(sh);
    // Until the job ran, or the shell ended (`quorum-lock: not found`).
    wait_until(HANG, || !lines(&log).is_empty() || !common::running(sh));
    if lines(&log).is_empty() {
        let out = wait_output(shell);
        panic!("the job did not run: {out:?}\n  {command}");
    }
    assert_eq!(lines(&log), ["ran with PATH=/usr/bin:/bin"]);
    // Held for --min-hold 9m: the tool is still in the foreground.
    let tool = children(sh);
    let _tools: Vec<common::Leftover> = tool.iter().map(|&pid| common::Leftover::of(pid)).collect();
    assert_eq!(tool.len(), 1, "the tool under sh: {tool:?}");
    common::send("TERM", &tool[0].to_string());
    let out = wait_output(shell);
    assert_eq!(code(&out), 0, "the job's status: {out:?}");
    assert_eq!(stderr(&out), "", "-q: {out:?}");
    // Where the manual's install puts it: the root stood in for above.
    let install = format!("cargo install --locked --root {root} quorum-lock-cli");
    assert!(
        doc.contains(&install),
        "the manual installs with `{install}`"
    );
}
