//! Command-line arguments, and building a `LockManager` from them.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use quorum_lock::{LockManager, RetryPolicy, Scripts};

/// The longest default `--kill-after` (the default with the default TTL).
const KILL_AFTER: Duration = Duration::from_secs(10);

/// flock(1) for a cluster: a lock held on a quorum of Redis masters.
#[derive(Debug, Parser)]
#[command(name = "quorum-lock", version, about, long_about = None, after_help = crate::exit::HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Settings every subcommand shares.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// The Redis masters, comma-separated (`redis://[user:pass@]host:port`;
    /// a `redis+sentinel://h1:p1,h2:p2/NAME` node keeps its own commas).
    #[arg(
        long,
        env = "QUORUM_LOCK_NODES",
        value_delimiter = ',',
        global = true,
        hide_env_values = true
    )]
    pub(crate) nodes: Vec<String>,
    /// Timeout of each call to one node.
    #[arg(long, value_parser = parse_duration, default_value = "100ms", global = true)]
    pub(crate) node_timeout: Duration,
    /// Longest TTL any lock may use; also how long a restarted server is
    /// kept from voting (restart quarantine).
    #[arg(long, value_parser = parse_duration, default_value = "60s", global = true)]
    pub(crate) max_ttl: Duration,
    /// Let a freshly (re)started server vote at once. Safe only when every
    /// server persists with `appendfsync always`.
    #[arg(long, global = true)]
    pub(crate) no_restart_quarantine: bool,
    /// Prefix of every key (as the library's `prefix`).
    #[arg(long, default_value = "", global = true)]
    pub(crate) prefix: String,
    /// Votes a lock needs: at least a majority of the nodes, at most all
    /// of them. [default: a majority]
    #[arg(long, value_name = "N", global = true)]
    pub(crate) quorum: Option<usize>,
    /// Clock-drift allowance: a lock's validity is its TTL, less the time
    /// taking it took, less TTL x this + 2 ms. In [0, 1).
    #[arg(long, value_name = "FACTOR", default_value_t = 0.01, global = true)]
    pub(crate) drift_factor: f64,
    /// Count the votes of servers that may evict lock keys (`maxmemory`
    /// with a `maxmemory-policy` other than `noeviction`). The risk: an
    /// evicted lock can be taken by a second holder while the first one
    /// runs. Only when the servers cannot reach `maxmemory`, or the work
    /// is safe to run twice (or fenced, `run --fencing`).
    #[arg(long, global = true)]
    pub(crate) accept_eviction_risk: bool,
    /// Lua scripts on the nodes: `auto` uses each server's own commands
    /// where its version has them (DELIFEQ, SET IFEQ, MSETEX: Valkey 9.1,
    /// Redis 8.4) and scripts elsewhere; `never` is for an ACL user
    /// denied @scripting (what needs a script fails at once, naming it);
    /// `always` runs the scripts everywhere.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = parse_scripts, global = true)]
    pub(crate) scripts: Scripts,
    /// No warnings on stderr (nodes missing from a run, the library's
    /// warnings, "held elsewhere"); errors are still printed.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding the lock NAME, then release it
    /// (--shared / --exclusive: a side of the read-write lock NAME).
    #[command(after_help = crate::exit::HELP)]
    Run(RunArgs),
    /// Show whether NAME is held on each node, and the quorum's verdict;
    /// the writer and readers of the read-write lock NAME too, when it has
    /// any.
    Status(StatusArgs),
    /// Check each node for what the lock relies on.
    Doctor(DoctorArgs),
    /// Break a stuck lock during an incident: show who holds NAME on each
    /// node and for how long, ask, then delete it on every node (--writer,
    /// --readers: the read-write lock NAME's). A holder that still runs is
    /// not told; only fencing protects the resource from it then.
    #[command(after_help = BREAK_HELP)]
    Break(BreakArgs),
    /// Run a command only while this process leads the election NAME
    /// (campaigning until it does); its term is QUORUM_LOCK_TERM.
    Elect(crate::elect::ElectArgs),
    /// Show who leads the election NAME: its value and term.
    Leader(crate::elect::LeaderArgs),
}

/// What `break --help` adds: its danger and its exit codes.
const BREAK_HELP: &str = "\
A holder that is still alive is not told: it goes on as if it held the lock until its next
extend fails (`run` then stops its command, exit 75), up to the time left shown. Meanwhile the
next holder runs too: only a fencing token checked by the resource (`run --fencing`) keeps the
old holder's late writes out. Fence counters are left alone, so fences keep increasing.

A node's key is deleted only while it holds the value that was shown (the library's
compare-and-delete release, which also wakes waiters): a lock that changed hands since is
left alone. For a permit of `run -n K NAME`, break `NAME:<slot>`.

