//! One op's replies judged into its answer: the first round trip's
//! (a final answer, or what the op needs next), a re-run's, the `GET` and
//! `PTTL` after a refused acquire, a script's. Apart from `mod.rs`, which
//! decides which round trip reads what: these read the replies of one op
//! and know nothing of the others.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use crate::backend::{BackendError, Op, Reply};

use super::super::Inner;
use super::super::forms::wire::{self, Bad, Pending, Said};
use super::super::forms::{self, Form, Scripts, script_for};
use super::super::scripts::Script;

/// What the first round trip said about one op.
pub(super) enum First {
    /// A final answer.
    Done(Result<Reply, BackendError>),
    /// A refused acquire: `GET` the key to tell "held elsewhere" from
    /// "already ours" and from a key of another type, and its `PTTL` for
    /// the waiters (how long the holder's key has left).
    NeedsGet,
    /// `NOSCRIPT` (or a command form that did not run, under
    /// `Scripts::Auto`): it and every later op run again, by script.
    Rerun,
    /// A command form's answer that needs a second round trip (a
    /// release's notices, a refused set's members).
    Pending(Pending),
}

impl Inner {
    /// The answer of a re-run of `op` (scripts by text; a plain acquire as
    /// `SET NX PX`, `GET` and `PTTL`).
    pub(super) fn rerun_answer(
        &self,
        op: &Op<'_>,
        replies: &mut impl Iterator<Item = Value>,
    ) -> Result<Reply, BackendError> {
        let mut next = || replies.next().unwrap_or(Value::Nil);
        match script_for(op) {
            None => {
                let (set, get, pttl) = (next(), next(), next());
                match set {
                    Value::Okay => Ok(Reply::Yes),
                    Value::Nil => self.refused_acquire(op, get, &pttl),
                    Value::ServerError(e) => Err(self.server_error(&e, Some(op.token))),
                    other => Err(self.protocol_error("SET NX", &other)),
                }
            }
            Some(script) => match next() {
                Value::ServerError(e) => Err(self.op_server_error(op, &e)),
                value => self.script_reply(script, value),
            },
        }
    }

    /// The first round trip's replies to `op`, sent in `form`.
    pub(super) fn first_answer(
        &self,
        op: &Op<'_>,
        form: Form,
        replies: &mut impl Iterator<Item = Value>,
    ) -> First {
        let script = match form {
            Form::SetNx => None,
            Form::Script(script) => Some(script),
            _ => {
                return match wire::read_command(form, op, self.cluster_shard, replies) {
                    Ok(Said::Done(reply)) => First::Done(Ok(reply)),
                    Ok(Said::Then(pending)) => First::Pending(pending),
                    Err(Bad::Refused(e)) if self.scripts == Scripts::Auto && forms::not_run(&e) => {
                        // The scripts from now on, on this backend: an ACL
                        // written for them does not name the commands.
                        self.commands_refused.store(true, Ordering::Relaxed);
                        First::Rerun
                    }
                    Err(bad) => First::Done(Err(self.bad_reply(op, form, bad))),
                };
            }
        };
        match (script, replies.next().unwrap_or(Value::Nil)) {
            (None, Value::Okay) => First::Done(Ok(Reply::Yes)),
            (None, Value::Nil) => First::NeedsGet,
            (_, Value::ServerError(e)) if e.code() == "NOSCRIPT" => First::Rerun,
            (_, Value::ServerError(e)) => First::Done(Err(self.op_server_error(op, &e))),
            (None, other) => First::Done(Err(self.protocol_error("SET NX", &other))),
            (Some(script), value) => First::Done(self.script_reply(script, value)),
        }
    }

    /// What the `GET` after a refused acquire says: our token (another
    /// name of this server set it: not a second vote), another value or
    /// none (expired in between: not set by us either way), or a key of
    /// another type (`SET NX` on a hash answers nil, `GET` fails). Another
    /// value comes with the time its key has left, when the `PTTL` beside
    /// the `GET` tells it (a key without expiry, or gone, tells none).
    pub(super) fn refused_acquire(
        &self,
        op: &Op<'_>,
        get: Value,
        pttl: &Value,
    ) -> Result<Reply, BackendError> {
        match get {
            Value::BulkString(held) if held == op.token => Ok(Reply::AlreadyOurs),
            Value::BulkString(held) => Ok(match pttl {
                Value::Int(ms) if *ms >= 0 => {
                    Reply::held_by(&held).expiring_in(Duration::from_millis(ms.unsigned_abs()))
                }
                _ => Reply::held_by(&held),
            }),
            Value::Nil => Ok(Reply::No),
            Value::ServerError(e) => Err(self.op_server_error(op, &e)),
            other => Err(self.protocol_error("GET", &other)),
        }
    }

    /// A script's reply (see [`Script::reply`]).
    fn script_reply(&self, script: Script, value: Value) -> Result<Reply, BackendError> {
        script
            .reply(value)
            .map_err(|other| self.protocol_error(script.name(), &other))
    }
}
