//! Trying what locks need on a node whose server refused an operation
//! with `Denied` (the judgement is `rights.rs`'s): one round trip
//! of a plain lock's acquire, extend and release on a fresh key of the
//! crate's own, `<prefix>{quorum-lock}:probe:<random>`, with a fresh
//! token, made by whichever driver runs the node's timer.

use std::time::Instant;

use super::State;
use super::batch::{Batch, Item};
use super::io;
use super::rights::{Change, TRIED, TRY_TTL};
use crate::backend::{BackendError, BackendErrorKind, KeySet};
use crate::engine::action::Action;
use crate::engine::hold::Hold;
use crate::health::LockOp;
use crate::token::{Token, random_u64};

impl State {
    /// Tries what locks need now and publishes what changed. The try is
    /// not a lock: its ops are not counted in the node's vitals, its
    /// refused release is not retried (the key expires in
    /// [`TRY_TTL`]), and nobody waits for its key.
    pub(super) fn try_rights(&mut self, now: Instant) {
        let results = match Token::random() {
            Ok(token) => {
                let name = format!("{:016x}", random_u64());
                let key = [&self.shared.rights_key[..], b":", name.as_bytes()].concat();
                let hold = Hold::Lock(KeySet::one(key));
                let items: Vec<Item> = TRIED
                    .iter()
                    .map(|op| Item {
                        action: match op {
                            LockOp::Acquire => Action::Acquire { ttl: TRY_TTL },
                            LockOp::Extend => Action::Extend { ttl: TRY_TTL },
                            LockOp::Release => Action::Release,
                        },
                        hold: hold.clone(),
                        token,
                    })
                    .collect();
                let batch = Batch::new(
                    items,
                    &self.shared.value_suffix,
                    &self.shared.fence_counters,
                );
                batch.spread(io::call(&*self.backend, &batch.ops())).0
            }
            // No randomness for a token: no try, no verdict.
            Err(reason) => vec![Err(BackendError::new(BackendErrorKind::Other, reason))],
        };
        match self.rights.on_try(&results, now) {
            None => {}
            Some(Change::Refuses(refused)) => self.publish.refuses_locks(refused),
            Some(Change::Serves) => self.publish.serves_locks_again(),
        }
    }
}
