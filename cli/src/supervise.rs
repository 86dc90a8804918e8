//! Holding the lock while the command runs: the tool extends it itself (at
//! a third of the TTL), forwards signals, and stops the command when the
//! lock is lost, early enough that it is gone before the lock's validity
//! ends and someone else can take it.
//!
//! The tool extends rather than the library's watchdog so that it knows
//! the deadline of the last successful extend (the guard forgets it once
//! the lock is lost, and the grace after SIGTERM is bounded by it), and so
//! that `--min-hold` can end the lock near a chosen time (`hold.rs`).

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use quorum_lock::{LockGuard, LockManager};

use crate::child::{Child, Ended};
use crate::notice::Notices;
use crate::signals::Signals;

/// Longest sleep between looks at the command, the signals and the lock.
pub(crate) const POLL: Duration = Duration::from_millis(50);
/// The command must be gone this long before the lock's validity ends:
/// time for SIGKILL to take effect and the tool to see it, on a loaded
/// machine.
pub(crate) const KILL_MARGIN: Duration = Duration::from_millis(250);

/// A held lock and what is known of it.
pub(crate) struct Held {
    pub(crate) guard: LockGuard,
    /// The TTL of every regular extend.
    pub(crate) ttl: Duration,
    /// The end of the validity, conservative: never later than the
    /// library's deadline, and kept when a failed extend makes the guard
    /// report zero.
    pub(crate) deadline: Instant,
    /// When the next regular extend is due.
    next_extend: Instant,
    /// What has been said of the nodes (a node that fails an extend or
    /// the release is named once).
    pub(crate) notices: Notices,
}

impl Held {
    pub(crate) fn new(guard: LockGuard, ttl: Duration) -> Self {
        let now = Instant::now();
        let deadline = now + guard.validity();
        Self {
            guard,
            ttl,
            deadline,
            next_extend: now + ttl / 3,
            notices: Notices::quiet(),
        }
    }

    /// Releases the lock; names the nodes that failed to (their copies
    /// stay until they expire). The error of a release no quorum
    /// answered.
    pub(crate) fn release(self) -> Result<(), String> {
        let ttl = self.guard.ttl();
        match self.guard.release() {
            Ok(report) => {
                self.notices.released(&report, ttl);
                Ok(())
            }
            Err(e) => Err(crate::wording::flags(&e.to_string())),
        }
    }

    /// Extends by `ttl`; the reason on failure (the lock may be lost).
    pub(crate) fn extend(&mut self, locks: &LockManager, ttl: Duration) -> Result<(), String> {
        let begun = Instant::now();
        // A failed extend may still have been applied on some nodes: with a
        // shorter TTL their keys now expire sooner than the old deadline.
        let bound = begun + ttl.saturating_sub(locks.drift_for(ttl));
        let result = self.guard.extend(ttl);
        self.deadline = self.deadline.min(bound);
        match result {
            Ok(validity) => {
                self.deadline = begun + validity;
                self.next_extend = begun + self.ttl / 3;
                self.notices.extended(locks);
                Ok(())
            }
            Err(e) => Err(crate::wording::flags(&e.to_string())),
        }
    }

    /// Whether a regular extend is due (a third of the TTL after the last).
    pub(crate) fn due(&self) -> bool {
        Instant::now() >= self.next_extend
    }

    /// Extends if one is due; checks the validity otherwise.
    fn keep(&mut self, locks: &LockManager) -> Result<(), String> {
        if self.due() {
            return self.extend(locks, self.ttl);
        }
        self.guard
            .check()
            .map_err(|e| crate::wording::flags(&e.to_string()))
    }
}

/// How the command's run ended.
pub(crate) enum Outcome {
    /// It ended with the lock held throughout; the last signal forwarded
    /// to it, if any.
    Ended(Ended, Option<Signal>),
    /// The lock was lost (said on stderr when it was found); the command
    /// was stopped.
    Lost,
    /// Waiting for it failed.
    Failed(std::io::Error),
}

/// What becomes of the processes the command left in its process group
/// when it ends (its background children, a script's helpers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rest {
    /// SIGTERM (and SIGCONT), SIGKILL after `--kill-after`; the lock is
    /// kept until they are gone. The default.
    Stop,
    /// Waited for with the lock kept (and extended): `--wait-group`.
    Wait,
    /// Let go: they run on after the lock is released, as a daemon
    /// started on purpose (`--leave-group`).
    Leave,
}

