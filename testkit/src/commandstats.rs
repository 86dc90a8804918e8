//! What a server received, counted by the server itself (`INFO
//! commandstats`): the count a test asserts when it must show what the
//! servers pay for a client's behaviour, not only what the caller got.

use crate::server::RedisServer;

/// Commands that set up or look at a connection (and the tests' own
/// inspection): not what a lock attempt sends.
const BOOKKEEPING: &[&str] = &[
    "info",
    "config",
    "config|get",
    "config|resetstat",
    "client",
    "client|setinfo",
    "client|setname",
    "hello",
    "ping",
    "auth",
    "select",
    "command",
    "role",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "script",
    "script|load",
    "cluster",
];

/// Calls per command since the last [`reset`], as `(command, calls)`
/// (subcommands as Redis names them, e.g. `pubsub|numsub`).
pub fn calls(server: &RedisServer) -> Vec<(String, u64)> {
    let stats: String = server.cmd(redis::cmd("INFO").arg("commandstats"));
    stats
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields.strip_prefix("calls=")?.split(',').next()?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Calls of everything a lock attempt, its undo and its notices send
/// (`SET`, the scripts, `PUBLISH`, `PUBSUB NUMSUB`, ...), leaving out the
/// bookkeeping of connections and inspection.
pub fn lock_commands(server: &RedisServer) -> u64 {
    calls(server)
        .into_iter()
        .filter(|(name, _)| !BOOKKEEPING.contains(&name.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// Calls of `command` (lower case; `pubsub|numsub` for a subcommand).
pub fn calls_of(server: &RedisServer, command: &str) -> u64 {
    calls(server)
        .into_iter()
        .find(|(name, _)| name == command)
        .map_or(0, |(_, n)| n)
}

/// Starts the counts again from zero (`CONFIG RESETSTAT`).
pub fn reset(server: &RedisServer) {
    let _: () = server.cmd(redis::cmd("CONFIG").arg("RESETSTAT"));
}

/// Every server's [`lock_commands`], in order, as text for a failing
/// assertion too.
pub fn lock_commands_of(servers: &[RedisServer]) -> Vec<u64> {
    servers.iter().map(lock_commands).collect()
}
