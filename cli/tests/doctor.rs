//! `doctor` and the ACL user docs/operations.md documents: with the
//! documented line every right checks out, wake-ups included; a user
//! without the publish / subscribe rights gets a warning that names them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::time::Duration;

use common::{code, documented_line, no_scripts_line, output, stdout, tool_on, user_url};
use quorum_lock::RedisBackend;
use quorum_lock::backend::ServerVersion;
use testkit::RedisServer;

/// The rights line and the findings of `doctor` for the node at `url`,
/// with the prefix the documented key pattern covers.
fn doctor(url: &str) -> (i32, String) {
    let out = output(&mut tool_on(
        &[url.to_owned()],
        &["--prefix", "locks:", "doctor"],
    ));
    (code(&out), stdout(&out))
}

#[test]
fn the_documented_acl_user_passes_every_rights_check() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &[]);
    let (_, text) = doctor(&url);
    let rights = text
        .lines()
        .find(|l| l.trim_start().starts_with("rights:"))
        .unwrap_or_else(|| panic!("no rights line: {text}"));
    assert!(rights.ends_with(": ok"), "{text}");
    for name in [
        "PTTL",
        "HSET",
        "HGET",
        "PUBLISH",
        "PUBSUB NUMSUB",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ZADD",
        "TIME",
    ] {
        assert!(rights.contains(name), "{name} is not checked: {text}");
    }
    assert!(!text.contains("missing"), "{text}");
}

/// Every right of the documented table is checked: a user without the
/// inspection's `PTTL`, the fence counters' `HSET` / `HGET` or the
/// extend's `PEXPIRE` (the last three run inside scripts, where a denied
/// command is not a `NOPERM` reply) fails, naming them.
#[test]
fn a_user_without_pttl_or_the_script_rights_fails_naming_them() {
    let server = RedisServer::start();
    let without = ["+pttl", "+hset", "+hget", "+pexpire"];
    let url = user_url(&server, documented_line(), &without);
    let (code, text) = doctor(&url);
    let missing = text
        .lines()
        .find(|l| l.contains("missing ACL rights for"))
        .unwrap_or_else(|| panic!("nothing missing: {text}"));
    for name in ["PTTL", "HSET, HGET", "PEXPIRE"] {
        assert!(missing.contains(name), "{name} is not named: {text}");
    }
    assert_eq!(code, 3, "{text}");
}

/// The server's version as the library reads it: Valkey by its own
/// version line (it says `redis_version:7.2.4` in every release).
fn server_version(server: &RedisServer) -> ServerVersion {
    let node = RedisBackend::open(&server.url(), Duration::from_secs(2)).unwrap();
    node.fetch_server_info().unwrap().version.unwrap()
}

#[test]
fn the_version_line_names_the_product_and_its_own_version() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &[]);
    let (_, text) = doctor(&url);
    let version = server_version(&server);
    assert!(
        text.lines()
            .any(|l| l.trim() == format!("version: {version}")),
        "{version}: {text}"
    );
}

/// Without the scripts' rights (a user denied `@scripting`), a server
/// that needs a script to release or extend fails; one with the commands
/// for them only warns (fenced locks fail there).
#[test]
fn a_user_without_the_script_rights_fails_where_locks_need_scripts() {
    let server = RedisServer::start();
    let can = server_version(&server).without_scripts();
    // Where the server has the commands, the documented line without
    // scripts (it names them); elsewhere the first line, its script rights
    // taken out.
    let url = if can.release && can.extend {
        user_url(&server, no_scripts_line(), &[])
    } else {
        user_url(
            &server,
            documented_line(),
            &["+eval", "+evalsha", "+script|load"],
        )
    };
    let (code, text) = doctor(&url);
    let missing = text
        .lines()
        .find(|l| l.contains("missing ACL rights for"))
        .unwrap_or_else(|| panic!("nothing missing: {text}"));
    for name in ["SCRIPT LOAD", "EVALSHA", "EVAL"] {
        assert!(missing.contains(name), "{name} is not named: {text}");
    }
    if can.release && can.extend {
        assert!(missing.contains("fenced locks fail"), "{text}");
        assert_eq!(code, 1, "{text}");
    } else {
        assert_eq!(code, 3, "{text}");
    }
}

