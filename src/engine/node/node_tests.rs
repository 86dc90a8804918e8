//! The node's state on its own, driven by hand with explicit times: no
//! thread, no sleeping. Real time is any `Instant` the test picks; the
//! manager's clock is a [`ManualClock`] that moves only when told.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::liveness::{FIRST_BACKOFF, MAX_BACKOFF};
use super::notices::{Doorbell, SUBSCRIPTION_CHECK};
use super::retries::RETRY_EVERY;
use super::*;
use crate::backend::KeySet;
use crate::backend::memory::MemoryBackend;
use crate::clock::ManualClock;
use crate::engine::action::Action;
use crate::engine::hold::Hold;
use crate::report::NodeOutcome;
use crate::token::Token;

const WINDOW: Duration = Duration::from_secs(10);

pub(super) fn shared(clock: &ManualClock, quarantine: Option<Duration>) -> Arc<Shared> {
    Arc::new(Shared {
        clock: Arc::new(clock.clone()),
        quarantine,
        forget_window: WINDOW,
        registry: Registry::default(),
        names: vec!["node-0".to_owned()],
        release_retry_window: WINDOW,
        fence_counters: Arc::from(&b"{quorum-lock}:fences"[..]),
        rights_key: Arc::from(&b"{quorum-lock}:probe"[..]),
        value_suffix: Box::default(),
        accept_eviction: false,
        waiters: Arc::new(Waiters::new(1, 1)),
        forgets: Arc::new(Forgets::new(1)),
        watcher: None,
    })
}

pub(super) fn node_state(
    node: &MemoryBackend,
    shared: Arc<Shared>,
    now: Instant,
) -> (State, Arc<Vitals>) {
    let health = Arc::new(Vitals::default());
    let backend: Arc<dyn Backend> = Arc::new(node.clone());
    let state = State::new(0, backend, Arc::clone(&health), shared, now);
    (state, health)
}

fn item(action: Action, key: &str, token: Token) -> Item {
    Item {
        action,
        hold: Hold::Lock(KeySet::one(key)),
        token,
    }
}

pub(super) fn acquire(key: &str, token: Token) -> Item {
    item(
        Action::Acquire {
            ttl: Duration::from_secs(30),
        },
        key,
        token,
    )
}

pub(super) fn release(key: &str, token: Token) -> Item {
    item(Action::Release, key, token)
}

/// One round trip as both drivers run it: begin, read, answers arrived.
pub(super) fn round_trip(state: &mut State, items: Vec<Item>, now: Instant) -> Vec<NodeOutcome> {
    let sent = state.begin(items, now);
    let mut outcomes = Vec::new();
    state.answers_arrived(sent.read(), now, |vote| outcomes.push(vote.outcome));
    outcomes
}

pub(super) fn token() -> Token {
    Token::random().unwrap()
}

#[test]
fn a_fresh_node_has_nothing_to_wake_for() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let (state, _) = node_state(&node, shared(&clock, None), Instant::now());
    assert_eq!(state.poll_timeout(), None);
    assert!(!state.is_down());
}

/// Marked down after two failed round trips, probed 50 ms later, then
/// backing off to 2 s; a probe that answers brings it back. The
/// manager's clock never moves: liveness runs on the real time the
/// drivers pass in.
#[test]
fn down_after_two_failed_round_trips_probed_with_backoff_and_back_up() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let t0 = Instant::now();
    let (mut state, health) = node_state(&node, shared(&clock, None), t0);
    node.set_down(true);
    let first = round_trip(&mut state, vec![acquire("k", token())], t0);
    assert!(matches!(first[0], NodeOutcome::Failed(_)), "{first:?}");
    assert!(!state.is_down(), "one failed round trip is not enough");
    round_trip(&mut state, vec![acquire("k", token())], t0);
    assert!(state.is_down() && health.is_down());
    assert_eq!(state.poll_timeout(), Some(t0 + FIRST_BACKOFF));
    // Down: the node is not contacted, the vote is settled at once.
    let calls = node.round_trips();
    let settled = round_trip(&mut state, vec![acquire("k", token())], t0);
    assert!(matches!(settled[..], [NodeOutcome::Down]), "{settled:?}");
    assert_eq!(node.round_trips(), calls, "a down node costs no call");
    // Not due yet: nothing happens.
    let _ = state.timer_fired(t0 + FIRST_BACKOFF / 2);
    assert_eq!(node.round_trips(), calls, "no probe before it is due");
    // Each failed probe doubles the wait, up to the bound.
    let mut waits = Vec::new();
    let mut now = t0 + FIRST_BACKOFF;
    for _ in 0..7 {
        let _ = state.timer_fired(now);
        let next = state.poll_timeout().unwrap();
        waits.push((next - now).as_millis());
        now = next;
    }
    assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    assert_eq!(
        Duration::from_millis(2000),
        MAX_BACKOFF,
        "the bound is the liveness machine's"
    );
    assert!(state.is_down());
    node.set_down(false);
    let _ = state.timer_fired(now);
    assert!(!state.is_down() && !health.is_down(), "the probe answered");
    assert_eq!(state.poll_timeout(), None);
    let granted = round_trip(&mut state, vec![acquire("k", token())], now);
    assert!(matches!(granted[..], [NodeOutcome::Granted]), "{granted:?}");
}

