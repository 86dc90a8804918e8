//! The read-write lock on the command line: `run --shared` / `run
//! --exclusive` (as `flock -s` / `flock -x`), its writer and readers in
//! `status`, and `break --writer` / `--readers`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{
    BIN, HANG, code, free_everywhere, held_everywhere, lines, output, stderr, stdout, tool,
    tool_on, wait_output,
};
use testkit::{RedisCluster, RedisServers, TempDir, wait_until};

const WRITER: &[u8] = b"{job}{quorum-lock}:writer";
const READERS: &[u8] = b"{job}{quorum-lock}:readers";

/// A shell command that says it is in (`touch in-file`), then holds until
/// `go` exists, then appends `out` to `log`.
fn until_go(in_file: &Path, go: &Path, log: &Path, out: &str) -> String {
    format!(
        "touch {in_file}; while [ ! -e {go} ]; do sleep 0.02; done; echo \"{out}\" >> {log}",
        in_file = in_file.display(),
        go = go.display(),
        log = log.display(),
    )
}

/// `run` with `args` (flags, then `job -- sh -c script`), its output piped.
fn spawn_run(servers: &RedisServers, flags: &[&str], script: &str) -> Child {
    let mut args = vec!["run"];
    args.extend(flags);
    args.extend(["job", "--", "sh", "-c", script]);
    tool(servers, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn exists(path: &Path) -> bool {
    path.exists()
}

/// The readers on a server (the members of the readers' set).
fn readers_on(server: &testkit::RedisServer) -> Vec<Vec<u8>> {
    server.cmd(redis::cmd("ZRANGE").arg(READERS).arg(0).arg(-1))
}

fn held_by_majority(servers: &RedisServers, key: &[u8]) -> bool {
    servers.iter().filter(|s| s.get(key).is_some()).count() > servers.len() / 2
}

/// Two `--shared` runs hold the lock at once (each is in while the other
/// still holds); an `--exclusive` attempt meanwhile is held elsewhere, and
/// the plain lock of the same name is another lock.
#[test]
fn two_shared_runs_hold_it_at_once() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (go, log) = (dir.path().join("go"), dir.path().join("log"));
    let ins = [dir.path().join("in-1"), dir.path().join("in-2")];
    let readers: Vec<Child> = ins
        .iter()
        .map(|in_file| {
            spawn_run(
                &servers,
                &["--shared"],
                &until_go(in_file, &go, &log, "out"),
            )
        })
        .collect();
    assert!(
        wait_until(HANG, || ins.iter().all(|f| exists(f))),
        "both readers run at once"
    );

    let writer = output(&mut tool(
        &servers,
        &["run", "--exclusive", "job", "--", "true"],
    ));
    assert_eq!(code(&writer), 1, "{writer:?}");
    assert!(
        stderr(&writer).contains("job is held elsewhere (by readers"),
        "{writer:?}"
    );
    let plain = output(&mut tool(&servers, &["run", "job", "--", "true"]));
    assert_eq!(code(&plain), 0, "the lock job is another lock: {plain:?}");

    std::fs::write(&go, b"").unwrap();
    for reader in readers {
        let out = wait_output(reader);
        assert_eq!(code(&out), 0, "{out:?}");
    }
    assert_eq!(lines(&log), ["out", "out"]);
    assert!(
        wait_until(HANG, || free_everywhere(&servers, READERS)),
        "both readers released"
    );
}

/// An `--exclusive` run with `--wait` waits for the `--shared` run that
/// holds the lock: its claim stops new readers at once, and its command
/// starts only after the reader's ended, with a fence (a reader has none).
#[test]
fn an_exclusive_run_waits_for_the_shared_holder() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (go, log, in_file) = (
        dir.path().join("go"),
        dir.path().join("log"),
        dir.path().join("in"),
    );
    let reader = spawn_run(
        &servers,
        &["--shared"],
        &until_go(
            &in_file,
            &go,
            &log,
            "reader out, fence ${QUORUM_LOCK_FENCE:-none}",
        ),
    );
    assert!(wait_until(HANG, || exists(&in_file)));

    let writer = spawn_run(
        &servers,
        &["--exclusive", "--fencing", "--wait", "20s"],
        &format!(
            "echo \"writer in, fence $QUORUM_LOCK_FENCE\" >> {}",
            log.display()
        ),
    );
    // Its claim is on a quorum: no new reader gets in behind it.
    assert!(wait_until(HANG, || held_by_majority(&servers, WRITER)));
    let late = output(&mut tool(
        &servers,
        &["run", "--shared", "job", "--", "true"],
    ));
    assert_eq!(
        code(&late),
        1,
        "a new reader waits behind the writer: {late:?}"
    );
    assert!(stderr(&late).contains("a writer waits for it"), "{late:?}");
    assert!(
        lines(&log).is_empty(),
        "the writer waits: {:?}",
        lines(&log)
    );

    std::fs::write(&go, b"").unwrap();
    let reader = wait_output(reader);
    assert_eq!(code(&reader), 0, "{reader:?}");
    let writer = wait_output(writer);
    assert_eq!(code(&writer), 0, "{writer:?}");
    let log = lines(&log);
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0], "reader out, fence none", "{log:?}");
    let fence = log[1].strip_prefix("writer in, fence ").unwrap_or_default();
    assert!(fence.parse::<u64>().is_ok(), "the writer's fence: {log:?}");
    assert!(wait_until(HANG, || free_everywhere(&servers, WRITER)
        && free_everywhere(&servers, READERS)));
}

