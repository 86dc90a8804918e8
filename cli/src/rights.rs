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
    let mut attempt = |name, cmd: &redis::Cmd| try_right(node, conn, &mut denied.plain, name, cmd);
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
        try_right(node, conn, &mut denied.commands, "SET IFEQ", &extend);
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
            &mut denied.commands,
            delete,
            cmd.arg("not-ours"),
        );
    }
    if scripts == Scripts::Never {
        // Removed by its TTL when DEL is not allowed (not needed here).
        let _ = node.query::<redis::Value>(conn, redis::cmd("DEL").arg(key));
    } else {
        checked.push("SCRIPT LOAD, EVAL, EVALSHA, PEXPIRE, HSET, HGET, DEL");
        denied.scripts = script_rights(node, conn, key, token);
        let probe = redis::cmd("EVAL")
            .arg(READ_WRITE_PROBE)
            .arg(1)
            .arg(format!("{key}:readers"))
            .clone();
        try_right(
            node,
            conn,
            &mut denied.read_write,
            READ_WRITE_RIGHTS,
            &probe,
        );
        if denied.read_write.is_empty() {
            checked.push(READ_WRITE_RIGHTS);
        }
    }
    denied.wake_ups = wake_ups(node, conn, key);
    // Last on this connection: a refused EXEC may leave it in MULTI.
    transaction(node, conn, &mut denied.plain);
    if denied.wake_ups.is_empty() {
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
fn script_rights(node: &Node, conn: &mut Connection, key: &str, token: &str) -> Vec<&'static str> {
    let mut missing = Vec::new();
    // The digest as the server gives it (as the library takes it): no
    // SHA-1 in the client.
    let sha = node
        .query::<String>(conn, redis::cmd("SCRIPT").arg("LOAD").arg(RELEASE))
        .ok();
    if sha.is_none() {
        missing.push("SCRIPT LOAD");
    }
    let sha = sha.unwrap_or_default();
    let mut attempt = |name, cmd: &redis::Cmd| try_right(node, conn, &mut missing, name, cmd);
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
    missing
}

/// Inspection's `MULTI` block: an empty one, `DISCARD`ed if `EXEC` is
/// refused.
fn transaction(node: &Node, conn: &mut Connection, missing: &mut Vec<&'static str>) {
    match node.query::<redis::Value>(conn, &redis::cmd("MULTI")) {
        Err(e) if refused(&e) => missing.push("MULTI"),
        Err(_) => {}
        Ok(_) => {
            if let Err(e) = node.query::<redis::Value>(conn, &redis::cmd("EXEC")) {
                if refused(&e) {
                    missing.push("EXEC");
                }
                let _ = node.query::<redis::Value>(conn, &redis::cmd("DISCARD"));
            }
        }
    }
}

/// Runs `cmd`; when the server refuses it for want of a right, adds
/// `name` to `missing`.
fn try_right(
    node: &Node,
    conn: &mut Connection,
    missing: &mut Vec<&'static str>,
    name: &'static str,
    cmd: &redis::Cmd,
) {
    if let Err(e) = node.query::<redis::Value>(conn, cmd)
        && refused(&e)
    {
        missing.push(name);
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
fn wake_ups(node: &Node, conn: &mut Connection, key: &str) -> Vec<&'static str> {
    let channel = format!("{RELEASE_CHANNEL}{key}");
    let mut missing = Vec::new();
    let publish = redis::cmd("PUBLISH").arg(&channel).arg("").clone();
    try_right(node, conn, &mut missing, "PUBLISH", &publish);
    let numsub = redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).clone();
    try_right(node, conn, &mut missing, "PUBSUB NUMSUB", &numsub);
    let Ok((mut listener, _)) = node.connect() else {
        return missing;
    };
    match node.query::<redis::Value>(&mut listener, redis::cmd("SUBSCRIBE").arg(&channel)) {
        Err(e) if refused(&e) => missing.push("SUBSCRIBE"),
        Err(_) => {}
        Ok(_) => {
            if let Err(e) =
                node.query::<redis::Value>(&mut listener, redis::cmd("UNSUBSCRIBE").arg(&channel))
                && refused(&e)
            {
                missing.push("UNSUBSCRIBE");
            }
        }
    }
    missing
}

/// Whether an error says the user may not run the command, or not on
/// these keys or channels (`NOPERM`: the redis crate writes `NoPerm`).
fn refused(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    // A command the ACL denies inside a script is not a NOPERM reply but
    // "ERR The user executing the script can't run this command ...".
    e.contains("noperm")
        || e.contains("unknown command")
        || e.contains("can't run this command")
        || e.contains("no permissions")
}