/// A release that failed is kept and sent again when due; one still kept
/// once max TTL has passed is dropped unsent (its key has expired).
#[test]
fn a_failed_release_is_retried_when_due_and_dropped_after_max_ttl() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let t0 = Instant::now();
    let (mut state, health) = node_state(&node, shared(&clock, None), t0);
    let held = token();
    round_trip(&mut state, vec![acquire("k", held)], t0);
    node.fail_next(1);
    let failed = round_trip(&mut state, vec![release("k", held)], t0);
    assert!(matches!(failed[0], NodeOutcome::Failed(_)), "{failed:?}");
    assert!(node.holder(b"k").is_some());
    let due = state.poll_timeout().unwrap();
    assert!(due <= t0, "kept releases go with the next tick");
    let _ = state.timer_fired(t0);
    assert_eq!(node.holder(b"k"), None, "the retry released the key");
    let retries_due = state.retries.next_wake();
    assert_eq!(retries_due, None, "nothing left to retry");
    // Kept again, but never retried before max TTL has passed.
    let other = token();
    round_trip(&mut state, vec![acquire("j", other)], t0);
    node.fail_next(1);
    round_trip(&mut state, vec![release("j", other)], t0);
    assert_eq!(state.retries.next_wake(), Some(t0 + RETRY_EVERY));
    let calls = node.round_trips();
    let late = t0 + WINDOW;
    let _ = state.timer_fired(late);
    assert_eq!(node.round_trips(), calls, "dropped unsent");
    assert!(state.retries.is_empty());
    let snapshot = health.snapshot("n", &[], late, clock.now(), false);
    assert_eq!(snapshot.releases_waiting, 0);
    assert_eq!(snapshot.releases_abandoned, 1);
}

/// A restarted server's grants do not count until the quarantine is over
/// on the manager's clock, whatever real time the drivers pass in.
#[test]
fn quarantine_is_entered_and_over_per_the_managers_clock() {
    let clock = ManualClock::new();
    let node = MemoryBackend::with_clock("n", Arc::new(clock.clone()));
    let quarantine = Duration::from_secs(20);
    let t0 = Instant::now();
    let (mut state, health) = node_state(&node, shared(&clock, Some(quarantine)), t0);
    let first = round_trip(&mut state, vec![acquire("a", token())], t0);
    assert!(
        matches!(first[..], [NodeOutcome::Granted]),
        "up for a year: voting, {first:?}"
    );
    node.restart();
    let after = round_trip(&mut state, vec![acquire("b", token())], t0);
    assert!(
        matches!(after[..], [NodeOutcome::Quarantined { remaining }] if remaining == quarantine),
        "{after:?}"
    );
    let snapshot = |now| health.snapshot("n", &[], now, clock.now(), false).state;
    assert!(
        matches!(snapshot(t0), crate::health::NodeState::Quarantined { .. }),
        "{:?}",
        snapshot(t0)
    );
    // Real time far ahead, the manager's clock not: still quarantined.
    let later = t0 + quarantine * 2;
    let still = round_trip(&mut state, vec![acquire("c", token())], later);
    assert!(
        matches!(still[0], NodeOutcome::Quarantined { .. }),
        "{still:?}"
    );
    clock.advance(quarantine);
    let over = round_trip(&mut state, vec![acquire("d", token())], later);
    assert!(matches!(over[..], [NodeOutcome::Granted]), "{over:?}");
    assert_eq!(snapshot(later), crate::health::NodeState::Up);
}

/// A cluster node as the engine sees it: keys starting with `a` live on
/// shard `a`, the others on shard `b`, and each answer carries the
/// identity of its shard ([`Answers::per_answer`]).
struct TwoShards {
    a: MemoryBackend,
    b: MemoryBackend,
}

impl Backend for TwoShards {
    fn describe(&self) -> String {
        "two-shards".into()
    }

