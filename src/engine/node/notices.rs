//! A node's part in the wake-ups: it keeps its node's subscription to
//! the release notices in line with the keys this manager's callers wait
//! for, reads the notices between jobs, and hands each one to the waiters
//! of its key (see [`Waiters`]).
//!
//! Notices are events: a listener that can ring the node's [`Doorbell`]
//! at each arrival (the Redis backend's reader thread, the memory
//! backend's release) wakes the node thread, which sleeps on its queue
//! otherwise (but for a look at the watched keys once a second while
//! subscribed, [`SUBSCRIPTION_CHECK`]), so a process whose threads only
//! wait for a lock uses next to no CPU. A listener that cannot (TLS, a backend without the ability)
//! is polled: while some key is watched, the node thread waits for jobs at
//! most [`NOTICE_POLL`] at a time and looks for notices in between. Like
//! the rest of the node's state, this takes the time as an argument.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::io;
use crate::backend::{Backend, KeySet, NoticeWaker, ReleaseListener, Reply};
use crate::engine::hold::Hold;
use crate::engine::waiters::Waiters;

/// How long a node thread waits for a job before it looks for release
/// notices, while some key is watched and its listener cannot ring:
/// about the longest a notice waits on the socket before the waiters hear
/// of it (the first node thread that reads one asks the others to read
/// theirs at once). Shorter wakes waiters sooner but wakes an idle node
/// thread more often (one non-blocking read each time), and only while
/// someone waits. Measured with 4 processes on one key and critical
/// sections of 2 ms (docs/benchmarks.md): 2 ms gave 1.56x the critical
/// sections' time in all, 1 ms 1.42x; 1 000 wake-ups a second per node
/// cost a few percent of a core while a manager waits.
pub(super) const NOTICE_POLL: Duration = Duration::from_millis(1);

/// How a listener reaches its node: the waker it is given rings the bell
/// only when it is not rung already, and the node answers it (clears it)
/// just before it takes the notices. So a burst of notices costs one ring,
/// and a notice that arrives after the take rings again: none is left
/// unread until the next job.
///
/// A ring takes the notices at once on the ringing thread (the listener's
/// reader thread, or the thread whose release on a memory node announced
/// it) when the listener allows it and nobody holds the node's state;
/// else it queues a wake-up for the node's thread, which takes them
/// (`worker.rs`), unless the holder was a caller or the reader driving
/// the node: that one takes them as it lets go, and drops the wake-up
/// (`serve_queue`). Taking them where they rang spares a thread hand-off
/// between a release and its waiters: counted with 4 processes taking
/// turns on one key, the node threads' context switches fell from 30 to
/// 12 per lock (docs/benchmarks.md).
#[derive(Clone)]
pub(crate) struct Doorbell {
    rung: Arc<AtomicBool>,
    /// Whether the node's listener took the waker (it rings at each
    /// arrival): its notices need no other wake-up.
    wired: Arc<AtomicBool>,
    /// Whether the listener lets its notices be taken inside the waker.
    take_here: Arc<AtomicBool>,
    ring: Arc<dyn Fn(bool) + Send + Sync>,
}

impl Doorbell {
    /// A bell that calls `ring` at a ring, with whether the notices may
    /// be taken on the ringing thread.
    pub(crate) fn new(ring: impl Fn(bool) + Send + Sync + 'static) -> Self {
        Self {
            rung: Arc::new(AtomicBool::new(false)),
            wired: Arc::new(AtomicBool::new(false)),
            take_here: Arc::new(AtomicBool::new(false)),
            ring: Arc::new(ring),
        }
    }

    /// Whether the node's listener rings this bell at each arrival: then
    /// its notices are taken without being asked, and another node that
    /// read a notice need not wake this node's thread to look (see
    /// `worker.rs`).
    pub(crate) fn is_wired(&self) -> bool {
        self.wired.load(Ordering::Acquire)
    }

    /// The waker a listener is given.
    fn waker(&self) -> NoticeWaker {
        let bell = self.clone();
        NoticeWaker::new(move || {
            if !bell.rung.swap(true, Ordering::AcqRel) {
                (bell.ring)(bell.take_here.load(Ordering::Acquire));
            }
        })
    }

    /// Clears the bell: called before the notices are taken, so that one
    /// arriving afterwards rings it again.
    fn answer(&self) {
        self.rung.store(false, Ordering::Release);
    }
}

/// How often a node whose listener rings looks at the watched keys while
/// it is subscribed: the end of a wait rings nothing (a waiter unregisters
/// without telling the node's thread, which may have no other work, its
/// rounds driven by the callers), so this bounds how long a subscription
/// outlives its last waiter. One wake-up a second per node, only while
/// subscribed.
pub(super) const SUBSCRIPTION_CHECK: Duration = Duration::from_secs(1);

