//! The streak of local turns: how many turns (or hand-overs) of one key
//! the threads of a manager have taken in a row (see `turns.rs`), and when
//! the next one must yield, so that other processes get a chance at the
//! lock.

/// Local turns taken in a row for one key. After [`MAX_STREAK`] the next
/// turn starts with a pause, so other processes get a window to win the
/// lock: a waiter's acquire is otherwise queued right behind the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Streak {
    /// Turns (or hand-overs) in a row before this one.
    pub(crate) count: u32,
    /// Pause one retry delay before contending.
    pub(crate) yield_first: bool,
}

/// Most local turns (or hand-overs) in a row before one yields to others.
pub(crate) const MAX_STREAK: u32 = 64;

impl Streak {
    /// The streak of the turn after this one.
    pub(crate) fn next(self) -> Self {
        if self.count + 1 >= MAX_STREAK {
            Self {
                count: 0,
                yield_first: true,
            }
        } else {
            Self {
                count: self.count + 1,
                yield_first: false,
            }
        }
    }
}