    fn send(&self, ops: &[crate::backend::Op<'_>]) -> Box<dyn crate::backend::InFlight> {
        let answers = ops.iter().map(|op| {
            let shard = if op.keys.first().starts_with(b"a") {
                &self.a
            } else {
                &self.b
            };
            let one = [*op];
            let got = shard.send(&one).finish(&one);
            let server = got.server().cloned().map(Arc::new);
            let result = got.into_results().remove(0);
            (result, server)
        });
        Box::new(crate::backend::Answers::per_answer(
            answers.collect::<Vec<_>>(),
        ))
    }
}

/// Each shard is judged on its own: a batch from one shard, then from
/// the other, is not a change of server (judged as one server, the
/// second batch would look like a restart and be quarantined), and a
/// restarted shard's grants wait out the quarantine while the other
/// shard's still count.
#[test]
fn a_cluster_nodes_shards_are_judged_one_by_one() {
    let clock = ManualClock::new();
    let quarantine = Duration::from_secs(20);
    let cluster = TwoShards {
        a: MemoryBackend::with_clock("a", Arc::new(clock.clone())),
        b: MemoryBackend::with_clock("b", Arc::new(clock.clone())),
    };
    let (a, b) = (cluster.a.clone(), cluster.b.clone());
    let t0 = Instant::now();
    let backend: Arc<dyn Backend> = Arc::new(cluster);
    let health = Arc::new(Vitals::default());
    let vitals = Arc::clone(&health);
    let shown = || vitals.snapshot("n", &[], t0, clock.now(), false).state;
    let mut state = State::new(0, backend, health, shared(&clock, Some(quarantine)), t0);
    for key in ["a1", "b1", "a2", "b2"] {
        let got = round_trip(&mut state, vec![acquire(key, token())], t0);
        assert!(matches!(got[..], [NodeOutcome::Granted]), "{key}: {got:?}");
    }
    // Shard b restarts: its grants wait, shard a's still count, in one batch too.
    b.restart();
    let got = round_trip(
        &mut state,
        vec![acquire("a3", token()), acquire("b3", token())],
        t0,
    );
    assert!(
        matches!(got[..], [NodeOutcome::Granted, NodeOutcome::Quarantined { remaining }] if remaining == quarantine),
        "{got:?}"
    );
    // health() does not hide the quarantined shard behind the other.
    assert!(
        matches!(shown(), crate::health::NodeState::Quarantined { remaining } if remaining == quarantine),
        "{:?}",
        shown()
    );
    let got = round_trip(&mut state, vec![acquire("a4", token())], t0);
    assert!(matches!(got[..], [NodeOutcome::Granted]), "{got:?}");
    assert!(
        matches!(shown(), crate::health::NodeState::Quarantined { .. }),
        "a batch from the other shard alone: {:?}",
        shown()
    );
    clock.advance(quarantine);
    let got = round_trip(&mut state, vec![acquire("b4", token())], t0);
    assert!(
        matches!(got[..], [NodeOutcome::Granted]),
        "after the quarantine: {got:?}"
    );
    assert!(
        matches!(shown(), crate::health::NodeState::Up),
        "{:?}",
        shown()
    );
    // A shard that hides its identity: its grant does not count.
    a.set_identity_hidden(true);
    let got = round_trip(
        &mut state,
        vec![acquire("a5", token()), acquire("b5", token())],
        t0,
    );
    assert!(
        matches!(got[..], [NodeOutcome::Failed(_), NodeOutcome::Granted]),
        "{got:?}"
    );
    // A shard that may evict: its grants do not count, and health() says
    // so for the node, naming the shard's setting.
    a.set_identity_hidden(false);
    b.set_maxmemory(1 << 20, "volatile-lru");
    let got = round_trip(
        &mut state,
        vec![acquire("a6", token()), acquire("b6", token())],
        t0,
    );
    assert!(
        matches!(got[..], [NodeOutcome::Granted, NodeOutcome::Failed(_)]),
        "{got:?}"
    );
    assert!(
        matches!(shown(), crate::health::NodeState::MayEvict { ref setting } if setting.contains("volatile-lru")),
        "{:?}",
        shown()
    );
}

/// An op refused by the node's access rules makes the timer try what
/// locks need on a key of the crate's own (one round trip): a refusal
/// tied to one resource's key leaves the try clean and the node up;
/// refused there too, the node refuses what locks need (published for
/// `health()`, the ops named). While it refuses it is tried every
/// second, without lock traffic, and the fix is found by the next try.
#[test]
fn a_denial_is_tried_on_the_crates_own_key_and_judged_there() {
    use super::rights::RETRY;
    use crate::backend::{BackendErrorKind, OpKind};
    use crate::health::{LockOp, NodeState as Shown};

    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let t0 = Instant::now();
    let (mut state, health) = node_state(&node, shared(&clock, None), t0);
    let names = vec!["node-0".to_owned()];
    let shown = |at| {
        health
            .snapshot("node-0", &names, at, clock.now(), false)
            .state
    };
    // One resource's key is refused (a key pattern that misses it).
    node.set_denied(Some(Arc::new(|op| op.keys.contains(b"secret"))));
    let refused = round_trip(&mut state, vec![acquire("secret", token())], t0);
    assert!(
        matches!(&refused[0], NodeOutcome::Failed(e) if e.kind() == BackendErrorKind::Denied),
        "{refused:?}"
    );
    assert_eq!(state.poll_timeout(), Some(t0), "a try is due at once");
    let calls = node.round_trips();
    let _ = state.timer_fired(t0);
    assert_eq!(node.round_trips(), calls + 1, "the try is one round trip");
    assert_eq!(shown(t0), Shown::Up, "the refusal was the resource's");
    assert_eq!(node.key_count(), 0, "the try's release removed its key");
    assert_eq!(state.poll_timeout(), None, "nothing to try again");

    // Every extend and release refused, as an ACL user without scripts
    // on Redis 7.
    node.set_denied(Some(Arc::new(|op| {
        !matches!(op.kind, OpKind::Acquire { .. })
    })));
    let t1 = t0 + RETRY;
    let held = token();
    let ttl = Duration::from_secs(30);
    round_trip(
        &mut state,
        vec![acquire("k", held), item(Action::Extend { ttl }, "k", held)],
        t1,
    );
    let _ = state.timer_fired(t1);
    match shown(t1) {
        Shown::Refuses { ops, reason } => {
            assert_eq!(ops, [LockOp::Extend, LockOp::Release]);
            assert!(reason.contains("NOPERM"), "{reason}");
        }
        other => panic!("expected it to refuse, got {other}"),
    }
    assert!(
        state.poll_timeout().is_some_and(|at| at <= t1 + RETRY),
        "tried again within a second"
    );
    // Fixed: not tried before the second is up, then found at once.
    node.set_denied(None);
    let calls = node.round_trips();
    let _ = state.timer_fired(t1 + RETRY / 2);
    assert_eq!(node.round_trips(), calls, "no try before it is due");
    assert!(matches!(shown(t1), Shown::Refuses { .. }));
    let _ = state.timer_fired(t1 + RETRY);
    assert_eq!(shown(t1 + RETRY), Shown::Up);
}

/// An action with no op on its hold (an admission of a plain lock) is
/// never sent, nor turned into another op: it fails in its place, the
/// other items of its batch go out and are answered in order, and a batch
/// of nothing else costs no call and says nothing of the node's health.
#[test]
fn an_item_without_an_op_fails_in_its_place_and_is_never_sent() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let t0 = Instant::now();
    let (mut state, health) = node_state(&node, shared(&clock, None), t0);
    let held = token();
    let ttl = Duration::from_secs(30);
    let admit = || item(Action::Admit { ttl }, "k", held);
    let items = vec![acquire("k", held), admit(), release("k", held)];
    let votes = round_trip(&mut state, items, t0);
    assert!(
        matches!(
            &votes[..],
            [NodeOutcome::Granted, NodeOutcome::Failed(e), NodeOutcome::Granted]
                if e.message().contains("no operation Admit")
        ),
        "{votes:?}"
    );
    assert_eq!(node.operations(), 2, "the admission was not sent");
    let calls = node.round_trips();
    let alone = round_trip(&mut state, vec![admit(), admit()], t0);
    assert!(
        alone.iter().all(|v| matches!(v, NodeOutcome::Failed(_))),
        "{alone:?}"
    );
    assert_eq!(node.round_trips(), calls, "nothing to send: no call");
    assert!(!state.is_down() && !health.is_down());
}

