//! One in-memory node's data (keys, fence counters, fault settings) and
//! what each operation does to it: the semantics of a Redis master.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{CallHook, UptimeReport};
use crate::backend::{BackendError, BackendErrorKind, Op, Reply};

pub(super) struct Entry {
    pub(super) token: Vec<u8>,
    pub(super) expires_at: Instant,
}

pub(super) struct State {
    pub(super) keys: HashMap<Vec<u8>, Entry>,
    /// Fence counters (no expiry; forgotten by a restart, like the keys of
    /// a server without persistence).
    pub(super) fences: HashMap<Vec<u8>, u64>,
    pub(super) down: bool,
    pub(super) paused: bool,
    pub(super) latency: Duration,
    pub(super) fail_next: u32,
    pub(super) lose_replies_next: u32,
    pub(super) generation: u64,
    pub(super) started_at: Instant,
    pub(super) hook: Option<CallHook>,
    pub(super) uptime_report: UptimeReport,
    /// Forward steps of the node's wall clock so far.
    pub(super) wall_steps: Duration,
    /// The node's wall clock at its last start, in whole seconds (Redis'
    /// `stat_starttime`), for [`UptimeReport::WholeSeconds`].
    pub(super) wall_start_secs: u64,
    /// Report no identity at all (like a proxy whose `INFO` lacks `run_id`).
    pub(super) identity_hidden: bool,
}

impl State {
    /// The node's wall clock at `now` (an arbitrary epoch: the node's
    /// creation, plus the phase), with every step so far.
    pub(super) fn wall(&self, created: Instant, now: Instant) -> Duration {
        let phase = match self.uptime_report {
            UptimeReport::Exact => Duration::ZERO,
            UptimeReport::WholeSeconds { phase } => phase,
        };
        now.saturating_duration_since(created)
            .saturating_add(phase)
            .saturating_add(self.wall_steps)
    }

    /// The entry for `key` if it exists and has not expired at `now`.
    pub(super) fn live(&mut self, key: &[u8], now: Instant) -> Option<&mut Entry> {
        if self.keys.get(key).is_some_and(|e| e.expires_at <= now) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// Applies one operation at `now` (the faults were checked before).
    pub(super) fn apply(&mut self, op: &Op<'_>, now: Instant) -> Result<Reply, BackendError> {
        Ok(match *op {
            Op::Acquire { key, token, ttl } => Reply::from(self.acquire(key, token, ttl, now)?),
            Op::AcquireFenced {
                key,
                token,
                ttl,
                counter,
            } => {
                if self.acquire(key, token, ttl, now)? {
                    Reply::Fenced(self.fences.get(counter).copied().unwrap_or(0))
                } else {
                    Reply::No
                }
            }
            Op::RaiseFence {
                key,
                token,
                counter,
                fence,
            } => {
                let ours = self.live(key, now).is_some_and(|e| e.token == token);
                if ours {
                    let value = self.fences.entry(counter.to_vec()).or_insert(0);
                    *value = (*value).max(fence);
                }
                Reply::from(ours)
            }
            Op::Release { key, token } => {
                let ours = self.live(key, now).is_some_and(|e| e.token == token);
                if ours {
                    self.keys.remove(key);
                }
                Reply::from(ours)
            }
            Op::Extend { key, token, ttl } => match self.live(key, now) {
                Some(entry) if entry.token == token => {
                    entry.expires_at = now.checked_add(ttl).ok_or_else(|| {
                        BackendError::new(BackendErrorKind::Other, "invalid expire time")
                    })?;
                    Reply::Yes
                }
                _ => Reply::No,
            },
        })
    }
    /// `SET key token NX PX ttl`, where a key already holding `token`
    /// counts as set (the same acquisition through another name).
    pub(super) fn acquire(
        &mut self,
        key: &[u8],
        token: &[u8],
        ttl: Duration,
        now: Instant,
    ) -> Result<bool, BackendError> {
        if let Some(entry) = self.live(key, now) {
            return Ok(entry.token == token);
        }
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| BackendError::new(BackendErrorKind::Other, "invalid expire time"))?;
        self.keys.insert(
            key.to_vec(),
            Entry {
                token: token.to_vec(),
                expires_at,
            },
        );
        Ok(true)
    }
}
