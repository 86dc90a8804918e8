//! The flags of `elect` and `leader`: with the other commands' in the
//! `args` room, so that the election's code imports its flags from here
//! and nothing here imports the election's code.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use super::parse_duration;

/// `quorum-lock elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// What this process proclaims while it leads (`leader NAME` shows
    /// it): where it can be reached, say. Public, never a secret; at most
    /// 224 bytes.
    #[arg(long, value_name = "TEXT")]
    pub(crate) value: String,
    /// Campaign once: exit 1 when another leads, and 75 when the
    /// leadership is lost, instead of campaigning again.
    #[arg(long)]
    pub(crate) once: bool,
    /// The leadership's TTL; it is extended at a third of it.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// After a loss or a forwarded SIGTERM: SIGKILL to the command after
    /// this long, and after a loss never later than the validity allows.
    /// [default: a third of --ttl, at most 10s]
    #[arg(long, value_parser = parse_duration)]
    pub(crate) kill_after: Option<Duration>,
    /// The owner label stored with the leadership's lock. [default:
    /// HOST:PID:NAME]
    #[arg(long, value_name = "LABEL")]
    pub(crate) owner: Option<String>,
    /// Exit code when another leads (with --once).
    #[arg(short = 'E', long, default_value_t = crate::exit::CONFLICT)]
    pub(crate) conflict_exit_code: u8,
    /// Exit code when the leadership is lost (with --once).
    #[arg(long, default_value_t = crate::exit::LOST)]
    pub(crate) lost_exit_code: u8,
    /// The election's name.
    pub(crate) name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// `quorum-lock leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// Print JSON for scripts: `name`, `leader` (whether one leads),
    /// `value`, `term` and `time_left_ms` (null without a leader).
    #[arg(long)]
    pub(crate) json: bool,
    /// The election's name.
    pub(crate) name: String,
}