The read-write lock NAME (`run --shared` / `run --exclusive`) is another lock: plain `break NAME`
never touches it (it says when it has holders). Name the side that is stuck: --writer deletes the
writer's key (whether it holds the lock or waits for readers to leave), --readers removes every
reader shown (a reader that came since stays), both flags both. A writer that only waits behind
a stuck reader needs --readers alone: it then goes ahead. A reader that still runs is not told
either, and has no fence: a writer may be admitted while it still reads. Each node's writer key is
deleted only while it holds the value shown, as a lock's.

Exit codes:
  0        no node holds what was shown any more (deleted there, or it was not held)
  1        not confirmed at the prompt
  64       no terminal to ask on and no --force; an empty NAME
  69       a node could not be read or its key deleted (it is named)
  78       configuration error (a bad node URL, ...)";

impl Command {
    /// The lock's name the subcommand works on, if it takes one.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            Self::Run(run) => Some(&run.name),
            Self::Status(status) => Some(&status.name),
            Self::Break(broken) => Some(&broken.name),
            Self::Elect(elect) => Some(&elect.name),
            Self::Leader(leader) => Some(&leader.name),
            Self::Doctor(_) => None,
        }
    }
}

/// `quorum-lock run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Lock TTL; the lock is extended at a third of it while the command runs.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// Wait up to this long for the lock (default: one attempt, like `flock -n`).
    #[arg(long, value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,
    /// Take a fencing token and pass it to the command as
    /// `QUORUM_LOCK_FENCE` (it increases from one holder to the next).
    #[arg(long)]
    pub(crate) fencing: bool,
    /// Keep the lock at least this long from when it was taken, even if
    /// the command ends sooner (then it is left to expire, not released):
    /// a job on several machines then runs once per period, not once per
    /// machine whose cron fired after the first run ended. The tool stays
    /// in the foreground until the hold ends (it extends the lock), then
    /// exits with the command's status: a systemd oneshot unit stays
    /// activating that long, a CI step takes that long.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) min_hold: Option<Duration>,
    /// Who holds the lock, as `status` shows it: readable by anyone who
    /// can read the key, so never a secret (at most 64 printable ASCII
    /// characters). [default: HOST:PID:NAME, this host, the tool's process
    /// id and the lock's name; nothing from the command]
    #[arg(long, value_name = "LABEL")]
    pub(crate) owner: Option<String>,
    /// Take one of K permits of the semaphore NAME instead of the lock: at
    /// most K commands run at once across machines (the permits are the
    /// locks NAME:0 .. NAME:K-1; the command gets its slot as
    /// `QUORUM_LOCK_PERMIT`).
    #[arg(
        short = 'n',
        long = "permits",
        value_name = "K",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(quorum_lock::MAX_PERMITS))
    )]
    pub(crate) permits: Option<u32>,
    /// Take the read side of the read-write lock NAME (as `flock -s`): any
    /// number of `--shared` runs hold it at once, none while an
    /// `--exclusive` run holds it or waits for it (new readers queue
    /// behind a waiting writer, so writers are not starved). No fence
    /// (not with --fencing). The read-write lock NAME is its own lock: a
    /// plain `run NAME` (and `-n K NAME`) neither waits for it nor stops it.
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "permits", "fencing"])]
    pub(crate) shared: bool,
    /// Take the write side of the read-write lock NAME (as `flock -x`):
    /// alone, once the `--shared` runs that hold it have ended (it waits
    /// for them within --wait; without --wait one attempt, held elsewhere
    /// while readers are in). With --fencing the command gets
    /// `QUORUM_LOCK_FENCE`, above every earlier writer's.
    #[arg(short = 'x', long, conflicts_with = "permits")]
    pub(crate) exclusive: bool,
    /// Exit code when the lock is held elsewhere.
    #[arg(short = 'E', long, default_value_t = crate::exit::CONFLICT)]
    pub(crate) conflict_exit_code: u8,
    /// Exit code when the lock is lost while the command runs (after it was
    /// stopped).
    #[arg(long, default_value_t = crate::exit::LOST)]
    pub(crate) lost_exit_code: u8,
    /// After a forwarded SIGTERM, a loss, or the command's end with
    /// processes left in its group: SIGKILL to them after this long. After
    /// a loss never later than the lock's validity allows. [default: a
    /// third of --ttl, at most 10s]
    #[arg(long, value_parser = parse_duration)]
    pub(crate) kill_after: Option<Duration>,
    /// When the command ends and processes it started are left in its
    /// process group (a background child), wait for them with the lock
    /// kept, instead of stopping them (SIGTERM, SIGKILL after
    /// --kill-after) before the lock is released. (A process that left
    /// the group, by `setsid` for one, is out of the tool's reach.)
    #[arg(long, conflicts_with = "leave_group")]
    pub(crate) wait_group: bool,
    /// When the command ends, let the processes left in its process group
    /// run on after the lock is released (a command that starts a daemon
    /// on purpose), instead of stopping them first.
    #[arg(long)]
    pub(crate) leave_group: bool,
    /// The lock's name (the resource).
    pub(crate) name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// `quorum-lock status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock's name (the resource).
    pub(crate) name: String,
    /// Print JSON for scripts.
    #[arg(long)]
    pub(crate) json: bool,
    /// Show the K permits of the semaphore NAME (as `run -n K NAME` takes
    /// them: the locks NAME:0 .. NAME:K-1) instead of the lock NAME.
    #[arg(
        short = 'n',
        long = "permits",
        value_name = "K",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(quorum_lock::MAX_PERMITS))
    )]
    pub(crate) permits: Option<u32>,
}

