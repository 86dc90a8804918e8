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
    parse(&stats)
        .into_iter()
        .map(|(name, calls, _)| (name, calls))
        .collect()
}

/// The `cmdstat_<name>:calls=<n>,usec=<n>,...` lines of an `INFO
/// commandstats` reply, as `(command, calls, microseconds)`; other lines
/// are skipped. (The benchmark reads the servers it starts through this
/// too.)
pub fn parse(info: &str) -> Vec<(String, u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))?
                    .parse::<u64>()
                    .ok()
            };
            Some((name.to_owned(), field("calls")?, field("usec")?))
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

/// Asserts the pace a waiter keeps while nothing says when a quorum is
/// back (a node down or timing out): `attempts` in `took` are at most
/// one per retry delay (100 ms by default, its jitter only lengthening
/// the pauses; 3 more for the first and the last), and every server
/// counted at most 10 lock commands per attempt (its `SET`, the undo's
/// script and the script's own calls, a refusal's `GET` and `PTTL`) and
/// 50 more. A failure names the counts, each server's commands and
/// `context` (the manager's health).
pub fn assert_paced(
    servers: &[RedisServer],
    attempts: u64,
    took: std::time::Duration,
    context: &dyn std::fmt::Display,
) {
    let per_command: Vec<_> = servers.iter().map(calls).collect();
    assert!(
        u128::from(attempts) <= took.as_millis() / 100 + 3,
        "{attempts} attempts in {took:?}: more than one per retry delay \
         ({per_command:?})\n{context}"
    );
    let sent = lock_commands_of(servers);
    assert!(
        sent.iter().all(|n| *n < 10 * attempts + 50),
        "{sent:?} lock commands in {attempts} attempts ({per_command:?})\n{context}"
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_line_is_read_with_its_calls_and_time() {
        let reply = "# Commandstats\r\n\
            cmdstat_set:calls=16400,usec=11935,usec_per_call=0.73,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_script|load:calls=24,usec=352,usec_per_call=14.67,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_broken:usec=1\r\n\
            errorstat_ERR:count=1\r\n";
        assert_eq!(
            parse(reply),
            [
                ("set".to_owned(), 16_400, 11_935),
                ("script|load".to_owned(), 24, 352)
            ]
        );
    }
}