/// How long after a subscription failed for want of the server (down,
/// timed out, connection lost) the node thread tries again.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// What the subscription needs of its node: the backend (for its
/// listener), the manager's waiters, the node's slot and name, and
/// whether the node is marked down.
pub(super) struct Ears<'a> {
    pub(super) backend: &'a dyn Backend,
    pub(super) waiters: &'a Waiters,
    pub(super) index: usize,
    pub(super) name: &'a str,
    pub(super) down: bool,
}

/// One node's subscription, owned by its node's state.
#[derive(Default)]
pub(super) struct NodeNotices {
    /// `None` until first needed; then the backend's listener, if it
    /// has one.
    listener: Option<Option<Box<dyn ReleaseListener>>>,
    /// How the listener may wake the node's thread (none in unit tests of
    /// the node's state, which then polls).
    doorbell: Option<Doorbell>,
    /// The listener rings the doorbell at each arrival: no polling.
    rings: bool,
    /// Notices are off for good here: the backend has none, or the
    /// server refused (ACL, a proxy without pub/sub).
    off: bool,
    /// Keys whose subscription the server has confirmed.
    listening: HashSet<Arc<[u8]>>,
    /// The registry generation last subscribed for.
    synced: u64,
    /// When to subscribe again after a failure.
    retry_at: Option<Instant>,
    /// When the notices were last looked at.
    looked_at: Option<Instant>,
    /// Notices may have been missed (the subscription was lost): wake
    /// every waiter once it is back.
    missed: bool,
}

impl NodeNotices {
    /// The node's subscription, whose listener may wake the node's thread
    /// with `doorbell`.
    pub(super) fn new(doorbell: Option<Doorbell>) -> Self {
        Self {
            doorbell,
            ..Self::default()
        }
    }

