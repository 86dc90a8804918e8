//! Times each node was seen to have possibly forgotten lock keys while it
//! kept answering: its settings began to allow eviction, or it became a
//! replica or took a new replication history (a failover). A restart is
//! not one: with durable persistence it keeps the keys, and without it
//! the restart quarantine covers it (docs/safety.md).
//!
//! Each node has a count (its epoch) that only grows. A lease records the
//! epochs of the nodes whose grants it counted, as read before the round
//! was sent; a node whose epoch moved since no longer supports it. The
//! layer above registers one hook to hear each forget as it is seen, so a
//! guard whose quorum is gone is told at once, not at the end of its TTL.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the layer above does when a node is seen to forget: given the
/// node's index and why, in words.
pub(crate) type ForgetHook = Box<dyn Fn(usize, &str) + Send + Sync>;

/// The most nodes whose epochs a snapshot keeps without a list: one is
/// taken per acquire, extend and admission.
const EPOCHS_IN_PLACE: usize = 8;

/// Every node's forget epoch at one moment, in node order: a slice
/// (`Deref`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Epochs(Stored);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Stored {
    InPlace {
        epochs: [u64; EPOCHS_IN_PLACE],
        n: usize,
    },
    Listed(Box<[u64]>),
}

/// Epochs given as a list (tests of the lease, which take no snapshot).
#[cfg(test)]
impl From<Vec<u64>> for Epochs {
    fn from(epochs: Vec<u64>) -> Self {
        Self(Stored::Listed(epochs.into_boxed_slice()))
    }
}

impl std::ops::Deref for Epochs {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        match &self.0 {
            Stored::InPlace { epochs, n } => &epochs[..*n],
            Stored::Listed(epochs) => epochs,
        }
    }
}

/// The forget epochs of one engine's nodes.
pub(crate) struct Forgets {
    epochs: Box<[AtomicU64]>,
    hook: OnceLock<ForgetHook>,
}

impl Forgets {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            epochs: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            hook: OnceLock::new(),
        }
    }

    /// Every node's epoch now, in node order.
    pub(crate) fn snapshot(&self) -> Epochs {
        let now = self.epochs.iter().map(|e| e.load(Ordering::SeqCst));
        let n = self.epochs.len();
        if n > EPOCHS_IN_PLACE {
            return Epochs(Stored::Listed(now.collect()));
        }
        let mut epochs = [0; EPOCHS_IN_PLACE];
        epochs.iter_mut().zip(now).for_each(|(slot, e)| *slot = e);
        Epochs(Stored::InPlace { epochs, n })
    }

    /// One node's epoch now (0 for a node that does not exist).
    pub(crate) fn epoch(&self, node: usize) -> u64 {
        self.epochs
            .get(node)
            .map_or(0, |e| e.load(Ordering::SeqCst))
    }

    /// Sets the hook (once; a second call is ignored).
    pub(crate) fn set_hook(&self, hook: ForgetHook) {
        let _ = self.hook.set(hook);
    }

    /// Records that `node` may have forgotten keys, `why`, and calls the
    /// hook. The epoch moves first: a lease made after this sees it.
    pub(crate) fn note(&self, node: usize, why: &str) {
        if let Some(epoch) = self.epochs.get(node) {
            epoch.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(hook) = self.hook.get() {
            hook(node, why);
        }
    }
}

impl fmt::Debug for Forgets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forgets")
            .field("epochs", &&*self.snapshot())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;

    #[test]
    fn a_forget_moves_the_epoch_before_the_hook_hears_it() {
        let forgets = Arc::new(Forgets::new(3));
        let heard = Arc::new(Mutex::new(Vec::new()));
        forgets.note(1, "before the hook");
        let (seen, inner) = (Arc::clone(&heard), Arc::downgrade(&forgets));
        forgets.set_hook(Box::new(move |node, why| {
            let epoch = inner.upgrade().map(|f| f.epoch(node));
            seen.lock().push((node, why.to_owned(), epoch));
        }));
        forgets.note(2, "evicting");
        assert_eq!(*forgets.snapshot(), [0, 1, 1]);
        let many = Forgets::new(EPOCHS_IN_PLACE + 2);
        many.note(EPOCHS_IN_PLACE + 1, "beyond the place kept");
        let mut expected = [0; EPOCHS_IN_PLACE + 2];
        expected[EPOCHS_IN_PLACE + 1] = 1;
        assert_eq!(*many.snapshot(), expected);
        assert_eq!(*heard.lock(), [(2, "evicting".to_owned(), Some(1))]);
        assert_eq!(forgets.epoch(7), 0);
    }
}
