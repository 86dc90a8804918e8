//! A "run this job once" program: it locks, drops its guard (or fails an
//! attempt) and returns from `main`. The releases it queued must reach the
//! servers before the process is gone. The program is this test binary
//! itself, run again as a child process with one test selected and the
//! servers' URLs in its environment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::process::Command;
use std::time::Duration;

use quorum_lock::{LockManager, RetryPolicy};
use testkit::RedisServers;
use testkit::proxy::Proxy;

const CHILD_ENV: &str = "QUORUM_LOCK_EXIT_TEST_NODES";
/// The child's test by its full name in this binary (its module's path).
const CHILD_TEST: &str = "exit::child_program";

/// The child's `main`: does nothing unless run as the child.
#[test]
fn child_program() {
    let Ok(urls) = std::env::var(CHILD_ENV) else {
        return;
    };
    let locks = LockManager::builder()
        .redis_nodes(urls.split(','))
        .unwrap()
        .restart_quarantine(false) // the servers were started a moment ago
        .ttl(Duration::from_secs(30))
        // Not the default 100 ms: a first connection on a loaded machine
        // took longer (NoQuorum before the test's point, the releases
        // reaching the servers before the process is gone).
        .node_timeout(Duration::from_secs(1))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let guard = locks.lock("exit:job").unwrap();
    // ... the job ...
    drop(guard); // queues the releases and returns at once
    // A failed attempt: its acquire landed on one node, the cleanup release
    // is queued.
    assert!(locks.try_lock("exit:busy").unwrap_err().is_contended());
    // The last handle goes, then the process ends at once, as returning
    // from `main` does (other threads are not waited for).
    drop(locks);
    std::process::exit(0);
}

#[test]
fn a_program_that_returns_right_after_dropping_its_guard_leaves_no_key() {
    let servers = RedisServers::start(3);
    // Another client holds "exit:busy" on two of the three servers.
    for server in &servers[..2] {
        server.set(b"exit:busy", b"someone-else");
    }
    // Every round trip takes a few milliseconds, as across a network: a
    // release still queued when the process ends would never leave.
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    for proxy in &proxies {
        proxy.delay(Duration::from_millis(5));
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--test-threads=1"])
        .env(CHILD_ENV, urls.join(","))
        .status()
        .unwrap();
    assert!(status.success(), "the child program failed: {status}");
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(
            server.get(b"exit:job"),
            None,
            "server {i} still holds the dropped guard's key ({} ms left)",
            server.pttl(b"exit:job")
        );
    }
    assert_eq!(
        servers[2].get(b"exit:busy"),
        None,
        "the failed attempt's key is left on server 2 ({} ms left)",
        servers[2].pttl(b"exit:busy")
    );
}
