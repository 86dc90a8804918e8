//! The writers of this manager that want a read-write lock: from the
//! moment a thread asks for the write side until the call returns, the
//! manager's own readers of that lock stand back, so no reader of this
//! process slips past a local writer's intent in the moment before the
//! writer's key reaches the servers (where it stops every other process's
//! readers).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::KeySet;

/// Writers in progress, by the writer's key.
#[derive(Debug, Default)]
pub(crate) struct Intents {
    writers: Mutex<HashMap<KeySet, usize>>,
}

/// One writer in progress; it stands down when dropped.
#[derive(Debug)]
pub(crate) struct Intent {
    intents: Arc<Intents>,
    writer: KeySet,
}

impl Intents {
    /// Marks a writer of `writer`'s lock as in progress, until the
    /// returned [`Intent`] is dropped.
    pub(crate) fn announce(self: &Arc<Self>, writer: &KeySet) -> Intent {
        *self.writers.lock().entry(writer.clone()).or_insert(0) += 1;
        Intent {
            intents: Arc::clone(self),
            writer: writer.clone(),
        }
    }

    /// Whether a writer of `writer`'s lock is in progress here.
    pub(crate) fn pending(&self, writer: &KeySet) -> bool {
        self.writers.lock().contains_key(writer)
    }
}

impl Drop for Intent {
    fn drop(&mut self) {
        let mut writers = self.intents.writers.lock();
        if let Some(count) = writers.get_mut(&self.writer) {
            *count -= 1;
            if *count == 0 {
                writers.remove(&self.writer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_is_pending_until_its_last_intent_is_dropped() {
        let intents = Arc::new(Intents::default());
        let w = KeySet::one("w");
        assert!(!intents.pending(&w));
        let first = intents.announce(&w);
        let second = intents.announce(&w);
        assert!(intents.pending(&w) && !intents.pending(&KeySet::one("x")));
        drop(first);
        assert!(intents.pending(&w));
        drop(second);
        assert!(!intents.pending(&w));
    }
}
