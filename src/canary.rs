//! Canaries: switches that each undo one protection of the crate's code, so
//! that a check (an explorer of `src/redlock/checks/`, or loom on the gate)
//! can show it finds the failure that protection prevents.
//!
//! The code asks [`on`] where it makes the protection: `if canary::on(..)`
//! takes the broken path. Outside `cfg(test)`, [`on`] is a `const fn` that
//! returns `false`, so the branch is compiled out of the library. In tests,
//! `with` turns one canary on for the current thread while a closure runs:
//! other tests (other threads) are unaffected. loom runs the threads of its
//! model as coroutines on the test's own thread, so they all see it.

/// One protection that a canary test undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Canary {
    /// engine/gate.rs: a job is counted only after it is visible in the
    /// node's queue.
    GateCountsAfterSend,
    /// engine/gate.rs: the state lock alone decides idleness (the count of
    /// queued jobs is ignored).
    GateIgnoresCount,
    /// engine/node/unread.rs: a send goes on without reading the batch
    /// parked unread before it.
    SendOverUnread,
    /// engine/node/queue.rs: once every sender is gone, the receiver
    /// ends with jobs still queued behind a driver (a batch parked with
    /// the reader) instead of running them.
    ClosedLeavesDrivenJobs,
    /// engine/node/queue.rs: a driver's end does not look at the queue, so
    /// a job queued while it drove (which woke nobody) is left there.
    DriverEndLooksAway,
    /// engine/node/queue.rs: a nudge does not wake the receiver, so a job
    /// sent quietly (a detached release of a wake chain) is left queued
    /// with nobody woken.
    NudgeWakesNobody,
    /// engine/node/queue.rs: a wake time sent to the receiver
    /// (`Sender::wake_by`) does not wake it, so it sleeps past a parked
    /// batch's due time.
    WakeByWakesNobody,
    /// engine/node/queue.rs: the receiver sleeps with the deadline it was
    /// given, not the earlier wake time sent to it before it slept.
    SleepIgnoresWakeBy,
    /// redlock/verdict.rs: any confirmed extend sets the deadline, not only
    /// the one begun last.
    AnyExtendSetsDeadline,
    /// redlock/verdict.rs: beginning an extend leaves the deadline as it
    /// was (no cap).
    NoBeginCap,
    /// redlock/turns.rs: leaving the line does not take a turn that
    /// arrived meanwhile.
    LeaveIgnoresTurns,
    /// redlock/turns.rs: the first waiter takes the turn while the
    /// holder's lock is still valid.
    IgnoreValidity,
    /// redlock/turns.rs: a ticket the line has moved past still passes the
    /// turn.
    StaleTicketsPass,
}

/// Whether `canary` is on: never, outside tests.
#[cfg(not(test))]
#[inline(always)]
pub(crate) const fn on(_canary: Canary) -> bool {
    false
}

/// Whether `canary` is on, on this thread.
#[cfg(test)]
pub(crate) fn on(canary: Canary) -> bool {
    ON.with(|on| on.get() == Some(canary))
}

#[cfg(test)]
thread_local! {
    static ON: std::cell::Cell<Option<Canary>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` on this thread with `canary` on (and turns it off again, even
/// if `f` panics).
#[cfg(test)]
pub(crate) fn with<T>(canary: Canary, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Canary>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ON.with(|on| on.set(self.0));
        }
    }
    let _restore = Restore(ON.with(|on| on.replace(Some(canary))));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_is_on_only_inside_with_and_only_itself() {
        assert!(!on(Canary::NoBeginCap));
        with(Canary::NoBeginCap, || {
            assert!(on(Canary::NoBeginCap));
            assert!(!on(Canary::AnyExtendSetsDeadline));
            let other = std::thread::spawn(|| on(Canary::NoBeginCap));
            assert!(!other.join().unwrap_or(true), "another thread saw it");
        });
        assert!(!on(Canary::NoBeginCap));
    }
}
