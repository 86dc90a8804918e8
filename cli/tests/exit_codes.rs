//! Exit codes as `flock(1)` and sysexits.h: 64 usage, 78 configuration,
//! 69 servers unavailable, 75 lock lost, 1 held elsewhere, the command's
//! own status, 128+N after signal N.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Command;

use common::{BIN, code, output, stderr, stdout, tool, tool_on};
use testkit::{RedisServers, free_port};

#[test]
fn usage_errors_exit_64() {
    let unknown_flag =
        output(Command::new(BIN).args(["run", "--no-such-flag", "job", "--", "true"]));
    assert_eq!(code(&unknown_flag), 64, "{unknown_flag:?}");
    let no_nodes = output(
        Command::new(BIN)
            .args(["status", "job"])
            .env_remove("QUORUM_LOCK_NODES"),
    );
    assert_eq!(code(&no_nodes), 64, "{no_nodes:?}");
    let help = output(Command::new(BIN).args(["run", "--help"]));
    assert_eq!(code(&help), 0, "--help is not an error");
}

#[test]
fn configuration_mistakes_exit_78() {
    let servers = RedisServers::start(3);
    let above_max = output(&mut tool(
        &servers,
        &["run", "--ttl", "90s", "job", "--", "true"],
    ));
    assert_eq!(code(&above_max), 78, "{above_max:?}");
    let below_timeout = output(&mut tool(
        &servers,
        &["run", "--ttl", "100ms", "job", "--", "true"],
    ));
    assert_eq!(code(&below_timeout), 78, "{below_timeout:?}");
    let bad_url = output(Command::new(BIN).args([
        "--nodes",
        "redis://:hunter2@host:notaport",
        "status",
        "job",
    ]));
    assert_eq!(code(&bad_url), 78, "{bad_url:?}");
    assert!(!stderr(&bad_url).contains("hunter2"));
}

#[test]
fn no_quorum_exits_69_and_signals_pass_through_as_128_plus_n() {
    let nobody: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}/0", free_port()))
        .collect();
    let down = output(&mut tool_on(&nobody, &["run", "job", "--", "true"]));
    assert_eq!(code(&down), 69, "{down:?}");
    let servers = RedisServers::start(3);
    let killed = output(&mut tool(
        &servers,
        &["run", "job", "--", "sh", "-c", "kill -TERM $$"],
    ));
    assert_eq!(code(&killed), 128 + 15, "{killed:?}");
}

#[test]
fn help_lists_every_exit_code() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let help = stdout(&output(Command::new(BIN).args(args)));
        for needle in ["64", "78", "69", "75", "128+N", "-E"] {
            assert!(
                help.contains(needle),
                "{args:?} --help lacks {needle}: {help}"
            );
        }
    }
}
