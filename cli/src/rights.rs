//! The ACL rights `doctor` checks on a node: every command the crate
//! sends, tried on a scratch key under the prefix (where the lock keys
//! are, so that an ACL key pattern judges it as it judges them) that is
//! removed again, and on that key's release channel. What is denied;
//! `doctor.rs` judges it.

use quorum_lock::Scripts;
use quorum_lock::backend::{ServerProduct, ServerVersion};
use redis::Connection;

use crate::inspect::Node;

/// The release script the crate runs (compare-and-delete).
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('del', KEYS[1]) else return 0 end";

/// What the checks found.
pub(crate) struct Rights {
    /// The rights tried, for the `rights` line.
    pub(crate) checked: Vec<&'static str>,
    /// The rights denied.
    pub(crate) denied: Denied,
    /// Whether release and extend go by the server's own commands: it has
    /// them, they are allowed, and scripts are not forced.
    pub(crate) by_commands: bool,
}

/// The rights denied, by what needs them.
#[derive(Default)]
pub(crate) struct Denied {
    /// A lock, its refusal's reading, inspection: needed everywhere.
    pub(crate) plain: Vec<&'static str>,
    /// The server's own release and extend (`DELIFEQ`/`DELEX`, `SET IFEQ`).
    pub(crate) commands: Vec<&'static str>,
    /// The scripts (not asked with `--scripts never`).
    pub(crate) scripts: Vec<&'static str>,
    /// The wake-ups (locks work without them).
    pub(crate) wake_ups: Vec<&'static str>,
    /// The read-write lock's scripts (plain locks work without them).
    pub(crate) read_write: Vec<&'static str>,
    /// Rights refused for the scratch key, not for the command: the ACL
    /// user's key pattern does not cover the prefix (not missing rights).
    pub(crate) key: Vec<&'static str>,
    /// The first such refusal, as the server said it.
    pub(crate) key_refusal: Option<String>,
    /// Rights refused for the release channel, not for the command: the
    /// user's channel pattern does not cover it.
    pub(crate) channel: Vec<&'static str>,
}

impl Denied {
    /// Files a refusal of `name`: by command (into `missing`), or by the
    /// key or channel it was asked for (the ACL's patterns).
    fn file(&mut self, missing: Missing, name: &'static str, error: &str) {
        match refusal(error) {
            Some(Refusal::Key) => {
                self.key.push(name);
                self.key_refusal.get_or_insert_with(|| error.to_owned());
            }
            Some(Refusal::Channel) => self.channel.push(name),
            Some(Refusal::Command) => match missing {
                Missing::Plain => self.plain.push(name),
                Missing::Commands => self.commands.push(name),
                Missing::Scripts => self.scripts.push(name),
                Missing::WakeUps => self.wake_ups.push(name),
                Missing::ReadWrite => self.read_write.push(name),
            },
            None => {}
        }
    }
}

/// Which list a right refused by command belongs to.
#[derive(Clone, Copy)]
enum Missing {
    Plain,
    Commands,
    Scripts,
    WakeUps,
    ReadWrite,
}

/// The commands the read-write lock's scripts call, as the warning names
/// them.
pub(crate) const READ_WRITE_RIGHTS: &str =
    "ZADD, ZRANGE, ZREM, ZREMRANGEBYSCORE, ZSCORE, ZCARD, PEXPIREAT, TIME (in scripts)";

/// Every command of the read-write lock's scripts, on a sorted set of the
/// doctor's own (removed again: the last `ZREM` empties it).
const READ_WRITE_PROBE: &str = "local t = redis.call('time') \
     redis.call('zadd', KEYS[1], 1, 'doctor') \
     redis.call('zscore', KEYS[1], 'doctor') \
     redis.call('zcard', KEYS[1]) \
     redis.call('zrange', KEYS[1], 0, -1, 'withscores') \
     redis.call('zremrangebyscore', KEYS[1], '-inf', 0) \
     redis.call('pexpireat', KEYS[1], tonumber(t[1]) * 1000 + 5000) \
     return redis.call('zrem', KEYS[1], 'doctor')";

