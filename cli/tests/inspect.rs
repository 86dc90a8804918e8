//! `status` and the JSON for scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Command;

use common::{BIN, HANG, code, output, stdout, tool, wait_for};
use testkit::{RedisServers, wait_until};

#[test]
fn status_is_unknown_without_a_quorum_of_answers_and_split_when_they_disagree() {
    let mut servers = RedisServers::start(3);
    for server in servers.iter() {
        server.cmd::<()>(redis::cmd("SET").arg("job").arg("t").arg("PX").arg(60_000));
    }
    // Two answers, a quorum, that disagree: split.
    servers[2].kill9();
    servers[0].flushall();
    let split = output(&mut tool(&servers, &["status", "job"]));
    assert!(stdout(&split).contains("job: split"), "{split:?}");
    assert_eq!(code(&split), 3);
    // One answer: too few to say anything.
    servers[1].kill9();
    let unknown = output(&mut tool(&servers, &["status", "job"]));
    let text = stdout(&unknown);
    assert!(text.contains("job: unknown"), "{text}");
    assert!(!text.contains("split"), "{text}");
    assert_eq!(code(&unknown), 69, "servers unavailable: {text}");
}

#[test]
fn status_names_the_owner_of_a_running_lock() {
    let servers = RedisServers::start(3);
    let holder = tool(&servers, &["run", "job", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    // The default owner label of the holding process: HOST:PID:NAME.
    let label_end = format!(":{}:job,", holder.id());
    assert!(
        wait_until(HANG, || code(&output(&mut tool(
            &servers,
            &["status", "job"]
        ))) == 0),
        "the lock was never held"
    );
    let text = stdout(&output(&mut tool(&servers, &["status", "job"])));
    assert!(text.contains("job: held by "), "{text}");
    assert!(text.contains(&label_end), "per node: {text}");
    let json = stdout(&output(&mut tool(&servers, &["status", "--json", "job"])));
    assert!(
        json.contains(&format!(r#":{}:job""#, holder.id())) && json.contains(r#""time_left_ms":"#),
        "{json}"
    );
    // SIGTERM: the run stops its command and releases.
    let pid = holder.id().to_string();
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    wait_for(holder);
    let free = output(&mut tool(&servers, &["status", "job"]));
    assert_eq!(code(&free), 1, "{}", stdout(&free));
}

#[test]
fn json_durations_are_integer_milliseconds() {
    let servers = RedisServers::start(3);
    for server in servers.iter() {
        server.cmd::<()>(redis::cmd("SET").arg("job").arg("t").arg("PX").arg(60_000));
    }
    let status = stdout(&output(&mut tool(&servers, &["status", "--json", "job"])));
    assert!(status.contains(r#""pttl_ms":"#), "{status}");
    let doctor = stdout(&output(Command::new(BIN).args([
        "--nodes",
        &servers.urls().join(","),
        "doctor",
        "--json",
    ])));
    for field in [
        r#""round_trip_ms":"#,
        r#""connect_ms":"#,
        r#""uptime_s":"#,
        r#""quarantine_left_ms":"#,
    ] {
        assert!(doctor.contains(field), "{field} in {doctor}");
    }
    // Numbers only as integers: no fraction, no exponent.
    for text in [&status, &doctor] {
        let numbers = numbers_in(text);
        assert!(!numbers.is_empty(), "{text}");
        assert!(
            numbers
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_digit() || c == '-')),
            "{numbers:?} in {text}"
        );
    }
}

/// The numbers of a JSON text (outside strings).
fn numbers_in(json: &str) -> Vec<String> {
    let mut numbers = Vec::new();
    let (mut in_string, mut escaped, mut current) = (false, false, String::new());
    for c in json.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c.is_ascii_digit()
            || matches!(c, '-' | '.' | 'e' | 'E' | '+') && !current.is_empty()
            || c == '-'
        {
            current.push(c);
            continue;
        }
        if !current.is_empty() {
            numbers.push(std::mem::take(&mut current));
        }
        in_string = c == '"';
    }
    numbers
}
