//! When a node's thread reads its server's settings by itself: while a
//! lock may be held on the node (up to max TTL after its last grant) and
//! the settings it has may be [`LOOK_EVERY`] old. A server switched to an
//! evicting policy at run time, or turned replica, is then seen within
//! about a second, not at the next lock call, which may never come.
//!
//! A batch's answers carry the settings its connection last read, which
//! the backend reads again once they are [`SETTINGS_MAX_AGE`] old: so
//! they count as read that long before they came. A look reads them
//! there and then (the backend asks for them, however fresh its own copy:
//! a look that found them fresh and only pinged the server was a wasted
//! wake every other time, when the look's clock ran ahead of the
//! connection's).

use std::time::{Duration, Instant};

use crate::backend::SETTINGS_MAX_AGE;

/// How old a node's settings may grow before its thread reads them
/// itself, while a lock may be held: twice what a batch accepts. An
/// idle holder's nodes are woken once a second each for it; every 500 ms
/// would double those wakes and the servers' `INFO` for a bound nobody
/// asked for.
pub(crate) const LOOK_EVERY: Duration = SETTINGS_MAX_AGE.saturating_mul(2);

/// The schedule of one node's background look at its settings.
#[derive(Debug)]
pub(crate) struct SettingsLook {
    /// How long after a grant a lock may still be held (max TTL).
    window: Duration,
    /// Until when a lock may be held on the node.
    held_until: Option<Instant>,
    /// The settings known now were read at this instant or later.
    read_since: Option<Instant>,
}

impl SettingsLook {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            held_until: None,
            read_since: None,
        }
    }

    /// The node granted an acquire or extend at `now`.
    pub(crate) fn granted(&mut self, now: Instant) {
        self.held_until = Some(now + self.window);
    }

    /// A batch's answers brought the settings at `now` (read by the
    /// connection at most [`SETTINGS_MAX_AGE`] before).
    pub(crate) fn brought(&mut self, now: Instant) {
        self.read_at(now.checked_sub(SETTINGS_MAX_AGE).unwrap_or(now));
    }

    /// A look read them (or tried to) at `now`.
    pub(crate) fn looked(&mut self, now: Instant) {
        self.read_at(now);
    }

    fn read_at(&mut self, at: Instant) {
        // Never older than what is known already.
        self.read_since = Some(self.read_since.map_or(at, |known| known.max(at)));
    }

    /// When the next look is due, if a lock may still be held then.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let held_until = self.held_until?;
        let at = self
            .read_since
            .map_or(Some(held_until), |read| read.checked_add(LOOK_EVERY))?;
        (at < held_until).then_some(at)
    }

    /// Whether a look is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.next_wake().is_some_and(|at| now >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_come_a_second_after_the_settings_were_read_while_a_lock_may_be_held() {
        let t0 = Instant::now() + Duration::from_secs(1);
        let mut look = SettingsLook::new(Duration::from_secs(5));
        assert_eq!(
            look.next_wake(),
            None,
            "nothing granted: nothing to look for"
        );
        look.looked(t0);
        assert_eq!(look.next_wake(), None);
        look.granted(t0);
        assert_eq!(look.next_wake(), Some(t0 + LOOK_EVERY));
        assert!(!look.due(t0) && look.due(t0 + LOOK_EVERY));
        // A batch brought them: read up to SETTINGS_MAX_AGE before it
        // came, so the look comes that much sooner than after a look.
        let t1 = t0 + Duration::from_millis(800);
        look.brought(t1);
        assert_eq!(look.next_wake(), Some(t1 - SETTINGS_MAX_AGE + LOOK_EVERY));
        // An older batch's settings never move the look back.
        look.brought(t0 + Duration::from_millis(100));
        assert_eq!(look.next_wake(), Some(t1 - SETTINGS_MAX_AGE + LOOK_EVERY));
        // Nor does a batch right after a look move it later than the look.
        let t2 = t1 + Duration::from_millis(500);
        look.looked(t2);
        look.brought(t2 + Duration::from_millis(10));
        assert_eq!(look.next_wake(), Some(t2 + LOOK_EVERY));
        // Past max TTL after the last grant no lock can be held: no look.
        look.looked(t0 + Duration::from_secs(5));
        assert_eq!(look.next_wake(), None);
    }
}
