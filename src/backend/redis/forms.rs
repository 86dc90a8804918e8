//! Which form an op takes on one server: the plain `SET NX PX`, a Lua
//! script, or the server's own command that does the script's work in one
//! atomic step ([`Form`]); and the setting that chooses ([`Scripts`]).
//!
//! The commands, and the servers that have them (checked on Valkey 8.1.8
//! and 9.1.2 and Redis 7.0.15 and 8.2.3; Redis 8.4's from its
//! documentation):
//!
//! | work | command | Valkey | Redis |
//! |---|---|---|---|
//! | release | `DELIFEQ key token` | 9.0+ | - |
//! | release | `DELEX key IFEQ token` | - | 8.4+ |
//! | extend | `SET key token IFEQ token PX ttl` | 8.1+ | 8.4+ |
//! | acquire of a set | `MSETEX n k1 token ... NX PX ttl` | 9.1+ | 8.4+ |
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
//!
//! Fenced ops keep their scripts on every server: no command reads a
//! counter and sets a key in one step.

use redis::Value;

use crate::backend::{Op, OpKind, Reply, ServerProduct, ServerVersion};

use super::notices::channel;
use super::scripts::Script;

/// Whether a Redis node may run Lua scripts: see
/// [`RedisBackend::with_scripts`](super::RedisBackend::with_scripts) and
/// [`LockManagerBuilder::scripts`](crate::LockManagerBuilder::scripts).
///
/// Release and extend of a single lock, release of a set and the acquire
/// of a set can go without a script on servers that have the commands
/// for them (Valkey 8.1+ for extend, 9.0+ for release, 9.1+ for a set's
/// acquire; Redis 8.4+ for all three). Fenced locks always need scripts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scripts {
    /// Per server: its own command where it has one, a script elsewhere
    /// (read from `INFO server` when a connection opens). A command the
    /// server refuses (`NOPERM`: an ACL user without `+delifeq` and the
    /// like; or unknown to it) runs again by script at once, and the
    /// backend uses only scripts from then on.
    #[default]
    Auto,
    /// Never a script: for an ACL user denied `@scripting`, or a server
    /// that forbids `EVAL`. An op the server cannot do without one fails
    /// at once, naming the server, the op and what it needs, before
    /// anything is sent.
    Never,
    /// Always the scripts, as before servers had the commands.
    Always,
}

/// How an op goes to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// `SET key token NX PX ttl`: the plain acquire of one key.
    SetNx,
    /// A script.
    Script(Script),
    /// `DELIFEQ` (Valkey) or `DELEX .. IFEQ` (Redis) per key, each followed
    /// by `PUBSUB NUMSUB` of its channel.
    DeleteIfEqual(Delete),
    /// `SET key token IFEQ token PX ttl` per key.
    SetIfEqual,
    /// `MSETEX` of every key, `NX PX`.
    MsetEx,
}

/// The server's conditional delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delete {
    /// Valkey 9.0+: `DELIFEQ key value`.
    DelIfEq,
    /// Redis 8.4+: `DELEX key IFEQ value`.
    DelEx,
}

/// The commands a server has in place of scripts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Commands {
    delete: Option<Delete>,
    set_if_equal: bool,
    mset_ex: bool,
}

impl Commands {
    /// What a server of `version` has
    /// ([`ServerVersion::without_scripts`]); nothing when it is not known.
    pub(super) fn of(version: Option<ServerVersion>) -> Self {
        let Some(v) = version else {
            return Self::default();
        };
        let can = v.without_scripts();
        let delete = match v.product {
            ServerProduct::Valkey => Delete::DelIfEq,
            ServerProduct::Redis => Delete::DelEx,
        };
        Self {
            delete: can.release.then_some(delete),
            set_if_equal: can.extend,
            mset_ex: can.lock_all,
        }
    }
}

/// The form of `op` on a server with `commands`, under `scripts`; `Err`
/// with what the op would need when `scripts` is [`Scripts::Never`] and
/// the server has no command for it.
pub(super) fn form_of(
    op: &Op<'_>,
    commands: Commands,
    scripts: Scripts,
) -> Result<Form, &'static str> {
    let script = script_for(op);
    let Some(script) = script else {
        return Ok(Form::SetNx);
    };
    let command = match op.kind {
        OpKind::Release => commands.delete.map(Form::DeleteIfEqual),
        OpKind::Extend { .. } => commands.set_if_equal.then_some(Form::SetIfEqual),
        OpKind::Acquire { .. } => commands.mset_ex.then_some(Form::MsetEx),
        _ => None,
    };
    match (scripts, command) {
        (Scripts::Always, _) | (Scripts::Auto, None) => Ok(Form::Script(script)),
        (Scripts::Auto | Scripts::Never, Some(form)) => Ok(form),
        (Scripts::Never, None) => Err(needs(op)),
    }
}