/// After SIGKILL to the group, the longest wait for it to be gone: a
/// process in an uninterruptible sleep dies when it leaves it (it runs
/// no more code of its own), a zombie whose parent does not collect it
/// never goes.
const GONE_WAIT: Duration = Duration::from_secs(1);

/// Settings of the watch.
pub(crate) struct Watch<'a> {
    pub(crate) locks: &'a LockManager,
    pub(crate) signals: &'a Signals,
    pub(crate) kill_after: Duration,
    pub(crate) rest: Rest,
    /// The lock's name, for messages.
    pub(crate) name: &'a str,
}

impl Watch<'_> {
    /// Runs until the command has ended and, unless let go, every process
    /// left in its group too (after a loss always: none of them may run
    /// on without the lock).
    pub(crate) fn run(&self, held: &mut Held, child: &mut Child) -> Outcome {
        let mut kill_at: Option<Instant> = None;
        let mut killed_at: Option<Instant> = None;
        let mut lost: Option<String> = None;
        let mut forwarded = None;
        let mut ended = None;
        loop {
            if ended.is_none() {
                match child.poll() {
                    Ok(Some(how)) => {
                        ended = Some(how);
                        if lost.is_none() && self.rest == Rest::Stop && child.group_alive() {
                            let at = self.stop_rest(child);
                            kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return Outcome::Failed(e),
                }
            }
            if let Some(how) = ended {
                let done = (self.rest == Rest::Leave && lost.is_none())
                    || child.group_gone()
                    || killed_at.is_some_and(|at| at.elapsed() >= GONE_WAIT);
                if done {
                    return match lost {
                        Some(_) => Outcome::Lost,
                        None => Outcome::Ended(how, forwarded),
                    };
                }
                if killed_at.is_some() {
                    // Whatever was being forked as the first one came.
                    child.signal(Signal::SIGKILL);
                }
            }
            child.keep_guardian();
            for signal in self.signals.take() {
                child.signal(signal);
                forwarded = Some(signal);
                if signal == Signal::SIGTERM {
                    let at = Instant::now() + self.kill_after;
                    kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                }
            }
            if lost.is_none()
                && let Err(why) = held.keep(self.locks)
            {
                let at = self.stop_after_loss(held.deadline, &why, child);
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                lost = Some(why);
            }
            let now = Instant::now();
            if kill_at.is_some_and(|at| now >= at) {
                child.signal(Signal::SIGKILL);
                kill_at = None;
                killed_at.get_or_insert(now);
            }
            let mut wake = now + POLL;
            if lost.is_none() {
                wake = wake.min(held.next_extend);
            }
            if let Some(at) = kill_at {
                wake = wake.min(at);
            }
            std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        }
    }

    /// The command ended and left processes in its group: SIGTERM to
    /// them (and SIGCONT, should they be stopped); when to SIGKILL them.
    fn stop_rest(&self, child: &Child) -> Instant {
        crate::logger::warn(&format!(
            "the command ended and left processes in its process group: SIGTERM to them, \
             SIGKILL in {} ms, before {} is released (--wait-group waits for them, \
             --leave-group lets them run)",
            self.kill_after.as_millis(),
            self.name
        ));
        child.signal(Signal::SIGTERM);
        child.signal(Signal::SIGCONT);
        Instant::now() + self.kill_after
    }

    /// SIGTERM to the command, and when to SIGKILL it: after
    /// `--kill-after`, but never later than the validity left less a margin.
    /// The loss is said here, once, with what is done about it (an error:
    /// `-q` does not silence it; the library's own warning of it is left
    /// out, see `logger.rs`).
    fn stop_after_loss(&self, deadline: Instant, why: &str, child: &Child) -> Instant {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        let grace = self.kill_after.min(left.saturating_sub(KILL_MARGIN));
        if grace.is_zero() {
            eprintln!(
                "quorum-lock: {why}; the lock's validity is (nearly) over: SIGKILL to the \
                 command now"
            );
            child.signal(Signal::SIGKILL);
            return now;
        }
        child.signal(Signal::SIGTERM);
        let shortened = if grace < self.kill_after {
            format!(
                ", before the lock's validity ends (not after --kill-after {} ms)",
                self.kill_after.as_millis()
            )
        } else {
            String::new()
        };
        eprintln!(
            "quorum-lock: {why}; stopping the command: SIGTERM, SIGKILL in {} ms{shortened}",
            grace.as_millis()
        );
        now + grace
    }
}
