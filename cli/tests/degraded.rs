//! A degraded cluster is not silent: `run` names the nodes it went ahead
//! without, `-q` silences that, `doctor` catches one server under two
//! names, and both word a failure the same way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    BIN, HANG, code, documented_line, output, stderr, stdout, tool_on, user_url, wait_output,
};
use testkit::{RedisServer, RedisServers, TempDir, wait_until};

#[test]
fn a_run_without_a_node_names_it_unless_quiet() {
    let mut servers = RedisServers::start(3);
    servers[2].kill9();
    let urls = servers.urls();
    let run = output(&mut tool_on(&urls, &["run", "job", "--", "true"]));
    assert_eq!(code(&run), 0, "{run:?}");
    let text = stderr(&run);
    assert!(
        text.contains(&urls[2]) && text.contains("unreachable"),
        "{text}"
    );
    assert!(
        !text.contains(&urls[0]),
        "only the missing node is named: {text}"
    );
    let quiet = output(&mut tool_on(&urls, &["run", "-q", "job", "--", "true"]));
    assert_eq!(code(&quiet), 0, "{quiet:?}");
    assert_eq!(stderr(&quiet), "", "-q is quiet");
}

#[test]
fn a_wrong_password_is_worded_the_same_by_run_and_doctor() {
    let servers = RedisServers::start(2);
    let guarded = RedisServer::start_with(&["--requirepass", "right-secret"]);
    let wrong = format!("redis://:wrong-secret@127.0.0.1:{}/0", guarded.port());
    let mut urls = servers.urls();
    urls.push(wrong);
    let run = output(&mut tool_on(&urls, &["run", "job", "--", "true"]));
    assert_eq!(code(&run), 0, "{run:?}");
    let run_text = stderr(&run);
    assert!(run_text.contains("authentication failed"), "{run_text}");
    let doctor =
        output(Command::new(BIN).args(["--nodes", &urls.join(","), "--max-ttl", "1s", "doctor"]));
    let doctor_text = stdout(&doctor);
    assert!(
        doctor_text.contains("verdict: fail: authentication failed"),
        "{doctor_text}"
    );
    for text in [&run_text, &doctor_text] {
        assert!(
            !text.contains("wrong-secret") && !text.contains("right-secret"),
            "{text}"
        );
    }
}

#[test]
fn one_server_under_two_names_is_caught_by_run_and_doctor() {
    let servers = RedisServers::start(2);
    let alias = format!("redis://localhost:{}/0", servers[0].port());
    let mut urls = servers.urls();
    urls.push(alias.clone());
    let run = output(&mut tool_on(&urls, &["run", "job", "--", "true"]));
    assert_eq!(code(&run), 0, "{run:?}");
    assert!(stderr(&run).contains("same server"), "{run:?}");
    let doctor = output(Command::new(BIN).args([
        "--nodes",
        &urls.join(","),
        "--no-restart-quarantine",
        "doctor",
    ]));
    let text = stdout(&doctor);
    assert!(text.contains("same server as"), "{text}");
    assert_ne!(code(&doctor), 0, "{text}");
}

/// Calls of the scripts (`EVAL`, `EVALSHA`) `server` has run so far
/// (`INFO commandstats`): on Redis 7 every extend and release is one.
fn script_calls(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(redis::cmd("INFO").arg("commandstats"));
    stats
        .lines()
        .filter(|l| {
            l.starts_with("cmdstat_eval:")
                || l.starts_with("cmdstat_evalsha:")
                // An extend without a script (`SET .. IFEQ .. PX`, Valkey
                // 8.1 and later) is a `SET`.
                || l.starts_with("cmdstat_set:")
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A node that grants acquires but refuses every extend and release (an
/// ACL user with `SET` and `GET` but no scripts, on a server whose
/// extend and release are scripts): the lock rests on the other nodes,
/// and `run` says so once for the extends and once for the release,
/// naming the node and the server's reason, never the password or the
/// token.
#[test]
fn a_node_that_refuses_extends_and_releases_is_named_once_each() {
    let servers = RedisServers::start(3);
    let can = {
        let node =
            quorum_lock::RedisBackend::open(&servers[2].url(), Duration::from_secs(2)).unwrap();
        node.fetch_server_info()
            .unwrap()
            .version
            .unwrap()
            .without_scripts()
    };
    let urls: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, server)| {
            let without: &[&str] = if i == 2 {
                &["+eval", "+evalsha", "+script|load"]
            } else {
                &[]
            };
            user_url(server, documented_line(), without)
        })
        .collect();
    let dir = TempDir::new("quorum-lock-cli");
    let done = dir.path().join("done");
    // Runs until the test says so (bounded: 30 s at most).
    let body = format!(
        "i=0; while [ ! -f {done} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        done = done.display()
    );
    let child = tool_on(
        &urls,
        &[
            "--prefix", "locks:", "run", "--ttl", "1500ms", "job", "--", "sh", "-c", &body,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let token = {
        let mut token = None;
        assert!(wait_until(HANG, || {
            token = servers[0].get(b"locks:job");
            token.is_some()
        }));
        token.unwrap()
    };
    // Three extends at least (one every 500 ms), each refused by the
    // third node.
    let before = script_calls(&servers[0]);
    assert!(
        wait_until(HANG, || script_calls(&servers[0]) >= before + 3),
        "no extends"
    );
    std::fs::write(&done, "").unwrap();
    let out = wait_output(child);
    assert_eq!(code(&out), 0, "{out:?}");
    let text = stderr(&out);
    let port = format!(":{}/", servers[2].port());
    let named: Vec<&str> = text.lines().filter(|l| l.contains(&port)).collect();
    if can.extend && can.release {
        // The server does both without a script: nothing to say.
        assert!(named.is_empty(), "{text}");
        return;
    }
    // The tool's own lines (the library's warning that the node refuses
    // what locks need may come too, once, naming both).
    let extends: Vec<&&str> = named
        .iter()
        .filter(|l| l.contains("failed an extend"))
        .collect();
    let releases: Vec<&&str> = named
        .iter()
        .filter(|l| l.contains("release failed"))
        .collect();
    // A server that extends without a script (Valkey 8.1: `SET .. IFEQ`)
    // refuses only the release.
    let said = |fails: bool| usize::from(fails);
    assert_eq!(
        extends.len(),
        said(!can.extend),
        "the extends' failure said once: {text}"
    );
    assert_eq!(
        releases.len(),
        said(!can.release),
        "the release's failure said once: {text}"
    );
    for line in extends.iter().chain(&releases) {
        assert!(line.contains("NOPERM"), "the reason: {text}");
    }
    for (i, server) in servers.iter().enumerate() {
        if i != 2 {
            assert!(
                !text.contains(&format!(":{}/", server.port())),
                "only the failing node is named: {text}"
            );
        }
    }
    let token = String::from_utf8_lossy(&token).into_owned();
    assert!(!text.contains(&token), "no token: {text}");
    assert!(!text.contains(common::PASSWORD), "no password: {text}");
}
