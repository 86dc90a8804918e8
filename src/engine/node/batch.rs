//! One batch of lock operations for a node, from its send to its votes.
//!
//! A [`Batch`] owns what its ops name (the keys, the values stored: each
//! token followed by the owner label, the fence counters' key), so the ops
//! are views of it: the same data serves the send and the read of the
//! answers, nothing is built twice. [`Sent`] is a batch on the wire,
//! [`Arrived`] one whose answers were read; the node's state turns the
//! latter into one [`Vote`] per op (`State::answers_arrived`), with
//! [`vote`] judging each answer.

use std::sync::Arc;
use std::time::Instant;

use super::identity::Standing;
use super::io::{self, Results};
use crate::backend::{BackendError, BackendErrorKind, InFlight, Op, Reply, Sources};
use crate::engine::action::{Action, Impossible};
use crate::engine::hold::Hold;
use crate::owner;
use crate::report::NodeOutcome;
use crate::token::{TOKEN_LEN, Token};

/// The most ops [`Batch::with_ops`] lays out on the stack; a larger
/// batch (many callers queued on one node) gets a list.
const INLINE_OPS: usize = 16;

/// One node's answer in a round.
#[derive(Debug, Clone)]
pub(crate) struct Vote {
    /// What the node answered, as the round's report shows it.
    pub(crate) outcome: NodeOutcome,
    /// For a fenced acquire that the node granted, the fence counter it
    /// read; `None` otherwise.
    pub(crate) fence: Option<u64>,
}

impl Vote {
    /// A vote that carries no fence counter.
    pub(crate) fn of(outcome: NodeOutcome) -> Self {
        Self {
            outcome,
            fence: None,
        }
    }
}

/// One lock operation for a node: an action on what one lease holds,
/// with one token.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) action: Action,
    pub(crate) hold: Hold,
    pub(crate) token: Token,
}

/// A batch's items: one (what a caller drives: no list to allocate and
/// free per node and round) or several.
#[derive(Debug)]
pub(crate) enum Items {
    One(Item),
    Many(Vec<Item>),
}

impl Items {
    pub(super) fn as_slice(&self) -> &[Item] {
        match self {
            Self::One(item) => std::slice::from_ref(item),
            Self::Many(items) => items,
        }
    }
}

impl From<Item> for Items {
    fn from(item: Item) -> Self {
        Self::One(item)
    }
}

impl From<Vec<Item>> for Items {
    fn from(items: Vec<Item>) -> Self {
        Self::Many(items)
    }
}

/// Operations that go to a node in one round trip, with the data their
/// ops borrow.
#[derive(Debug)]
pub(crate) struct Batch {
    items: Items,
    /// The stored value of each item (token, then the owner label), all
    /// of one length, packed in item order.
    values: Vec<u8>,
    /// The key of the node's fence counters, when an op is fenced.
    counters: Option<Arc<[u8]>>,
    /// Settled without the server (a node marked down): nothing is sent.
    unsent: bool,
}

impl Batch {
    /// `items`, their values made with the owner label `suffix`; fenced
    /// ops name the hash `counters`.
    pub(super) fn new(items: impl Into<Items>, suffix: &[u8], counters: &Arc<[u8]>) -> Self {
        Self::new_in(Vec::new(), items, suffix, counters)
    }

    /// [`new`](Self::new), its values written into `values` (emptied
    /// first): a list with room kept from an earlier batch (`room.rs`).
    pub(super) fn new_in(
        mut values: Vec<u8>,
        items: impl Into<Items>,
        suffix: &[u8],
        counters: &Arc<[u8]>,
    ) -> Self {
        let items = items.into();
        let list = items.as_slice();
        values.clear();
        values.reserve(list.len() * (TOKEN_LEN + suffix.len()));
        for item in list {
            owner::push_value(&item.token, suffix, &mut values);
        }
        let fenced = list.iter().any(|i| i.action.is_fenced());
        Self {
            items,
            values,
            counters: fenced.then(|| Arc::clone(counters)),
            unsent: false,
        }
    }

