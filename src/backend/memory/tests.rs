//! Unit tests of the in-memory node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::backend::memory::*;
use crate::backend::{KeySet, acquire, extend, run};
use crate::clock::ManualClock;

const TTL: Duration = Duration::from_secs(10);

#[test]
fn expiry_follows_the_injected_clock() {
    let clock = ManualClock::new();
    let node = MemoryBackend::with_clock("m", Arc::new(clock.clone()));
    assert!(acquire(&node, b"k", b"a", TTL).unwrap());
    clock.advance(TTL - Duration::from_millis(1));
    assert_eq!(node.holder(b"k").as_deref(), Some(&b"a"[..]));
    clock.advance(Duration::from_millis(1));
    assert_eq!(node.holder(b"k"), None);
    assert!(acquire(&node, b"k", b"b", TTL).unwrap());
}

#[test]
fn extend_never_recreates_and_checks_the_token() {
    let clock = ManualClock::new();
    let node = MemoryBackend::with_clock("m", Arc::new(clock.clone()));
    assert!(!extend(&node, b"k", b"a", TTL).unwrap());
    assert_eq!(node.key_count(), 0);
    assert!(acquire(&node, b"k", b"a", TTL).unwrap());
    assert!(!extend(&node, b"k", b"b", TTL * 2).unwrap());
    assert_eq!(node.remaining_ttl(b"k"), Some(TTL));
    assert!(extend(&node, b"k", b"a", TTL * 2).unwrap());
    assert_eq!(node.remaining_ttl(b"k"), Some(TTL * 2));
    clock.advance(TTL * 2);
    assert!(!extend(&node, b"k", b"a", TTL).unwrap());
}

#[test]
fn faults() {
    let node = MemoryBackend::new("m");
    node.fail_next(1);
    assert!(acquire(&node, b"k", b"a", TTL).is_err());
    assert_eq!(node.key_count(), 0, "a failed op is not applied");
    node.lose_replies_next(1);
    let err = acquire(&node, b"k", b"a", TTL).unwrap_err();
    assert_eq!(err.kind(), BackendErrorKind::Timeout);
    assert_eq!(node.holder(b"k").as_deref(), Some(&b"a"[..]), "applied");
    let before = node.server_info().unwrap();
    node.restart();
    assert_eq!(node.key_count(), 0);
    assert_ne!(node.server_info().unwrap().run_id, before.run_id);
}

#[test]
fn batch_is_one_round_trip() {
    let node = MemoryBackend::new("m");
    let a = KeySet::one("a");
    let ops = [
        Op::acquire(&a, b"t", TTL),
        Op::acquire(&a, b"u", TTL),
        Op::release(&a, b"t"),
    ];
    let results: Vec<bool> = run(&node, &ops)
        .into_results()
        .into_iter()
        .map(|r| r.unwrap().is_yes())
        .collect();
    assert_eq!(results, [true, false, true]);
    assert_eq!((node.round_trips(), node.operations()), (1, 3));
}

/// A refused acquire says who holds the key, by digest, for a plain key,
/// a fenced one and a set (the first member held by another value); a
/// single key's also says how long the key has left.
#[test]
fn a_refused_acquire_names_the_holder_by_digest() {
    let node = MemoryBackend::new("m");
    assert!(acquire(&node, b"b", b"theirs", TTL).unwrap());
    let (b, set) = (KeySet::one("b"), KeySet::new(["a", "b"]).unwrap());
    let ops = [
        Op::acquire(&b, b"mine", TTL),
        Op::acquire_fenced(&b, b"mine", TTL, b"fences"),
        Op::acquire(&set, b"mine", TTL),
        Op::acquire(&b, b"theirs", TTL),
    ];
    let replies: Vec<Reply> = run(&node, &ops)
        .into_results()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let Reply::HeldBy { digest: theirs, .. } = Reply::held_by(b"theirs") else {
        unreachable!()
    };
    let Reply::HeldBy { digest: mine, .. } = Reply::held_by(b"mine") else {
        unreachable!()
    };
    assert_ne!(theirs, mine);
    for reply in &replies[..2] {
        // A single key's refusal with the time the holder's key has left.
        assert!(
            matches!(reply, Reply::HeldBy { digest, expires_in: Some(left) }
                if *digest == theirs && *left <= TTL && !left.is_zero()),
            "{replies:?}"
        );
        assert!(!reply.is_yes());
    }
    // A set's without (as the Redis set script's).
    assert_eq!(
        replies[2],
        Reply::HeldBy {
            digest: theirs,
            expires_in: None
        }
    );
    assert_eq!(replies[3], Reply::AlreadyOurs);
}

/// A proclaim announces its write to the record key's listeners only:
/// never to the lock key's (the campaigns'), and not when it is refused.
#[test]
fn a_proclaim_is_announced_on_the_record_key_only() {
    use crate::backend::{Op, Reply};

    let node = MemoryBackend::new("m");
    let (mut on_record, mut on_lock) = (MemoryListener::new(&node), MemoryListener::new(&node));
    on_record.listen(&[b"rec"]).unwrap();
    on_lock.listen(&[b"lock"]).unwrap();
    let lock = KeySet::one(b"lock");
    assert!(acquire(&node, b"lock", b"a", TTL).unwrap());
    let refused = run(&node, &[Op::proclaim(&lock, b"b", b"rec", b"r1")]);
    assert!(matches!(refused.results(), [Ok(Reply::No)]));
    assert!(
        on_record.receive().unwrap().is_empty(),
        "a refused proclaim"
    );
    let written = run(&node, &[Op::proclaim(&lock, b"a", b"rec", b"r2")]);
    assert!(matches!(written.results(), [Ok(Reply::Yes)]));
    assert_eq!(on_record.receive().unwrap(), vec![b"rec".to_vec()]);
    assert!(
        on_lock.receive().unwrap().is_empty(),
        "the lock key's listener heard it"
    );
}
