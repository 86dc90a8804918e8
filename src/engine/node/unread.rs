//! The one batch a node may have on the wire unread: a round that was
//! decided before this node answered leaves its batch here, in the node's
//! state, instead of waking the node's thread to read it; and a batch of
//! queued operations waits here for the reader (`../reader.rs`), which
//! reads it when its answers arrive (due for the node's thread after
//! `WATCH_GRACE` should the reader not come first).
//!
//! Whoever next takes the node's state reads it first: the next caller
//! that drives the node (a parked batch alone does not make the node
//! busy: that caller reads the late answer among its own round's, then
//! sends; `../drive.rs`), the node's thread before any job or timer work,
//! or, when nobody comes, the node's thread at the batch's due time
//! ([`UNREAD_GRACE`] after it was parked; part of the state's poll
//! timeout, told to the sleeping thread with `queue::Sender::wake_by`).
//! Nothing is sent to the node while a batch is parked: every send first
//! takes the parked batch ([`Line::take`]) and reads it, so a node's next
//! batch is written only after the previous one is read (per-node FIFO on
//! the wire, whatever connection each batch uses), and a batch is read
//! exactly once (it is moved out of the line by the one reader that takes
//! it).
//!
//! The rule is checked by loom over every interleaving of a node thread
//! and two callers, with the gate, the job queue and the callers that run
//! what is queued behind them (`wire_order.rs`), with canaries that break
//! it (src/canary.rs).

use std::time::{Duration, Instant};

use crate::canary::{self, Canary};

/// How long a parked batch waits for a caller before the node's thread
/// reads it. While callers keep coming, they read it (no thread hand-off)
/// and the thread wakes about once per grace to find nothing due; when
/// they stop, its answer is read (and its votes, liveness and release
/// retries acted on) at most this much after the round left it.
pub(crate) const UNREAD_GRACE: Duration = Duration::from_millis(5);

/// A node's parked batch, if any, and when the node's thread must read it.
#[derive(Debug)]
pub(crate) struct Line<B> {
    parked: Option<(B, Instant)>,
}

impl<B> Default for Line<B> {
    fn default() -> Self {
        Self { parked: None }
    }
}

impl<B> Line<B> {
    /// Parks `batch`, left unread at `now`: due at `now` + grace. The line
    /// must be empty (every send takes the parked batch first).
    pub(crate) fn park(&mut self, batch: B, now: Instant) {
        self.park_for(batch, now + UNREAD_GRACE);
    }

    /// Parks `batch`, due at `due`. The line must be empty.
    pub(crate) fn park_for(&mut self, batch: B, due: Instant) {
        debug_assert!(self.parked.is_none(), "a batch parked over another");
        self.parked = Some((batch, due));
    }

    /// The parked batch, if any.
    pub(crate) fn parked(&self) -> Option<&B> {
        self.parked.as_ref().map(|(batch, _)| batch)
    }

    /// Takes the parked batch, to read it before anything else is sent.
    pub(crate) fn take(&mut self) -> Option<B> {
        if canary::on(Canary::SendOverUnread) {
            // Broken: the sender goes on without reading what is parked.
            return None;
        }
        self.parked.take().map(|(batch, _)| batch)
    }

    /// The parked batch, if any (to see whether its answer is in).
    pub(crate) fn parked_mut(&mut self) -> Option<&mut B> {
        self.parked.as_mut().map(|(batch, _)| batch)
    }

    /// When the node's thread must read the parked batch, if one is.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.parked.as_ref().map(|(_, due)| *due)
    }

    /// A broken line for a canary: parks `batch` over the one already
    /// parked, which comes back as if read (two batches on the wire).
    #[cfg(all(test, loom))]
    pub(crate) fn park_over(&mut self, batch: B, now: Instant) -> Option<B> {
        let old = self.parked.take().map(|(old, _)| old);
        self.parked = Some((batch, now + UNREAD_GRACE));
        old
    }
}
