//! A lock server whose release listeners count how often they are asked
//! for notices ([`CountedNotices`]): a node thread that polls asks about
//! once a millisecond, one that sleeps until a notice arrives asks once
//! per wake-up. Wraps any backend, so the in-memory and the real-server
//! tests count the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorum_lock::backend::{
    Backend, BackendError, InFlight, Inspect, NoticeWaker, Op, Probe, ReleaseListener,
};

/// `node`, with every `receive` of its release listeners counted in one
/// shared counter.
#[derive(Debug)]
pub struct CountedNotices<B> {
    node: B,
    receives: Arc<AtomicU64>,
}

impl<B: Backend> CountedNotices<B> {
    /// `node`, counting into `receives` (share one counter among a
    /// manager's nodes to count them all).
    pub fn new(node: B, receives: &Arc<AtomicU64>) -> Self {
        Self {
            node,
            receives: Arc::clone(receives),
        }
    }
}

/// A listener that counts its `receive` calls and passes everything on.
struct CountedListener {
    inner: Box<dyn ReleaseListener>,
    receives: Arc<AtomicU64>,
}

impl ReleaseListener for CountedListener {
    fn listen(&mut self, keys: &[&[u8]]) -> Result<(), BackendError> {
        self.inner.listen(keys)
    }
    fn receive(&mut self) -> Result<Vec<Vec<u8>>, BackendError> {
        self.receives.fetch_add(1, Ordering::Relaxed);
        self.inner.receive()
    }
    fn wake_on_arrival(&mut self, waker: NoticeWaker) -> bool {
        self.inner.wake_on_arrival(waker)
    }
    fn may_receive_in_wake(&self) -> bool {
        self.inner.may_receive_in_wake()
    }
}

impl<B: Backend> Backend for CountedNotices<B> {
    fn describe(&self) -> String {
        self.node.describe()
    }
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        self.node.send(ops)
    }
    fn call_timeout(&self) -> Option<Duration> {
        self.node.call_timeout()
    }
    fn probe(&self) -> Option<&dyn Probe> {
        self.node.probe()
    }
    fn inspector(&self) -> Option<&dyn Inspect> {
        self.node.inspector()
    }
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        let inner = self.node.release_listener()?;
        Some(Box::new(CountedListener {
            inner,
            receives: Arc::clone(&self.receives),
        }))
    }
}
