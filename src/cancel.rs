//! [`CancellationToken`]: stops a wait for a lock from another thread, and
//! the [`Alarm`] every waiting call sleeps on.
//!
//! A waiting call never sleeps with `thread::sleep`: it waits on its
//! alarm's channel with a deadline, so anything that has the alarm's
//! sender (today the cancellation token; later a wake-up when the lock is
//! released elsewhere) ends the sleep at once.

use std::cell::OnceCell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// Cancels the waits that use it: [`LockManager::lock_with`] with
/// [`LockOptions::cancellation`] returns [`Error::Cancelled`] within a few
/// milliseconds of [`cancel`](Self::cancel), plus at most one node timeout
/// when a round is in flight (it is never cut off half-way: an attempt
/// whose outcome is not known is released on every node, as any failed
/// attempt is).
///
/// Cancelling interrupts the pause between attempts and the wait for the
/// local line (threads of the same manager waiting for the same resource),
/// and is checked before every attempt. A token cancelled before the call
/// makes it fail before any node is contacted. Cancelling is for good:
/// a cancelled token stays cancelled; use a new token for new work.
///
/// Cheap to clone (an `Arc`): clones cancel together. One token may serve
/// any number of calls on any threads, typically everything a shutdown
/// must stop.
///
/// ```
/// use std::time::Duration;
/// use quorum_lock::{CancellationToken, LockManager, LockOptions, MemoryBackend};
///
/// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
/// let held = locks.try_lock("job")?;
///
/// let shutdown = CancellationToken::new();
/// let waiter = {
///     let (locks, shutdown) = (locks.clone(), shutdown.clone());
///     std::thread::spawn(move || {
///         let opts = LockOptions::new()
///             .wait(Duration::from_secs(30))
///             .cancellation(&shutdown);
///         locks.lock_with("job", &opts).map(drop)
///     })
/// };
/// shutdown.cancel(); // e.g. on SIGTERM
/// let err = waiter.join().unwrap().unwrap_err();
/// assert!(err.is_cancelled());
/// drop(held);
/// # Ok::<(), quorum_lock::Error>(())
/// ```
///
/// [`LockManager::lock_with`]: crate::LockManager::lock_with
/// [`LockOptions::cancellation`]: crate::LockOptions::cancellation
/// [`Error::Cancelled`]: crate::Error::Cancelled
#[derive(Clone, Default)]
pub struct CancellationToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Set once, before the listeners are signalled (see [`Alarm::new`]).
    cancelled: AtomicBool,
    listeners: Mutex<Listeners>,
}

/// The alarms of the calls waiting with this token now.
#[derive(Default)]
struct Listeners {
    next_id: u64,
    alarms: Vec<(u64, Sender<Signal>)>,
}

impl CancellationToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait that uses this token (or a clone of it), now and
    /// later. Idempotent; never blocks on the network.
    pub fn cancel(&self) {
        // The flag first: an alarm registered after the listeners are
        // drained below sees it when it checks (it registers under the
        // same lock, after this store).
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let alarms = std::mem::take(&mut self.inner.listeners.lock().alarms);
        for (_, alarm) in alarms {
            // A full alarm is already set to go off; it checks the flag.
            let _ = alarm.try_send(Signal::Cancelled);
        }
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    fn listen(&self, alarm: Sender<Signal>) -> u64 {
        let mut listeners = self.inner.listeners.lock();
        let id = listeners.next_id;
        listeners.next_id += 1;
        listeners.alarms.push((id, alarm));
        id
    }

    fn unlisten(&self, id: u64) {
        self.inner.listeners.lock().alarms.retain(|(i, _)| *i != id);
    }
}

impl fmt::Debug for CancellationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancellationToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Why an [`Alarm`] went off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The call's token was cancelled.
    Cancelled,
}