/// `quorum-lock break`.
#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    /// The lock's name (the resource).
    pub(crate) name: String,
    /// Do not ask: break it at once (needed without a terminal).
    #[arg(long)]
    pub(crate) force: bool,
    /// Break the writer of the read-write lock NAME (`run --exclusive
    /// NAME`) instead of the lock NAME: its key is deleted on every node,
    /// whether it holds the lock or still waits for readers to leave.
    #[arg(long)]
    pub(crate) writer: bool,
    /// Remove every reader of the read-write lock NAME (`run --shared
    /// NAME`) that was shown, on every node, instead of breaking the lock
    /// NAME. With --writer: both.
    #[arg(long)]
    pub(crate) readers: bool,
}

/// `quorum-lock doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Print JSON for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Which lock `run` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The lock NAME.
    Mutex,
    /// One of K permits of the semaphore NAME (`-n K`).
    Permit(u32),
    /// The read side of the read-write lock NAME (`--shared`).
    Shared,
    /// The write side of the read-write lock NAME (`--exclusive`).
    Exclusive,
}

impl RunArgs {
    /// Which lock the flags ask for (clap refuses the combinations that
    /// make no sense).
    pub(crate) fn side(&self) -> Side {
        match (self.permits, self.shared, self.exclusive) {
            (Some(permits), _, _) => Side::Permit(permits),
            (None, true, _) => Side::Shared,
            (None, false, true) => Side::Exclusive,
            (None, false, false) => Side::Mutex,
        }
    }

    /// `--kill-after`, or its default: a third of the TTL (what is left of
    /// the validity when an extend, due at a third, fails at once), at
    /// most [`KILL_AFTER`].
    pub(crate) fn kill_after(&self) -> Duration {
        self.kill_after.unwrap_or(KILL_AFTER.min(self.ttl / 3))
    }

    /// The flags given that need scripts on the servers: fencing and
    /// either side of the read-write lock have no script-free form on any
    /// server, so with `--scripts never` they could only fail on every
    /// node.
    pub(crate) fn needing_scripts(&self) -> Vec<&'static str> {
        [
            ("--fencing", self.fencing),
            ("--shared", self.shared),
            ("--exclusive", self.exclusive),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// `--owner`, or its default: [`default_owner`] of the lock's name.
    pub(crate) fn owner(&self) -> String {
        self.owner
            .clone()
            .unwrap_or_else(|| default_owner(&self.name))
    }
}

impl Global {
    /// A manager over the nodes with these settings, `ttl` as its TTL, and
    /// `owner` as its owner label (`None`: the library's default; only a
    /// manager that takes locks stores one).
    pub(crate) fn manager(
        &self,
        ttl: Duration,
        owner: Option<String>,
    ) -> Result<LockManager, quorum_lock::Error> {
        let mut builder = LockManager::builder()
            .redis_nodes(&self.nodes)?
            .node_timeout(self.node_timeout)
            .max_ttl(self.max_ttl)
            .ttl(ttl)
            .prefix(&self.prefix)
            .drift_factor(self.drift_factor)
            .restart_quarantine(!self.no_restart_quarantine)
            .accept_eviction_risk(self.accept_eviction_risk)
            .scripts(self.scripts)
            .retry(RetryPolicy::none());
        if let Some(quorum) = self.quorum {
            builder = builder.quorum(quorum);
        }
        if let Some(owner) = owner {
            builder = builder.owner(owner);
        }
        builder.build()
    }

    /// Votes a lock needs: `--quorum`, or a majority of the nodes.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum.unwrap_or(self.nodes.len() / 2 + 1)
    }
}

