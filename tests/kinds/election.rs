//! Leader election on in-memory nodes: one leader at a time, terms that
//! only grow, what observers read, a leader's loss, and bad input as a
//! typed error that leaves no key behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{
    CancellationToken, Error, LockManager, LockOptions, MAX_LEADER_VALUE, MemoryBackend,
    RetryPolicy,
};
use testkit::{memory_nodes, observed};

use crate::support::manager;

/// A manager with a short TTL (its leaders are lost within a second).
fn quick(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(Duration::from_millis(900))
        .node_timeout(Duration::from_millis(200))
        // A restarted node is quarantined for max_ttl plus drift.
        .max_ttl(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
fn two_managers_campaign_one_leads_and_the_other_leads_after_a_resignation() {
    let nodes = memory_nodes(3);
    let [a, b, watcher] = [(); 3].map(|()| manager(&nodes).election("scheduler").unwrap());
    assert_eq!(watcher.observe().unwrap(), None, "nobody leads yet");
    let first = a.campaign(b"a:8080").unwrap();
    assert!(first.is_valid() && first.validity() > Duration::ZERO);
    first.check().unwrap();
    let refused = b.try_campaign(b"b:8080").unwrap_err();
    assert!(refused.is_contended(), "{refused}");
    let seen = watcher.observe().unwrap().expect("a leads");
    assert_eq!((seen.term(), seen.value()), (first.term(), &b"a:8080"[..]));
    assert!(seen.time_left() > Duration::ZERO);

    // b waits in campaign; a resigns; b leads with a higher term.
    let follower = thread::spawn(move || b.campaign(b"b:8080"));
    let first_term = first.term();
    first.resign().unwrap();
    let second = follower.join().unwrap().unwrap();
    assert!(second.term() > first_term);
    let seen = watcher.observe().unwrap().expect("b leads");
    assert_eq!((seen.term(), seen.value()), (second.term(), &b"b:8080"[..]));

    // A drop resigns too.
    let second_term = second.term();
    drop(second);
    let third = a
        .campaign_with(b"a:8080", &LockOptions::new().wait(Duration::from_secs(5)))
        .unwrap();
    assert!(third.term() > second_term);
}

#[test]
fn observers_see_each_proclaimed_value_and_terms_never_go_back() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let election = locks.election("api").unwrap();
    let watcher = manager(&nodes).election("api").unwrap();
    let mut leading = election.campaign(b"v1").unwrap();
    for value in [&b"v2"[..], b"", &[b'x'; MAX_LEADER_VALUE]] {
        leading.proclaim(value).unwrap();
        assert_eq!(leading.value(), value);
        let seen = watcher.observe().unwrap().expect("a leader");
        assert_eq!((seen.term(), seen.value()), (leading.term(), value));
    }
    let too_long = leading.proclaim(&[b'x'; MAX_LEADER_VALUE + 1]).unwrap_err();
    assert!(
        matches!(too_long, Error::InvalidArgument { .. }),
        "{too_long}"
    );
    assert_eq!(leading.value(), &[b'x'; MAX_LEADER_VALUE][..], "unchanged");
    leading.resign().unwrap();
    assert_eq!(watcher.observe().unwrap(), None);
}

#[test]
fn fifty_successive_leaders_have_strictly_increasing_terms() {
    let nodes = memory_nodes(3);
    let managers: Vec<LockManager> = (0..3).map(|_| manager(&nodes)).collect();
    let watcher = manager(&nodes).election("queue").unwrap();
    let mut last = 0;
    for i in 0..50 {
        let election = managers[i % 3].election("queue").unwrap();
        let value = format!("leader-{i}");
        let leading = election.try_campaign(value.as_bytes()).unwrap();
        assert!(
            leading.term() > last,
            "term {} after {last}",
            leading.term()
        );
        last = leading.term();
        let seen = watcher.observe().unwrap().expect("a leader");
        assert_eq!((seen.term(), seen.value()), (last, value.as_bytes()));
        match i % 2 {
            0 => leading.resign().unwrap(),
            _ => {
                drop(leading);
                managers[i % 3].flush(Duration::from_secs(5));
            }
        }
    }
}

#[test]
fn a_leader_whose_majority_fails_is_told_and_observers_do_not_see_it() {
    let nodes = memory_nodes(3);
    let election = quick(&nodes).election("jobs").unwrap();
    let watcher = quick(&nodes).election("jobs").unwrap();
    let leading = election.campaign(b"here").unwrap();
    let lost = leading.lost_signal();
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    let error = lost
        .recv_timeout(Duration::from_secs(5))
        .expect("a loss notice");
    assert!(error.is_lost(), "{error}");
    assert!(!leading.is_valid());
    assert!(leading.check().unwrap_err().is_lost());
    // Too few nodes answer: no answer rather than a guess.
    let unknown = watcher.observe().unwrap_err();
    assert!(unknown.is_no_quorum(), "{unknown}");
    // Back, restarted without their keys (as servers killed and started
    // again): nobody leads (or, while the quarantine counts, no answer).
    for node in &nodes[..2] {
        node.set_down(false);
        node.restart();
    }
    assert_eq!(observed(&watcher), None);
    let next = watcher
        .campaign_with(b"there", &LockOptions::new().wait(Duration::from_secs(5)))
        .unwrap();
    assert!(next.term() > leading.term());
    // The old leader's manager counts the restarted nodes once their
    // quarantine ends there too.
    let seen = observed(&election).expect("the new leader");
    assert_eq!((seen.term(), seen.value()), (next.term(), &b"there"[..]));
}

#[test]
fn try_campaign_returns_at_once_while_another_leads() {
    let nodes = memory_nodes(3);
    let leading = manager(&nodes)
        .election("x")
        .unwrap()
        .campaign(b"a")
        .unwrap();
    let other = manager(&nodes).election("x").unwrap();
    let started = Instant::now();
    let refused = other.try_campaign(b"b").unwrap_err();
    assert!(refused.is_contended(), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // A bounded campaign ends with the wait; a cancelled one at once.
    let short = LockOptions::new().wait(Duration::from_millis(300));
    assert!(
        other
            .campaign_with(b"b", &short)
            .unwrap_err()
            .is_contended()
    );
    let token = CancellationToken::new();
    token.cancel();
    let cancelled = LockOptions::new().cancellation(&token);
    assert!(
        other
            .campaign_with(b"b", &cancelled)
            .unwrap_err()
            .is_cancelled()
    );
    drop(leading);
}

#[test]
fn wait_change_returns_at_a_resignation_and_at_the_timeout() {
    let nodes = memory_nodes(3);
    let election = manager(&nodes).election("w").unwrap();
    let watcher = manager(&nodes).election("w").unwrap();
    let leading = election.campaign(b"a").unwrap();
    let term = leading.term();
    // Nothing changes: the timeout ends the wait, with the same leader.
    let started = Instant::now();
    let same = watcher
        .wait_change(Some(term), Duration::from_millis(300))
        .unwrap();
    assert_eq!(same.map(|l| l.term()), Some(term));
    assert!(started.elapsed() >= Duration::from_millis(300));
    let waiter = {
        let watcher = watcher.clone();
        thread::spawn(move || watcher.wait_change(Some(term), Duration::from_secs(10)))
    };
    thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    leading.resign().unwrap();
    let changed = waiter.join().unwrap().unwrap();
    assert_eq!(changed, None, "nobody leads after the resignation");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// `wait_update` returns at a proclaim within the term (the new value),
/// at a resignation (nobody), and at its timeout (the same leader);
/// `wait_change` is not ended by a proclaim; a campaign waiting for the
/// same election is not woken by the proclaim's notice.
#[test]
fn wait_update_returns_at_a_new_value_and_campaigns_are_not_woken_by_it() {
    let nodes = memory_nodes(3);
    let (leader, campaigner) = (manager(&nodes), manager(&nodes));
    let watcher = manager(&nodes).election("u").unwrap();
    let mut leading = leader.election("u").unwrap().campaign(b"v1").unwrap();
    let term = leading.term();
    let seen = watcher.observe().unwrap();
    let same = watcher
        .wait_update(seen.as_ref(), Duration::from_millis(200))
        .unwrap();
    assert_eq!(
        same.as_ref().map(|l| (l.term(), l.value())),
        Some((term, &b"v1"[..]))
    );
    let follower = campaigner.election("u").unwrap();
    let slow = LockOptions::new().wait(Duration::from_secs(30)).retry(
        RetryPolicy::new()
            .attempts(6)
            .delay(Duration::from_secs(5))
            .jitter(Duration::ZERO),
    );
    thread::scope(|s| {
        let campaign = s.spawn(|| follower.campaign_with(b"next", &slow));
        testkit::until_listening(&campaigner);
        let waited_from = Instant::now();
        let by_term = s.spawn(|| watcher.wait_change(Some(term), Duration::from_secs(1)));
        let by_value = s.spawn(|| watcher.wait_update(seen.as_ref(), Duration::from_secs(30)));
        leading.proclaim(b"v2").unwrap();
        let now = by_value.join().unwrap().unwrap().expect("a leader");
        assert_eq!((now.term(), now.value()), (term, &b"v2"[..]));
        // Only its timeout ends it (the term stays): not the proclaim.
        let still = by_term.join().unwrap().unwrap().expect("a leader");
        assert_eq!(still.term(), term);
        assert!(waited_from.elapsed() >= Duration::from_secs(1));
        assert_eq!(
            campaigner.health().locks.woken,
            0,
            "a proclaim woke a campaign"
        );
        let watcher = &watcher;
        let gone = s.spawn(move || watcher.wait_update(Some(&now), Duration::from_secs(30)));
        leading.resign().unwrap();
        let next = campaign.join().unwrap().unwrap();
        // Nobody (the resignation), or already the next leader.
        let after = gone.join().unwrap().unwrap();
        assert!(
            after.as_ref().is_none_or(|l| l.term() == next.term()),
            "{after:?}"
        );
        next.resign().unwrap();
    });
}

#[test]
fn bad_names_and_values_are_refused_and_leave_no_key_behind() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    for name in ["", "a{quorum-lock}b", "}x"] {
        let refused = locks.election(name).unwrap_err();
        assert!(
            matches!(refused, Error::InvalidArgument { .. }),
            "{name}: {refused}"
        );
    }
    let long = "n".repeat(quorum_lock::MAX_RESOURCE_LEN);
    assert!(matches!(
        locks.election(&long).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let election = locks.election("ok").unwrap();
    let too_long = vec![b'v'; MAX_LEADER_VALUE + 1];
    for refused in [
        election.try_campaign(&too_long).unwrap_err(),
        election.campaign(&too_long).unwrap_err(),
    ] {
        assert!(
            matches!(refused, Error::InvalidArgument { .. }),
            "{refused}"
        );
    }
    assert!(locks.flush(Duration::from_secs(5)));
    assert!(nodes.iter().all(|n| n.key_count() == 0));
}

#[test]
fn the_election_x_is_not_the_lock_x_or_the_rw_lock_x() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let mutex = locks.try_lock("x").unwrap();
    let writer = locks.rw_lock("x").unwrap().try_write().unwrap();
    let election = locks.election("x").unwrap();
    let leading = election.try_campaign(b"v").expect("its own keys");
    assert_ne!(election.keys().0, locks.key_for("x"));
    assert_ne!(election.keys().0, election.keys().1);
    drop((mutex, writer));
    drop(locks.try_lock("x").expect("the mutex is free"));
    drop(leading);
}

#[test]
fn a_thread_that_leads_and_campaigns_again_would_wait_for_itself() {
    let nodes = memory_nodes(3);
    let election = manager(&nodes).election("self").unwrap();
    let leading = election.campaign(b"v").unwrap();
    let again = election.campaign(b"v").unwrap_err();
    assert!(again.is_deadlock(), "{again}");
    drop(leading);
}

/// A campaign waits though the manager's policy makes one attempt (as
/// the command line's manager does): a follower's job is to wait.
#[test]
fn a_campaign_waits_on_a_manager_that_does_not_retry() {
    let nodes = memory_nodes(3);
    let single = || {
        LockManager::builder()
            .nodes(nodes.iter().cloned())
            .retry(quorum_lock::RetryPolicy::none())
            .build()
            .unwrap()
    };
    let leading = single()
        .election("one-try")
        .unwrap()
        .campaign(b"a")
        .unwrap();
    let follower = single().election("one-try").unwrap();
    let waiter = thread::spawn(move || follower.campaign(b"b").map(|l| l.term()));
    thread::sleep(Duration::from_millis(200));
    let term = leading.term();
    leading.resign().unwrap();
    assert!(waiter.join().unwrap().unwrap() > term);
}
