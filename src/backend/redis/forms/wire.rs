//! The script-free forms on the wire: each command packed, its replies
//! read into an answer, and the second round trip some answers need (a
//! script's form is packed and read by the batch, which knows the
//! digests). `forms.rs` chooses the form.
//!
//! Each answers as the script it replaces, with two differences handled
//! here. A release's notice: the script publishes inside its own atomic
//! step; here `PUBSUB NUMSUB` of the channel follows the delete in the
//! same pipeline, and a second round trip `PUBLISH`es only when the delete
//! deleted and someone listens (never a blind `PUBLISH`, which would
//! announce every failed attempt's undo and wake every waiter for
//! nothing). A waiter subscribes before it tries, so one that `NUMSUB`
//! missed tries after the delete and finds the key free. And a set's
//! extend: one `SET IFEQ` per member extends the members that still hold
//! our token even when another does not (the script changes none then);
//! the answer is still "no", and keys that hold our token only ever
//! exclude others for as long as we asked.

use redis::Value;

use super::{Delete, Form};
use crate::backend::redis::encode::command;
use crate::backend::redis::notices::channel;
use crate::backend::{Op, Reply};

/// Replies `op` in `form` gets in the first round trip.
pub(in crate::backend::redis) fn replies(form: Form, op: &Op<'_>) -> usize {
    match form {
        Form::SetNx | Form::Script(_) | Form::MsetEx => 1,
        Form::DeleteIfEqual(_) => 2 * op.keys.len(),
        Form::SetIfEqual => op.keys.len(),
    }
}

/// Packs `op` in `form` ([`replies`] commands),
/// unless it is a script: those the batch packs (it knows the digests).
pub(in crate::backend::redis) fn pack_command(
    form: Form,
    op: &Op<'_>,
    ttl_ms: u64,
    buf: &mut Vec<u8>,
) {
    let Op { keys, token, .. } = *op;
    match form {
        Form::Script(_) => {}
        Form::SetNx => {
            command(buf, 6)
                .encoded(b"$3\r\nSET\r\n", 1)
                .bytes(keys.first())
                .bytes(token)
                .encoded(b"$2\r\nNX\r\n$2\r\nPX\r\n", 2)
                .number(ttl_ms);
        }
        Form::DeleteIfEqual(delete) => {
            for key in keys.iter() {
                match delete {
                    Delete::DelIfEq => {
                        command(buf, 3).bytes(b"DELIFEQ").bytes(key).bytes(token);
                    }
                    Delete::DelEx => {
                        command(buf, 4)
                            .bytes(b"DELEX")
                            .bytes(key)
                            .bytes(b"IFEQ")
                            .bytes(token);
                    }
                }
                command(buf, 3)
                    .bytes(b"PUBSUB")
                    .bytes(b"NUMSUB")
                    .bytes(&channel(key));
            }
        }
        Form::SetIfEqual => {
            for key in keys.iter() {
                command(buf, 7)
                    .bytes(b"SET")
                    .bytes(key)
                    .bytes(token)
                    .bytes(b"IFEQ")
                    .bytes(token)
                    .bytes(b"PX")
                    .number(ttl_ms);
            }
        }
        Form::MsetEx => {
            let mut cmd = command(buf, 2 + 2 * keys.len() + 3);
            cmd.bytes(b"MSETEX").number(keys.len() as u64);
            for key in keys.iter() {
                cmd.bytes(key).bytes(token);
            }
            cmd.bytes(b"NX").bytes(b"PX").number(ttl_ms);
        }
    }
}

/// What a command form's first replies say, when the server ran it.
pub(in crate::backend::redis) enum Said {
    /// A final answer.
    Done(Reply),
    /// An answer that needs a second round trip.
    Then(Pending),
}

/// The second round trip a command form's answer needs.
pub(in crate::backend::redis) enum Pending {
    /// A release deleted these keys (indices into the op's keys), which
    /// `listeners` subscribers wait on: announce them.
    Announce { keys: Vec<usize>, listeners: u64 },
    /// `MSETEX` set nothing: read every member to tell who holds the set.
    ReadMembers,
}

/// A reply that is not an answer.
pub(in crate::backend::redis) enum Bad {
    /// The server refused the command: its error (an unknown command on a
    /// server older than its version said, `WRONGTYPE`, `NOPERM`).
    Refused(redis::ServerError),
    /// A reply no server of this command sends.
    Unexpected(Value),
}