/// The owner label `run` stores by default: `HOST:PID:NAME`, so that
/// `status` and `break` tell an operator where to look (the host, and the
/// tool's process there) and which job it is. Never the command line: a
/// label is readable by anyone who can read the key, and a command's
/// arguments may carry secrets. Printable ASCII only (anything else in the
/// name becomes `?`), cut at the library's limit.
pub(crate) fn default_owner(name: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().chars().filter(char::is_ascii_graphic).collect())
        .filter(|h: &String| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut label = format!("{host}:{}:{name}", std::process::id());
    // ASCII only, so any byte index is a character boundary.
    label.truncate(quorum_lock::MAX_OWNER_LEN);
    label
}

/// `30s`, `500ms`, `2m`, `1h`, `1.5s`: a number and a unit (ms, s, m, h).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 30s, 500ms, 2m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is out of range"))
}

/// `auto`, `never` or `always` (see [`Global::scripts`]).
fn parse_scripts(text: &str) -> Result<Scripts, String> {
    match text {
        "auto" => Ok(Scripts::Auto),
        "never" => Ok(Scripts::Never),
        "always" => Ok(Scripts::Always),
        other => Err(format!("`{other}`: expected auto, never or always")),
    }
}

/// The node URLs of `--nodes` split at every comma, put back together
/// where a comma was a Sentinel URL's (between its sentinels): a piece
/// without a scheme (`://`) continues the URL before it.
pub(crate) fn rejoin_sentinels(pieces: Vec<String>) -> Vec<String> {
    let mut urls: Vec<String> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") && last.contains("+sentinel://") => {
                last.push(',');
                last.push_str(&piece);
            }
            _ => urls.push(piece),
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_keeps_its_commas() {
        let split = |text: &str| text.split(',').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            rejoin_sentinels(split(
                "redis://a:1,redis+sentinel://s1:1,s2:2,s3/main,redis://b:2"
            )),
            [
                "redis://a:1",
                "redis+sentinel://s1:1,s2:2,s3/main",
                "redis://b:2"
            ]
        );
        // A stray piece after a plain URL stays a (bad) URL of its own.
        assert_eq!(
            rejoin_sentinels(split("redis://a:1,b:2")),
            ["redis://a:1", "b:2"]
        );
    }

    #[test]
    fn durations_people_write() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("1e999s").is_err());
    }

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["quorum-lock", "run"];
        argv.extend(extra);
        argv.extend(["job", "--", "true"]);
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Run(run)) => run,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kill_after_defaults_to_a_third_of_the_ttl_at_most_ten_seconds() {
        assert_eq!(run_args(&[]).kill_after(), Duration::from_secs(10));
        assert_eq!(
            run_args(&["--ttl", "3s"]).kill_after(),
            Duration::from_secs(1)
        );
        assert_eq!(
            run_args(&["--ttl", "5m"]).kill_after(),
            Duration::from_secs(10)
        );
        let given = run_args(&["--ttl", "3s", "--kill-after", "10s"]);
        assert_eq!(given.kill_after(), Duration::from_secs(10));
    }

    #[test]
    fn the_default_owner_is_the_host_the_pid_and_the_name_in_printable_ascii() {
        let pid = format!(":{}:", std::process::id());
        let owner = default_owner("nightly-report");
        assert!(owner.ends_with(&format!("{pid}nightly-report")), "{owner}");
        assert!(!owner.starts_with(':'), "a host first: {owner}");
        let odd = default_owner("naïve\tjob");
        assert!(odd.ends_with(&format!("{pid}na?ve?job")), "{odd}");
        let long = default_owner(&"x".repeat(200));
        assert_eq!(long.len(), quorum_lock::MAX_OWNER_LEN, "{long}");
        assert!(long.chars().all(|c| c.is_ascii_graphic() || c == ' '));
        assert_eq!(run_args(&["--owner", "ci@build-7"]).owner(), "ci@build-7");
    }

    #[test]
    fn shared_and_exclusive_pick_a_side_and_refuse_what_makes_no_sense() {
        assert_eq!(run_args(&[]).side(), Side::Mutex);
        assert_eq!(run_args(&["--shared"]).side(), Side::Shared);
        assert_eq!(run_args(&["-s", "--wait", "5s"]).side(), Side::Shared);
        assert_eq!(run_args(&["-x", "--fencing"]).side(), Side::Exclusive);
        assert_eq!(run_args(&["-n", "3"]).side(), Side::Permit(3));
        for bad in [
            &["--shared", "--exclusive"][..],
            &["-s", "--fencing"],
            &["--shared", "-n", "2"],
            &["--exclusive", "--permits", "2"],
        ] {
            let mut argv = vec!["quorum-lock", "run"];
            argv.extend(bad);
            argv.extend(["job", "--", "true"]);
            let kind = Cli::try_parse_from(&argv).map(|_| ()).map_err(|e| e.kind());
            assert_eq!(
                kind,
                Err(clap::error::ErrorKind::ArgumentConflict),
                "{bad:?}"
            );
        }
    }
}