#[test]
fn a_user_without_the_wake_up_rights_gets_a_warning_naming_them() {
    let server = RedisServer::start();
    let url = user_url(
        &server,
        documented_line(),
        &["+publish", "+pubsub|numsub", "+subscribe", "+unsubscribe"],
    );
    let (code, text) = doctor(&url);
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(
        verdict.contains("verdict: warn"),
        "locks still work: {text}"
    );
    for name in ["PUBLISH", "PUBSUB NUMSUB", "SUBSCRIBE"] {
        assert!(verdict.contains(name), "{name} is not named: {text}");
    }
    assert_eq!(code, 1, "{text}");
}

/// Without the read-write lock's rights (a user made from the ACL line
/// before they were in it), doctor warns that the read-write lock fails
/// there: its checks said "ok" while `run --shared` failed on every node.
#[test]
fn a_user_without_the_read_write_rights_gets_a_warning_naming_them() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &["+zadd", "+zremrangebyscore"]);
    let (code, text) = doctor(&url);
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(
        verdict.contains("verdict: warn"),
        "plain locks work: {text}"
    );
    assert!(verdict.contains("ZADD"), "{text}");
    assert!(verdict.contains("read-write lock"), "{text}");
    assert_eq!(code, 1, "{text}");
}

/// A node that fails (here: no right to `SET`) while in restart
/// quarantine was counted twice in the summary (`usable - in_quarantine`
/// underflowed: doctor panicked).
#[test]
fn a_failing_node_in_quarantine_is_counted_once() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &["+set"]);
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args(["--nodes", &url, "--prefix", "locks:", "doctor"]);
    let out = output(&mut cmd);
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "no quorum: {out:?}");
    assert!(text.contains("0 of 1 nodes can vote now"), "{text}");
}

/// Three servers whose memory policy may evict lock keys: their grants do
/// not count, so `doctor` says "no quorum" (exit 3), as `run` would find,
/// instead of "locks work". The probe lock, taken through the library on
/// each node alone, is what finds it.
#[test]
fn servers_that_may_evict_leave_no_quorum() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let out = output(&mut tool_on(
        &urls,
        &["--max-ttl", "1s", "doctor", "--json"],
    ));
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "no quorum: {text}");
    assert!(text.contains("may evict"), "the reason is named: {text}");
    assert!(text.contains(r#""usable":0"#), "{text}");
    // Sub-millisecond round trips keep their microseconds in JSON.
    assert!(text.contains(r#""round_trip_us":"#), "{text}");
}

/// The documented ACL user with `--prefix` forgotten: its key pattern
/// denies every lock's key. Every right checks out on its own key, but the
/// probe lock under the (empty) prefix is refused: "no quorum", exit 3.
#[test]
fn a_forgotten_prefix_is_no_quorum_not_ok() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &[]);
    let out = output(&mut tool_on(&[url], &["--max-ttl", "1s", "doctor"]));
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "{text}{}", common::stderr(&out));
    assert!(text.contains("NOPERM"), "the refusal is named: {text}");
    assert!(text.contains("NO QUORUM"), "{text}");
}

/// The documented ACL user may not run `CONFIG GET`, so `doctor` could not
/// see an evicting memory policy that way; the library reads it from
/// `INFO`, and so does the probe lock: "no quorum", naming the policy.
#[test]
fn an_evicting_policy_is_found_without_the_config_right() {
    let server =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]);
    let url = user_url(&server, documented_line(), &[]);
    let out = output(&mut tool_on(
        &[url],
        &["--prefix", "locks:", "--max-ttl", "1s", "doctor"],
    ));
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "{text}");
    assert!(text.contains("may evict"), "{text}");
}

/// The one `verdict:` line of a node in `text`.
fn verdict_line(text: &str) -> &str {
    let verdicts: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("verdict:"))
        .collect();
    assert_eq!(verdicts.len(), 1, "one verdict: {text}");
    verdicts[0]
}

/// The documented ACL user with `--prefix` forgotten: every right is
/// there, but its key pattern does not cover the keys. Named as such (the
/// pattern, when the user may read it, and the prefix), not as missing
/// rights an operator would add in vain.
#[test]
fn a_key_pattern_that_misses_the_prefix_is_named_not_taken_for_missing_rights() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &[]);
    let out = output(&mut tool_on(&[url], &["--max-ttl", "1s", "doctor"]));
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "{text}");
    assert!(!text.contains("missing ACL rights"), "{text}");
    let verdict = verdict_line(&text);
    assert!(verdict.contains("key pattern"), "{text}");
    assert!(verdict.contains("--prefix"), "{text}");
    // A user allowed to read its own ACL: its pattern is named.
    let line = format!("{} +acl|getuser", documented_line()).replace(" locker ", " reader ");
    let url = user_url(&server, &line, &[]);
    let out = output(&mut tool_on(&[url], &["--max-ttl", "1s", "doctor"]));
    let text = stdout(&out);
    assert!(verdict_line(&text).contains("~locks:*"), "{text}");
}

