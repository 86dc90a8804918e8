//! One node: its state, the parts the state is made of, and its thread.
//!
//! The state ([`State`]) is in the manner of quinn-proto's `Connection`:
//! private fields, named transitions, and no clock inside: every method
//! that needs the time takes `now`, and [`State::poll_timeout`] says when
//! to call back. It is not sans-IO: [`State::begin`],
//! [`State::timer_fired`] and [`State::inspect`] call the backend, and
//! every backend call goes through `io.rs` (one small function per kind
//! of call, panics contained).
//!
//! Its methods, by kind, as `Connection`'s are:
//!
//! - **getters** (`&self`; this file): [`State::is_down`], and
//!   [`State::inspect`], which asks the server and changes nothing;
//! - **handlers** (`handlers.rs`): what happened, at `now`: a batch's
//!   answers ([`State::answers_arrived`]), the timer
//!   ([`State::timer_fired`]), a probe's outcome
//!   ([`State::probe_result`]), a recovery the backend reported
//!   ([`State::probe_now`]), a change of the watched keys
//!   ([`State::listen`]), a barrier about to be answered
//!   ([`State::try_rights_if_due`]);
//! - **mutators** (this file): what a driver asks of the node: a batch
//!   to send ([`State::begin`]), one left unread when its round was
//!   decided ([`State::park_unread`], read by the next driver or at its
//!   due time, [`State::read_unread`]; `unread.rs`);
//! - **polls** (this file): [`State::poll_timeout`], the next time the
//!   timer has work, and [`State::unread_answered`], whether the batch
//!   an earlier round left unread has its answers in (a driver sends
//!   nothing before they are).
//!
//! Two drivers move it: the node's own thread (`worker.rs`: it waits for
//! jobs until the poll timeout, then calls [`State::timer_fired`] and
//! runs the jobs), and a caller that drives a round itself on an idle node
//! (`../drive.rs`). Both send a batch with [`State::begin`], read its
//! answers ([`Sent::read`]) and hand them to
//! [`State::answers_arrived`]: everything that follows a round trip
//! (votes, latency, liveness, identity and quarantine, release retries,
//! release notices, the settings look) happens there, whoever drove it.
//!
//! ```text
//!   begin(items, now) ──> Sent ──read()──> Arrived ──answers_arrived(now, each)──> votes
//!   timer_fired(now): a probe when due, release retries, a settings look, notices
//!   poll_timeout(): the next time timer_fired has something to do
//! ```
//!
//! Two clocks: `now` is real time, passed in by the drivers
//! (`Instant::now()`), for liveness, retries, the settings look and the
//! notices: whether a server answers is a matter of the network, not of
//! lock validity (see `liveness.rs`), and a node marked down must still be
//! probed in a test whose manual clock never moves. The manager's clock
//! (`Shared::clock`, injectable) times the restart quarantine, as it times
//! every lock's validity.
//!
//! The state's parts, each a small machine on explicit times:
//! `liveness.rs` (up or down), `refusal.rs` (refuses this client),
//! `rights.rs` (refuses what locks need; tried by `rights_try.rs`),
//! `retries.rs` (releases sent again), `settings_look.rs` (when to read
//! the server's settings), `identity.rs` and `shards.rs` (who answers,
//! judged by `judge.rs`); `batch.rs` (a batch from send to votes),
//! `notices.rs` (release notices), `publish.rs` and `vitals.rs` (what
//! `health()` and the logs are told).

mod batch;
mod handlers;
mod identity;
pub(super) mod io;
pub(super) mod jobs;
mod judge;
mod liveness;
mod notices;
mod publish;
pub(super) mod queue;
mod refusal;
mod retries;
mod rights;
mod rights_try;
mod room;
mod settings_look;
mod shards;
mod unread;
mod vitals;
#[cfg(all(test, loom))]
mod wake_chain;
#[cfg(all(test, loom))]
mod wire_order;
pub(super) mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use self::batch::{Batch, Items};
pub(crate) use self::batch::{Item, Sent, Vote};
#[cfg(test)]
pub(crate) use self::identity::Standing;
pub(crate) use self::identity::{Identity, Registry};
use self::jobs::{Job, Record, Replies, ReplyTo, Unread, Watched};
use self::liveness::Liveness;
pub(crate) use self::notices::Doorbell;
use self::notices::NodeNotices;
use self::publish::Publisher;
use self::refusal::Refusal;
use self::retries::RetryList;
use self::rights::Rights;
use self::room::Room;
use self::settings_look::SettingsLook;
use self::shards::Shards;
use self::unread::Line;
#[cfg(test)]
pub(crate) use self::unread::UNREAD_GRACE;
pub(crate) use self::vitals::Vitals;
use super::action::Action;
use super::forgets::Forgets;
use super::reader::{WATCH_GRACE, Watcher};
use super::waiters::Waiters;
use crate::backend::{Backend, BackendError, BackendErrorKind, Holding, Op, Reply};
use crate::clock::Clock;

