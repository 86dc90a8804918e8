//! [`LockGuard`]: a held lock, released when dropped. It holds the
//! manager's internal core (not the public manager) and the lease it shares
//! with the rounds and the watchdog.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lost::LostSignal;
use crate::redlock::{Core, Lease, Owned, Ticket};
use crate::report::Report;
use crate::token::Token;
use crate::trace::{self, Call};

/// A lock held on a quorum of nodes, valid until its deadline.
///
/// The lock is safe to rely on only while [`is_valid`](Self::is_valid):
/// after that the nodes' keys may expire and someone else may take it. Long
/// work should [`check`](Self::check) before each step that needs
/// exclusivity, and [`extend`](Self::extend) in time (or ask for
/// [`LockOptions::auto_extend`](crate::LockOptions::auto_extend)).
///
/// # Drop
///
/// Dropping the guard never blocks: it queues a release on every node and
/// returns at once (the last handle of a manager to go waits for what is
/// queued, see [`LockManager`](crate::LockManager)). When another thread of
/// the same manager is waiting in [`LockManager::lock`](crate::LockManager::lock)
/// for the same resource, the lock may instead be **handed to it** (same
/// token and deadline, no round trip, only when it is the lock that thread
/// asked for: the same TTL and no fencing on either side, only while at
/// least half the TTL is left, at most 64 times in a row, then the servers
/// get it back so other processes have a chance).
///
/// Because the drop returns before the nodes have the release, another
/// process can, for a moment, still find the lock held; when its next
/// step counts on the lock being free (a test, a hand-off between
/// processes), call [`release`](Self::release) instead: it
/// always releases on the servers (no hand-over), waits, and reports each
/// node's answer; [`forget`](Self::forget) lets the
/// lock expire on its own. Either way, no extend is sent for this lock
/// after the release.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    core: Arc<Core>,
    /// The lease, held by this guard's entry among the manager's live
    /// guards (so the thread that took it gets `Error::Deadlock` if it
    /// asks for the key again): one field for both, as every held lock
    /// keeps a guard (issue 30).
    owned: Owned,
    /// What `Drop` does; `release` and `forget` leave nothing more to do.
    ending: Ending,
    /// When the guard was made (real time), for the hold-time metric.
    #[cfg(feature = "metrics")]
    since: std::time::Instant,
}

/// What dropping a guard does. One field for what were a flag and an
/// optional turn: the ticket's spare values tell the other two apart, so
/// it is no larger than the ticket.
#[derive(Debug)]
enum Ending {
    /// Queue a release on every node.
    Release,
    /// The guard holds its manager's local turn for the key (it came from
    /// a waiting `lock`): hand the lock over in line, or release and pass
    /// the turn on (the ticket passes it when dropped, whatever the path).
    InLine(Ticket),
    /// Nothing more: `release` or `forget` let it go.
    Done,
}

impl Ending {
    /// Leaves nothing more to do; the turn, if the guard holds one.
    fn finish(&mut self) -> Option<Ticket> {
        match std::mem::replace(self, Self::Done) {
            Self::InLine(turn) => Some(turn),
            Self::Release | Self::Done => None,
        }
    }
}

impl LockGuard {
    pub(crate) fn new(core: Arc<Core>, lease: Arc<Lease>) -> Self {
        let owned = core.rounds().owners().own(lease);
        // Registered: from now on the forget hook sees this lease. A node
        // seen forgetting since the round was sent is caught here.
        core.rounds().check_support(owned.lease());
        Self {
            core,
            owned,
            ending: Ending::Release,
            #[cfg(feature = "metrics")]
            since: std::time::Instant::now(),
        }
    }

    /// Marks the guard as holding the local turn for its key; the line
    /// waits for this lock only while it is valid.
    pub(crate) fn with_turn(mut self, turn: Ticket) -> Self {
        turn.hold(self.lease());
        self.ending = Ending::InLine(turn);
        self
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        self.owned.lease()
    }

    /// The resource as given to `lock`. A guard of several resources
    /// ([`LockManager::lock_all`](crate::LockManager::lock_all)) gives the
    /// first of its [`resources`](Self::resources) (the smallest, as
    /// bytes): ask `resources` for all of them.
    pub fn resource(&self) -> &[u8] {
        self.lease().resources.first()
    }