/// A user without the scripts' rights on a server whose extend and
/// release are scripts (Redis 7): locks are taken there but never
/// extended nor released. One verdict says that, short, without the
/// false "plain locks work" nor "a lock cannot be taken here", and
/// without the probe's whole report.
#[test]
fn a_user_without_eval_gets_one_short_true_verdict() {
    let server = RedisServer::start();
    let url = user_url(
        &server,
        documented_line(),
        &["+eval", "+evalsha", "+script|load"],
    );
    let (code, text) = doctor(&url);
    let verdict = verdict_line(&text);
    assert!(!verdict.contains("plain locks work"), "{text}");
    assert!(!verdict.contains("cannot be taken"), "{text}");
    assert!(!verdict.contains("0/1 nodes granted"), "no report: {text}");
    assert!(
        verdict.len() <= 300,
        "short: {} chars: {text}",
        verdict.len()
    );
    assert!(verdict.contains("EVAL"), "the cause: {text}");
    if !server_version(&server).without_scripts().extend {
        assert!(verdict.contains("verdict: fail"), "{text}");
        assert!(verdict.contains("extend"), "{text}");
        assert_eq!(code, 3, "{text}");
    }
}

/// The documented user may not run `CONFIG GET`: the memory policy and
/// the persistence come from `INFO`, and "verdict: ok" is earned. A user
/// who may read neither gets "unknown" with a warning naming the right.
#[test]
fn the_memory_policy_and_persistence_come_from_info() {
    let server = RedisServer::start();
    let url = user_url(&server, documented_line(), &[]);
    let doctor = || {
        output(std::process::Command::new(common::BIN).args([
            "--nodes",
            &url,
            "--prefix",
            "locks:",
            "--max-ttl",
            "1s",
            "doctor",
        ]))
    };
    // Until a run that read the server's uptime finds the quarantine over
    // (a run that could not read it, on a loaded machine, says nothing of
    // the quarantine either): that run's report is the one checked.
    let mut last = None;
    let over = testkit::wait_until(common::HANG, || {
        let out = doctor();
        let text = stdout(&out);
        let done = text.contains("  uptime: ") && !text.contains("quarantine left");
        last = Some(out);
        done
    });
    let out = last.expect("doctor ran");
    let text = stdout(&out);
    assert!(over, "the quarantine never ended: {text}");
    assert!(text.contains("  maxmemory-policy: noeviction"), "{text}");
    let persistence = text
        .lines()
        .find(|l| l.trim_start().starts_with("persistence:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!persistence.contains("unknown"), "{text}");
    assert!(persistence.contains("appendonly no"), "{text}");
    assert_eq!(verdict_line(&text).trim(), "verdict: ok", "{text}");
    assert_eq!(code(&out), 0, "{text}");
    // Neither INFO nor CONFIG GET: unknown, and a warning naming a right.
    let blind = user_url(
        &server,
        &documented_line().replace(" locker ", " blind "),
        &["+info"],
    );
    let (_, text) = self::doctor(&blind);
    assert!(text.contains("maxmemory-policy: unknown"), "{text}");
    let verdict = verdict_line(&text);
    assert!(verdict.contains("verdict: warn"), "{text}");
    assert!(text.contains("+info"), "names the right: {text}");
}

/// Servers started a moment before are all in restart quarantine: none
/// can vote yet, so no lock can be taken now. A deploy gate must not read
/// that as "works": exit 3, as for no quorum, saying when it ends.
#[test]
fn doctor_exits_3_while_too_few_nodes_are_out_of_quarantine() {
    let servers = testkit::RedisServers::start(3);
    let out = output(std::process::Command::new(common::BIN).args([
        "--nodes",
        &servers.urls().join(","),
        "doctor",
    ]));
    let text = stdout(&out);
    assert_eq!(code(&out), 3, "{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(summary.contains("0 of 3 nodes can vote now"), "{text}");
    assert!(summary.contains("NO QUORUM"), "{text}");
    assert!(summary.contains("quarantine ends in about"), "{text}");
}