/// Reads a command form's first replies ([`replies`] of them).
/// `SetNx` and scripts are read by the batch.
///
/// `listeners_elsewhere`: the server is a cluster's shard, whose
/// `PUBLISH` reaches the subscribers of every node while `PUBSUB NUMSUB`
/// counts its own: every key deleted is announced.
pub(in crate::backend::redis) fn read_command(
    form: Form,
    op: &Op<'_>,
    listeners_elsewhere: bool,
    replies: &mut impl Iterator<Item = Value>,
) -> Result<Said, Bad> {
    let mut next = || replies.next().unwrap_or(Value::Nil);
    match form {
        Form::SetNx | Form::Script(_) => Err(Bad::Unexpected(next())),
        Form::DeleteIfEqual(_) => {
            let (mut removed, mut heard_by, mut listeners, mut refused) = (0, Vec::new(), 0, None);
            for k in 0..op.keys.len() {
                let (delete, numsub) = (next(), next());
                match delete {
                    Value::Int(1) => {
                        removed += 1;
                        let heard = subscribers(&numsub);
                        if heard > 0 || listeners_elsewhere {
                            heard_by.push(k);
                            listeners += heard;
                        }
                    }
                    Value::Int(0) => {}
                    Value::ServerError(e) => refused = refused.or(Some(Bad::Refused(e))),
                    other => refused = refused.or(Some(Bad::Unexpected(other))),
                }
            }
            match refused {
                Some(refused) => Err(refused),
                None if removed == 0 => Ok(Said::Done(Reply::No)),
                None if heard_by.is_empty() => Ok(Said::Done(Reply::Yes)),
                None => Ok(Said::Then(Pending::Announce {
                    keys: heard_by,
                    listeners,
                })),
            }
        }
        Form::SetIfEqual => {
            let (mut all_set, mut refused) = (true, None);
            for _ in 0..op.keys.len() {
                match next() {
                    Value::Okay => {}
                    Value::Nil => all_set = false,
                    Value::ServerError(e) => refused = refused.or(Some(Bad::Refused(e))),
                    other => refused = refused.or(Some(Bad::Unexpected(other))),
                }
            }
            match refused {
                Some(refused) => Err(refused),
                None => Ok(Said::Done(Reply::from(all_set))),
            }
        }
        Form::MsetEx => match next() {
            Value::Int(1) => Ok(Said::Done(Reply::Yes)),
            Value::Int(0) => Ok(Said::Then(Pending::ReadMembers)),
            Value::ServerError(e) => Err(Bad::Refused(e)),
            other => Err(Bad::Unexpected(other)),
        },
    }
}

/// Packs the second round trip of `pending`: `PUBLISH` on each deleted
/// key's channel (one reply each), or `GET` of every member (one reply
/// each). Returns the replies to expect.
pub(in crate::backend::redis) fn pack_followup(
    pending: &Pending,
    op: &Op<'_>,
    buf: &mut Vec<u8>,
) -> usize {
    match pending {
        Pending::Announce { keys, .. } => {
            for &k in keys {
                if let Some(key) = op.keys.iter().nth(k) {
                    redis::cmd("PUBLISH")
                        .arg(channel(key))
                        .arg("")
                        .write_packed_command(buf);
                }
            }
            keys.len()
        }
        Pending::ReadMembers => {
            for key in op.keys.iter() {
                redis::cmd("GET").arg(key).write_packed_command(buf);
            }
            op.keys.len()
        }
    }
}

/// What the follow-up's replies say: for an announced release,
/// [`Reply::Notified`] with the listeners when every `PUBLISH` went out
/// (a refused one, such as an ACL without `+publish`, still released);
/// for the members of a refused set, who holds them as the set acquire
/// script tells it (the first member held by another value, else ours,
/// else none), or a member's error (`WRONGTYPE`).
pub(in crate::backend::redis) fn read_followup(
    pending: &Pending,
    op: &Op<'_>,
    replies: &mut impl Iterator<Item = Value>,
) -> Result<Reply, Bad> {
    match pending {
        Pending::Announce { keys, listeners } => {
            let published = keys
                .iter()
                .filter(|_| matches!(replies.next(), Some(Value::Int(_))))
                .count();
            Ok(if published == keys.len() && *listeners > 0 {
                Reply::Notified(*listeners)
            } else {
                Reply::Yes
            })
        }
        Pending::ReadMembers => {
            let (mut ours, mut other, mut refused) = (false, None, None);
            for _ in 0..op.keys.len() {
                match replies.next().unwrap_or(Value::Nil) {
                    Value::BulkString(held) if held == op.token => ours = true,
                    Value::BulkString(held) => other = other.or(Some(held)),
                    Value::Nil => {}
                    Value::ServerError(e) => refused = refused.or(Some(Bad::Refused(e))),
                    value => refused = refused.or(Some(Bad::Unexpected(value))),
                }
            }
            match (refused, other) {
                (Some(refused), _) => Err(refused),
                (None, Some(held)) => Ok(Reply::held_by(&held)),
                (None, None) if ours => Ok(Reply::AlreadyOurs),
                (None, None) => Ok(Reply::No),
            }
        }
    }
}

/// The count in a `PUBSUB NUMSUB` reply (`[channel, count]`); 0 for
/// anything else (a refusal: an ACL without `+pubsub|numsub`).
fn subscribers(reply: &Value) -> u64 {
    match reply {
        Value::Array(items) => match items.get(1) {
            Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
            _ => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
