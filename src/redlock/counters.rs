//! What happened to a manager's locks, counted for `health()` snapshots.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;
use crate::health::LockCounters;

/// One counter per outcome; relaxed atomics, read only by snapshots.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquired: AtomicU64,
    contended: AtomicU64,
    no_quorum: AtomicU64,
    validity_expired: AtomicU64,
    lost: AtomicU64,
    extends_ok: AtomicU64,
    extends_failed: AtomicU64,
    hand_overs: AtomicU64,
    woken: AtomicU64,
    yielded: AtomicU64,
    held_back: AtomicU64,
}

/// Something worth counting.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Acquired,
    Lost,
    ExtendOk,
    ExtendFailed,
    HandOver,
    /// A wait between attempts ended by a release notice.
    Woken,
    /// A lock let the processes already waiting go first.
    Yielded,
    /// A wait between attempts heard a release notice but went on to its
    /// retry delay: its early wake-ups were spent.
    HeldBack,
}

impl Counters {
    pub(crate) fn note(&self, event: Event) {
        let (counter, field) = match event {
            Event::Acquired => (&self.acquired, "acquired"),
            Event::Lost => (&self.lost, "lost"),
            Event::ExtendOk => (&self.extends_ok, "extends_ok"),
            Event::ExtendFailed => (&self.extends_failed, "extends_failed"),
            Event::HandOver => (&self.hand_overs, "hand_overs"),
            Event::Woken => (&self.woken, "woken"),
            Event::Yielded => (&self.yielded, "yielded"),
            Event::HeldBack => (&self.held_back, "held_back"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        crate::metrics::count(field);
    }

    /// Counts a failed acquire attempt by its kind.
    pub(crate) fn note_failed_attempt(&self, error: &Error) {
        let (counter, field) = match error {
            Error::Contended { .. } => (&self.contended, "contended"),
            Error::ValidityExpired { .. } => (&self.validity_expired, "validity_expired"),
            _ => (&self.no_quorum, "no_quorum"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        crate::metrics::count(field);
    }

    pub(crate) fn snapshot(&self) -> LockCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LockCounters {
            acquired: get(&self.acquired),
            contended: get(&self.contended),
            no_quorum: get(&self.no_quorum),
            validity_expired: get(&self.validity_expired),
            lost: get(&self.lost),
            extends_ok: get(&self.extends_ok),
            extends_failed: get(&self.extends_failed),
            hand_overs: get(&self.hand_overs),
            woken: get(&self.woken),
            yielded: get(&self.yielded),
            held_back: get(&self.held_back),
        }
    }
}
