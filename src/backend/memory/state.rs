//! One in-memory node's data (keys, fence counters, fault settings) and
//! what each operation does to it: the semantics of a Redis master, with
//! one key space for locks and the fence counters' hash, as on Redis.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::faults::{CallHook, DenyRule, UptimeReport};
use super::notices::Inbox;
use crate::backend::{
    BackendError, BackendErrorKind, Holding, KeySet, NoticeWaker, Op, OpKind, Reply,
};

/// What a key holds.
pub(super) enum Value {
    /// A string: a lock's token (or anything else a client wrote).
    Str(Vec<u8>),
    /// A hash of fence counters: lock key -> counter.
    Counters(HashMap<Vec<u8>, u64>),
    /// A read-write lock's readers: token -> its own expiry.
    Readers(HashMap<Vec<u8>, Instant>),
}

pub(super) struct Entry {
    pub(super) value: Value,
    /// `None`: no expiry (the fence counters).
    pub(super) expires_at: Option<Instant>,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// The token of a lock key; `None` for a hash.
    pub(super) fn token(&self) -> Option<&[u8]> {
        match &self.value {
            Value::Str(token) => Some(token),
            Value::Counters(_) | Value::Readers(_) => None,
        }
    }
}

pub(super) struct State {
    pub(super) keys: HashMap<Vec<u8>, Entry>,
    pub(super) down: bool,
    pub(super) paused: bool,
    pub(super) latency: Duration,
    pub(super) fail_next: u32,
    pub(super) lose_replies_next: u32,
    pub(super) generation: u64,
    pub(super) started_at: Instant,
    pub(super) hook: Option<CallHook>,
    /// The operations refused as by access rules.
    pub(super) denied: Option<DenyRule>,
    pub(super) uptime_report: UptimeReport,
    /// Forward steps of the node's wall clock so far.
    pub(super) wall_steps: Duration,
    /// The node's wall clock at its last start, in whole seconds (Redis'
    /// `stat_starttime`), for [`UptimeReport::WholeSeconds`].
    pub(super) wall_start_secs: u64,
    /// Report no identity at all (like a proxy whose `INFO` lacks `run_id`).
    pub(super) identity_hidden: bool,
    /// `maxmemory` and `maxmemory-policy` as reported (0 and `noeviction`
    /// by default).
    pub(super) memory: (u64, String),
    /// Keys dropped by [`evict_volatile`](Self::evict_volatile) since the
    /// node's start (Redis' `evicted_keys`).
    pub(super) evicted: u64,
    /// Release notices are announced and listeners accepted (default).
    pub(super) notices_on: bool,
    /// Each release listener's subscriptions and undelivered notices.
    pub(super) listeners: HashMap<u64, Inbox>,
    pub(super) next_listener: u64,
    /// Calls to a listener's `listen` (changes of subscription asked).
    pub(super) listen_calls: u64,
    /// The wakers of the listeners that heard a release during the current
    /// operation: called once the node's lock is let go (see `apply`).
    pub(super) to_wake: Vec<NoticeWaker>,
}

/// The error of an op on a key that holds the other kind of value.
pub(super) fn wrong_type(key: &[u8], what: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::WrongType,
        format!(
            "key {} holds {what} (WRONGTYPE)",
            String::from_utf8_lossy(&key[..key.len().min(64)])
        ),
    )
}

