//! Tests of `waiters.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn notices_from_a_quorum_wake_every_waiter_of_their_key_and_only_them() {
    let waiters = Arc::new(Waiters::new(3, 2));
    let (a, b) = (KeySet::one("a"), KeySet::one("b"));
    let (a1, a2, b1) = (
        waiters.register(&a),
        waiters.register(&a),
        waiters.register(&b),
    );
    waiters.notify(b"a", Some(2));
    waiters.notify(b"a", Some(2));
    assert!(a1.notices().try_recv().is_err(), "one node is not a quorum");
    waiters.notify(b"a", Some(0));
    waiters.notify(b"a", Some(1));
    assert!(a1.notices().try_recv().is_ok() && a2.notices().try_recv().is_ok());
    assert!(a1.notices().try_recv().is_err(), "coalesced into one");
    assert!(b1.notices().try_recv().is_err());
    a1.clear();
    waiters.notify(b"a", Some(0));
    assert!(
        a1.notices().try_recv().is_err(),
        "cleared: heard from one node since"
    );
    waiters.set_deaf(2, true);
    waiters.notify(b"a", Some(0));
    assert!(
        a1.notices().try_recv().is_err(),
        "one node deaf: one notice is what an undo on the free node sends"
    );
    waiters.notify(b"a", Some(1));
    assert!(a1.notices().try_recv().is_ok(), "both nodes that can send");
    waiters.notify(b"b", None);
    assert!(
        b1.notices().try_recv().is_ok(),
        "missed notices wake at once"
    );
    let generation = waiters.generation();
    drop(a1);
    assert_eq!(waiters.generation(), generation, "a still has a waiter");
    drop((a2, b1));
    assert_ne!(waiters.generation(), generation);
    assert!(
        waiters.keys().1.is_empty(),
        "nothing watched once all are gone"
    );
}

/// A set waiter counts each member's notices on their own. The release of
/// one member on node 0 and of another on node 1 is no member released on a
/// quorum.
#[test]
fn a_set_waiter_counts_the_notices_of_each_member_apart() {
    let waiters = Arc::new(Waiters::new(3, 2));
    let set = KeySet::new(["a", "b"]).unwrap();
    let watch = waiters.register(&set);
    assert_eq!(waiters.keys().1.len(), 2, "both members listened for");
    waiters.notify(b"a", Some(0));
    waiters.notify(b"b", Some(1));
    assert!(
        watch.notices().try_recv().is_err(),
        "woken by two members' notices from one node each"
    );
    waiters.notify(b"b", Some(0));
    assert!(watch.notices().try_recv().is_ok(), "b from a quorum");
}

/// The holder a waiter knows is the value a quorum of nodes refused
/// it with: a change of it is news once, another waiter's failed
/// attempt (on fewer nodes) is none.
#[test]
fn holder_news_comes_from_a_quorum_of_refusals() {
    use HolderNews::{First, Moved, Stayed, Unknown};

    let waiters = Arc::new(Waiters::new(3, 2));
    let key = KeySet::one("k");
    let watch = waiters.register(&key);
    assert_eq!(watch.take_holder_news(), Unknown, "no refusal yet");
    waiters.note_holder(&key, 0, 7, None);
    assert_eq!(watch.take_holder_news(), Unknown, "one node");
    waiters.note_holder(&key, 1, 7, None);
    assert_eq!(watch.take_holder_news(), First);
    assert_eq!(watch.take_holder_news(), Unknown, "told once");
    waiters.note_holder(&key, 2, 7, None);
    assert_eq!(watch.take_holder_news(), Stayed, "a late refusal");
    watch.clear();
    waiters.note_holder(&key, 0, 7, None);
    waiters.note_holder(&key, 2, 9, None);
    assert_eq!(
        watch.take_holder_news(),
        Unknown,
        "the holder on one node, another attempt on the other"
    );
    let other = KeySet::one("other");
    waiters.note_holder(&other, 0, 8, None);
    waiters.note_holder(&other, 1, 8, None);
    assert_eq!(watch.take_holder_news(), Unknown, "another key");
    watch.clear();
    waiters.note_holder(&key, 0, 11, None);
    assert_eq!(
        watch.take_holder_news(),
        Unknown,
        "one node is not a quorum, and older refusals do not count"
    );
    waiters.note_holder(&key, 1, 11, None);
    assert_eq!(watch.take_holder_news(), Moved, "a new holder on a quorum");
    assert_eq!(watch.take_holder_news(), Unknown, "told once");
    watch.clear();
    waiters.note_holder(&key, 1, 11, None);
    waiters.note_holder(&key, 2, 11, None);
    assert_eq!(watch.take_holder_news(), Stayed);
}