/// A listener that rings on arrival spares the node's thread the polling
/// for notices, but the end of a wait rings nothing: the node still looks
/// at the watched keys within [`SUBSCRIPTION_CHECK`], so that a
/// subscription nobody waits for is dropped although no other work comes
/// (seen in CI: a server still had a waiter's subscription 5 s after the
/// waiter got its lock, its rounds driven by the caller, so the node's
/// thread never woke).
#[test]
fn a_subscription_nobody_waits_for_is_dropped_without_other_work() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let shared = shared(&clock, None);
    let now = Instant::now();
    let (state, _) = node_state(&node, Arc::clone(&shared), now);
    let mut state = state.ringing(Doorbell::new(|_| {}));
    let watch = shared.waiters.register(&KeySet::one("k"));
    let _ = state.listen(now);
    assert_eq!(node.listened_keys(), 1, "subscribed while someone waits");
    drop(watch);
    let wake = state.poll_timeout();
    assert!(
        wake.is_some_and(|at| at <= now + SUBSCRIPTION_CHECK),
        "the node's thread would sleep until other work comes: {wake:?}"
    );
    let _ = state.timer_fired(now + SUBSCRIPTION_CHECK);
    assert_eq!(node.listened_keys(), 0, "unsubscribed once nobody waits");
    assert_eq!(state.poll_timeout(), None, "nothing left to wake for");
}

/// When the node's thread wakes: never at a time already past.
#[path = "wake_tests.rs"]
mod wake;