    /// Every resource this guard holds, as given: the one given to `lock`,
    /// or the set given to
    /// [`LockManager::lock_all`](crate::LockManager::lock_all), sorted as
    /// bytes and each once (1 to [`MAX_SET_SIZE`](crate::MAX_SET_SIZE)).
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
    /// let one = locks.try_lock("b")?;
    /// assert_eq!(one.resources(), [&b"b"[..]]);
    /// let set = locks.lock_all(["c", "a", "c"], &LockOptions::new())?;
    /// assert_eq!(set.resources(), [&b"a"[..], b"c"]);
    /// assert_eq!(set.resource(), b"a");
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    pub fn resources(&self) -> &[Vec<u8>] {
        self.lease().resources.as_slice()
    }

    /// The key on the nodes: the manager's prefix (if any) followed by
    /// [`resource`](Self::resource). A guard of several resources gives
    /// the first of its [`keys`](Self::keys).
    pub fn key(&self) -> &[u8] {
        self.lease().hold.keys().first()
    }

    /// The keys on the nodes, one per resource, in the order of
    /// [`resources`](Self::resources): each is the manager's prefix (if
    /// any) followed by the resource.
    pub fn keys(&self) -> &[Vec<u8>] {
        self.lease().hold.keys().as_slice()
    }

    /// This acquisition's token.
    pub fn token(&self) -> &Token {
        &self.lease().token
    }

    /// The fencing token, when the lock was acquired with
    /// [`LockOptions::fencing`](crate::LockOptions::fencing): larger than
    /// that of every earlier holder of this resource (through any manager
    /// on the same servers), below 2^53. Send it with every write to the
    /// protected resource, which keeps the highest fence it has seen and
    /// refuses writes with a lower one (`examples/fenced_write.rs`).
    /// `None` for a lock taken without fencing, and always for a read
    /// guard of an [`RwLock`](crate::RwLock): readers have no fence.
    ///
    /// ```
    /// use quorum_lock::{LockManager, LockOptions, MemoryBackend};
    ///
    /// let locks = LockManager::builder().node(MemoryBackend::new("mem")).build()?;
    /// let fenced = LockOptions::new().fencing(true);
    /// let first = locks.lock_with("ledger", &fenced)?;
    /// let a = first.fence().expect("asked for");
    /// first.release()?;
    /// let second = locks.lock_with("ledger", &fenced)?;
    /// assert!(second.fence().unwrap() > a);
    /// assert_eq!(locks.try_lock("other")?.fence(), None);
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    pub fn fence(&self) -> Option<u64> {
        self.lease().fence()
    }

    /// The TTL last set on the nodes.
    pub fn ttl(&self) -> Duration {
        self.lease().state().ttl()
    }

    /// Successful extends so far, manual and automatic.
    pub fn extensions(&self) -> u32 {
        self.lease().state().extensions()
    }

    /// Why auto-extension stopped (bound reached, extend failed), or `None`
    /// while it runs or when it was never asked for.
    pub fn renewal_stopped(&self) -> Option<String> {
        self.lease().state().renewal_stopped().map(str::to_owned)
    }

    /// Safe time left: zero once the deadline has passed or the lock is
    /// known to be lost. Never longer than what a quorum confirmed.
    pub fn validity(&self) -> Duration {
        self.lease().state().validity(self.core.rounds().now())
    }

    /// Whether the lock is still safe to rely on.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// `Ok` while the lock is valid, otherwise [`Error::Lost`] saying why
    /// (with the per-node report of the failed extend, when there was one).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] once the validity has run out or an extend failed.
    pub fn check(&self) -> Result<()> {
        let state = self.lease().state();
        if let Some(lost) = state.lost() {
            return Err(lost.clone());
        }
        if state.deadline() <= self.core.rounds().now() {
            let reason = match state.renewal_stopped() {
                Some(why) => {
                    format!("the lock's validity ran out after auto-extension stopped ({why})")
                }
                None => "the lock's validity ran out".into(),
            };
            return Err(Error::Lost {
                reason,
                report: None,
            });
        }
        Ok(())
    }

    /// A [`LostSignal`] that gets the [`Error::Lost`] as soon as the lock is
    /// known to be lost: an extend failed, (with auto-extension) the
    /// validity ran out after renewal stopped, or a node whose grant the
    /// lock counted was seen to have possibly forgotten its keys (its
    /// settings began to allow eviction, it evicted keys, it became a
    /// replica or took a new replication history) and fewer than a quorum
    /// of the counted nodes are left.
    /// Poll it with `try_recv`, wait with `recv_timeout`, or `select!` its
    /// receiver against your work. If the lock is already lost the notice
    /// is waiting. Each call gives a new signal.
    ///
    /// The validity running out is watched only on guards with
    /// auto-extension; on other guards that shows in
    /// [`validity`](Self::validity) and [`check`](Self::check).
    pub fn lost_signal(&self) -> LostSignal {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.lease().state().subscribe(tx);
        LostSignal::new(rx)
    }

