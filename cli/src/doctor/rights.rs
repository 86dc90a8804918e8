//! One server's rights, judged: every command the crate sends (asked by
//! `rights.rs` at the tool's root), and the ACL user's key and channel
//! patterns when a refusal is for the prefix or the release channel
//! rather than for a command.

use quorum_lock::Scripts;
use quorum_lock::backend::ServerVersion;
use redis::Connection;

use crate::args::Global;
use crate::checkup::{Checkup, Verdict};
use crate::inspect::Node;
use crate::rights::{self, RELEASE_CHANNEL};

/// The rights for every command the crate sends (`rights.rs`), judged.
///
/// The plain commands (a lock, its refusal's reading, inspection) are
/// needed everywhere: one missing fails the node. A missing script right
/// fails it too where locks need scripts: with `--scripts always`, or a
/// server (`version`) without the commands for release and extend (or
/// of unknown version): locks are taken there (`SET NX`) but never
/// extended nor released. On a server whose own commands do them, it is a
/// warning: fenced locks fail there. With `--scripts never` the scripts'
/// rights are not asked for, and the commands are the only way.
///
/// A refusal for the key (the ACL user's key pattern does not cover the
/// prefix) is not a missing right: it is named as the pattern and the
/// prefix, and so is a channel pattern that misses the release channel.
pub(super) fn check_rights(
    node: &Node,
    conn: &mut Connection,
    global: &Global,
    version: Option<ServerVersion>,
    c: &mut Checkup,
) {
    let prefix = global.prefix.as_str();
    let key = format!("{prefix}quorum-lock:doctor:{}", std::process::id());
    let mut rights = rights::check(node, conn, &key, global.scripts, version);
    let denied = &rights.denied;
    if !denied.key.is_empty() || !denied.channel.is_empty() {
        let (keys, channels) = acl_patterns(node, conn);
        if !denied.key.is_empty() {
            let refusal = denied.key_refusal.as_deref().unwrap_or("refused");
            c.note(
                Verdict::Fail,
                format!(
                    "the ACL user's key pattern {} does not cover --prefix {prefix:?} (the key \
                     {key} is refused: {refusal}): give --prefix a prefix the pattern covers, or \
                     widen the pattern",
                    keys.as_deref()
                        .unwrap_or("(not shown: ACL GETUSER is not allowed)")
                ),
            );
        }
        if !denied.channel.is_empty() {
            c.note(
                Verdict::Warn,
                format!(
                    "the ACL user's channel pattern {} does not cover \
                     {RELEASE_CHANNEL}{prefix}*: release notices (wake-ups) are off on this node, \
                     waiters retry on their timer",
                    channels
                        .as_deref()
                        .unwrap_or("(not shown: ACL GETUSER is not allowed)")
                ),
            );
        }
    }
    let all: Vec<&str> = denied
        .plain
        .iter()
        .chain(&denied.commands)
        .chain(&denied.scripts)
        .copied()
        .collect();
    let scripts_needed = !rights.by_commands && global.scripts != Scripts::Never;
    if all.is_empty() {
        if denied.key.is_empty() {
            c.text(
                "rights",
                "rights",
                format!("{}: ok", rights.checked.join(", ")),
            );
        }
    } else if !denied.plain.is_empty() {
        c.note(
            Verdict::Fail,
            format!("missing ACL rights for {}", all.join(", ")),
        );
    } else if scripts_needed && !denied.scripts.is_empty() {
        let server = version.map_or_else(|| "this server".to_owned(), |v| v.to_string());
        c.note(
            Verdict::Fail,
            format!(
                "missing ACL rights for {}: {server} extends and releases locks by script, so \
                 locks are taken here but never extended nor released",
                all.join(", ")
            ),
        );
    } else if !rights.by_commands && global.scripts == Scripts::Never {
        c.note(
            Verdict::Fail,
            format!("missing ACL rights for {}", all.join(", ")),
        );
    } else if rights.by_commands {
        c.note(
            Verdict::Warn,
            format!(
                "missing ACL rights for {}: fenced locks fail on this node (release and \
                 extend go by the server's own commands)",
                all.join(", ")
            ),
        );
    } else {
        // Only the commands are denied: the library uses the scripts.
        let commands = denied.commands.clone();
        rights.checked.retain(|name| !commands.contains(name));
        c.text(
            "rights",
            "rights",
            format!("{}: ok", rights.checked.join(", ")),
        );
        c.text(
            "own commands",
            "own_commands",
            format!(
                "{} not allowed: the scripts do that work",
                commands.join(", ")
            ),
        );
    }
    // Without EVAL the read-write lock's probe could not tell its own
    // rights: the scripts' finding says it all.
    if !rights.denied.read_write.is_empty() && !rights.denied.scripts.contains(&"EVAL") {
        c.note(
            Verdict::Warn,
            format!(
                "missing ACL rights for {}: the read-write lock (run --shared, --exclusive) \
                 fails on this node (docs/operations.md, Access rights)",
                rights.denied.read_write.join(", ")
            ),
        );
    }
    if !rights.denied.wake_ups.is_empty() {
        c.note(
            Verdict::Warn,
            format!(
                "missing ACL rights for {} on {RELEASE_CHANNEL}{prefix}*: release notices \
                 (wake-ups) are off on this node, waiters retry on their timer \
                 (docs/operations.md, Access rights)",
                rights.denied.wake_ups.join(", ")
            ),
        );
    }
}

/// The key and channel patterns of the user `node` connects as (`ACL
/// GETUSER`, when the user may run it: the documented user may not).
fn acl_patterns(node: &Node, conn: &mut Connection) -> (Option<String>, Option<String>) {
    let user = node.user().unwrap_or_else(|| "default".to_owned());
    let Ok(redis::Value::Array(fields)) =
        node.query::<redis::Value>(conn, redis::cmd("ACL").arg("GETUSER").arg(&user))
    else {
        return (None, None);
    };
    let text = |value: &redis::Value| -> Option<String> {
        match value {
            redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            redis::Value::SimpleString(text) => Some(text.clone()),
            redis::Value::Array(items) => {
                let words: Vec<String> = items
                    .iter()
                    .filter_map(|item| match item {
                        redis::Value::BulkString(bytes) => {
                            Some(String::from_utf8_lossy(bytes).into_owned())
                        }
                        _ => None,
                    })
                    .collect();
                Some(words.join(" "))
            }
            _ => None,
        }
    };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair.first().and_then(text).as_deref() == Some(name))
            .and_then(|pair| pair.get(1).and_then(text))
            .map(|value| {
                if value.is_empty() {
                    "(none)".to_owned()
                } else {
                    value
                }
            })
    };
    (field("keys"), field("channels"))
}
