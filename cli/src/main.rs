//! `quorum-lock`: flock(1) for a cluster of Redis masters.
//!
//! * `quorum-lock run NAME -- COMMAND...` runs a command while holding the
//!   lock (auto-extended), like `flock -n`;
//! * `quorum-lock status NAME` shows who holds a lock on each node;
//! * `quorum-lock doctor` checks each node for what the lock relies on.
//!
//! Nodes come from `--nodes URL,URL,...` or `QUORUM_LOCK_NODES`.

mod args;
mod doctor;
mod inspect;
mod json;
mod run;
mod status;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};

/// Exit code for errors that are not the lock's answer: no quorum,
/// unreachable nodes, bad configuration (`EX_UNAVAILABLE` of sysexits.h).
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.global.nodes.is_empty() {
        // A global argument cannot be `required` in clap: checked here,
        // with clap's usage message and exit code (2).
        Cli::command()
            .error(
                ErrorKind::MissingRequiredArgument,
                "the nodes are required: --nodes URL,URL,... or QUORUM_LOCK_NODES",
            )
            .exit();
    }
    let code = match &cli.command {
        Command::Run(run) => run::run(&cli.global, run),
        Command::Status(status) => status::status(&cli.global, status),
        Command::Doctor(doctor) => doctor::doctor(&cli.global, doctor),
    };
    ExitCode::from(code)
}