/// What every node of one engine shares.
pub(crate) struct Shared {
    /// The manager's clock, for quarantine times.
    pub(crate) clock: Arc<dyn Clock>,
    /// Restart quarantine (max TTL plus drift), or `None` when off.
    pub(crate) quarantine: Option<Duration>,
    /// How long a node that may have forgotten keys while it kept
    /// answering has its grants withheld (max TTL plus drift).
    pub(crate) forget_window: Duration,
    /// Run ids seen, for duplicate detection.
    pub(crate) registry: Registry,
    /// Node names, for reports.
    pub(crate) names: Vec<String>,
    /// How long a release that could not reach its node is retried: the
    /// longest a key can live (max TTL), after which it is gone anyway.
    pub(crate) release_retry_window: Duration,
    /// The key of the fence counters' hash on every node.
    pub(crate) fence_counters: Arc<[u8]>,
    /// What the keys of a try of a node's rights start with
    /// (`<prefix>{quorum-lock}:probe`; see `rights.rs`).
    pub(crate) rights_key: Arc<[u8]>,
    /// What follows the token in every value stored: the owner label
    /// (src/owner.rs), or nothing.
    pub(crate) value_suffix: Box<[u8]>,
    /// Count grants of servers that may evict lock keys.
    pub(crate) accept_eviction: bool,
    /// Who waits for which lock's release (wake-ups).
    pub(crate) waiters: Arc<Waiters>,
    /// When each node was seen to have possibly forgotten keys.
    pub(crate) forgets: Arc<Forgets>,
    /// Where batches are parked with the reader (`../reader.rs`); `None`
    /// where there is none: node threads read their batches in place.
    pub(crate) watcher: Option<Arc<Watcher>>,
}

/// One node's state: liveness, release retries, identity and quarantine,
/// release notices, the settings look, and what it published of them.
///
/// Its methods come in four kinds (the module's text lists them):
/// getters, handlers (`handlers.rs`), mutators and polls.
pub(crate) struct State {
    /// The node's place in the configuration.
    index: usize,
    backend: Arc<dyn Backend>,
    shared: Arc<Shared>,
    identity: Identity,
    /// The servers behind a node that answers from several (a cluster's
    /// shards), each judged on its own.
    shards: Shards,
    /// Releases to send again.
    retries: RetryList,
    /// Up, or down and when to probe it.
    liveness: Liveness,
    /// Whether it refuses this client as a whole, and when to ask again.
    refusal: Refusal,
    /// Whether its access rules refuse what locks need, and when to try.
    rights: Rights,
    /// The node's subscription to release notices.
    notices: NodeNotices,
    /// When to read the server's settings while locks may be held on it
    /// and no batch brings them.
    settings_look: SettingsLook,
    /// The vitals `health()` reads, and what was last announced.
    publish: Publisher,
    /// A batch sent and left unread when its round was decided, or
    /// parked with the reader: read before anything else is sent
    /// (`unread.rs`).
    unread: Line<Unread>,
    /// Operations the gate counts that were read here, in a batch parked
    /// with the reader, since the state's holder last let go of it: the
    /// holder uncounts them ([`take_read_counted`](Self::take_read_counted)).
    read_counted: usize,
    /// The serial number of the last batch parked with the reader.
    watch_serial: u32,
    /// Empty lists with the room of the last batch's, for the next
    /// (`room.rs`).
    room: Room,
}
impl State {
    // Construction.

