//! Command-line arguments, and building a `LockManager` from them.
//!
//! This file holds the command line's shape: the settings every
//! subcommand shares ([`Global`], and the manager they build), the
//! subcommands, and the flags of the small ones. `run`'s many flags and
//! what they mean together are in `run.rs`; how a flag's text becomes its
//! value (durations, `--scripts`, the node list) is in `values.rs`.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use quorum_lock::{LockManager, RetryPolicy, Scripts};

pub(crate) use self::elect::{ElectArgs, LeaderArgs};
pub(crate) use self::run::{RunArgs, Side, default_owner};
pub(crate) use self::values::{parse_duration, rejoin_sentinels};
use self::values::{parse_scripts, permit_count};

mod elect;
mod run;
mod values;

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
    Elect(ElectArgs),
    /// Show who leads the election NAME: its value and term.
    Leader(LeaderArgs),
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
        value_parser = permit_count()
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

#[cfg(test)]
mod tests {
    use super::*;

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
