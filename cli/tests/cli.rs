//! The `quorum-lock` binary against real redis-servers started by the
//! library's test harness: run (conflict, pass-through, wait, loss, signal
//! forwarding), status, doctor, and bad arguments.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use testkit::{RedisServers, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_quorum-lock");
/// Generous bound for a child that must end by itself (a hang detector, not
/// a timing assertion).
const HANG: Duration = Duration::from_secs(30);

/// The tool with `--nodes` set and quarantine off (the servers were just
/// started), plus `args`.
fn tool(servers: &RedisServers, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--nodes")
        .arg(servers.urls().join(","))
        .arg("--no-restart-quarantine")
        .args(args)
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Waits for `child` at most [`HANG`]; kills it and fails if it hangs.
fn wait_for(mut child: Child) -> i32 {
    let end = Instant::now() + HANG;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the tool did not exit within {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn held_everywhere(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().all(|s| s.get(key).is_some())
}

fn held_by_majority(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().filter(|s| s.get(key).is_some()).count() > servers.len() / 2
}

fn free_everywhere(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().all(|s| s.get(key).is_none())
}

#[test]
fn run_with_permits_lets_k_commands_run_and_the_next_one_conflicts() {
    let servers = RedisServers::start(3);
    let dir = std::env::temp_dir().join(format!("quorum-lock-permits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let _ = std::fs::remove_file(&go);
    // Each holder writes its slot, then waits for the test's go-ahead.
    let script = format!(
        "echo $QUORUM_LOCK_PERMIT > {dir}/slot-$$; while [ ! -e {go} ]; do sleep 0.02; done",
        dir = dir.display(),
        go = go.display()
    );
    let holders: Vec<Child> = (0..2)
        .map(|_| {
            tool(
                &servers,
                &["run", "-n", "2", "pool", "--", "sh", "-c", &script],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    // On a majority, not everywhere: two holders that start on the same
    // slot split its nodes, and the winner holds it on the nodes it won.
    assert!(wait_until(HANG, || {
        held_by_majority(&servers, b"pool:0") && held_by_majority(&servers, b"pool:1")
    }));
    let third = output(&mut tool(
        &servers,
        &["run", "-n", "2", "pool", "--", "true"],
    ));
    assert_eq!(code(&third), 1, "{third:?}");
    assert!(
        String::from_utf8_lossy(&third.stderr).contains("all 2 permits of pool are held elsewhere"),
        "{third:?}"
    );
    std::fs::write(&go, b"").unwrap();
    for holder in holders {
        assert_eq!(wait_for(holder), 0);
    }
    let mut slots: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.file_name()
                .to_string_lossy()
                .starts_with("slot-")
                .then(|| std::fs::read_to_string(e.path()).unwrap().trim().to_owned())
        })
        .collect();
    slots.sort();
    assert_eq!(slots, ["0", "1"], "each command got its own permit");
    assert!(free_everywhere(&servers, b"pool:0") && free_everywhere(&servers, b"pool:1"));
    let zero = output(&mut tool(
        &servers,
        &["run", "-n", "0", "pool", "--", "true"],
    ));
    assert_eq!(code(&zero), 64, "zero permits is a usage error: {zero:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_run_conflicts_and_the_first_passes_its_status_through() {
    let servers = RedisServers::start(3);
    let first = tool(
        &servers,
        &["run", "job", "--", "sh", "-c", "sleep 1; exit 7"],
    )
    .spawn()
    .unwrap();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    let second = output(&mut tool(&servers, &["run", "job", "--", "true"]));
    assert_eq!(code(&second), 1, "{second:?}");
    assert!(String::from_utf8_lossy(&second.stderr).contains("held elsewhere"));
    let custom = output(&mut tool(
        &servers,
        &["run", "-E", "42", "job", "--", "true"],
    ));
    assert_eq!(code(&custom), 42);
    assert_eq!(wait_for(first), 7, "the command's status passes through");
    assert!(
        free_everywhere(&servers, b"job"),
        "released after the command"
    );
}

#[test]
fn the_command_sees_the_lock_name_and_wait_gets_the_lock_after_the_holder() {
    let servers = RedisServers::start(3);
    let first = tool(&servers, &["run", "job", "--", "sleep", "1"])
        .spawn()
        .unwrap();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    let waited = output(&mut tool(
        &servers,
        &[
            "run",
            "--wait",
            "20s",
            "job",
            "--",
            "sh",
            "-c",
            "echo $QUORUM_LOCK_NAME",
        ],
    ));
    assert_eq!(code(&waited), 0, "{waited:?}");
    assert_eq!(String::from_utf8_lossy(&waited.stdout).trim(), "job");
    assert_eq!(wait_for(first), 0);
}

#[test]
fn fencing_passes_an_increasing_fence_to_the_command() {
    let servers = RedisServers::start(3);
    let fence = || {
        let out = output(&mut tool(
            &servers,
            &[
                "run",
                "--fencing",
                // Retries: on a loaded machine a first attempt can time out.
                "--wait",
                "10s",
                "job",
                "--",
                "sh",
                "-c",
                "echo $QUORUM_LOCK_FENCE",
            ],
        ));
        assert_eq!(code(&out), 0, "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let (first, second) = (fence(), fence());
    assert!(second > first, "{second} after {first}");
}

#[test]
fn losing_the_majority_stops_the_command_with_the_lost_code() {
    let mut servers = RedisServers::start(3);
    let child = tool(
        &servers,
        &[
            "run",
            "--ttl",
            "1s",
            "--kill-after",
            "2s",
            "job",
            "--",
            "sleep",
            "60",
        ],
    )
    .spawn()
    .unwrap();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    servers[0].kill9();
    servers[1].kill9();
    assert_eq!(wait_for(child), 75, "the lost exit code");
}

#[test]
fn sigterm_to_the_tool_is_forwarded_and_the_lock_released() {
    let servers = RedisServers::start(3);
    let dir = testkit::TempDir::new("quorum-lock-cli");
    let trapped = dir.path().join("trapped");
    // The marker says the trap is set (a signal before it would kill the
    // shell with 143, not let it exit 9).
    let script = format!(
        "trap 'exit 9' TERM; touch {}; sleep 60 & wait",
        trapped.display()
    );
    let child = tool(&servers, &["run", "job", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    assert!(wait_until(HANG, || held_everywhere(&servers, b"job")));
    assert!(wait_until(HANG, || trapped.exists()), "no trap set");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        wait_for(child),
        9,
        "the command's trap ran and its code passed through"
    );
    assert!(free_everywhere(&servers, b"job"));
}

#[test]
fn status_reports_each_node_and_the_verdict() {
    let mut servers = RedisServers::start(3);
    let free = output(&mut tool(&servers, &["status", "job"]));
    assert_eq!(code(&free), 1, "{free:?}");
    assert!(String::from_utf8_lossy(&free.stdout).contains("job: free"));
    for server in servers.iter() {
        server.cmd::<()>(redis::cmd("SET").arg("job").arg("t").arg("PX").arg(60_000));
    }
    let held = output(&mut tool(&servers, &["status", "--json", "job"]));
    assert_eq!(code(&held), 0, "{held:?}");
    let json = String::from_utf8_lossy(&held.stdout);
    assert!(json.contains(r#""verdict":"held""#), "{json}");
    servers[2].kill9();
    let one_down = output(&mut tool(&servers, &["status", "job"]));
    assert_eq!(code(&one_down), 0, "still held on a quorum");
    assert!(String::from_utf8_lossy(&one_down.stdout).contains("unreachable"));
    servers[0].flushall();
    let split = output(&mut tool(&servers, &["status", "job"]));
    assert_eq!(code(&split), 3, "{split:?}");
}

/// `status -n K NAME` shows the permits `run -n K NAME` takes (the locks
/// NAME:0 .. NAME:K-1): free, one held by a running command, and the
/// count; exit 1 when every permit is free, 0 when one is held.
#[test]
fn status_shows_the_permits_of_a_semaphore() {
    let servers = RedisServers::start(3);
    let free = output(&mut tool(&servers, &["status", "-n", "2", "uploads"]));
    assert_eq!(code(&free), 1, "{free:?}");
    let text = String::from_utf8_lossy(&free.stdout);
    assert!(text.contains("0 of 2 permits of uploads held"), "{text}");
    for server in servers.iter() {
        server.cmd::<()>(
            redis::cmd("SET")
                .arg("uploads:1")
                .arg("t")
                .arg("PX")
                .arg(60_000),
        );
    }
    let one = output(&mut tool(&servers, &["status", "-n", "2", "uploads"]));
    assert_eq!(code(&one), 0, "{one:?}");
    let text = String::from_utf8_lossy(&one.stdout);
    assert!(text.contains("1 of 2 permits of uploads held"), "{text}");
    assert!(text.contains("uploads:1"), "{text}");
    let json = output(&mut tool(
        &servers,
        &["status", "-n", "2", "--json", "uploads"],
    ));
    let json = String::from_utf8_lossy(&json.stdout);
    assert!(
        json.contains(r#""permits":2"#) && json.contains(r#""held":1"#),
        "{json}"
    );
    let zero = output(&mut tool(&servers, &["status", "-n", "0", "uploads"]));
    assert_eq!(code(&zero), 64, "0 permits is a usage error: {zero:?}");
}

#[test]
fn doctor_sees_healthy_down_and_quarantined_nodes() {
    let mut servers = RedisServers::start(3);
    let urls = servers.urls().join(",");
    let doctor = |extra: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["--nodes", &urls, "doctor"]).args(extra);
        output(&mut cmd)
    };
    // Freshly started servers are quarantined (max_ttl 60 s): each node
    // warns, and none can vote yet: no quorum now (exit 3).
    let fresh = doctor(&[]);
    let text = String::from_utf8_lossy(&fresh.stdout);
    assert_eq!(code(&fresh), 3, "{text}");
    assert!(text.contains("quarantined for about"), "{text}");
    // With a 1 s max_ttl they are out of quarantine within a few seconds.
    let healthy = || doctor(&["--max-ttl", "1s"]);
    assert!(
        wait_until(HANG, || code(&healthy()) == 0),
        "{:?}",
        healthy()
    );
    let text = String::from_utf8_lossy(&healthy().stdout).into_owned();
    assert!(
        text.contains("verdict: ok") && text.contains("role: master"),
        "{text}"
    );
    // Quarantine off without durable persistence is worth a warning.
    let unsafe_restarts = doctor(&["--max-ttl", "1s", "--no-restart-quarantine"]);
    assert_eq!(code(&unsafe_restarts), 1);
    let json = String::from_utf8_lossy(&doctor(&["--max-ttl", "1s", "--json"]).stdout).into_owned();
    assert!(
        json.starts_with('{') && json.contains(r#""verdict":"ok""#),
        "{json}"
    );
    servers[1].kill9();
    let down = healthy();
    let text = String::from_utf8_lossy(&down.stdout);
    assert_eq!(code(&down), 1, "a quorum still works: {text}");
    assert!(text.contains("verdict: fail: unreachable"), "{text}");
    servers[2].kill9();
    assert_eq!(code(&healthy()), 3, "no quorum");
}

#[test]
fn bad_arguments_are_usage_errors_and_a_bad_url_a_configuration_error() {
    let no_nodes = output(
        Command::new(BIN)
            .args(["status", "job"])
            .env_remove("QUORUM_LOCK_NODES"),
    );
    assert_eq!(code(&no_nodes), 64);
    assert!(String::from_utf8_lossy(&no_nodes.stderr).contains("--nodes"));
    let bad_duration = output(Command::new(BIN).args([
        "--nodes",
        "redis://127.0.0.1:1",
        "run",
        "--ttl",
        "3 weeks",
        "job",
        "--",
        "true",
    ]));
    assert_eq!(code(&bad_duration), 64);
    assert!(String::from_utf8_lossy(&bad_duration.stderr).contains("unit"));
    let no_command =
        output(Command::new(BIN).args(["--nodes", "redis://127.0.0.1:1", "run", "job"]));
    assert_eq!(code(&no_command), 64);
    let bad_url = output(Command::new(BIN).args([
        "--nodes",
        "redis://:hunter2@host:notaport",
        "status",
        "job",
    ]));
    assert_eq!(code(&bad_url), 78);
    assert!(!String::from_utf8_lossy(&bad_url.stderr).contains("hunter2"));
}

/// Regression: `run --ttl 3s` (the README's CI recipe) printed a warning
/// about a `--kill-after` the user never gave. The default now follows the
/// TTL; only a value the user gave and that cannot fit is worth a warning.
#[test]
fn a_short_ttl_does_not_warn_about_a_kill_after_nobody_gave() {
    let servers = RedisServers::start(3);
    let quiet = output(&mut tool(
        &servers,
        &["run", "--ttl", "3s", "job", "--", "true"],
    ));
    assert_eq!(code(&quiet), 0, "{quiet:?}");
    let text = String::from_utf8_lossy(&quiet.stderr);
    assert!(!text.contains("kill-after"), "{text}");
    let given = output(&mut tool(
        &servers,
        &[
            "run",
            "--ttl",
            "3s",
            "--kill-after",
            "10s",
            "job",
            "--",
            "true",
        ],
    ));
    assert_eq!(code(&given), 0, "{given:?}");
    let text = String::from_utf8_lossy(&given.stderr);
    assert!(
        text.contains("--kill-after 10000 ms can never fit"),
        "{text}"
    );
}
