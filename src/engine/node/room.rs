//! The lists a node's batches are made of, kept empty between batches for
//! their room.
//!
//! Every batch a node sends takes its items, where their answers go and
//! the values it stores into lists of their own, and every batch is read
//! on the node's state: the lists of the batch just read serve the next.
//! With one batch in flight per node, one set is enough. Made and freed
//! per batch, they were three allocations per batch: about five for each
//! lock and its `release()` at N=3 with 8 threads (counted with the
//! benchmark's `--wakes`: docs/benchmarks.md, "Less work per lock").
//!
//! A list is kept by the crate's one rule for kept lists
//! ([`keep`](crate::spare::keep)): up to a bound, and only when it has
//! more room than the one kept.

use super::batch::Item;
use super::jobs::{Job, ReplyTo};
use crate::spare::keep;

/// The most items (and answers, and jobs) a kept list may have room for.
const KEPT_ITEMS: usize = 64;

/// The most bytes the kept list of stored values may have room for: 64
/// values of a token (20 bytes) and an owner label of up to 108.
const KEPT_VALUE_BYTES: usize = 8 * 1024;

/// Empty lists with room, one of each kind.
#[derive(Default)]
pub(crate) struct Room {
    items: Vec<Item>,
    replies: Vec<Option<ReplyTo>>,
    values: Vec<u8>,
    /// The list a driver's share of the queue is taken into
    /// (`worker.rs`, `serve_queue`).
    served: Vec<Job>,
}

impl Room {
    /// An empty list for a batch's items (with the room kept, if any).
    pub(crate) fn items(&mut self) -> Vec<Item> {
        std::mem::take(&mut self.items)
    }

    /// An empty list for where a batch's answers go.
    pub(crate) fn replies(&mut self) -> Vec<Option<ReplyTo>> {
        std::mem::take(&mut self.replies)
    }

    /// An empty list for a batch's stored values.
    pub(crate) fn values(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.values)
    }

    /// An empty list for a driver's share of the queue.
    pub(crate) fn served(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.served)
    }

    /// Keeps `items`' room (emptied here) for the next batch.
    pub(crate) fn keep_items(&mut self, items: Vec<Item>) {
        keep(&mut self.items, items, KEPT_ITEMS);
    }

    /// Keeps `replies`' room (emptied here).
    pub(crate) fn keep_replies(&mut self, replies: Vec<Option<ReplyTo>>) {
        keep(&mut self.replies, replies, KEPT_ITEMS);
    }

    /// Keeps `values`' room (emptied here).
    pub(crate) fn keep_values(&mut self, values: Vec<u8>) {
        keep(&mut self.values, values, KEPT_VALUE_BYTES);
    }

    /// Keeps `served`'s room (emptied here).
    pub(crate) fn keep_served(&mut self, served: Vec<Job>) {
        keep(&mut self.served, served, KEPT_ITEMS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_list_leaves_none_behind() {
        let mut room = Room::default();
        room.keep_values(Vec::with_capacity(100));
        let taken = room.values();
        assert!(taken.capacity() >= 100);
        assert_eq!(room.values().capacity(), 0);
    }
}