    /// Pushes the expiry to `ttl` from now on every node that still holds
    /// our token. Succeeds only when a quorum confirms within the remaining
    /// validity; never re-creates a key that has expired. Returns the new
    /// validity.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when no quorum confirmed in time (the guard is then
    /// marked lost: stop the protected work); [`Error::InvalidArgument`]
    /// for an unusable TTL (the guard is unchanged).
    pub fn extend(&mut self, ttl: Duration) -> Result<Duration> {
        let (rounds, lease) = (self.core.rounds(), self.lease());
        let quorum = rounds.config().quorum;
        trace::act(Call::Extend, quorum, &lease.trace, &lease.resources, || {
            rounds.extend(lease, ttl)
        })?;
        Ok(self.validity())
    }

    /// Lets the lock go and waits until that is done. Auto-extension stops
    /// first.
    ///
    /// When another thread of this manager waits for this lock (in `lock`
    /// or `lock_with`, in line behind this guard), the lock is **handed
    /// over** to it, as dropping the guard does: no round trip, and the
    /// report says so ([`Report::handed_over`], every node
    /// [`NodeOutcome::HandedOver`](crate::report::NodeOutcome::HandedOver)). That
    /// happens only when it is safe and fair: the lock is not lost, at
    /// least half of its TTL is left (the new holder gets what is left,
    /// never more), the waiter asked for the same TTL, neither side is
    /// fenced (a fenced waiter needs a fence above this one's, so it
    /// acquires anew), and the streak of local hand-overs is not at its
    /// bound (then other processes get their turn).
    ///
    /// Otherwise it releases on every node and waits (at most the per-node
    /// timeout) for the answer of each node that is up; a node marked down
    /// is skipped in the report (its release is parked and sent once it is
    /// back). [`release_on_nodes`](Self::release_on_nodes) always does
    /// this.
    ///
    /// # Errors
    ///
    /// None after a hand-over (it cannot fail). After a release on the
    /// nodes, [`Error::NoQuorum`] when fewer than a quorum of nodes
    /// answered: the remaining keys expire with their TTL. A node that no
    /// longer held our token is not an error; it shows as refused in the
    /// report.
    pub fn release(mut self) -> Result<Report> {
        let turn = self.ending.finish();
        let (rounds, lease) = (self.core.rounds(), self.lease());
        let quorum = rounds.config().quorum;
        trace::act(
            Call::Release,
            quorum,
            &lease.trace,
            &lease.resources,
            || rounds.release_or_hand_over(lease, turn),
        )
    }

    /// Releases on every node, never handing the lock to a waiting thread
    /// of this manager, and waits (at most the per-node timeout) for the
    /// answer of each node that is up; a node marked down is skipped in
    /// the report (its release is parked and sent once it is back).
    /// Auto-extension stops first. For a program that must know the keys
    /// are gone from the servers when this returns (a waiting thread of
    /// the same manager then acquires anew, after this release).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of nodes answered: the
    /// remaining keys expire with their TTL. A node that no longer held our
    /// token is not an error; it shows as refused in the report.
    pub fn release_on_nodes(mut self) -> Result<Report> {
        let turn = self.ending.finish();
        let (rounds, lease) = (self.core.rounds(), self.lease());
        let quorum = rounds.config().quorum;
        trace::act(
            Call::Release,
            quorum,
            &lease.trace,
            &lease.resources,
            || rounds.release(lease, turn),
        )
    }

    /// Gives up the guard without releasing: auto-extension stops and the
    /// lock expires on its own at its TTL.
    pub fn forget(mut self) {
        let turn = self.ending.finish();
        self.lease().state().finish();
        // The turn passes (without a hand-over) as the ticket drops.
        drop(turn);
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Every guard ends here (`release` and `forget` too).
        #[cfg(feature = "metrics")]
        crate::metrics::held(self.since.elapsed());
        // Only queues the releases (or hands the lock to a waiting thread
        // of this manager): never blocks on the network, never panics.
        match std::mem::replace(&mut self.ending, Ending::Done) {
            Ending::Release => self.core.rounds().release_detached(self.lease()),
            Ending::InLine(turn) => self.core.rounds().hand_over(self.lease(), turn),
            Ending::Done => {}
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.lease().resources.to_string())
            .field("token", &self.lease().token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
