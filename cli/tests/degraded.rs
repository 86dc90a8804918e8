//! A degraded cluster is not silent: `run` names the nodes it went ahead
//! without, `-q` silences that, `doctor` catches one server under two
//! names, and both word a failure the same way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Command;

use common::{BIN, code, output, stderr, stdout, tool_on};
use testkit::{RedisServer, RedisServers};

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
