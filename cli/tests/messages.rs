//! What the tool says when something is wrong: once, in one line, naming
//! the flags. The loss of a held lock: `loss.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::{Command, Stdio};

use common::{BIN, code, output, stderr};
use testkit::RedisServers;

/// `run ''` (an unset variable, say) exited 78 as a configuration error.
#[test]
fn an_empty_lock_name_is_a_usage_error_in_one_line() {
    for args in [
        &["run", "", "--", "true"][..],
        &["status", ""],
        &["break", "--force", ""],
    ] {
        let out = output(
            Command::new(BIN)
                .args(["--nodes", "redis://127.0.0.1:1"])
                .args(args)
                .stdin(Stdio::null()),
        );
        assert_eq!(code(&out), 64, "{args:?}: {out:?}");
        let text = stderr(&out);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("the lock's name is empty"), "{text}");
    }
}

/// Servers just started are all in restart quarantine: the report said
/// the same reason three times, with the library's setting names.
#[test]
fn a_report_whose_nodes_share_one_reason_says_it_once() {
    let servers = RedisServers::start(3);
    // Quarantine on (the common `tool` switches it off).
    let out = output(
        Command::new(BIN)
            .args([
                "--nodes",
                &servers.urls().join(","),
                "run",
                "job",
                "--",
                "true",
            ])
            .stdin(Stdio::null()),
    );
    assert_eq!(code(&out), 69, "{out:?}");
    let text = stderr(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    // Every node, or the two that decided the round (the third was not
    // awaited then): one reason, said once.
    assert!(
        text.contains("[all 3 nodes quarantined: ") || text.contains("not awaited"),
        "{text}"
    );
    assert_eq!(text.matches("quarantined").count(), 1, "{text}");
    assert!(text.contains("; they vote again in "), "{text}");
    assert!(
        text.contains("(flags: --max-ttl, --no-restart-quarantine)"),
        "{text}"
    );
    assert!(!text.contains("max_ttl"), "{text}");
}
