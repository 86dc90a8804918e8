//! quorum-lock through its public API, plus a diagnostic client that calls
//! its `RedisBackend` directly (no engine, no threads).

use std::time::{Duration, Instant};

use quorum_lock::backend;
use quorum_lock::{LockManager, LockOptions, RedisBackend, RetryPolicy};

use crate::clients::{Locker, Service, Settings, Tokens};

/// Builds the manager the benchmark uses: one attempt per `lock` unless a
/// call asks for more.
pub fn manager(urls: &[String], settings: &Settings) -> Result<LockManager, String> {
    LockManager::builder()
        .redis_nodes(urls)
        .and_then(|b| {
            b.node_timeout(settings.node_timeout)
                .ttl(settings.ttl)
                // The servers were started a moment ago: with quarantine on
                // they would not vote for max_ttl. The identity check after
                // each batch runs either way, so its cost is measured.
                .restart_quarantine(false)
                .retry(RetryPolicy::none())
                .build()
        })
        .map_err(|e| format!("quorum-lock: {e}"))
}

/// Threads share one manager (it is `Clone + Sync`; so are its workers).
pub struct OursService {
    pub locks: LockManager,
    pub settings: Settings,
    /// End each lock by dropping the guard instead of `release()`.
    pub drop_guard: bool,
}

impl Service for OursService {
    fn locker(&self) -> Result<Box<dyn Locker + '_>, String> {
        Ok(Box::new(Ours {
            locks: &self.locks,
            settings: &self.settings,
            drop_guard: self.drop_guard,
        }))
    }

    fn finish(&self) {
        self.locks.flush(Duration::from_secs(10));
    }
}

/// One thread's view of the shared manager.
pub struct Ours<'a> {
    pub locks: &'a LockManager,
    pub settings: &'a Settings,
    /// End each lock by dropping the guard instead of `release()`.
    pub drop_guard: bool,
}

impl Ours<'_> {
    fn finish(&self, guard: quorum_lock::LockGuard) -> Result<(), String> {
        if self.drop_guard {
            drop(guard);
            return Ok(());
        }
        guard.release().map(drop).map_err(|e| e.to_string())
    }
}

impl Locker for Ours<'_> {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let guard = self.locks.try_lock(key).map_err(|e| e.to_string())?;
        self.finish(guard)
    }

    fn critical_section(
        &mut self,
        key: &[u8],
        deadline: Instant,
        work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let options = LockOptions::new().wait(wait).retry(
            RetryPolicy::new()
                .attempts(u32::MAX)
                .delay(Duration::ZERO)
                .jitter(self.settings.retry_pause),
        );
        let guard = self
            .locks
            .lock_with(key, &options)
            .map_err(|e| e.to_string())?;
        work();
        self.finish(guard)
    }
}

/// Lock, then drop the guard (the release is queued, not awaited).
pub fn lock_drop(locks: &LockManager, key: &[u8]) -> Result<(), String> {
    locks.try_lock(key).map(drop).map_err(|e| e.to_string())
}

/// Diagnostic: `backend::acquire` then `release` on a `RedisBackend`, called from the
/// measuring thread, node after node (meant for N=1, where that is one
/// round trip each, like the floor).
pub struct Direct {
    nodes: Vec<RedisBackend>,
    ttl: Duration,
    tokens: Tokens,
}

impl Direct {
    pub fn open(urls: &[String], settings: &Settings) -> Result<Self, String> {
        let nodes = urls
            .iter()
            .map(|u| RedisBackend::open(u, settings.node_timeout).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nodes,
            ttl: settings.ttl,
            tokens: Tokens::new(),
        })
    }
}

impl Locker for Direct {
    fn lock_release(&mut self, key: &[u8]) -> Result<(), String> {
        let token = self.tokens.next();
        for node in &self.nodes {
            if !backend::acquire(node, key, &token, self.ttl).map_err(|e| e.to_string())? {
                return Err("backend: acquire refused".into());
            }
        }
        for node in &self.nodes {
            if !backend::release(node, key, &token).map_err(|e| e.to_string())? {
                return Err("backend: release refused".into());
            }
        }
        Ok(())
    }
}
