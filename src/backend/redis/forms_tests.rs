//! Unit tests of `forms.rs`: which server gets which command, and what
//! the command forms' replies say.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use super::*;
use crate::backend::KeySet;

fn on(product: ServerProduct, major: u32, minor: u32) -> Commands {
    Commands::of(Some(ServerVersion::new(product, major, minor, 0)))
}

/// docs/operations.md's table, per version. Redis 8.4 is covered here
/// only: no Redis 8.4 server is installable on the test machines.
#[test]
fn each_server_version_has_the_commands_of_its_release() {
    use ServerProduct::{Redis, Valkey};
    let none = Commands::default();
    assert_eq!(Commands::of(None), none);
    assert_eq!(on(Valkey, 8, 0), none);
    assert_eq!(on(Redis, 7, 0), none);
    assert_eq!(on(Redis, 8, 2), none);
    let extend_only = Commands {
        set_if_equal: true,
        ..none
    };
    assert_eq!(on(Valkey, 8, 1), extend_only);
    assert_eq!(
        on(Valkey, 9, 0),
        Commands {
            delete: Some(Delete::DelIfEq),
            ..extend_only
        }
    );
    let all = |delete| Commands {
        delete: Some(delete),
        set_if_equal: true,
        mset_ex: true,
    };
    assert_eq!(on(Valkey, 9, 1), all(Delete::DelIfEq));
    assert_eq!(on(Redis, 8, 4), all(Delete::DelEx));
    assert_eq!(on(Redis, 9, 0), all(Delete::DelEx));
}

#[test]
fn the_setting_chooses_between_command_and_script() {
    let key = KeySet::one("k");
    let release = Op::release(&key, b"t");
    let fenced = Op::acquire_fenced(&key, b"t", Duration::from_secs(1), b"c");
    let redis_84 = on(ServerProduct::Redis, 8, 4);
    let redis_7 = on(ServerProduct::Redis, 7, 0);
    let delex = Form::DeleteIfEqual(Delete::DelEx);
    assert_eq!(form_of(&release, redis_84, Scripts::Auto), Ok(delex));
    assert_eq!(form_of(&release, redis_84, Scripts::Never), Ok(delex));
    let script = Ok(Form::Script(Script::Release));
    assert_eq!(form_of(&release, redis_84, Scripts::Always), script);
    assert_eq!(form_of(&release, redis_7, Scripts::Auto), script);
    let refused = form_of(&release, redis_7, Scripts::Never).unwrap_err();
    assert!(refused.contains("DELEX"), "{refused}");
    assert!(form_of(&fenced, redis_84, Scripts::Never).is_err());
    let plain = Op::acquire(&key, b"t", Duration::from_secs(1));
    assert_eq!(form_of(&plain, redis_7, Scripts::Never), Ok(Form::SetNx));
}

/// Redis 8.4's conditional delete, as its documentation writes it.
#[test]
fn delex_is_packed_with_ifeq_and_a_subscriber_count() {
    let key = KeySet::one("locks:k");
    let op = Op::release(&key, b"tok");
    let form = Form::DeleteIfEqual(Delete::DelEx);
    let mut buf = Vec::new();
    form.pack_command(&op, 0, &mut buf);
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
    assert_eq!(form.replies(&op), 2);
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