/// The error of a read-write lock's or an election's kind where a lock's
/// is run (never: `State::apply` runs those apart).
fn not_a_lock_kind(kind: OpKind<'_>) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("{kind:?} is not a lock's operation"),
    )
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
        if self.keys.get(key).is_some_and(|e| e.expired(now)) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// Whether `key` is a lock holding `token` (`WRONGTYPE` for a hash, as
    /// the scripts' `GET` fails on one).
    pub(super) fn holds(
        &mut self,
        key: &[u8],
        token: &[u8],
        now: Instant,
    ) -> Result<bool, BackendError> {
        match self.live(key, now) {
            None => Ok(false),
            Some(entry) => match entry.token() {
                Some(held) => Ok(held == token),
                None => Err(wrong_type(key, "a hash, not a lock")),
            },
        }
    }

    /// The counter of lock `key` in the counters' hash `counters` (0 when
    /// absent); `WRONGTYPE` when `counters` holds something else.
    fn counter(&mut self, counters: &[u8], key: &[u8], now: Instant) -> Result<u64, BackendError> {
        match self.live(counters, now).map(|e| &e.value) {
            None => Ok(0),
            Some(Value::Counters(map)) => Ok(map.get(key).copied().unwrap_or(0)),
            Some(Value::Str(_) | Value::Readers(_)) => {
                Err(wrong_type(counters, "not the fence counters"))
            }
        }
    }

    /// What `key` holds at `now`, read-only (`WRONGTYPE` for a hash).
    pub(super) fn inspect(
        &mut self,
        key: &[u8],
        now: Instant,
    ) -> Result<Option<Holding>, BackendError> {
        let Some(entry) = self.live(key, now) else {
            return Ok(None);
        };
        let ttl = entry.expires_at.map(|at| at.saturating_duration_since(now));
        match entry.token() {
            Some(value) => Ok(Some(Holding::new(value, value.len(), ttl))),
            None => Err(wrong_type(key, "a hash, not a lock")),
        }
    }

    /// Applies one operation at `now` (the faults were checked before):
    /// on one key as `SET NX PX` and the one-key scripts do, on several as
    /// the set scripts do (all or nothing).
    pub(super) fn apply(&mut self, op: &Op<'_>, now: Instant) -> Result<Reply, BackendError> {
        if op.kind.is_read_write() {
            return self.apply_read_write(op, now);
        }
        if let OpKind::Proclaim { record_key, record } = op.kind {
            return self.proclaim(op.keys, op.token, record_key, record, now);
        }
        match op.keys.single() {
            Some(key) => self.apply_one(key, op.token, op.kind, now),
            None => self.apply_set(op.keys, op.token, op.kind, now),
        }
    }

    /// `kind` on the one key `key`.
    fn apply_one(
        &mut self,
        key: &[u8],
        token: &[u8],
        kind: OpKind<'_>,
        now: Instant,
    ) -> Result<Reply, BackendError> {
        Ok(match kind {
            OpKind::Acquire { ttl } => self.acquire(key, token, ttl, now)?,
            OpKind::AcquireFenced { ttl, counter } => {
                // Read first: a foreign value there fails before any write.
                let read = self.counter(counter, key, now)?;
                match self.acquire(key, token, ttl, now)? {
                    Reply::Yes => Reply::Fenced(read),
                    other => other,
                }
            }
            OpKind::RaiseFence { counter, fence } => {
                let ours = self.holds(key, token, now)?;
                if ours {
                    self.counter(counter, key, now)?;
                    let entry = self.keys.entry(counter.to_vec()).or_insert(Entry {
                        value: Value::Counters(HashMap::new()),
                        expires_at: None,
                    });
                    if let Value::Counters(map) = &mut entry.value {
                        let value = map.entry(key.to_vec()).or_insert(0);
                        *value = (*value).max(fence);
                    }
                }
                Reply::from(ours)
            }
            OpKind::Release => {
                if !self.holds(key, token, now)? {
                    return Ok(Reply::No);
                }
                self.keys.remove(key);
                match self.announce(key) {
                    0 => Reply::Yes,
                    heard => Reply::Notified(heard),
                }
            }
            OpKind::Extend { ttl } => {
                if !self.holds(key, token, now)? {
                    return Ok(Reply::No);
                }
                self.expire(key, ttl, now)?;
                Reply::Yes
            }
            // A read-write lock's kinds: `apply` runs them apart.
            OpKind::ReadAcquire { .. }
            | OpKind::ReadExtend { .. }
            | OpKind::ReadRelease
            | OpKind::Admit { .. }
            | OpKind::Proclaim { .. } => return Err(not_a_lock_kind(kind)),
        })
    }

    /// `kind` on every key of `keys` as one step, all or nothing.
    fn apply_set(
        &mut self,
        keys: &KeySet,
        token: &[u8],
        kind: OpKind<'_>,
        now: Instant,
    ) -> Result<Reply, BackendError> {
        Ok(match kind {
            OpKind::Acquire { ttl } => self.acquire_all(keys, token, ttl, now)?,
            OpKind::AcquireFenced { ttl, counter } => {
                // Read first: a foreign value there fails before any write.
                let mut read = 0;
                for k in keys.iter() {
                    read = read.max(self.counter(counter, k, now)?);
                }
                match self.acquire_all(keys, token, ttl, now)? {
                    Reply::Yes => Reply::Fenced(read),
                    other => other,
                }
            }
            OpKind::RaiseFence { counter, fence } => {
                for k in keys.iter() {
                    if !self.holds(k, token, now)? {
                        return Ok(Reply::No);
                    }
                }
                for k in keys.iter() {
                    self.apply_one(k, token, OpKind::RaiseFence { counter, fence }, now)?;
                }
                Reply::Yes
            }
            OpKind::Extend { ttl } => {
                for k in keys.iter() {
                    if !self.holds(k, token, now)? {
                        return Ok(Reply::No);
                    }
                }
                for k in keys.iter() {
                    self.expire(k, ttl, now)?;
                }
                Reply::Yes
            }
            OpKind::Release => {
                let mut released = false;
                let mut heard = 0;
                for k in keys.iter() {
                    if self.holds(k, token, now)? {
                        self.keys.remove(k);
                        heard += self.announce(k);
                        released = true;
                    }
                }
                match (released, heard) {
                    (false, _) => Reply::No,
                    (true, 0) => Reply::Yes,
                    (true, heard) => Reply::Notified(heard),
                }
            }
            OpKind::ReadAcquire { .. }
            | OpKind::ReadExtend { .. }
            | OpKind::ReadRelease
            | OpKind::Admit { .. }
            | OpKind::Proclaim { .. } => return Err(not_a_lock_kind(kind)),
        })
    }

    /// Every key of `keys` for `token`, or none, as the set acquire script
    /// does: every key is read first.
    fn acquire_all(
        &mut self,
        keys: &KeySet,
        token: &[u8],
        ttl: Duration,
        now: Instant,
    ) -> Result<Reply, BackendError> {
        let mut ours = false;
        for k in keys.iter() {
            if self.live(k, now).is_some() {
                if !self.holds(k, token, now)? {
                    let held = self.live(k, now).and_then(|e| e.token());
                    return Ok(held.map_or(Reply::No, Reply::held_by));
                }
                ours = true;
            }
        }
        if ours {
            return Ok(Reply::AlreadyOurs);
        }
        for k in keys.iter() {
            self.acquire(k, token, ttl, now)?;
        }
        Ok(Reply::Yes)
    }

    /// Sets the expiry of an existing `key` to `ttl` from `now`.
    fn expire(&mut self, key: &[u8], ttl: Duration, now: Instant) -> Result<(), BackendError> {
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| BackendError::new(BackendErrorKind::Other, "invalid expire time"))?;
        if let Some(entry) = self.keys.get_mut(key) {
            entry.expires_at = Some(expires_at);
        }
        Ok(())
    }

    /// `SET key token NX PX ttl`: `Yes` when set by this call, `AlreadyOurs`
    /// when the key already held `token` (another name of this server set
    /// it), `No` when another token holds it.
    pub(super) fn acquire(
        &mut self,
        key: &[u8],
        token: &[u8],
        ttl: Duration,
        now: Instant,
    ) -> Result<Reply, BackendError> {
        if let Some(entry) = self.live(key, now) {
            return match entry.token() {
                Some(held) if held == token => Ok(Reply::AlreadyOurs),
                Some(held) => Ok(match entry.expires_at {
                    Some(at) => Reply::held_by(held).expiring_in(at.saturating_duration_since(now)),
                    None => Reply::held_by(held),
                }),
                None => Err(wrong_type(key, "a hash, not a lock")),
            };
        }
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| BackendError::new(BackendErrorKind::Other, "invalid expire time"))?;
        self.keys.insert(
            key.to_vec(),
            Entry {
                value: Value::Str(token.to_vec()),
                expires_at: Some(expires_at),
            },
        );
        Ok(Reply::Yes)
    }

    /// Announces the release of `key` to its listeners; how many heard it.
    /// Their wakers are queued in `to_wake`, for the caller to call once it
    /// has let go of the node's lock.
    pub(super) fn announce(&mut self, key: &[u8]) -> u64 {
        if !self.notices_on {
            return 0;
        }
        let mut heard = 0;
        for inbox in self.listeners.values_mut() {
            if let Some(waker) = inbox.hear(key) {
                heard += 1;
                self.to_wake.extend(waker);
            }
        }
        heard
    }

    /// Drops every key with an expiry, as a server at `maxmemory` under an
    /// evicting policy does first with idle volatile keys. The number gone.
    pub(super) fn evict_volatile(&mut self) -> usize {
        let before = self.keys.len();
        self.keys.retain(|_, e| e.expires_at.is_none());
        let gone = before - self.keys.len();
        self.evicted += gone as u64;
        gone
    }
}
