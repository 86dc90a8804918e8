//! A leader election's proclaim on one in-memory node, as the Redis
//! script does it (`backend/redis/scripts_election.rs`): the record key
//! is written only while the election's lock key holds the token, and
//! the write is announced to the record key's listeners (the observers
//! waiting for a new value), never to the lock key's.

use std::time::Instant;

use super::state::{Entry, State, Value, wrong_type};
use crate::backend::{BackendError, BackendErrorKind, KeySet, Reply};

impl State {
    /// [`OpKind::Proclaim`](crate::backend::OpKind::Proclaim) at `now`:
    /// `record` into `record_key` (no expiry), only while the one key of
    /// `lock` holds `token`; the write is announced as a release of
    /// `record_key`.
    pub(super) fn proclaim(
        &mut self,
        lock: &KeySet,
        token: &[u8],
        record_key: &[u8],
        record: &[u8],
        now: Instant,
    ) -> Result<Reply, BackendError> {
        let Some(key) = lock.single() else {
            return Err(BackendError::new(
                BackendErrorKind::Protocol,
                "an election's proclaim is on one lock key",
            ));
        };
        if !self.holds(key, token, now)? {
            return Ok(Reply::No);
        }
        // A hash or a reader set there is another program's key: refuse,
        // as `SET` in a script would not (it overwrites), but never
        // silently turn it into a record.
        if let Some(entry) = self.live(record_key, now)
            && entry.token().is_none()
        {
            return Err(wrong_type(record_key, "not an election's record"));
        }
        self.keys.insert(
            record_key.to_vec(),
            Entry {
                value: Value::Str(record.to_vec()),
                expires_at: None,
            },
        );
        self.announce(record_key);
        Ok(Reply::Yes)
    }
}
