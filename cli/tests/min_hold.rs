//! `run --min-hold`: once per period, not only one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{HANG, code, held_everywhere, lines, output, stderr, tool, wait_output};
use testkit::{RedisServers, TempDir, wait_until};

/// Cron on two machines, B a little after A, and a job shorter than the
/// skew: without `--min-hold` both run it; with it, B finds it held
/// while A stays in the foreground for the hold.
#[test]
fn a_short_job_keeps_the_lock_for_min_hold_and_a_late_second_run_is_refused() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let ran = dir.path().join("ran");
    let job = |who: &str| format!("echo {who} >> {}", ran.display());
    let min_hold = Duration::from_secs(10);
    let started = Instant::now();
    let a = tool(
        &servers,
        &[
            "run",
            "--ttl",
            "30s",
            "--min-hold",
            "10s",
            "job",
            "--",
            "sh",
            "-c",
            &job("A"),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    assert!(wait_until(HANG, || lines(&ran) == ["A"]), "A never ran");
    let b = output(&mut tool(
        &servers,
        &["run", "job", "--", "sh", "-c", &job("B")],
    ));
    assert_eq!(code(&b), 1, "{b:?}");
    assert!(stderr(&b).contains("held elsewhere"), "{b:?}");
    assert_eq!(lines(&ran), ["A"], "the job ran once");
    // Held at least min-hold from when it was taken, and left to expire
    // near then (not a whole TTL later: the next period must find it free).
    assert!(
        held_everywhere(&servers, b"job"),
        "not released before min-hold"
    );
    // A shortens the lock once its command has ended, in an extend that
    // is decided at a quorum: wait (bounded) until every server has it.
    let left = |server: &testkit::RedisServer| {
        Duration::from_millis(server.pttl(b"job").try_into().unwrap_or(0))
    };
    let shortened = || servers.iter().all(|s| left(s) <= Duration::from_secs(11));
    assert!(
        wait_until(HANG, shortened),
        "expires near min-hold: {:?}",
        servers.iter().map(left).collect::<Vec<_>>()
    );
    for server in servers.iter() {
        let left = left(server);
        assert!(started.elapsed() + left >= min_hold, "{left:?}");
    }
    let a = wait_output(a);
    assert_eq!(code(&a), 0, "{a:?}");
    assert!(started.elapsed() >= min_hold, "A stayed for the hold");
}

/// A min-hold longer than the TTL: the tool keeps extending after the
/// command ended, and stays in the foreground until the hold has passed
/// (as the manual says: systemd and CI count on it). The test measures a
/// lower bound only: the lock was taken after the tool started, so the
/// tool must not exit before its start + the min-hold.
#[test]
fn the_tool_stays_in_the_foreground_until_the_min_hold_has_passed() {
    let servers = RedisServers::start(3);
    let min_hold = Duration::from_secs(3);
    let started = Instant::now();
    let a = output(&mut tool(
        &servers,
        &[
            "run",
            "--ttl",
            "1s",
            "--min-hold",
            "3s",
            "job",
            "--",
            "true",
        ],
    ));
    let exited = started.elapsed();
    assert_eq!(code(&a), 0, "{a:?}");
    assert!(
        exited >= min_hold,
        "exited {exited:?} after it started, before the min-hold of {min_hold:?}: {a:?}"
    );
}