    /// When the node must look at the notices again, if at all: while it
    /// is subscribed, every [`NOTICE_POLL`] when its listener cannot ring,
    /// every [`SUBSCRIPTION_CHECK`] when it can (for the keys nobody waits
    /// for any more); and when a failed subscription is due to be tried
    /// again.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        if self.listening.is_empty() {
            return self.retry_at;
        }
        let every = if self.rings {
            SUBSCRIPTION_CHECK
        } else {
            NOTICE_POLL
        };
        let look = self.looked_at.map(|at| at + every);
        look.into_iter().chain(self.retry_at).min()
    }

    fn lose_subscriptions(&mut self, node: &Ears<'_>, retry: bool, now: Instant) {
        self.missed |= !self.listening.is_empty() || retry;
        self.listening.clear();
        // The echoes of undos announced before are lost with it.
        node.waiters.echoes().lost_notices(node.index);
        self.retry_at = retry.then(|| now + RELISTEN_AFTER);
    }

    /// Subscribes for the keys now watched, when they changed (or a retry
    /// is due), then hands out the notices that have arrived. Whether the
    /// other nodes should read theirs now (see [`Self::hand_out`]).
    pub(super) fn tend(&mut self, node: &Ears<'_>, now: Instant) -> bool {
        if self.off {
            return false;
        }
        self.looked_at = Some(now);
        let changed = node.waiters.generation() != self.synced;
        let due = self.retry_at.is_some_and(|at| now >= at);
        if changed || due {
            self.subscribe(node, now);
        }
        !self.listening.is_empty() && self.hand_out(node, now)
    }

    /// Brings the subscription in line with the watched keys.
    fn subscribe(&mut self, node: &Ears<'_>, now: Instant) {
        let waiters = node.waiters;
        let (generation, keys) = waiters.keys();
        if node.down && !keys.is_empty() {
            // Down: no subscription attempt per change; once it is back.
            self.lose_subscriptions(node, true, now);
            self.synced = generation;
            waiters.set_deaf(node.index, true);
            return;
        }
        let backend = node.backend;
        let doorbell = self.doorbell.as_ref();
        let rings = &mut self.rings;
        let listener = self.listener.get_or_insert_with(|| {
            let mut listener = io::listener(backend);
            if let (Some(listener), Some(bell)) = (listener.as_mut(), doorbell) {
                // Read before the waker is handed over: no ring comes
                // before the first subscription, after this.
                let here = io::may_receive_in_wake(listener.as_ref());
                bell.take_here.store(here, Ordering::Release);
                *rings = io::wake_on_arrival(listener.as_mut(), bell.waker());
                bell.wired.store(*rings, Ordering::Release);
            }
            listener
        });
        let Some(listener) = listener.as_mut() else {
            self.turn_off(node);
            return;
        };
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let outcome = io::listen(listener.as_mut(), &refs);
        self.synced = generation;
        let name = node.name;
        match outcome {
            Ok(Ok(())) => {
                waiters.set_deaf(node.index, false);
                self.listening = keys.iter().cloned().collect();
                self.retry_at = None;
                if std::mem::take(&mut self.missed) {
                    // This node may have announced a release unheard
                    // meanwhile: count it as heard here. A waiter wakes
                    // once enough nodes heard (or may have): after a cut
                    // of every subscription, once, not once per node,
                    // which would spend its early wake-ups (a spurious
                    // wake-up costs an attempt, a missed one a retry
                    // delay).
                    for key in &keys {
                        waiters.notify(key, Some(node.index));
                    }
                }
            }
            Ok(Err(e)) if keys.is_empty() => {
                // Nothing to listen for: the listener dropped what it had.
                log::debug!("quorum-lock: node {name}: unsubscribing: {e}");
                self.lose_subscriptions(node, false, now);
            }
            Ok(Err(e)) if e.kind().is_connectivity() => {
                log::debug!(
                    "quorum-lock: node {name}: release notices unavailable for now, waiters \
                     retry on their timer: {e}"
                );
                self.lose_subscriptions(node, true, now);
                waiters.set_deaf(node.index, true);
            }
            Ok(Err(e)) => {
                log::debug!(
                    "quorum-lock: node {name}: release notices off (waiters retry on their \
                     timer): {e}"
                );
                self.turn_off(node);
            }
            Err(io::ListenerPanicked) => {
                log::debug!("quorum-lock: node {name}: the release listener panicked: notices off");
                self.turn_off(node);
            }
        }
    }

    /// Whether the server has confirmed a subscription to every key of
    /// `keys`.
    pub(super) fn listens_for(&self, keys: &KeySet) -> bool {
        !self.off && keys.iter().all(|key| self.listening.contains(key))
    }

    /// Hands out the notices that have arrived, on the thread whose
    /// listener rang (see [`Doorbell`]): the subscription is left as it
    /// is (changing it waits for the server, which is the node thread's
    /// work). Whether a waiter heard from too few nodes yet, as
    /// [`Self::tend`].
    pub(super) fn take_rung(&mut self, node: &Ears<'_>, now: Instant) -> bool {
        if self.off || self.listening.is_empty() {
            return false;
        }
        self.hand_out(node, now)
    }

    fn turn_off(&mut self, node: &Ears<'_>) {
        node.waiters.set_deaf(node.index, true);
        self.off = true;
        self.listener = Some(None);
        // Off for good: no retry, so the time is not read.
        self.missed |= !self.listening.is_empty();
        self.listening.clear();
        node.waiters.echoes().lost_notices(node.index);
        self.retry_at = None;
    }

    /// Wakes the waiters of every key whose release notice arrived,
    /// except for the echoes of this manager's own releases. Whether a
    /// waiter heard from too few nodes yet: a release reaches every node
    /// at about the same time, so the other nodes should read their
    /// notices now rather than at their next poll.
    fn hand_out(&mut self, node: &Ears<'_>, now: Instant) -> bool {
        let Some(Some(listener)) = self.listener.as_mut() else {
            return false;
        };
        if let Some(bell) = &self.doorbell {
            bell.answer();
        }
        let arrived = match io::take(listener.as_mut()) {
            Ok(Ok(arrived)) => arrived,
            Ok(Err(e)) => {
                log::debug!(
                    "quorum-lock: node {}: release notices interrupted: {e}",
                    node.name
                );
                self.lose_subscriptions(node, false, now);
                node.waiters.set_deaf(node.index, true);
                // Try again on the next tick: most often the server is
                // back at once (a dropped connection); if not, the failed
                // subscription schedules the next try.
                self.retry_at = Some(now);
                return false;
            }
            Err(io::ListenerPanicked) => {
                self.turn_off(node);
                return false;
            }
        };
        let mut short = false;
        let echoes = node.waiters.echoes();
        for key in arrived {
            // The notice of this manager's own undo wakes nobody. (Echoes
            // age on the real clock: notices arrive in real time.)
            if echoes.swallow(node.index, &key, Instant::now()) {
                continue;
            }
            short |= node.waiters.notify(&key, Some(node.index));
        }
        short
    }

    /// Takes note of a release's answer: when others listen for the
    /// notices of what `hold` held (the count is of listeners for exactly
    /// the keys its release announces on, see [`Reply::Notified`]; this
    /// node's own subscription to a single key is one of them), the next
    /// `lock` of it here lets them go first. (Whether its notice wakes
    /// this manager's waiters is the echoes' matter: only an undo's does
    /// not.)
    pub(super) fn note_release(&mut self, hold: &Hold, reply: Reply, waiters: &Waiters) {
        let Reply::Notified(heard) = reply else {
            return;
        };
        let own = hold
            .announced_on()
            .single()
            .is_some_and(|key| self.listening.contains(key));
        if heard > u64::from(own) {
            waiters.note_heard(hold);
        }
    }
}
