//! `quorum-lock break NAME`: an operator breaks a stuck lock during an
//! incident, after seeing what it breaks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{
    BIN, HANG, code, free_everywhere, held_everywhere, output, stderr, stdout, tool, wait_output,
};
use testkit::{RedisServers, TempDir, wait_until};

/// The fence a command wrote to `file`, waiting for it.
fn read_fence(file: &Path) -> u64 {
    let mut fence = None;
    let found = wait_until(HANG, || {
        fence = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        fence.is_some()
    });
    assert!(found, "no fence in {}", file.display());
    fence.unwrap()
}

/// A holder that is still alive (its tool extends the lock) is broken:
/// the next holder gets the lock at once with a fence above the first
/// one's (the counters are left alone), and the first holder only learns
/// of it at its next extend, when its command is stopped (exit 75).
#[test]
fn a_broken_lock_goes_to_the_next_holder_with_a_higher_fence() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let fence_file = dir.path().join("fence");
    let script = format!(
        "echo $QUORUM_LOCK_FENCE > {}; exec sleep 60",
        fence_file.display()
    );
    let first = tool(
        &servers,
        &[
            "run",
            "--fencing",
            "--ttl",
            "6s",
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
    let first_fence = read_fence(&fence_file);
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));

    let broken = output(&mut tool(&servers, &["break", "--force", "job"]));
    assert_eq!(code(&broken), 0, "{broken:?}");
    let text = stdout(&broken);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for url in servers.urls() {
        assert!(
            text.contains(&format!("{url}: held by {}:", host.trim())),
            "one line per node, with the owner: {text}"
        );
        assert!(text.contains("expires in "), "and the time left: {text}");
        assert!(text.contains(&format!("{url}: deleted")), "{text}");
    }
    assert!(text.contains("is not told"), "the danger is said: {text}");
    assert!(free_everywhere(&servers, b"job"));

    let second = output(&mut tool(
        &servers,
        &[
            "run",
            "--fencing",
            "job",
            "--",
            "sh",
            "-c",
            "echo $QUORUM_LOCK_FENCE",
        ],
    ));
    assert_eq!(code(&second), 0, "the next holder gets it: {second:?}");
    let second_fence: u64 = stdout(&second).trim().parse().unwrap();
    assert!(
        second_fence > first_fence,
        "fences keep increasing after a break: {first_fence} then {second_fence}"
    );

    let first = wait_output(first);
    assert_eq!(code(&first), 75, "{first:?}");
    let said = String::from_utf8_lossy(&first.stderr);
    assert_eq!(said.matches("lock lost").count(), 1, "{said}");
}

/// Without a terminal to ask on, `break` refuses (a usage error) before
/// touching anything, unless `--force`.
#[test]
fn without_a_terminal_or_force_break_refuses_and_the_lock_stays() {
    let servers = RedisServers::start(3);
    let nodes = servers.urls().join(",");
    // The command, which holds the lock, tries to break it with stdin not
    // a terminal (the tool's stdin is /dev/null), then looks.
    let inner = format!(
        "{BIN} --nodes {nodes} break job; echo \"break exited $?\"; {BIN} --nodes {nodes} status job"
    );
    let out = output(&mut tool(
        &servers,
        &["run", "job", "--", "sh", "-c", &inner],
    ));
    assert_eq!(code(&out), 0, "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("break exited 64"), "{out:?}");
    assert!(text.contains("job: held by"), "not broken: {out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("no terminal to ask on") && said.contains("--force"),
        "{said}"
    );
}

/// On a terminal `break` asks, and only a yes breaks. (`script` runs it
/// on a pseudo-terminal; the answer is typed ahead.) The key here was set
/// by some other program without expiry: it never goes by itself.
#[test]
fn on_a_terminal_break_asks_and_only_yes_breaks() {
    let servers = RedisServers::start(3);
    for server in servers.iter() {
        server.set(b"job", b"stuck-by-someone-else");
    }
    // A node timeout of 2 s, not the default 100 ms: the test is about
    // the question, and on a loaded machine (ci-23) a 100 ms read of two
    // of the three keys timed out, and it asked about one node.
    let command = format!(
        "{BIN} --nodes {} --node-timeout 2s break job",
        servers.urls().join(",")
    );
    let answer = |typed: &str| {
        let mut script = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        script
            .stdin
            .take()
            .unwrap()
            .write_all(typed.as_bytes())
            .unwrap();
        wait_output(script)
    };
    let no = answer("n\n");
    assert_eq!(code(&no), 1, "{no:?}");
    let text = stdout(&no);
    assert!(
        text.contains("held by a client without an owner label, without expiry"),
        "{text}"
    );
    assert!(text.contains("break job on 3 nodes? [y/N]"), "{text}");
    assert!(text.contains("not broken"), "{text}");
    assert!(held_everywhere(&servers, b"job"));

    let yes = answer("y\n");
    assert_eq!(code(&yes), 0, "{yes:?}");
    assert!(stdout(&yes).contains(": deleted"), "{yes:?}");
    assert!(free_everywhere(&servers, b"job"));
}
