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
//! Fenced ops keep their scripts on every server: no command reads a
//! counter and sets a key in one step. How each command form is written
//! and its replies read is in `forms/wire.rs`.

use crate::backend::{Op, OpKind, ServerProduct, ServerVersion};

use super::scripts::Script;

pub(super) mod wire;

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
