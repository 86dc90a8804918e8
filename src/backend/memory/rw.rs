//! A read-write lock's operations on one in-memory node, as the Redis
//! scripts do them (`backend/redis/scripts_rw.rs`): the readers are one key
//! holding each reader's token with an expiry of its own, the writer a
//! plain lock key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::state::{Entry, State, Value, wrong_type};
use crate::backend::op::MAX_READERS;
use crate::backend::{BackendError, BackendErrorKind, Op, OpKind, Reply};

impl State {
    /// `op`, a read-write lock's, at `now`: on its one key (`op.keys`,
    /// the readers' or the writer's, as its kind says), naming the other
    /// by its role.
    pub(super) fn apply_read_write(
        &mut self,
        op: &Op<'_>,
        now: Instant,
    ) -> Result<Reply, BackendError> {
        let Some(key) = op.keys.single() else {
            return Err(BackendError::new(
                BackendErrorKind::Protocol,
                "a read-write lock's operation is on one key",
            ));
        };
        let token = op.token;
        match op.kind {
            OpKind::ReadAcquire { ttl, writer } => {
                let readers = key;
                if let Some(entry) = self.live(writer, now) {
                    let held = entry
                        .token()
                        .ok_or_else(|| wrong_type(writer, "not a lock"))?;
                    let left = entry.expires_at.map(|at| at.saturating_duration_since(now));
                    let refused = Reply::held_by(held);
                    return Ok(left.map_or(refused, |left| refused.expiring_in(left)));
                }
                let expires_at = after(now, ttl)?;
                let set = self.readers(readers, now)?;
                if set.contains_key(token) {
                    return Ok(Reply::AlreadyOurs);
                }
                if set.len() >= MAX_READERS as usize {
                    return Ok(Reply::No);
                }
                set.insert(token.to_vec(), expires_at);
                self.settle(readers);
                Ok(Reply::Yes)
            }
            OpKind::ReadExtend { ttl } => {
                let readers = key;
                let expires_at = after(now, ttl)?;
                let set = self.readers(readers, now)?;
                let Some(expiry) = set.get_mut(token) else {
                    return Ok(Reply::No);
                };
                *expiry = expires_at;
                self.settle(readers);
                Ok(Reply::Yes)
            }
            OpKind::ReadRelease => {
                let readers = key;
                let set = self.readers(readers, now)?;
                if set.remove(token).is_none() {
                    return Ok(Reply::No);
                }
                self.settle(readers);
                Ok(match self.announce(readers) {
                    0 => Reply::Yes,
                    heard => Reply::Notified(heard),
                })
            }
            OpKind::Admit { ttl, readers } => {
                let writer = key;
                let expires_at = after(now, ttl)?;
                let ours = match self.live(writer, now) {
                    None => false,
                    Some(entry) => {
                        entry
                            .token()
                            .ok_or_else(|| wrong_type(writer, "not a lock"))?
                            == token
                    }
                };
                if !ours {
                    return Ok(Reply::No);
                }
                let set = self.readers(readers, now)?;
                let last = set.iter().max_by_key(|(_, expiry)| **expiry);
                if let Some((token, expiry)) = last {
                    // Refused while readers are in: the last one to expire,
                    // and when, tells the writer when to look again.
                    let refused =
                        Reply::held_by(token).expiring_in(expiry.saturating_duration_since(now));
                    self.settle(readers);
                    return Ok(refused);
                }
                if let Some(entry) = self.keys.get_mut(writer) {
                    entry.expires_at = Some(expires_at);
                }
                Ok(Reply::Yes)
            }
            OpKind::Acquire { .. }
            | OpKind::AcquireFenced { .. }
            | OpKind::Extend { .. }
            | OpKind::Release
            | OpKind::RaiseFence { .. }
            | OpKind::Proclaim { .. } => Err(BackendError::new(
                BackendErrorKind::Protocol,
                "not a read-write lock's operation",
            )),
        }
    }

    /// The readers in `key` that are live at `now`, with their time left
    /// (none for another value), read-only.
    pub(super) fn live_readers(&mut self, key: &[u8], now: Instant) -> Vec<(Vec<u8>, Duration)> {
        match self.live(key, now).map(|e| &e.value) {
            Some(Value::Readers(set)) => set
                .iter()
                .filter(|(_, expiry)| **expiry > now)
                .map(|(token, expiry)| (token.clone(), expiry.saturating_duration_since(now)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The live readers in `key` at `now` (those past their expiry
    /// dropped), made empty when absent; `WRONGTYPE` for another value.
    fn readers(
        &mut self,
        key: &[u8],
        now: Instant,
    ) -> Result<&mut HashMap<Vec<u8>, Instant>, BackendError> {
        if self.live(key, now).is_none() {
            self.keys.insert(
                key.to_vec(),
                Entry {
                    value: Value::Readers(HashMap::new()),
                    expires_at: None,
                },
            );
        }
        match self.keys.get_mut(key).map(|e| &mut e.value) {
            Some(Value::Readers(set)) => {
                set.retain(|_, expiry| *expiry > now);
                Ok(set)
            }
            _ => Err(wrong_type(key, "not a read-write lock's readers")),
        }
    }

    /// After a change to the readers in `key`: the key lives as long as
    /// its last reader, and is gone with it.
    fn settle(&mut self, key: &[u8]) {
        let last = match self.keys.get(key).map(|e| &e.value) {
            Some(Value::Readers(set)) => set.values().max().copied(),
            _ => return,
        };
        match last {
            None => {
                self.keys.remove(key);
            }
            Some(last) => {
                if let Some(entry) = self.keys.get_mut(key) {
                    entry.expires_at = Some(last);
                }
            }
        }
    }
}

/// `ttl` after `now`.
fn after(now: Instant, ttl: Duration) -> Result<Instant, BackendError> {
    now.checked_add(ttl)
        .ok_or_else(|| BackendError::new(BackendErrorKind::Other, "invalid expire time"))
}
