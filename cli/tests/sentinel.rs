//! The tool on a Sentinel node (`redis+sentinel://`): `run` locks
//! through the master the sentinels name, `status` shows the holder
//! there, `break --force` releases it there, and `doctor` checks that
//! master without failing; when the sentinels name no master, `doctor`
//! fails that node with what they said and checks the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use common::{code, output, stdout, tool_on};
use testkit::{RedisServer, SentinelSet};

#[test]
fn run_status_break_and_doctor_work_through_a_sentinel_node() {
    let set = SentinelSet::start();
    let urls = [set.url()];
    let doctor = output(&mut tool_on(&urls, &["doctor"]));
    let text = stdout(&doctor);
    assert!(!text.contains("verdict: fail"), "{text}");
    assert_ne!(code(&doctor), 3, "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", set.master().port())),
        "doctor names the master the sentinels name: {text} {}",
        common::stderr(&doctor)
    );
    common::run_status_break(&urls, |key| set.master().get(key));
}

/// The verdict line of the node named `name` in `doctor`'s output.
fn verdict_of<'a>(text: &'a str, name: &str) -> &'a str {
    let mut lines = text.lines().skip_while(|line| *line != name);
    assert!(lines.next().is_some(), "no block for {name}: {text}");
    lines
        .find(|line| line.starts_with("  verdict: "))
        .unwrap_or_else(|| panic!("no verdict for {name}: {text}"))
}

/// Two of the three sentinels down: no majority names a master, so the
/// Sentinel node fails, its verdict naming the node and what the one
/// sentinel left said; the plain nodes after it are checked all the
/// same, and the exit code is the usual one (1: a quorum of nodes can
/// still vote; 3 for the Sentinel node alone). Its password is never
/// shown.
#[test]
fn doctor_fails_a_sentinel_node_without_a_majority_and_checks_the_others() {
    let mut set = SentinelSet::start();
    set.kill_sentinel(1);
    set.kill_sentinel(2);
    let servers = [RedisServer::start(), RedisServer::start()];
    let mut urls = vec![set.url()];
    urls.extend(servers.iter().map(RedisServer::url));
    let doctor = output(&mut tool_on(&urls, &["doctor"]));
    let text = stdout(&doctor);
    let verdict = verdict_of(&text, &set.url());
    let alive = set.sentinel_ports()[0];
    let master = set.master().port();
    for said in [
        "verdict: fail: ".to_owned(),
        set.url(),
        "no majority of the 3 sentinels".to_owned(),
        "1 of them answered (".to_owned(),
        format!("127.0.0.1:{alive}"),
        format!("names 127.0.0.1:{master})"),
        "2 did not".to_owned(),
    ] {
        assert!(
            verdict.contains(&said),
            "{said:?} not in {verdict:?}: {text}"
        );
    }
    for server in &servers {
        let verdict = verdict_of(&text, &server.url());
        assert!(!verdict.contains("fail"), "{text}");
    }
    assert!(
        text.contains("2 of 3 nodes can vote now (0 in quarantine), 2 needed: locks work"),
        "{text}"
    );
    assert_eq!(code(&doctor), 1, "{text} {}", common::stderr(&doctor));
    // Alone, with the data nodes' password in the URL (never used: no
    // master is found): no quorum, and the password is not shown.
    let secret = set.url().replacen("://", "://:hunter2@", 1);
    let alone = output(&mut tool_on(&[secret], &["doctor"]));
    let (text, errors) = (stdout(&alone), common::stderr(&alone));
    let redacted = set.url().replacen("://", "://:***@", 1);
    let verdict = verdict_of(&text, &redacted);
    assert!(verdict.contains("fail: "), "{text}");
    assert!(verdict.contains(&redacted), "{text}");
    assert!(
        !text.contains("hunter2") && !errors.contains("hunter2"),
        "{text} {errors}"
    );
    assert_eq!(code(&alone), 3, "{text} {errors}");
}