/// A waiter's next timed attempt may wait until a quorum of nodes may
/// grant: the Q-th expiry among the refusals that said when, counting the
/// nodes that did not say (or did not refuse) as free now; never while
/// some node is deaf (a release there reaches nobody).
#[test]
fn a_quorum_is_free_when_enough_of_the_holders_keys_have_expired() {
    let waiters = Arc::new(Waiters::new(5, 3));
    let key = KeySet::one("k");
    let watch = waiters.register(&key);
    let now = Instant::now();
    let at = |ms| now + Duration::from_millis(ms);
    assert_eq!(watch.quorum_free_at(), None, "nothing refused yet");
    waiters.note_holder(&key, 0, 7, Some(at(500)));
    waiters.note_holder(&key, 1, 7, Some(at(300)));
    assert_eq!(watch.quorum_free_at(), None, "three nodes may grant now");
    waiters.note_holder(&key, 2, 7, Some(at(900)));
    assert_eq!(
        watch.quorum_free_at(),
        Some(at(300)),
        "two free, one more to expire: the earliest"
    );
    waiters.note_holder(&key, 3, 7, None);
    assert_eq!(
        watch.quorum_free_at(),
        Some(at(300)),
        "a refusal without expiry"
    );
    waiters.note_holder(&key, 3, 7, Some(at(100)));
    waiters.note_holder(&key, 4, 7, Some(at(700)));
    assert_eq!(
        watch.quorum_free_at(),
        Some(at(500)),
        "all five refused: the third expiry"
    );
    waiters.set_deaf(4, true);
    assert_eq!(watch.quorum_free_at(), None, "a deaf node");
    waiters.set_deaf(4, false);
    watch.clear();
    assert_eq!(watch.quorum_free_at(), None, "cleared with the refusals");
}

/// The threshold never lets the undos of attempts that lost to a
/// holder (at most N - Q nodes) wake anyone.
#[test]
fn the_threshold_stays_above_what_an_undo_can_reach() {
    // (nodes, quorum, deaf, needed)
    let cases = [
        (1, 1, 0, 1),
        (3, 2, 0, 2),
        (3, 2, 1, 2),
        (3, 2, 2, 2),
        (3, 3, 0, 3),
        (3, 3, 1, 2),
        (3, 3, 2, 1),
        (4, 3, 0, 3),
        (4, 3, 1, 2),
        (4, 3, 2, 2),
        (5, 3, 0, 3),
        (5, 3, 1, 3),
        (5, 4, 1, 3),
        (5, 4, 3, 2),
    ];
    for (nodes, quorum, deaf, needed) in cases {
        let waiters = Waiters::new(nodes, quorum);
        (0..deaf).for_each(|n| waiters.set_deaf(n, true));
        assert_eq!(
            waiters.needed(),
            needed,
            "{nodes} nodes, {quorum} needed, {deaf} deaf"
        );
        assert!(needed > nodes - quorum, "an undo could wake");
    }
}

#[test]
fn heard_releases_are_remembered_briefly_and_boundedly() {
    let waiters = Waiters::new(3, 2);
    let key = Hold::Lock(KeySet::one("k"));
    assert!(!waiters.take_heard(&key));
    waiters.note_heard(&key);
    assert!(waiters.take_heard(&key));
    assert!(!waiters.take_heard(&key), "taken once");
    for i in 0..MAX_HEARD * 2 {
        waiters.note_heard(&Hold::Lock(KeySet::one(i.to_string())));
    }
    assert!(waiters.heard.lock().len() <= MAX_HEARD);
}