    /// A batch whose ops are never sent (a node marked down).
    pub(super) fn unsent(items: impl Into<Items>) -> Self {
        Self {
            items: items.into(),
            values: Vec::new(),
            counters: None,
            unsent: true,
        }
    }

    pub(super) fn items(&self) -> &[Item] {
        self.items.as_slice()
    }

    /// The batch's lists, for their room: its items' (`None` for a batch
    /// of one item, which has none) and its values'.
    pub(super) fn into_lists(self) -> (Option<Vec<Item>>, Vec<u8>) {
        let items = match self.items {
            Items::One(_) => None,
            Items::Many(items) => Some(items),
        };
        (items, self.values)
    }

    /// The backend's ops: views of the batch's own data, one per item
    /// whose action has an op on its hold ([`Action::op`]). An item
    /// without one is never sent: [`spread`](Self::spread) answers it
    /// with its refusal.
    pub(super) fn ops(&self) -> Vec<Op<'_>> {
        self.each_op().filter_map(Result::ok).collect()
    }

    /// `f` of the batch's [`ops`](Self::ops), laid out on the stack for a
    /// batch of up to [`INLINE_OPS`] items (an `Op` is a few borrowed
    /// views): every batch is sent and read, and a list allocated and
    /// freed at each was two allocations per batch.
    pub(super) fn with_ops<R>(&self, f: impl FnOnce(&[Op<'_>]) -> R) -> R {
        let mut ops = self.each_op().filter_map(Result::ok);
        let Some(first) = ops.next() else {
            return f(&[]);
        };
        // The usual batch, one op (what a caller drives): lent as it is.
        // Filling the stack's room with copies of it cost about 150
        // instructions per call, four calls per lock + release at N=1.
        if self.items().len() == 1 {
            return f(std::slice::from_ref(&first));
        }
        if self.items().len() > INLINE_OPS {
            let mut all = vec![first];
            all.extend(ops);
            return f(&all);
        }
        let mut inline = [first; INLINE_OPS];
        let mut len = 1;
        for (slot, op) in inline[1..].iter_mut().zip(ops) {
            *slot = op;
            len += 1;
        }
        f(&inline[..len])
    }

    /// Each item's op, or its refusal, in item order.
    fn each_op(&self) -> impl Iterator<Item = Result<Op<'_>, Impossible>> {
        let items = self.items();
        let len = self.values.len().checked_div(items.len()).unwrap_or(0);
        items
            .iter()
            .zip(self.values.chunks(len.max(1)))
            .map(|(item, value)| {
                let counters = self.counters.as_deref().unwrap_or_default();
                item.action.op(&item.hold, value, counters)
            })
    }

    /// One result per item from `answers`, the backend's to
    /// [`ops`](Self::ops): each item that had no op fails with its
    /// refusal, from no known server, in its place.
    #[inline]
    pub(super) fn spread(&self, answers: Results) -> Results {
        // The usual batch: every item sent, nothing to make (no allocation).
        // `io` makes a batch's results exactly as many as its ops, so as
        // many results as items means every item had its op (counted, not
        // each op built again to see).
        if answers.0.len() == self.items().len() {
            return answers;
        }
        let refused: Vec<Option<Impossible>> = self.each_op().map(Result::err).collect();
        let (results, sources) = answers;
        let mut results = results.into_iter();
        let spread = refused.iter().map(|refused| match refused {
            Some(impossible) => Err(impossible.error()),
            None => results.next().unwrap_or_else(|| Err(missing())),
        });
        let spread = spread.collect();
        let sources = match sources {
            Sources::One(server) => Sources::One(server),
            Sources::Each(servers) => {
                let mut servers = servers.into_iter();
                let each = refused.iter().map(|refused| match refused {
                    Some(_) => None,
                    None => servers.next().flatten(),
                });
                Sources::Each(each.collect())
            }
        };
        (spread, sources)
    }
}

/// A result the backend did not give (`io` makes every batch's results
/// as many as its ops, so never).
fn missing() -> BackendError {
    BackendError::new(BackendErrorKind::Protocol, "no result for this op")
}

