//! Every library setting has a flag, and what the tool prints names the
//! flags, not the library's builder methods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::process::Command;

use common::{BIN, code, output, stderr, stdout, tool, tool_on};
use testkit::{RedisServer, RedisServers};

#[test]
fn run_help_has_a_flag_for_every_library_setting() {
    let help = stdout(&output(Command::new(BIN).args(["run", "--help"])));
    for flag in [
        "--nodes",
        "--node-timeout",
        "--max-ttl",
        "--no-restart-quarantine",
        "--prefix",
        "--quorum",
        "--drift-factor",
        "--accept-eviction-risk",
        "--ttl",
        "--owner",
        "--fencing",
        "--wait",
    ] {
        assert!(help.contains(flag), "run --help lacks {flag}: {help}");
    }
    // What --min-hold means for whoever waits for the tool.
    assert!(
        help.contains("stays in the foreground until the hold ends"),
        "{help}"
    );
}

/// `status` shows `HOST:PID:NAME` by default: the host and the lock,
/// never the command line (its arguments may carry secrets); `--owner`
/// otherwise.
#[test]
fn the_owner_is_the_host_and_the_lock_unless_given() {
    let servers = RedisServers::start(3);
    // The command asks `status` about its own lock while it holds it.
    let look = format!("{BIN} --nodes {} status job", servers.urls().join(","));
    let default = output(&mut tool(
        &servers,
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            &look,
            "sh",
            "--password=hunter2",
        ],
    ));
    assert_eq!(code(&default), 0, "{default:?}");
    let text = stdout(&default);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let prefix = format!("job: held by {}:", host.trim());
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {text}"));
    let pid = line[prefix.len()..].split(':').next().unwrap();
    assert!(pid.parse::<u32>().is_ok(), "HOST:PID:NAME: {line}");
    assert!(line.contains(&format!("{pid}:job for")), "{line}");
    assert!(!text.contains("hunter2"), "{text}");

    let given = output(&mut tool(
        &servers,
        &[
            "run",
            "--owner",
            "nightly@ci",
            "job",
            "--",
            "sh",
            "-c",
            &look,
        ],
    ));
    assert!(
        stdout(&given).contains("job: held by nightly@ci for"),
        "{given:?}"
    );
    let bad = output(&mut tool(
        &servers,
        &["run", "--owner", "tab\there", "job", "--", "true"],
    ));
    assert_eq!(code(&bad), 78, "{bad:?}");
    assert!(stderr(&bad).contains("--owner contains"), "{bad:?}");
}

/// Servers that may evict lock keys: their votes count only with
/// `--accept-eviction-risk`, and the refusal names that flag, not
/// `LockManagerBuilder::accept_eviction_risk`.
#[test]
fn an_evicting_server_votes_only_with_accept_eviction_risk() {
    let evicting = ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"];
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&evicting)).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let refused = output(&mut tool_on(&urls, &["run", "job", "--", "true"]));
    assert_eq!(code(&refused), 69, "{refused:?}");
    let text = stderr(&refused);
    assert!(text.contains("--accept-eviction-risk"), "{text}");
    assert!(!text.contains("LockManagerBuilder"), "{text}");
    let accepted = output(&mut tool_on(
        &urls,
        &["--accept-eviction-risk", "run", "job", "--", "true"],
    ));
    assert_eq!(code(&accepted), 0, "{accepted:?}");

    let doctor = |extra: &[&str]| {
        output(
            Command::new(BIN)
                .args(["--nodes", &urls.join(","), "--no-restart-quarantine"])
                .args(extra)
                .arg("doctor"),
        )
    };
    let fails = doctor(&[]);
    assert_eq!(code(&fails), 3, "no node votes: {fails:?}");
    assert!(
        stdout(&fails).contains("votes do not count: use noeviction (or --accept-eviction-risk)"),
        "{fails:?}"
    );
    let warns = doctor(&["--accept-eviction-risk"]);
    assert_eq!(code(&warns), 1, "{warns:?}");
}

#[test]
fn quorum_drift_and_ttl_errors_name_their_flags() {
    let mut servers = RedisServers::start(3);
    servers[2].kill9();
    let urls = servers.urls();
    let majority = output(&mut tool_on(&urls, &["run", "job", "--", "true"]));
    assert_eq!(code(&majority), 0, "{majority:?}");
    let all = output(&mut tool_on(
        &urls,
        &["--quorum", "3", "run", "job", "--", "true"],
    ));
    assert_eq!(code(&all), 69, "{all:?}");
    for (args, says) in [
        (
            &["--quorum", "1", "run", "job", "--", "true"][..],
            "--quorum 1 is outside 2..=3",
        ),
        (
            &["--drift-factor", "1.5", "run", "job", "--", "true"],
            "--drift-factor 1.5 is outside [0, 1)",
        ),
        (
            &["run", "--ttl", "90s", "job", "--", "true"],
            "--ttl 90s is above --max-ttl 60s",
        ),
        (
            &[
                "--node-timeout",
                "5s",
                "run",
                "--ttl",
                "3s",
                "job",
                "--",
                "true",
            ],
            "--node-timeout 5s must be above zero and below --ttl 3s",
        ),
        (&["--quorum", "1", "doctor"], "--quorum 1 is outside"),
    ] {
        let out = output(&mut tool_on(&urls, args));
        assert_eq!(code(&out), 78, "{args:?}: {out:?}");
        let text = stderr(&out);
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!text.contains("max_ttl"), "{text}");
    }
}

/// `--scripts never` with what has no script-free form (fencing, either
/// side of the read-write lock) is a configuration error found before
/// any node is contacted, naming the flags.
#[test]
fn scripts_never_with_fencing_or_a_read_write_side_is_refused_before_any_node_is_contacted() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    for (flag, extra) in [
        ("--fencing", &["--fencing"][..]),
        ("--shared", &["--shared"]),
        ("--exclusive", &["--exclusive"]),
        ("--fencing", &["--exclusive", "--fencing"]),
    ] {
        let mut args = vec!["--scripts", "never", "run"];
        args.extend(extra);
        args.extend(["job", "--", "true"]);
        let out = output(&mut tool_on(std::slice::from_ref(&url), &args));
        assert_eq!(code(&out), 78, "{extra:?}: {out:?}");
        let text = stderr(&out);
        assert!(
            text.contains(flag) && text.contains("--scripts never"),
            "{extra:?}: {text}"
        );
        assert!(
            listener.accept().is_err(),
            "{extra:?}: a node was contacted: {text}"
        );
    }
}
