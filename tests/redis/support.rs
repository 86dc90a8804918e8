//! What the real-server tests share.

use std::time::Duration;

use quorum_lock::{LockManager, LockManagerBuilder, RetryPolicy, Scripts};
use testkit::RedisServer;

/// A builder over `urls`, servers the test started a moment ago: `ttl`,
/// `node_timeout`, one attempt per call, and no restart quarantine (every
/// such server's uptime is below `max_ttl`: with quarantine none of them
/// would vote for a minute, which is not what these tests are about; the
/// tests of quarantine build their own). The test adds what it is about.
pub(crate) fn fresh_builder<I>(urls: I, ttl: Duration, node_timeout: Duration) -> LockManagerBuilder
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    LockManager::builder()
        .redis_nodes(urls)
        .unwrap_or_else(|e| panic!("redis_nodes: {e}"))
        .ttl(ttl)
        .node_timeout(node_timeout)
        .retry(RetryPolicy::none())
        .restart_quarantine(false)
}

/// Managers on servers the test started a moment ago ([`fresh_builder`])
/// with one TTL and node timeout: the tests of one area share one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fresh {
    pub(crate) ttl: Duration,
    pub(crate) node_timeout: Duration,
}

impl Fresh {
    /// A manager on `urls`, with scripts where the servers have them.
    pub(crate) fn manager(&self, urls: &[String]) -> LockManager {
        self.with_scripts(urls, Scripts::Auto)
    }

    /// A manager on `urls` with `scripts`.
    pub(crate) fn with_scripts(&self, urls: &[String], scripts: Scripts) -> LockManager {
        fresh_builder(urls, self.ttl, self.node_timeout)
            .scripts(scripts)
            .build()
            .unwrap_or_else(|e| panic!("build: {e}"))
    }
}

/// A manager over `urls` ([`fresh_builder`]) whose locks may last up to
/// `ttl` (its `max_ttl`), failing at once so that a refused lock says so.
pub(crate) fn manager_of<I>(urls: I, ttl: Duration, node_timeout: Duration) -> LockManager
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    fresh_builder(urls, ttl, node_timeout)
        .max_ttl(ttl)
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"))
}

/// Creates the ACL user `user` on `server` with `password` and `rules`
/// (`ACL SETUSER <user> on ><password> <rules>...`; panics, naming the
/// server, when it refuses them); the URL that connects as that user.
pub(crate) fn acl_user(server: &RedisServer, user: &str, password: &str, rules: &[&str]) -> String {
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(format!(">{password}"))
        .arg(rules);
    let () = server.cmd(&acl);
    format!("redis://{user}:{password}@127.0.0.1:{}/0", server.port())
}

/// Starts keeping the warnings (and errors) this binary logs (once; the
/// tests run in one process), and says how many of those kept so far
/// contain every one of `texts` (a test names something of its own: a
/// node's URL, with its ports).
pub(crate) fn warnings_with(texts: &[&str]) -> usize {
    testkit::logs::capture(log::LevelFilter::Warn)
        .events_with(texts)
        .len()
}