/// A batch sent to the node (or settled without it: a node marked down),
/// its answers not read yet.
pub(crate) struct Sent {
    batch: Batch,
    in_flight: Option<Box<dyn InFlight>>,
    started: Instant,
}

impl Sent {
    pub(super) fn new(
        batch: Batch,
        in_flight: Option<Box<dyn InFlight>>,
        started: Instant,
    ) -> Self {
        Self {
            batch,
            in_flight,
            started,
        }
    }

    /// When the batch was sent (the clock read just before its send).
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// Whether the answers have begun to arrive (waiting at most until
    /// `until`); a batch settled without the server always has.
    pub(crate) fn ready(&mut self, until: Instant) -> bool {
        match self.in_flight.as_mut() {
            Some(in_flight) => io::wait(in_flight.as_mut(), until),
            None => true,
        }
    }

    /// The socket its answers arrive on, for the reader to wait on
    /// ([`InFlight::readable_fd`]); `None` when there is nothing to wait
    /// for there (settled without the server, or a backend without one).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn readable_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.in_flight.as_ref()?.readable_fd()
    }

    /// Reads the answers (within the backend's bound on one call), with
    /// the ops the batch was sent with.
    #[inline]
    pub(crate) fn read(self) -> Arrived {
        let Self {
            batch,
            in_flight,
            started,
        } = self;
        let answers = match in_flight {
            Some(in_flight) => Some(batch.with_ops(|ops| io::finish(in_flight, ops))),
            None if batch.unsent => None,
            // Nothing to send: every item was refused (`Batch::spread`).
            None => Some((Vec::new(), Sources::One(None))),
        };
        Arrived {
            batch,
            answers,
            started,
        }
    }
}

/// A batch whose answers were read, one per op sent (`None`: settled
/// without the server); `Batch::spread` makes them one per item.
pub(crate) struct Arrived {
    pub(super) batch: Batch,
    pub(super) answers: Option<Results>,
    pub(super) started: Instant,
}

/// The vote for one answer to `action`, from a node whose grants count
/// as `standing` says; `identified`: the server that answered reported
/// its run id. `grant` is what a grant counts for.
pub(super) fn vote(
    action: Action,
    result: Result<Reply, BackendError>,
    standing: Standing,
    identified: bool,
    grant: impl FnOnce() -> NodeOutcome,
) -> Vote {
    match result {
        Ok(Reply::No | Reply::HeldBy { .. }) => Vote::of(NodeOutcome::Refused),
        // Our token already there: another name of this server set it.
        // That server votes once: here only when it is identified and this
        // node is the name it votes under (its other name's grant then
        // counts as a duplicate's, i.e. not at all), and not for a fenced
        // acquire, whose vote must carry the counter it read.
        Ok(Reply::AlreadyOurs)
            if identified
                && standing == Standing::Voting
                && matches!(action, Action::Acquire { .. }) =>
        {
            Vote::of(NodeOutcome::Granted)
        }
        Ok(Reply::AlreadyOurs) => Vote::of(NodeOutcome::Failed(already_ours())),
        // Releases count whoever answers: undoing needs no vote.
        Ok(_) if action == Action::Release => Vote::of(NodeOutcome::Granted),
        Ok(Reply::Fenced(read)) => {
            let outcome = grant();
            let fence = outcome.is_granted().then_some(read);
            Vote { outcome, fence }
        }
        Ok(_) => Vote::of(grant()),
        Err(e) => Vote::of(NodeOutcome::Failed(e)),
    }
}