/// Tries every right on `node` with the scratch `key`, for the `scripts`
/// setting and a server of `version`.
pub(crate) fn check(
    node: &Node,
    conn: &mut Connection,
    key: &str,
    scripts: Scripts,
    version: Option<ServerVersion>,
) -> Rights {
    let token = "quorum-lock-doctor";
    let mut denied = Denied::default();
    let mut attempt =
        |name, cmd: &redis::Cmd| try_right(node, conn, &mut denied, Missing::Plain, name, cmd);
    attempt(
        "SET",
        redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(5000),
    );
    attempt("GET", redis::cmd("GET").arg(key));
    attempt("PTTL", redis::cmd("PTTL").arg(key));
    attempt("GETRANGE", redis::cmd("GETRANGE").arg(key).arg(0).arg(1));
    attempt("STRLEN", redis::cmd("STRLEN").arg(key));
    let mut checked = vec!["SET, GET, PTTL, GETRANGE, STRLEN, MULTI, EXEC, INFO"];
    // The server's own release and extend, where its version has them.
    let can = version.map(|v| v.without_scripts()).unwrap_or_default();
    let commands_allowed = scripts != Scripts::Always;
    if commands_allowed && can.extend {
        checked.push("SET IFEQ");
        let extend = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("IFEQ")
            .arg(token)
            .arg("PX")
            .arg(5000)
            .clone();
        try_right(
            node,
            conn,
            &mut denied,
            Missing::Commands,
            "SET IFEQ",
            &extend,
        );
    }
    if commands_allowed && can.release {
        let valkey = version.is_some_and(|v| v.product == ServerProduct::Valkey);
        let delete = if valkey { "DELIFEQ" } else { "DELEX" };
        checked.push(delete);
        let mut cmd = redis::cmd(delete);
        cmd.arg(key);
        if !valkey {
            cmd.arg("IFEQ");
        }
        // A token the scratch key does not hold: deletes nothing.
        try_right(
            node,
            conn,
            &mut denied,
            Missing::Commands,
            delete,
            cmd.arg("not-ours"),
        );
    }
    if scripts == Scripts::Never {
        // Removed by its TTL when DEL is not allowed (not needed here).
        let _ = node.query::<redis::Value>(conn, redis::cmd("DEL").arg(key));
    } else {
        checked.push("SCRIPT LOAD, EVAL, EVALSHA, PEXPIRE, HSET, HGET, DEL");
        script_rights(node, conn, &mut denied, key, token);
        let probe = redis::cmd("EVAL")
            .arg(READ_WRITE_PROBE)
            .arg(1)
            .arg(format!("{key}:readers"))
            .clone();
        try_right(
            node,
            conn,
            &mut denied,
            Missing::ReadWrite,
            READ_WRITE_RIGHTS,
            &probe,
        );
        if denied.read_write.is_empty() && !denied.key.contains(&READ_WRITE_RIGHTS) {
            checked.push(READ_WRITE_RIGHTS);
        }
    }
    wake_ups(node, conn, &mut denied, key);
    // Last on this connection: a refused EXEC may leave it in MULTI.
    transaction(node, conn, &mut denied);
    if denied.wake_ups.is_empty() && denied.channel.is_empty() {
        checked.push(WAKE_UP_RIGHTS);
    }
    let by_commands = commands_allowed && can.release && can.extend && denied.commands.is_empty();
    Rights {
        checked,
        denied,
        by_commands,
    }
}

/// The scripts' rights, tried as the library runs them (the last one, the
/// release script, removes the scratch `key`): the rights missing.
fn script_rights(node: &Node, conn: &mut Connection, denied: &mut Denied, key: &str, token: &str) {
    // The digest as the server gives it (as the library takes it): no
    // SHA-1 in the client.
    let sha = node
        .query::<String>(conn, redis::cmd("SCRIPT").arg("LOAD").arg(RELEASE))
        .ok();
    if sha.is_none() {
        denied.scripts.push("SCRIPT LOAD");
    }
    let sha = sha.unwrap_or_default();
    let mut attempt =
        |name, cmd: &redis::Cmd| try_right(node, conn, denied, Missing::Scripts, name, cmd);
    // The fence counters' commands, inside a script as the library runs
    // them, on a hash of the doctor's own (never the real counters, whose
    // fields must not be touched).
    attempt(
        "HSET, HGET (in scripts)",
        redis::cmd("EVAL")
            .arg(
                "redis.call('hset', KEYS[1], 'f', '1'); redis.call('hget', KEYS[1], 'f'); \
                 return redis.call('del', KEYS[1])",
            )
            .arg(1)
            .arg(format!("{key}:fences")),
    );
    attempt(
        "PEXPIRE (in scripts)",
        redis::cmd("EVAL")
            .arg("return redis.call('pexpire', KEYS[1], 5000)")
            .arg(1)
            .arg(key),
    );
    attempt(
        "EVALSHA",
        redis::cmd("EVALSHA").arg(&sha).arg(1).arg(key).arg(token),
    );
    attempt(
        "EVAL",
        redis::cmd("EVAL").arg(RELEASE).arg(1).arg(key).arg(token),
    );
    // Without EVAL the commands inside the scripts were never reached:
    // their rights are not known to be missing.
    if denied.scripts.contains(&"EVAL") {
        denied
            .scripts
            .retain(|name| !name.ends_with("(in scripts)"));
    }
}