    /// The state of node `index`, talking to `backend`, publishing to
    /// `health`, created at `now` (real time).
    pub(crate) fn new(
        index: usize,
        backend: Arc<dyn Backend>,
        health: Arc<Vitals>,
        shared: Arc<Shared>,
        now: Instant,
    ) -> Self {
        let identity = Identity::new(index, shared.quarantine, shared.accept_eviction)
            .forgetting_for(shared.forget_window);
        let name = shared.names.get(index).map_or("?", String::as_str);
        Self {
            index,
            backend,
            identity,
            shards: Shards::new(index),
            retries: RetryList::new(shared.release_retry_window, now),
            liveness: Liveness::default(),
            refusal: Refusal::default(),
            rights: Rights::default(),
            notices: NodeNotices::default(),
            settings_look: SettingsLook::new(shared.release_retry_window),
            publish: Publisher::new(name.to_owned(), health),
            unread: Line::default(),
            read_counted: 0,
            watch_serial: 0,
            room: Room::default(),
            shared,
        }
    }

    /// The state, whose release listener wakes the node's thread with
    /// `doorbell` when notices arrive (without one, the thread polls for
    /// them while someone waits).
    pub(crate) fn ringing(mut self, doorbell: Doorbell) -> Self {
        self.notices = NodeNotices::new(Some(doorbell));
        self
    }

    // Getters: read the state (or, for `inspect`, the server), change
    // nothing.

    /// Whether the node is marked down (rounds skip it; its thread probes
    /// it).
    pub(crate) fn is_down(&self) -> bool {
        self.liveness.is_down()
    }