/// The outcome of a grant from a node in `standing`; `eviction` is the
/// server's evicting setting, `names` the nodes' names.
pub(super) fn grant(standing: Standing, eviction: Option<&str>, names: &[String]) -> NodeOutcome {
    match standing {
        Standing::Voting => NodeOutcome::Granted,
        Standing::Quarantined(remaining) => NodeOutcome::Quarantined { remaining },
        Standing::Unverified => NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Protocol,
            "the server's identity (run_id in INFO server) is unknown, so a restart \
             cannot be ruled out: with restart quarantine on, its grant does not count",
        )),
        Standing::MayEvict => NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Config,
            format!(
                "{}: the server may evict lock keys under memory pressure, and a lock \
                 whose keys were evicted can be taken by a second holder: set \
                 `maxmemory-policy noeviction` (or no maxmemory), or accept the risk \
                 with LockManagerBuilder::accept_eviction_risk",
                eviction.unwrap_or("maxmemory with an evicting policy")
            ),
        )),
        Standing::Replica => NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Config,
            "the server is a replica now (role in INFO replication): its keys are \
             its master's, and what it grants is gone at the next sync",
        )),
        Standing::DuplicateOf(owner) => {
            let other = names.get(owner).map_or("another node", String::as_str);
            NodeOutcome::Failed(BackendError::new(
                BackendErrorKind::Config,
                format!("the same server as {other} (same run id): one server casts one vote"),
            ))
        }
    }
}

/// The outcome of an acquire that found our token already there: the same
/// server reached under another name, whose vote counted under that name.
fn already_ours() -> BackendError {
    BackendError::new(
        BackendErrorKind::Config,
        "the key already held this attempt's token: the same server as another configured \
         node (one server casts one vote)",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::time::Duration;

    use super::*;
    use crate::backend::{KeySet, OpKind, ServerInfo};

    /// An item whose action has no op on its hold is not among the ops
    /// sent, and its refusal takes its place among the answers and the
    /// servers that gave them.
    #[test]
    fn a_refused_item_takes_its_place_among_the_answers_and_their_servers() {
        let (token, ttl) = (Token::random().unwrap(), Duration::from_secs(1));
        let hold = Hold::Lock(KeySet::one("k"));
        let item = |action| Item {
            action,
            hold: hold.clone(),
            token,
        };
        let items = vec![
            item(Action::Acquire { ttl }),
            item(Action::Admit { ttl }),
            item(Action::Release),
        ];
        let batch = Batch::new(items, b"", &Arc::from(&b"c"[..]));
        let kinds: Vec<OpKind<'_>> = batch.ops().iter().map(|op| op.kind).collect();
        assert_eq!(kinds, [OpKind::Acquire { ttl }, OpKind::Release]);
        let server = Some(Arc::new(ServerInfo::default()));
        let answers = (
            vec![Ok(Reply::Yes), Ok(Reply::No)],
            Sources::Each(vec![server.clone(), server]),
        );
        let (results, sources) = batch.spread(answers);
        assert!(
            matches!(
                &results[..],
                [Ok(Reply::Yes), Err(e), Ok(Reply::No)] if e.kind() == BackendErrorKind::Other
            ),
            "{results:?}"
        );
        let Sources::Each(servers) = sources else {
            panic!("one server per answer");
        };
        let known: Vec<bool> = servers.iter().map(Option::is_some).collect();
        assert_eq!(known, [true, false, true]);
    }

    /// The ops lent in place are the batch's ops, in order, with the
    /// refused items left out: for a batch of one, of a few, of exactly
    /// the stack's room and of one more than it.
    #[test]
    fn with_ops_lends_the_batch_ops_in_order_at_every_size() {
        let ttl = Duration::from_secs(1);
        let holds: Vec<Hold> = (0..=INLINE_OPS + 1)
            .map(|i| Hold::Lock(KeySet::one(format!("k{i}"))))
            .collect();
        for size in [1, 3, INLINE_OPS, INLINE_OPS + 1] {
            let items: Vec<Item> = holds[..size]
                .iter()
                .enumerate()
                .map(|(i, hold)| Item {
                    // Every third item has no op (refused in place).
                    action: if i % 3 == 1 {
                        Action::Admit { ttl }
                    } else {
                        Action::Acquire { ttl }
                    },
                    hold: hold.clone(),
                    token: Token::random().unwrap(),
                })
                .collect();
            let batch = Batch::new(items, b"-label", &Arc::from(&b"c"[..]));
            let listed = batch.ops();
            // Items 1, 4, 7, ... are refused.
            assert_eq!(listed.len(), size - (size + 1) / 3, "size {size}");
            batch.with_ops(|lent| assert_eq!(lent, &listed[..], "size {size}"));
        }
    }
}