/// What one waiting call sleeps on: a channel its cancellation token (and
/// later other sources of wake-ups) can signal. Registered with the token
/// for as long as the call waits.
pub(crate) struct Alarm {
    token: Option<(CancellationToken, u64)>,
    /// Made at once for a call with a token (which signals it), on first
    /// use otherwise: nothing else can signal it before the call waits,
    /// and a call that never waits (one attempt) does not pay for it.
    channel: OnceCell<(Sender<Signal>, Receiver<Signal>)>,
}

impl Alarm {
    /// The alarm of a call with `token` (or none).
    pub(crate) fn new(token: Option<&CancellationToken>) -> Self {
        let channel = OnceCell::new();
        let token = token.map(|t| {
            let (tx, _) = channel.get_or_init(Self::channel);
            (t.clone(), t.listen(tx.clone()))
        });
        Self { token, channel }
    }

    fn channel() -> (Sender<Signal>, Receiver<Signal>) {
        // One slot is enough: a signal waiting in it already ends the
        // next wait, and every wake-up re-checks the token's flag.
        crossbeam_channel::bounded(1)
    }

    fn rx(&self) -> &Receiver<Signal> {
        &self.channel.get_or_init(Self::channel).1
    }

    /// Whether the call's token has been cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.token.as_ref().is_some_and(|(t, _)| t.is_cancelled())
    }

    /// The channel to wait on together with others (`select`). After it
    /// delivers, check [`is_cancelled`](Self::is_cancelled).
    pub(crate) fn receiver(&self) -> &Receiver<Signal> {
        self.rx()
    }

    /// Sleeps for `pause` unless the alarm goes off first. Returns `true`
    /// when the whole pause was slept, `false` when interrupted.
    pub(crate) fn sleep(&self, pause: Duration) -> bool {
        if self.is_cancelled() {
            return false;
        }
        match Instant::now().checked_add(pause) {
            Some(until) => self.sleep_until(until),
            // Beyond what an Instant can hold: until the alarm goes off.
            None => {
                let _ = self.rx().recv();
                false
            }
        }
    }

    /// Sleeps until `until` (real time) unless the alarm goes off first.
    /// Returns `true` when it slept until then, `false` when interrupted.
    pub(crate) fn sleep_until(&self, until: Instant) -> bool {
        if self.is_cancelled() {
            return false;
        }
        // `recv_deadline` cannot fail as disconnected: we hold a sender.
        self.rx().recv_deadline(until).is_err() && !self.is_cancelled()
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let Some((token, id)) = &self.token {
            token.unlisten(*id);
        }
    }
}

impl fmt::Debug for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Alarm")
            .field("cancelled", &self.is_cancelled())
            .field("pending", &self.channel.get().map_or(0, |(tx, _)| tx.len()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::cancel::*;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn cancel_ends_a_sleep_and_stays_cancelled() {
        let token = CancellationToken::new();
        let alarm = Alarm::new(Some(&token));
        assert!(!alarm.is_cancelled());
        assert!(alarm.sleep(Duration::from_millis(1)), "slept in full");
        let sleeper = std::thread::spawn(move || {
            let slept = alarm.sleep(LONG);
            (slept, alarm.is_cancelled())
        });
        token.clone().cancel();
        assert_eq!(sleeper.join().unwrap(), (false, true));
        assert!(token.is_cancelled());
        // A later alarm on the same token never sleeps.
        let late = Alarm::new(Some(&token));
        assert!(!late.sleep(LONG));
        assert!(!late.sleep(Duration::MAX));
    }

    #[test]
    fn alarms_leave_the_token_when_dropped() {
        let token = CancellationToken::new();
        for _ in 0..100 {
            drop(Alarm::new(Some(&token)));
        }
        assert!(token.inner.listeners.lock().alarms.is_empty());
        let none = Alarm::new(None);
        assert!(!none.is_cancelled());
        assert!(none.sleep(Duration::ZERO));
    }

    #[test]
    fn the_token_is_clone_send_sync() {
        fn check<T: Clone + Send + Sync + 'static>() {}
        check::<CancellationToken>();
    }
}
