//! When a node's thread wakes: after its timer fired, never at a time
//! already past (a thread that would wake at once, again and again, burns
//! a core). Driven by hand as the node's other tests are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use testkit::rng::Rng;

/// A node marked down while a lock may still be held on it, with its
/// settings due for a look: the look waits for the node to be back, and
/// the thread's next wake is the probe, never a moment already past (it
/// was: the thread woke at once, did nothing, and woke again, a core
/// burnt until the node came back; the model test's CPU grew with the
/// machine's load from it).
#[test]
fn a_down_node_with_a_look_due_sleeps_until_its_probe() {
    let clock = ManualClock::new();
    let node = MemoryBackend::new("n");
    let t0 = Instant::now();
    let (mut state, _) = node_state(&node, shared(&clock, None), t0);
    let granted = round_trip(&mut state, vec![acquire("k", token())], t0);
    assert!(matches!(granted[..], [NodeOutcome::Granted]), "{granted:?}");
    node.set_down(true);
    let later = t0 + Duration::from_secs(1);
    round_trip(&mut state, vec![acquire("k2", token())], later);
    round_trip(&mut state, vec![acquire("k2", token())], later);
    assert!(state.is_down());
    let mut now = later;
    for _ in 0..5 {
        let _ = state.timer_fired(now);
        let wake = state.poll_timeout().expect("the probe is due some time");
        assert!(
            wake > now,
            "a down node's thread would wake at once, again and again: {:?} past",
            now - wake
        );
        now = wake;
    }
    node.set_down(false);
    let _ = state.timer_fired(now);
    assert!(!state.is_down(), "the probe answered");
}

/// Whatever happened to the node (grants, releases that fail and are
/// kept, the node down and back, failures, lost replies, restarts and
/// quarantine, waiters subscribing and leaving, the memory policy
/// switched), once its timer has fired at `now` the thread's next wake
/// is later than `now`: a wake time already past would wake the thread at
/// once, again and again (the busy loop of a down node with its settings
/// look due, above, was one). Random walks of such events, each seeded.
#[test]
fn after_its_timer_the_node_never_wakes_at_a_time_already_past() {
    for seed in 1..=200u64 {
        let mut rng = Rng::new(seed);
        let mut draw = move |n: u64| rng.below(n);
        let clock = ManualClock::new();
        let node = MemoryBackend::with_clock("n", Arc::new(clock.clone()));
        let shared = shared(&clock, Some(Duration::from_secs(2)));
        let mut now = Instant::now();
        let (state, _) = node_state(&node, Arc::clone(&shared), now);
        let mut state = state.ringing(Doorbell::new(|_| {}));
        let mut watches = Vec::new();
        let mut log = Vec::new();
        for step in 0..150 {
            let key = ["a", "b", "c"][draw(3) as usize];
            let event = draw(12);
            log.push(event);
            match event {
                0 | 1 => drop(round_trip(&mut state, vec![acquire(key, token())], now)),
                2 => drop(round_trip(&mut state, vec![release(key, token())], now)),
                3 => node.set_down(draw(2) == 0),
                4 => node.fail_next(1),
                5 => node.lose_replies_next(1),
                6 => node.restart(),
                7 => watches.push(shared.waiters.register(&KeySet::one(key))),
                8 => drop(watches.pop()),
                9 => node.set_maxmemory(1 << 20, ["noeviction", "allkeys-lru"][draw(2) as usize]),
                10 => clock.advance(Duration::from_millis(draw(1500))),
                _ => {}
            }
            now += Duration::from_millis(draw(700));
            let _ = state.timer_fired(now);
            let wake = state.poll_timeout();
            assert!(
                wake.is_none_or(|at| at > now),
                "seed {seed}, step {step}: after the timer at now, the next wake is {:?} past \
                 (down: {}); events so far: {log:?}",
                wake.map(|at| now.saturating_duration_since(at)),
                state.is_down(),
            );
        }
    }
}
