//! Unit tests of `forms/wire.rs`: how a command form is packed, and what
//! its replies say.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use redis::Value;

use super::*;
use crate::backend::redis::forms::Delete;
use crate::backend::{KeySet, Reply};

/// An acquire by `SET .. NX PX`, its constant words written pre-encoded,
/// is the command the `redis` crate writes.
#[test]
fn set_nx_is_packed_as_the_crate_packs_it() {
    let key = KeySet::one("locks:k");
    let op = Op::acquire(&key, b"tok", std::time::Duration::from_millis(10_000));
    let mut buf = Vec::new();
    pack_command(Form::SetNx, &op, 10_000, &mut buf);
    let mut expected = Vec::new();
    redis::cmd("SET")
        .arg("locks:k")
        .arg("tok")
        .arg("NX")
        .arg("PX")
        .arg(10_000u64)
        .write_packed_command(&mut expected);
    assert_eq!(buf, expected);
    assert_eq!(replies(Form::SetNx, &op), 1);
}

/// Redis 8.4's conditional delete, as its documentation writes it.
#[test]
fn delex_is_packed_with_ifeq_and_a_subscriber_count() {
    let key = KeySet::one("locks:k");
    let op = Op::release(&key, b"tok");
    let form = Form::DeleteIfEqual(Delete::DelEx);
    let mut buf = Vec::new();
    pack_command(form, &op, 0, &mut buf);
    let mut expected = Vec::new();
    redis::cmd("DELEX")
        .arg("locks:k")
        .arg("IFEQ")
        .arg("tok")
        .write_packed_command(&mut expected);
    redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("quorum-lock:released:locks:k")
        .write_packed_command(&mut expected);
    assert_eq!(buf, expected);
    assert_eq!(replies(form, &op), 2);
}

fn numsub(n: i64) -> Value {
    Value::Array(vec![Value::BulkString(b"ch".to_vec()), Value::Int(n)])
}

/// A release announces only keys it deleted and someone listens on.
#[test]
fn a_release_is_announced_only_when_it_deleted_for_listeners() {
    let keys = KeySet::new(["a", "b"]).expect("two keys");
    let op = Op::release(&keys, b"t");
    let form = Form::DeleteIfEqual(Delete::DelIfEq);
    let read = |replies: Vec<Value>| read_command(form, &op, false, &mut replies.into_iter());
    assert!(matches!(
        read(vec![Value::Int(0), numsub(3), Value::Int(0), numsub(1)]),
        Ok(Said::Done(Reply::No))
    ));
    assert!(matches!(
        read(vec![Value::Int(1), numsub(0), Value::Int(0), numsub(5)]),
        Ok(Said::Done(Reply::Yes))
    ));
    match read(vec![Value::Int(0), numsub(4), Value::Int(1), numsub(2)]) {
        Ok(Said::Then(Pending::Announce { keys, listeners })) => {
            assert_eq!((keys, listeners), (vec![1], 2));
        }
        _ => panic!("expected an announcement of b"),
    }
    // Anything but [channel, count] (a refused NUMSUB: no right)
    // counts nobody: released, silent.
    let denied = Value::SimpleString("not a count".into());
    assert!(matches!(
        read(vec![Value::Int(1), denied, Value::Int(0), numsub(0)]),
        Ok(Said::Done(Reply::Yes))
    ));
    // A cluster's shard: its listeners may be on other nodes, which its
    // NUMSUB does not count; what it deleted is announced all the same,
    // and what it did not delete never is.
    let on_shard = |replies: Vec<Value>| read_command(form, &op, true, &mut replies.into_iter());
    match on_shard(vec![Value::Int(1), numsub(0), Value::Int(0), numsub(0)]) {
        Ok(Said::Then(Pending::Announce { keys, listeners })) => {
            assert_eq!((keys, listeners), (vec![0], 0));
        }
        _ => panic!("expected an announcement of a"),
    }
    assert!(matches!(
        on_shard(vec![Value::Int(0), numsub(0), Value::Int(0), numsub(0)]),
        Ok(Said::Done(Reply::No))
    ));
}
