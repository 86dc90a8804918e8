//! `run --min-hold`: once per period, not only one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::time::{Duration, Instant};

use common::{code, held_everywhere, lines, output, stderr, tool};
use testkit::{RedisServers, TempDir};

/// Cron on two machines, B a little after A, and a job shorter than the
/// skew: without `--min-hold` both run it; with it, B finds it held.
#[test]
fn a_short_job_keeps_the_lock_for_min_hold_and_a_late_second_run_is_refused() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let ran = dir.path().join("ran");
    let job = |who: &str| format!("echo {who} >> {}", ran.display());
    let started = Instant::now();
    let a = output(&mut tool(
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
    ));
    assert_eq!(code(&a), 0, "{a:?}");
    assert!(
        held_everywhere(&servers, b"job"),
        "not released before min-hold"
    );
    let b = output(&mut tool(
        &servers,
        &["run", "job", "--", "sh", "-c", &job("B")],
    ));
    assert_eq!(code(&b), 1, "{b:?}");
    assert!(stderr(&b).contains("held elsewhere"), "{b:?}");
    assert_eq!(lines(&ran), ["A"], "the job ran once");
    // Held at least min-hold from when it was taken, and left to expire
    // near then (not a whole TTL later: the next period must find it free).
    for server in servers.iter() {
        let left = Duration::from_millis(server.pttl(b"job").try_into().unwrap());
        assert!(
            started.elapsed() + left >= Duration::from_secs(10),
            "{left:?}"
        );
        assert!(
            left <= Duration::from_secs(11),
            "expires near min-hold: {left:?}"
        );
    }
}

/// A min-hold longer than the TTL: the tool keeps extending after the
/// command ended, then leaves the lock to expire.
#[test]
fn a_min_hold_beyond_the_ttl_is_covered_by_extends() {
    let servers = RedisServers::start(3);
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
    assert_eq!(code(&a), 0, "{a:?}");
    for server in servers.iter() {
        let left = Duration::from_millis(server.pttl(b"job").try_into().unwrap());
        assert!(
            started.elapsed() + left >= Duration::from_secs(3),
            "{left:?}"
        );
    }
}