/// Inspection's `MULTI` block: an empty one, `DISCARD`ed if `EXEC` is
/// refused.
fn transaction(node: &Node, conn: &mut Connection, denied: &mut Denied) {
    match node.query::<redis::Value>(conn, &redis::cmd("MULTI")) {
        Err(e) => denied.file(Missing::Plain, "MULTI", &e),
        Ok(_) => {
            if let Err(e) = node.query::<redis::Value>(conn, &redis::cmd("EXEC")) {
                denied.file(Missing::Plain, "EXEC", &e);
                let _ = node.query::<redis::Value>(conn, &redis::cmd("DISCARD"));
            }
        }
    }
}

/// Runs `cmd`; when the server refuses it for want of a right, files
/// `name` as denied: under `missing` when the command is refused, as a
/// key's or channel's when the pattern is what refuses it.
fn try_right(
    node: &Node,
    conn: &mut Connection,
    denied: &mut Denied,
    missing: Missing,
    name: &'static str,
    cmd: &redis::Cmd,
) {
    if let Err(e) = node.query::<redis::Value>(conn, cmd) {
        denied.file(missing, name, &e);
    }
}

/// The channel a release is announced on is this and the key.
pub(crate) const RELEASE_CHANNEL: &str = "quorum-lock:released:";
/// The rights the wake-ups need, for the `rights` line.
const WAKE_UP_RIGHTS: &str = "PUBLISH, PUBSUB NUMSUB, SUBSCRIBE, UNSUBSCRIBE";

/// The wake-ups' rights on `key`'s release channel: the release script
/// publishes there and counts the channel's subscribers (`PUBSUB NUMSUB`,
/// whether a waiter listens), a waiter subscribes (on a connection of its
/// own, as the library does: this one stays out of subscriber mode). The
/// rights missing.
fn wake_ups(node: &Node, conn: &mut Connection, denied: &mut Denied, key: &str) {
    let channel = format!("{RELEASE_CHANNEL}{key}");
    let publish = redis::cmd("PUBLISH").arg(&channel).arg("").clone();
    try_right(node, conn, denied, Missing::WakeUps, "PUBLISH", &publish);
    let numsub = redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).clone();
    try_right(
        node,
        conn,
        denied,
        Missing::WakeUps,
        "PUBSUB NUMSUB",
        &numsub,
    );
    let Ok((mut listener, _)) = node.connect() else {
        return;
    };
    match node.query::<redis::Value>(&mut listener, redis::cmd("SUBSCRIBE").arg(&channel)) {
        Err(e) => denied.file(Missing::WakeUps, "SUBSCRIBE", &e),
        Ok(_) => {
            if let Err(e) =
                node.query::<redis::Value>(&mut listener, redis::cmd("UNSUBSCRIBE").arg(&channel))
            {
                denied.file(Missing::WakeUps, "UNSUBSCRIBE", &e);
            }
        }
    }
}

/// What the ACL refused.
enum Refusal {
    /// The command (or subcommand).
    Command,
    /// A key it was asked for: the user's key pattern.
    Key,
    /// A channel it was asked for: the user's channel pattern.
    Channel,
}

/// What an error says the user may not do, if it is a refusal (`NOPERM`:
/// the redis crate writes `NoPerm`).
fn refusal(e: &str) -> Option<Refusal> {
    let e = e.to_ascii_lowercase();
    // A command the ACL denies inside a script is not a NOPERM reply but
    // "ERR The user executing the script can't run this command ..." (or
    // "can't access at least one of the keys ...").
    let refused = e.contains("noperm")
        || e.contains("unknown command")
        || e.contains("can't run this command")
        || e.contains("can't access")
        || e.contains("no permissions");
    if !refused {
        return None;
    }
    // "no permissions to access one of the keys used as arguments"
    // (Redis 7.0), "... to access a key" / "the 'k' key" (later ones).
    let access = e.contains("access");
    Some(if access && e.contains("channel") {
        Refusal::Channel
    } else if access && e.contains("key") {
        Refusal::Key
    } else {
        Refusal::Command
    })
}
