//! `quorum-lock run`'s flags ([`RunArgs`]) and what they mean together:
//! which lock they take ([`Side`]), the defaults that depend on other
//! flags (`--kill-after`, `--owner`), the flags that need scripts. Apart
//! from `mod.rs` because `run` has more flags than every other subcommand
//! together, and their rules are its own.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use super::values::{parse_duration, permit_count};

/// The longest default `--kill-after` (the default with the default TTL).
const KILL_AFTER: Duration = Duration::from_secs(10);

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
        value_parser = permit_count()
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