/// What the server would need to do `op` without a script.
fn needs(op: &Op<'_>) -> &'static str {
    match op.kind {
        OpKind::Release => "release needs DELIFEQ (Valkey 9.0+) or DELEX (Redis 8.4+)",
        OpKind::Extend { .. } => "extend needs SET .. IFEQ (Valkey 8.1+, Redis 8.4+)",
        OpKind::Acquire { .. } => "lock_all needs MSETEX (Valkey 9.1+, Redis 8.4+)",
        OpKind::AcquireFenced { .. } | OpKind::RaiseFence { .. } => {
            "fencing has no script-free form on any server"
        }
        OpKind::Proclaim { .. } => {
            "the leader election has no script-free form on any server (it needs EVAL)"
        }
        _ => "the read-write lock has no script-free form on any server (it needs EVAL)",
    }
}

/// The script that does `op`'s work (`None`: `SET NX PX`, the plain
/// acquire of one key): the form of every op on a server without the
/// commands, and of every re-run. One key runs the one-key scripts;
/// several run the set scripts, which take, extend, release or fence
/// every key or none.
pub(super) fn script_for(op: &Op<'_>) -> Option<Script> {
    let one = op.keys.len() == 1;
    match op.kind {
        OpKind::Acquire { .. } if one => None,
        OpKind::Acquire { .. } => Some(Script::AcquireAll),
        OpKind::AcquireFenced { .. } if one => Some(Script::AcquireFenced),
        OpKind::AcquireFenced { .. } => Some(Script::AcquireAllFenced),
        OpKind::Extend { .. } if one => Some(Script::Extend),
        OpKind::Extend { .. } => Some(Script::ExtendAll),
        OpKind::Release if one => Some(Script::Release),
        OpKind::Release => Some(Script::ReleaseAll),
        OpKind::RaiseFence { .. } if one => Some(Script::RaiseFence),
        OpKind::RaiseFence { .. } => Some(Script::RaiseFenceAll),
        OpKind::ReadAcquire { .. } => Some(Script::ReadAcquire),
        OpKind::ReadExtend { .. } => Some(Script::ReadExtend),
        OpKind::ReadRelease => Some(Script::ReadRelease),
        OpKind::Admit { .. } => Some(Script::Admit),
        OpKind::Proclaim { .. } => Some(Script::Proclaim),
    }
}

impl Form {
    /// Replies this form of `op` gets in the first round trip.
    pub(super) fn replies(self, op: &Op<'_>) -> usize {
        match self {
            Self::SetNx | Self::Script(_) | Self::MsetEx => 1,
            Self::DeleteIfEqual(_) => 2 * op.keys.len(),
            Self::SetIfEqual => op.keys.len(),
        }
    }

    /// Packs `op` in this form ([`replies`](Self::replies) commands),
    /// unless it is a script: those the batch packs (it knows the digests).
    pub(super) fn pack_command(self, op: &Op<'_>, ttl_ms: u64, buf: &mut Vec<u8>) {
        let Op { keys, token, .. } = *op;
        match self {
            Self::Script(_) => {}
            Self::SetNx => redis::cmd("SET")
                .arg(keys.first())
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .write_packed_command(buf),
            Self::DeleteIfEqual(delete) => {
                for key in keys.iter() {
                    match delete {
                        Delete::DelIfEq => redis::cmd("DELIFEQ")
                            .arg(key)
                            .arg(token)
                            .write_packed_command(buf),
                        Delete::DelEx => redis::cmd("DELEX")
                            .arg(key)
                            .arg("IFEQ")
                            .arg(token)
                            .write_packed_command(buf),
                    }
                    redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg(channel(key))
                        .write_packed_command(buf);
                }
            }
            Self::SetIfEqual => {
                for key in keys.iter() {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(token)
                        .arg("IFEQ")
                        .arg(token)
                        .arg("PX")
                        .arg(ttl_ms)
                        .write_packed_command(buf);
                }
            }
            Self::MsetEx => {
                let mut cmd = redis::cmd("MSETEX");
                cmd.arg(keys.len());
                for key in keys.iter() {
                    cmd.arg(key).arg(token);
                }
                cmd.arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .write_packed_command(buf);
            }
        }
    }

    /// The command's name, for messages.
    pub(super) fn command(self) -> &'static str {
        match self {
            Self::SetNx => "SET NX",
            Self::Script(_) => "EVALSHA",
            Self::DeleteIfEqual(Delete::DelIfEq) => "DELIFEQ",
            Self::DeleteIfEqual(Delete::DelEx) => "DELEX",
            Self::SetIfEqual => "SET IFEQ",
            Self::MsetEx => "MSETEX",
        }
    }
}

/// What a command form's first replies say, when the server ran it.
pub(super) enum Said {
    /// A final answer.
    Done(Reply),
    /// An answer that needs a second round trip.
    Then(Pending),
}

/// The second round trip a command form's answer needs.
pub(super) enum Pending {
    /// A release deleted these keys (indices into the op's keys), which
    /// `listeners` subscribers wait on: announce them.
    Announce { keys: Vec<usize>, listeners: u64 },
    /// `MSETEX` set nothing: read every member to tell who holds the set.
    ReadMembers,
}

/// A reply that is not an answer.
pub(super) enum Bad {
    /// The server refused the command: its error (an unknown command on a
    /// server older than its version said, `WRONGTYPE`, `NOPERM`).
    Refused(redis::ServerError),
    /// A reply no server of this command sends.
    Unexpected(Value),
}

/// Reads a command form's first replies ([`Form::replies`] of them).
/// `SetNx` and scripts are read by the batch.
///
/// `listeners_elsewhere`: the server is a cluster's shard, whose
/// `PUBLISH` reaches the subscribers of every node while `PUBSUB NUMSUB`
/// counts its own: every key deleted is announced.
pub(super) fn read_command(
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
pub(super) fn pack_followup(pending: &Pending, op: &Op<'_>, buf: &mut Vec<u8>) -> usize {
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
pub(super) fn read_followup(
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

/// Whether a server error says the command did not run because the
/// server does not know it (a server older than the version it reported,
/// or a proxy in front of it) or the user may not run it (`NOPERM`: an ACL
/// written for the scripts, without `+delifeq` and the like). Under
/// [`Scripts::Auto`] the op, and every op after it, runs again by script.
pub(super) fn not_run(e: &redis::ServerError) -> bool {
    e.code() == "NOPERM"
        || (e.code() == "ERR"
            && e.details()
                .is_some_and(|d| d.starts_with("unknown command")))
}

#[cfg(test)]
#[path = "forms_tests.rs"]
mod tests;
