//! The release notices' reader threads against real `redis-server`s: one
//! per subscriber connection (per manager and node) while a process
//! waits, and none left once the manager is gone. Alone in a process of
//! its own (`testkit::alone`), so no other test's threads are counted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, RetryPolicy};
use testkit::RedisServers;

/// The threads of this process with `name` (`/proc/self/task/*/comm`).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// The name is cut to 15 bytes by the kernel.
const READER: &str = "quorum-lock-not";

fn manager(urls: &[String]) -> LockManager {
    LockManager::builder()
        .redis_nodes(urls)
        .unwrap()
        .node_timeout(Duration::from_millis(500))
        .restart_quarantine(false)
        .build()
        .unwrap()
}

#[test]
fn a_reader_thread_per_subscribed_node_and_none_once_the_manager_is_gone() {
    if !testkit::alone(
        "notice_threads::a_reader_thread_per_subscribed_node_and_none_once_the_manager_is_gone",
    ) {
        return;
    }
    let servers = RedisServers::start(3);
    let urls = servers.urls();
    let holder = manager(&urls);
    let waiter = manager(&urls);
    assert_eq!(threads_named(READER), 0, "nobody has waited yet");
    let _held = holder.try_lock("job").unwrap();
    let wait = LockOptions::new()
        .wait(Duration::from_millis(300))
        .retry(RetryPolicy::new().delay(Duration::from_millis(50)));
    assert!(waiter.lock_with("job", &wait).unwrap_err().is_contended());
    // The subscriber connections stay open for the next wait, each read
    // by its thread, which sleeps on it. (A wait listens on a node for at
    // most a node timeout: a node thread slow on a loaded machine may
    // subscribe a moment later, hence the bounded wait.)
    let three = || threads_named(READER) == 3;
    assert!(
        testkit::wait_until(Duration::from_secs(10), three),
        "one reader per node: {}",
        threads_named(READER)
    );
    assert!(waiter.lock_with("job", &wait).unwrap_err().is_contended());
    assert_eq!(threads_named(READER), 3, "the next wait reuses them");
    drop(waiter);
    // Dropping the manager shuts the connections down, which ends the
    // readers' blocking reads.
    assert!(
        testkit::wait_until(Duration::from_secs(10), || threads_named(READER) == 0),
        "{} reader threads left after the manager was dropped",
        threads_named(READER)
    );
}
