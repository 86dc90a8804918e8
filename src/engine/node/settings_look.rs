//! When a node's thread reads its server's settings by itself: while a
//! lock may be held on the node (up to max TTL after its last grant) and
//! no batch has brought them for [`SETTINGS_MAX_AGE`]. A server switched to
//! an evicting policy at run time, or turned replica, is then seen within
//! about twice that age, not at the next lock call, which may never come.

use std::time::{Duration, Instant};

use crate::backend::SETTINGS_MAX_AGE;

/// The schedule of one node's background look at its settings.
#[derive(Debug)]
pub(crate) struct SettingsLook {
    /// How long after a grant a lock may still be held (max TTL).
    window: Duration,
    /// Until when a lock may be held on the node.
    held_until: Option<Instant>,
    /// When the settings last came (with a batch, or from a look).
    seen_at: Option<Instant>,
}

impl SettingsLook {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            held_until: None,
            seen_at: None,
        }
    }

    /// The node granted an acquire or extend at `now`.
    pub(crate) fn granted(&mut self, now: Instant) {
        self.held_until = Some(now + self.window);
    }

    /// The server's settings came at `now`.
    pub(crate) fn seen(&mut self, now: Instant) {
        self.seen_at = Some(now);
    }

    /// When the next look is due, if a lock may still be held then.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let held_until = self.held_until?;
        let at = self
            .seen_at
            .map_or(Some(held_until), |seen| seen.checked_add(SETTINGS_MAX_AGE))?;
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
    fn looks_come_every_settings_age_while_a_lock_may_be_held() {
        let t0 = Instant::now();
        let mut look = SettingsLook::new(Duration::from_secs(5));
        assert_eq!(
            look.next_wake(),
            None,
            "nothing granted: nothing to look for"
        );
        look.seen(t0);
        assert_eq!(look.next_wake(), None);
        look.granted(t0);
        assert_eq!(look.next_wake(), Some(t0 + SETTINGS_MAX_AGE));
        assert!(!look.due(t0) && look.due(t0 + SETTINGS_MAX_AGE));
        // A batch brought them: the look moves on.
        let t1 = t0 + Duration::from_millis(300);
        look.seen(t1);
        assert_eq!(look.next_wake(), Some(t1 + SETTINGS_MAX_AGE));
        // Past max TTL after the last grant no lock can be held: no look.
        look.seen(t0 + Duration::from_secs(5));
        assert_eq!(look.next_wake(), None);
    }
}
