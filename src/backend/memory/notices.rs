//! Release notices of an in-memory node, like Redis pub/sub: a release
//! that deletes a key announces it to every listener of that key, and the
//! release's reply says how many heard it. A listener is woken at each
//! notice ([`ReleaseListener::wake_on_arrival`]), once the node's lock is
//! let go.

use std::collections::HashSet;

use super::MemoryBackend;
use crate::backend::{BackendError, BackendErrorKind, NoticeWaker, ReleaseListener};

/// One listener's subscriptions, the notices not yet taken, and how to
/// wake its owner.
#[derive(Default)]
pub(super) struct Inbox {
    keys: HashSet<Vec<u8>>,
    arrived: Vec<Vec<u8>>,
    waker: Option<NoticeWaker>,
}

impl Inbox {
    /// Listens for nothing and forgets what arrived (notices turned off).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.arrived.clear();
    }

    /// How many keys it listens for.
    #[cfg(test)]
    pub(super) fn listens(&self) -> usize {
        self.keys.len()
    }

    /// Takes the notice of `key`'s release when this listener listens for
    /// it: `None` when it does not, else the waker to call (once the
    /// node's lock is let go), if its owner left one.
    pub(super) fn hear(&mut self, key: &[u8]) -> Option<Option<NoticeWaker>> {
        if !self.keys.contains(key) {
            return None;
        }
        self.arrived.push(key.to_vec());
        Some(self.waker.clone())
    }
}

/// A listener on one in-memory node (see [`MemoryBackend::set_release_notices`]).
pub(super) struct MemoryListener {
    node: MemoryBackend,
    id: u64,
}

impl MemoryListener {
    pub(super) fn new(node: &MemoryBackend) -> Self {
        let mut state = node.inner.state.lock();
        let id = state.next_listener;
        state.next_listener += 1;
        state.listeners.insert(id, Inbox::default());
        drop(state);
        Self {
            node: node.clone(),
            id,
        }
    }
}

impl ReleaseListener for MemoryListener {
    fn listen(&mut self, keys: &[&[u8]]) -> Result<(), BackendError> {
        let mut state = self.node.inner.state.lock();
        state.listen_calls += 1;
        let refusal = if state.down {
            Some((BackendErrorKind::Unreachable, "node is down (injected)"))
        } else if !state.notices_on && !keys.is_empty() {
            Some((
                BackendErrorKind::Denied,
                "release notices are off (injected)",
            ))
        } else {
            None
        };
        let inbox = state.listeners.entry(self.id).or_default();
        inbox.keys.clear();
        if let Some((kind, why)) = refusal {
            return Err(BackendError::new(kind, why));
        }
        inbox.keys.extend(keys.iter().map(|k| k.to_vec()));
        Ok(())
    }

    fn receive(&mut self) -> Result<Vec<Vec<u8>>, BackendError> {
        let mut state = self.node.inner.state.lock();
        Ok(state
            .listeners
            .get_mut(&self.id)
            .map(|inbox| std::mem::take(&mut inbox.arrived))
            .unwrap_or_default())
    }

    fn wake_on_arrival(&mut self, waker: NoticeWaker) -> bool {
        let mut state = self.node.inner.state.lock();
        state.listeners.entry(self.id).or_default().waker = Some(waker);
        true
    }

    /// Yes: a release rings its listeners after it let go of the node's
    /// lock, the one `receive` takes.
    fn may_receive_in_wake(&self) -> bool {
        true
    }
}

impl Drop for MemoryListener {
    fn drop(&mut self) {
        self.node.inner.state.lock().listeners.remove(&self.id);
    }
}
