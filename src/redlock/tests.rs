//! Tests of the lease's deadline under overlapping extends and hand-over,
//! at the level of the rounds, where the watchdog's two-step extend
//! (begun, finished later) can be interleaved step by step. The forget
//! watch's tests, which need a guard, use these helpers from
//! `src/guard_tests.rs` (the layer above).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lease::Lease;
use super::line::Want;
use super::rounds::{Config, Rounds};
use super::turns::Streak;
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, KeySet};
use crate::clock::ManualClock;
use crate::engine::{Engine, Settings};

const MS: Duration = Duration::from_millis(1);
pub(crate) const LONG: Duration = Duration::from_secs(3);
const SHORT: Duration = Duration::from_millis(300);

/// Rounds over `nodes` on `clock`, as a manager with TTL = max_ttl = 3 s
/// and no quarantine (the nodes never restart here).
pub(crate) fn rounds(nodes: &[MemoryBackend], clock: &ManualClock) -> Rounds {
    let backends: Vec<Arc<dyn Backend>> = nodes
        .iter()
        .map(|n| Arc::new(n.clone()) as Arc<dyn Backend>)
        .collect();
    let timeout = Duration::from_millis(500);
    let clock = Arc::new(clock.clone());
    let settings = Settings {
        quorum: 2,
        quarantine: None,
        max_ttl: LONG,
        forget_window: LONG,
        drain_wait: timeout,
        clock: clock.clone(),
        fence_counters: crate::resource::crate_key(b"", crate::resource::FENCES),
        rights_key: crate::resource::crate_key(b"", crate::resource::PROBE),
        accept_eviction: false,
        value_suffix: Box::default(),
    };
    let engine = Engine::start(backends, settings).unwrap();
    let config = Config {
        ttl: LONG,
        max_ttl: LONG,
        node_timeout: timeout,
        drift_factor: 0.01,
        quorum: 2,
        prefix: Vec::new(),
        fencing: false,
        clock,
        owner: String::new(),
    };
    Rounds::new(engine, config)
}

fn cluster(clock: &ManualClock) -> (Vec<MemoryBackend>, Rounds, Rounds) {
    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::with_clock(format!("mem-{i}"), Arc::new(clock.clone())))
        .collect();
    let (a, b) = (rounds(&nodes, clock), rounds(&nodes, clock));
    (nodes, a, b)
}

pub(crate) fn lock(rounds: &Rounds) -> Option<Arc<Lease>> {
    let resources = KeySet::one("r");
    let lock = rounds.lock_on(&resources);
    rounds.acquire_once(&resources, &lock, LONG, false).ok()
}

/// The lease's remaining validity on `rounds`' clock (zero once lost).
fn validity(rounds: &Rounds, lease: &Lease) -> Duration {
    lease.state().validity(rounds.now())
}

/// Regression: per-node FIFO makes the extend *begun* last the one the
/// servers apply last, and `PEXPIRE` can shorten a key. Schedule: the
/// watchdog sends a 3 s extend; the holder's own `extend(300 ms)`
/// completes; the watchdog gathers later. Before the fix the watchdog wrote
/// a ~3 s deadline ("validity 2.968s outlives the last extend (300ms)"),
/// the keys expired after 300 ms, and a second manager locked while the
/// first guard was still valid.
#[test]
fn an_extend_finishing_last_does_not_outlive_one_begun_after_it() {
    let clock = ManualClock::new();
    let (_nodes, a, b) = cluster(&clock);
    let lease = lock(&a).unwrap();
    let watchdog = a.begin_extend(&lease, LONG).unwrap();
    a.extend(&lease, SHORT).unwrap();
    a.finish_extend(&lease, watchdog).unwrap();
    let left = validity(&a, &lease);
    assert!(
        left <= SHORT,
        "validity {left:?} outlives the last extend ({SHORT:?})"
    );
    clock.advance(SHORT + MS);
    let other = lock(&b);
    assert!(
        validity(&a, &lease).is_zero() || other.is_none(),
        "two valid holders"
    );
}

/// The same, hand-over variant: a lock handed to the next local holder
/// while an extend that shortens the keys is in flight must not carry the
/// older, longer deadline.
#[test]
fn a_hand_over_during_a_shortening_extend_carries_the_shorter_deadline() {
    let clock = ManualClock::new();
    let (_nodes, a, _b) = cluster(&clock);
    let lease = lock(&a).unwrap();
    let shortening = a.begin_extend(&lease, SHORT).unwrap();
    let want = Want {
        ttl: LONG,
        fenced: false,
    };
    let handoff = a.handoff(&lease, &want, Streak::default());
    let deadline = handoff.map(|lease| lease.state().deadline());
    assert!(
        deadline.is_none_or(|d| d <= a.now() + SHORT),
        "handed over with {:?} left while a {SHORT:?} extend is in flight",
        deadline.map(|d| d - a.now())
    );
    let _ = a.finish_extend(&lease, shortening);
}

// The lease's events in every order (extends from two sources, node
// answers in per-node FIFO order, release, forget, hand-over, clock
// steps), checked exhaustively against a model of the nodes: see
// `checks/lease.rs`, which replaced the 40 random schedules that were here.

#[test]
fn the_deadline_starts_before_the_first_send() {
    let clock = ManualClock::new();
    let (_nodes, a, _b) = cluster(&clock);
    let before: Instant = a.now();
    let lease = lock(&a).unwrap();
    let drift = super::validity::drift(LONG, 0.01);
    assert_eq!(lease.state().deadline(), before + LONG - drift);
}