/// `status` shows the readers (each one's owner and time left, counted)
/// and the writer (waiting, then writing), per node and as the quorum's
/// view, in text and JSON; never a token.
#[test]
fn status_shows_the_readers_and_the_writer() {
    let servers = RedisServers::start(3);
    let dir = TempDir::new("quorum-lock-cli");
    let (go, go_writer, log) = (
        dir.path().join("go"),
        dir.path().join("go-writer"),
        dir.path().join("log"),
    );
    let ins = [dir.path().join("in-1"), dir.path().join("in-2")];
    let readers: Vec<Child> = ins
        .iter()
        .zip(["r1@test", "r2@test"])
        .map(|(in_file, owner)| {
            spawn_run(
                &servers,
                &["--shared", "--owner", owner],
                &until_go(in_file, &go, &log, "reader out"),
            )
        })
        .collect();
    assert!(wait_until(HANG, || ins.iter().all(|f| exists(f))));
    // Each reader entered a quorum; the last node may still be on its way.
    assert!(wait_until(HANG, || servers
        .iter()
        .all(|s| readers_on(s).len() == 2)));
    let status = |json: bool| {
        let mut args = vec!["status"];
        if json {
            args.push("--json");
        }
        args.push("job");
        output(&mut tool(&servers, &args))
    };

    let read = status(false);
    assert_eq!(code(&read), 0, "held by readers: {read:?}");
    let text = stdout(&read);
    assert!(text.contains("job: free"), "the lock job itself: {text}");
    for url in servers.urls() {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{url}: read-write lock: ")))
            .unwrap_or_else(|| panic!("no read-write line for {url}: {text}"));
        assert!(line.contains("no writer; 2 readers: "), "{line}");
        assert!(line.contains("r1@test (expires in ") && line.contains("r2@test (expires in "));
    }
    assert!(
        text.contains("job (read-write lock): read by 2 readers: "),
        "{text}"
    );
    let json = stdout(&status(true));
    assert!(
        json.contains(r#""read_write":{"verdict":"held","writer":null,"reader_count":2"#),
        "{json}"
    );
    assert!(
        json.contains(r#"{"owner":"r1@test","time_left_ms":"#),
        "{json}"
    );

    let writer = spawn_run(
        &servers,
        &["--exclusive", "--wait", "20s", "--owner", "w@test"],
        &until_go(
            &dir.path().join("writer-in"),
            &go_writer,
            &log,
            "writer out",
        ),
    );
    assert!(wait_until(HANG, || held_everywhere(&servers, WRITER)));
    let waiting = status(false);
    assert_eq!(code(&waiting), 0, "{waiting:?}");
    let text = stdout(&waiting);
    assert!(
        text.contains("read-write lock: writer held by w@test, expires in "),
        "{text}"
    );
    assert!(text.contains("w@test waits to write"), "{text}");
    assert!(text.contains("read by 2 readers"), "{text}");
    let json = stdout(&status(true));
    assert!(
        json.contains(r#""writer":{"owner":"w@test","admitted":false,"#),
        "{json}"
    );
    // No part of any holder's value but its label: the tokens are the
    // first 20 bytes.
    let mut values = readers_on(&servers[0]);
    values.push(servers[0].get(WRITER).unwrap());
    for value in &values {
        let token = &value[..20];
        let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
        for out in [&waiting.stdout, json.as_bytes()] {
            assert!(
                !out.windows(token.len()).any(|w| w == token),
                "a token printed"
            );
            assert!(
                !String::from_utf8_lossy(out).contains(&hex),
                "a token printed"
            );
        }
    }

    std::fs::write(&go, b"").unwrap();
    for reader in readers {
        assert_eq!(code(&wait_output(reader)), 0);
    }
    assert!(wait_until(HANG, || exists(&dir.path().join("writer-in"))));
    let written = stdout(&status(false));
    assert!(
        written.contains("job (read-write lock): written by w@test for at least "),
        "{written}"
    );
    assert!(written.contains("; no readers"), "{written}");
    std::fs::write(&go_writer, b"").unwrap();
    assert_eq!(code(&wait_output(writer)), 0);
    // Every node answered its release (or the last one is on its way).
    assert!(wait_until(HANG, || free_everywhere(&servers, WRITER)
        && free_everywhere(&servers, READERS)));

    let free = status(false);
    assert_eq!(code(&free), 1, "{free:?}");
    assert!(
        !stdout(&free).contains("read-write"),
        "nothing to add: {free:?}"
    );
    let json = stdout(&status(true));
    assert!(json.contains(r#""read_write":null"#), "{json}");
}

/// A writer's key left without expiry (a stuck writer) keeps every reader
/// out; plain `break` leaves it alone and says where it is; `break
/// --writer` deletes it, and readers get in again.
#[test]
fn break_writer_removes_a_stuck_writer() {
    let servers = RedisServers::start(3);
    let stuck = [&[7u8; 20][..], b";owner=stuck@test"].concat();
    for server in servers.iter() {
        server.set(WRITER, &stuck);
    }
    let reader = output(&mut tool(
        &servers,
        &["run", "--shared", "job", "--", "true"],
    ));
    assert_eq!(
        code(&reader),
        1,
        "the stuck writer keeps readers out: {reader:?}"
    );

    let plain = output(&mut tool(&servers, &["break", "--force", "job"]));
    assert_eq!(code(&plain), 0, "{plain:?}");
    assert!(
        stdout(&plain).contains("the read-write lock job has a writer or readers, left alone"),
        "{plain:?}"
    );
    assert!(
        held_everywhere(&servers, WRITER),
        "not broken by a plain break"
    );

    let broken = output(&mut tool(
        &servers,
        &["break", "--force", "--writer", "job"],
    ));
    assert_eq!(code(&broken), 0, "{broken:?}");
    let text = stdout(&broken);
    for url in servers.urls() {
        assert!(
            text.contains(&format!(
                "{url}: read-write lock: writer held by stuck@test, without expiry"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("{url}: writer deleted")), "{text}");
    }
    assert!(text.contains("is not told"), "the danger is said: {text}");
    assert!(free_everywhere(&servers, WRITER));

    let reader = output(&mut tool(
        &servers,
        &["run", "--shared", "job", "--", "true"],
    ));
    assert_eq!(code(&reader), 0, "{reader:?}");
}

/// A reader that never leaves (an entry far in the future) keeps writers
/// out; `break --readers` removes it, and a writer gets in.
#[test]
fn break_readers_removes_a_stuck_reader() {
    let servers = RedisServers::start(3);
    let stuck = [&[9u8; 20][..], b";owner=hung@test"].concat();
    for server in servers.iter() {
        server.cmd::<()>(
            redis::cmd("ZADD")
                .arg(READERS)
                .arg(i64::MAX / 2)
                .arg(&stuck),
        );
    }
    let writer = output(&mut tool(
        &servers,
        &["run", "--exclusive", "job", "--", "true"],
    ));
    assert_eq!(code(&writer), 1, "{writer:?}");

    let broken = output(&mut tool(
        &servers,
        &["break", "--force", "--readers", "job"],
    ));
    assert_eq!(code(&broken), 0, "{broken:?}");
    let text = stdout(&broken);
    assert!(text.contains("1 reader: hung@test (expires in "), "{text}");
    assert!(text.contains("removes the 1 reader shown"), "{text}");
    for url in servers.urls() {
        assert!(
            text.contains(&format!("{url}: 1 of 1 readers removed")),
            "{text}"
        );
    }
    assert!(free_everywhere(&servers, READERS));

    let writer = output(&mut tool(
        &servers,
        &["run", "--exclusive", "job", "--", "true"],
    ));
    assert_eq!(code(&writer), 0, "{writer:?}");
}

/// A reader whose expiry has passed is no reader: `status` does not show
/// it (every step on the lock drops it), only the live one.
#[test]
fn status_shows_only_the_readers_that_have_not_expired() {
    let servers = RedisServers::start(3);
    let expired = [&[7u8; 20][..], b";owner=gone@test"].concat();
    let live = [&[8u8; 20][..], b";owner=here@test"].concat();
    for server in servers.iter() {
        server.cmd::<()>(redis::cmd("ZADD").arg(READERS).arg(1).arg(&expired));
        server.cmd::<()>(redis::cmd("ZADD").arg(READERS).arg(i64::MAX / 2).arg(&live));
    }
    let status = output(&mut tool(&servers, &["status", "job"]));
    let text = stdout(&status);
    assert!(text.contains("here@test"), "{text}");
    assert!(!text.contains("gone@test"), "{text}");
}

/// A `--shared` run whose reader is removed (`break --readers`) learns it
/// at its next extend, and its command is stopped as after any loss.
#[test]
fn a_shared_run_whose_reader_is_removed_stops_its_command() {
    let servers = RedisServers::start(3);
    let reader = spawn_run(&servers, &["--shared", "--ttl", "3s"], "exec sleep 60");
    assert!(wait_until(HANG, || servers
        .iter()
        .all(|s| readers_on(s).len() == 1)));
    let broken = output(&mut tool(
        &servers,
        &["break", "--force", "--readers", "job"],
    ));
    assert_eq!(code(&broken), 0, "{broken:?}");
    let reader = wait_output(reader);
    assert_eq!(code(&reader), 75, "{reader:?}");
    assert_eq!(
        stderr(&reader).matches("lock lost").count(),
        1,
        "{reader:?}"
    );
}

/// `--shared` and `--exclusive` exclude each other, a fence for a reader,
/// and permits; both are documented.
#[test]
fn the_sides_refuse_what_makes_no_sense_and_are_documented() {
    for bad in [
        &["--shared", "--exclusive"][..],
        &["-s", "--fencing"],
        &["--shared", "-n", "2"],
        &["-x", "--permits", "2"],
    ] {
        let mut args = vec!["--nodes", "redis://127.0.0.1:1", "run"];
        args.extend(bad);
        args.extend(["job", "--", "true"]);
        let out = output(Command::new(BIN).args(&args));
        assert_eq!(code(&out), 64, "{bad:?}: {out:?}");
        assert!(stderr(&out).contains("cannot be used with"), "{out:?}");
    }
    let run = stdout(&output(Command::new(BIN).args(["run", "--help"])));
    assert!(
        run.contains("--shared") && run.contains("--exclusive"),
        "{run}"
    );
    assert!(
        run.contains("flock -s") && run.contains("flock -x"),
        "{run}"
    );
    let broken = stdout(&output(Command::new(BIN).args(["break", "--help"])));
    assert!(
        broken.contains("--writer") && broken.contains("--readers"),
        "{broken}"
    );
}

/// Through a cluster node (`redis+cluster://`) the readers are read, and
/// removed, on the master that serves their slot, which is not the seed
/// here (the seed answers MOVED).
#[test]
fn status_and_break_find_the_readers_through_a_cluster_node() {
    let cluster = RedisCluster::start(3, 0);
    let urls = [cluster.seed_url()];
    let seed = urls[0].rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let (name, readers) = (0..)
        .map(|i| {
            let name = format!("job{i}");
            let readers = format!("{{{name}}}{{quorum-lock}}:readers").into_bytes();
            (name, readers)
        })
        .find(|(_, key)| cluster.server_for_key(key).port() != seed)
        .unwrap();
    let stuck = [&[9u8; 20][..], b";owner=hung@test"].concat();
    cluster.server_for_key(&readers).cmd::<()>(
        redis::cmd("ZADD")
            .arg(&readers)
            .arg(i64::MAX / 2)
            .arg(&stuck),
    );

    let status = output(&mut tool_on(&urls, &["status", &name]));
    assert_eq!(code(&status), 0, "{status:?}");
    let text = stdout(&status);
    assert!(
        text.contains("no writer; 1 reader: hung@test (expires in "),
        "{text}"
    );
    assert!(text.contains("read by 1 reader: hung@test"), "{text}");

    let broken = output(&mut tool_on(
        &urls,
        &["break", "--force", "--readers", &name],
    ));
    assert_eq!(code(&broken), 0, "{broken:?}");
    assert!(
        stdout(&broken).contains(": 1 of 1 readers removed"),
        "{broken:?}"
    );
    let left: Vec<Vec<u8>> = cluster
        .server_for_key(&readers)
        .cmd(redis::cmd("ZRANGE").arg(&readers).arg(0).arg(-1));
    assert!(left.is_empty(), "removed on the slot's master");
}