    /// What `key` holds on this node (a node marked down is not asked).
    pub(crate) fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        if self.liveness.is_down() {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is marked down (being probed in the background)",
            ));
        }
        io::inspect(&*self.backend, key)
    }

    /// Writes an election leader's record where its lock key holds its
    /// token (one op, one round trip; a node marked down is not asked).
    pub(crate) fn proclaim(&self, record: &Record) -> Result<Reply, BackendError> {
        if self.liveness.is_down() {
            return Err(BackendError::new(
                BackendErrorKind::Unreachable,
                "node is marked down (being probed in the background)",
            ));
        }
        let op = Op::proclaim(&record.lock, &record.stored, &record.key, &record.record);
        io::call(&*self.backend, &[op]).0.pop().unwrap_or_else(|| {
            Err(BackendError::new(
                BackendErrorKind::Protocol,
                "the backend returned no result for the proclaim",
            ))
        })
    }

    // Mutators: what a driver asks of the node.

    /// Sends `items` to the node as one batch at `now` (a node marked
    /// down skips acquires and extends at no cost, and keeps its releases
    /// for when it is back: an earlier acquire may have landed there).
    pub(crate) fn begin(&mut self, items: impl Into<Items>, now: Instant) -> Sent {
        let items = items.into();
        // The batch left unread first: nothing is sent over it.
        let now = if self.read_unread() {
            Instant::now()
        } else {
            now
        };
        if self.liveness.is_down() {
            for item in items
                .as_slice()
                .iter()
                .filter(|i| i.action == Action::Release)
            {
                self.keep(&item.hold, item.token, now);
            }
            return Sent::new(Batch::unsent(items), None, now);
        }
        let batch = Batch::new_in(
            self.room.values(),
            items,
            &self.shared.value_suffix,
            &self.shared.fence_counters,
        );
        let in_flight =
            batch.with_ops(|ops| (!ops.is_empty()).then(|| io::send(&*self.backend, ops)));
        Sent::new(batch, in_flight, now)
    }

    /// Leaves `sent`, whose round was decided before it was read, parked
    /// at `now`: the next driver reads it first, and the node's thread at
    /// the latest when it falls due (see `unread.rs`); its answers go to
    /// `reply`.
    pub(crate) fn park_unread(&mut self, sent: Sent, reply: Option<ReplyTo>, now: Instant) {
        let unread = Unread {
            sent,
            replies: Replies::One(reply),
            watched: None,
        };
        self.unread.park(unread, now);
    }

    /// Arms `sent`'s socket in the reader's set (`../reader.rs`) under
    /// the next serial number: the token to park it with
    /// ([`park_watched`](Self::park_watched)). `None`, to read it in
    /// place, where there is no reader, the backend has no descriptor for
    /// it, or the reader stops.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn arm(&mut self, sent: &Sent) -> Option<u64> {
        let watcher = self.shared.watcher.as_ref()?;
        let fd = sent.readable_fd()?;
        self.watch_serial = self.watch_serial.wrapping_add(1);
        let token = super::reader::token(self.index, self.watch_serial);
        watcher.arm(fd, token).then_some(token)
    }

    /// No reader here.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn arm(&mut self, _sent: &Sent) -> Option<u64> {
        None
    }

    /// Parks `sent`, a batch of `counted` queued operations whose answers
    /// go to `replies`, with the reader, its socket armed under `token`
    /// ([`arm`](Self::arm)): a driver counted on the node's `queue` while
    /// it is parked, its operations left counted at the gate until read,
    /// and due for the node's thread after [`WATCH_GRACE`] should the
    /// reader not read it first.
    pub(crate) fn park_watched(
        &mut self,
        sent: Sent,
        replies: Vec<Option<ReplyTo>>,
        counted: usize,
        token: u64,
        queue: &queue::Handle<Job>,
    ) {
        let unread = Unread {
            sent,
            replies: Replies::Many(replies),
            watched: Some(Watched {
                driving: queue.drive(),
                counted,
                token,
            }),
        };
        // From the batch's start, read just before its send: a bound of
        // 50 ms needs no fresher clock.
        let due = unread.sent.started() + WATCH_GRACE;
        self.unread.park_for(unread, due);
    }

    /// Reads the parked batch, if any (waiting for its answers within the
    /// backend's bound on one call), and passes its votes on. Whether
    /// there was one.
    pub(crate) fn read_unread(&mut self) -> bool {
        let Some(unread) = self.unread.take() else {
            return false;
        };
        // A batch parked with the reader: read here, not by it.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if unread.watched.is_some()
            && let (Some(watcher), Some(fd)) =
                (self.shared.watcher.as_ref(), unread.sent.readable_fd())
        {
            watcher.disarm(fd);
        }
        // Its driver count ends here.
        drop(self.read_parked(unread));
        true
    }

    /// For the reader: reads the batch parked with it under `token`
    /// (`None`: whichever is), if it is still parked, and returns its
    /// driver count, for the reader to send what is queued behind it.
    pub(crate) fn read_watched(&mut self, token: Option<u64>) -> Option<queue::Driving<Job>> {
        let watched = self.unread.parked()?.watched.as_ref()?;
        if token.is_some_and(|token| token != watched.token) {
            return None;
        }
        let unread = self.unread.take()?;
        self.read_parked(unread)
    }

    /// Reads `unread` and passes its votes on; a batch parked with the
    /// reader has its operations added to those to uncount, and gives
    /// its driver count back.
    fn read_parked(&mut self, unread: Unread) -> Option<queue::Driving<Job>> {
        let Unread {
            sent,
            replies,
            watched,
        } = unread;
        let arrived = sent.read();
        let mut item = 0;
        self.answers_arrived(arrived, Instant::now(), |vote| {
            worker::reply_to(replies.get(item), vote);
            item += 1;
        });
        if let Replies::Many(list) = replies {
            self.room.keep_replies(list);
        }
        let watched = watched?;
        self.read_counted += watched.counted;
        Some(watched.driving)
    }

    /// The operations the gate counts that were read here since the last
    /// call (see the field): its holder uncounts them as it lets go.
    pub(crate) fn take_read_counted(&mut self) -> usize {
        std::mem::take(&mut self.read_counted)
    }

    /// Whether the parked batch's answers are in, waiting for them at
    /// most until `until` (`None`: not at all): a caller that drives the
    /// node sends nothing before they are. True when nothing is parked
    /// (the clock is then not read: every round asks this of every idle
    /// node).
    pub(crate) fn unread_answered(&mut self, until: Option<Instant>) -> bool {
        self.unread
            .parked_mut()
            .is_none_or(|unread| unread.sent.ready(until.unwrap_or_else(Instant::now)))
    }

    // Polls: when to call back.

    /// When [`timer_fired`](Self::timer_fired) next has something to do:
    /// a probe while down, release retries, a recheck or a try of its
    /// rights while up, a look at the notices or the server's settings;
    /// `None`: nothing until the next job.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        // While down only the probe is due: the releases, rechecks, rights
        // and the settings look wait for it, as `timer_fired` does none of
        // them while down (one of them here would be a time already past,
        // and the thread would wake at once, again and again).
        let (work, recheck, rights, look) = match self.liveness.probe_at() {
            Some(at) => (Some(at), None, None, None),
            None => (
                self.retries.next_wake(),
                self.refusal.recheck_at(),
                self.rights.try_at(),
                self.settings_look.next_wake(),
            ),
        };
        [
            work,
            recheck,
            rights,
            look,
            self.notices.next_wake(),
            self.unread.due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
