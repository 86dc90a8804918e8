//! `quorum-lock elect` and `quorum-lock leader` on real servers: the
//! command runs only while the tool leads, with its term; two tools at
//! once take turns with increasing terms; a loss (a majority killed) or
//! `kill -9` of the tool stops the command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Stdio;

use common::{
    HANG, Leftover, code, lines, output, read_pid, running, stderr, stdout, tool, wait_output,
};
use testkit::{RedisServers, TempDir, wait_until};

/// The election `job`'s lock key on the servers (no prefix).
const LOCK_KEY: &[u8] = b"{job}{quorum-lock}:leader";

#[test]
fn the_command_gets_its_term_and_leader_shows_the_value() {
    let servers = RedisServers::start(3);
    let out = output(&mut tool(
        &servers,
        &[
            "elect",
            "job",
            "--value",
            "host-a",
            "--",
            "sh",
            "-c",
            "echo $QUORUM_LOCK_TERM",
        ],
    ));
    assert_eq!(code(&out), 0, "{out:?}");
    let term: u64 = stdout(&out).trim().parse().expect("a term");
    assert!(term > 0);
    let shown = output(&mut tool(&servers, &["leader", "job"]));
    assert_eq!(code(&shown), 0, "{shown:?}");
    assert_eq!(
        stdout(&shown).trim(),
        "job: no leader",
        "resigned at the end"
    );

    let dir = TempDir::new("quorum-lock-cli");
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut leading = tool(
        &servers,
        &[
            "elect",
            "job",
            "--value",
            "host-a:8080",
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
    let shown = output(&mut tool(&servers, &["leader", "job"]));
    let text = stdout(&shown);
    assert!(text.starts_with("job: led by host-a:8080 (term "), "{text}");
    let later: u64 = text["job: led by host-a:8080 (term ".len()..]
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(later > term, "{later} after {term}");
    // Another tool, once: led elsewhere, exit 1 at once.
    let other = output(&mut tool(
        &servers,
        &["elect", "--once", "job", "--value", "host-b", "--", "true"],
    ));
    assert_eq!(code(&other), 1, "{other:?}");
    assert!(stderr(&other).contains("led elsewhere"), "{other:?}");
    leading.kill().unwrap();
    leading.wait().unwrap();
}

#[test]
fn two_tools_at_once_take_turns_with_increasing_terms() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let log = dir.path().join("terms");
    let script = format!(
        "echo $QUORUM_LOCK_TERM >> {log}; sleep 0.5; echo $QUORUM_LOCK_TERM >> {log}",
        log = log.display()
    );
    let [a, b] = ["a", "b"].map(|value| {
        tool(
            &servers,
            &["elect", "job", "--value", value, "--", "sh", "-c", &script],
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    });
    let (a, b) = (wait_output(a), wait_output(b));
    assert_eq!((code(&a), code(&b)), (0, 0), "{a:?} {b:?}");
    // Each leader's two lines together: no overlap, and the second term
    // is higher.
    let terms: Vec<u64> = lines(&log).iter().map(|l| l.parse().unwrap()).collect();
    assert_eq!(terms.len(), 4, "{terms:?}");
    assert_eq!(terms[0], terms[1], "{terms:?}");
    assert_eq!(terms[2], terms[3], "{terms:?}");
    assert!(terms[2] > terms[0], "{terms:?}");
}

#[test]
fn a_loss_stops_the_command_and_once_exits_75() {
    let mut servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (pid_file, term_file) = (dir.path().join("pid"), dir.path().join("term"));
    let script = format!(
        "echo $$ > {pid}; trap 'touch {term}; exit 0' TERM; while :; do sleep 0.05; done",
        pid = pid_file.display(),
        term = term_file.display()
    );
    let leading = tool(
        &servers,
        &[
            "elect", "--once", "--ttl", "2s", "job", "--value", "a", "--", "sh", "-c", &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    assert!(wait_until(HANG, || servers[0].get(LOCK_KEY).is_some()));
    servers[0].kill9();
    servers[1].kill9();
    let out = wait_output(leading);
    assert_eq!(code(&out), 75, "{out:?}");
    assert!(term_file.exists(), "the command got SIGTERM");
    assert!(!running(pid));
    assert!(stderr(&out).contains("leadership lost"), "{out:?}");
}

#[test]
fn the_command_dies_with_the_tool() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut leading = tool(
        &servers,
        &[
            "elect", "--ttl", "2s", "job", "--value", "a", "--", "sh", "-c", &script,
        ],
    )
    .spawn()
    .unwrap();
    let pid = read_pid(&pid_file);
    let _leftover = Leftover::of(pid);
    leading.kill().unwrap();
    leading.wait().unwrap();
    assert!(
        wait_until(HANG, || !running(pid)),
        "the command outlived the tool"
    );
}

/// `leader NAME --json`: one object (value, term, time left; nulls and
/// `"leader":false` when nobody leads), with the exit codes of `leader`
/// without it: 0 with or without a leader, the same code for a name
/// refused and for too few servers, and nothing on stdout then.
#[test]
fn leader_json_shows_value_term_and_time_left_with_the_same_exit_codes() {
    let mut servers = RedisServers::start(3);
    let nobody = output(&mut tool(&servers, &["leader", "--json", "job"]));
    assert_eq!(code(&nobody), 0, "{nobody:?}");
    assert_eq!(
        stdout(&nobody).trim(),
        r#"{"name":"job","leader":false,"value":null,"term":null,"time_left_ms":null}"#
    );

    let dir = TempDir::new("quorum-lock-cli");
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut leading = tool(
        &servers,
        &[
            "elect",
            "--ttl",
            "10s",
            "job",
            "--value",
            "host-a:8080",
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
    let shown = output(&mut tool(&servers, &["leader", "job", "--json"]));
    assert_eq!(code(&shown), 0, "{shown:?}");
    let json = stdout(&shown);
    let json = json.trim();
    let prefix = r#"{"name":"job","leader":true,"value":"host-a:8080","term":"#;
    assert!(json.starts_with(prefix), "{json}");
    let (term, rest) = json[prefix.len()..].split_once(',').unwrap();
    assert!(term.parse::<u64>().unwrap() > 0, "{json}");
    let left: u64 = rest
        .strip_prefix(r#""time_left_ms":"#)
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or_else(|| panic!("{json}"))
        .parse()
        .unwrap();
    assert!(left > 0 && left <= 10_000, "{json}");
    let text = output(&mut tool(&servers, &["leader", "job"]));
    assert!(
        stdout(&text).contains(&format!("(term {term},")),
        "{text:?} vs {json}"
    );
    leading.kill().unwrap();
    leading.wait().unwrap();

    // Errors: the same code with and without --json, and no JSON.
    let refused = |args: &[&str], servers: &RedisServers| {
        let plain = output(&mut tool(servers, args));
        let json = output(&mut tool(servers, &[args, &["--json"]].concat()));
        assert_ne!(code(&plain), 0, "{plain:?}");
        assert_eq!(code(&plain), code(&json), "{plain:?} vs {json:?}");
        assert_eq!(stdout(&json), "", "{json:?}");
        assert!(!stderr(&json).is_empty(), "{json:?}");
    };
    refused(&["leader", "{quorum-lock}"], &servers);
    servers[0].kill9();
    servers[1].kill9();
    refused(&["leader", "job"], &servers);
}
