//! Test-only switches that undo a protection of the line, so the line
//! explorer can show it fails without it. Per thread: other tests are
//! unaffected.

use std::cell::Cell;

/// Which protections are undone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Broken {
    /// Leaving the line does not take a turn that arrived meanwhile.
    pub(crate) leave_ignores_turns: bool,
    /// The first waiter takes the turn while the holder's lock is
    /// still valid.
    pub(crate) ignore_validity: bool,
    /// A ticket the line has moved past still passes the turn.
    pub(crate) stale_tickets_pass: bool,
}

thread_local! {
    static BROKEN: Cell<Broken> = Cell::new(Broken::default());
}

/// The switches in force on this thread.
pub(crate) fn get() -> Broken {
    BROKEN.with(Cell::get)
}

/// Runs `f` on this thread with `broken` in force.
pub(crate) fn with<T>(broken: Broken, f: impl FnOnce() -> T) -> T {
    BROKEN.with(|b| b.set(broken));
    let result = f();
    BROKEN.with(|b| b.set(Broken::default()));
    result
}
