//! `quorum-lock`: flock(1) for a cluster of Redis masters.
//!
//! * `quorum-lock run NAME -- COMMAND...` runs a command while holding the
//!   lock (extended while it runs), like `flock -n`; `--shared` and
//!   `--exclusive` take a side of the read-write lock NAME instead, as
//!   `flock -s` and `flock -x`;
//! * `quorum-lock status NAME` shows who holds a lock on each node (and the
//!   writer and readers of the read-write lock NAME, when it has any);
//! * `quorum-lock doctor` checks each node for what the lock relies on;
//! * `quorum-lock elect NAME --value TEXT -- COMMAND...` runs a command only
//!   while this process leads the election NAME (`QUORUM_LOCK_TERM`), and
//!   `quorum-lock leader NAME` shows who leads it;
//! * `quorum-lock break NAME` deletes a stuck lock on every node, after
//!   showing what it breaks and asking (`--writer`, `--readers`: those
//!   of the read-write lock NAME).
//!
//! Nodes come from `--nodes URL,URL,...` or `QUORUM_LOCK_NODES`. Exit codes
//! are in `exit.rs` (and `--help`).

mod args;
mod break_lock;
mod checkup;
mod child;
mod doctor;
mod elect;
mod exit;
mod guardian;
mod hold;
mod inspect;
mod json;
mod logger;
mod notice;
mod rights;
mod run;
mod rw;
mod signals;
mod status;
mod supervise;
mod terminal;
mod wording;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    // The guardian of a command's process group (`guardian.rs`) is this
    // binary, started by `run` with an argument no user types.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == guardian::ARG)
    {
        return guardian::main();
    }
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(&e),
    };
    cli.global.nodes = args::rejoin_sentinels(std::mem::take(&mut cli.global.nodes));
    if cli.global.nodes.is_empty() {
        // A global argument cannot be `required` in clap: checked here,
        // with clap's usage message.
        let e = Cli::command().error(
            ErrorKind::MissingRequiredArgument,
            "the nodes are required: --nodes URL,URL,... or QUORUM_LOCK_NODES",
        );
        return usage(&e);
    }
    if cli.command.name() == Some("") {
        // No lock has an empty name: a mistake in the command line (often
        // a variable that was not set), said in one line.
        eprintln!(
            "quorum-lock: the lock's name is empty (an unset variable?): give NAME, \
             e.g. `quorum-lock run nightly-report -- ./report.sh`"
        );
        return ExitCode::from(exit::USAGE);
    }
    logger::install(cli.global.quiet);
    let code = match &cli.command {
        Command::Run(run) => run::run(&cli.global, run),
        Command::Status(status) => status::status(&cli.global, status),
        Command::Doctor(doctor) => doctor::doctor(&cli.global, doctor),
        Command::Break(broken) => break_lock::break_lock(&cli.global, broken),
        Command::Elect(elect) => elect::elect(&cli.global, elect),
        Command::Leader(leader) => elect::leader(&cli.global, leader),
    };
    ExitCode::from(code)
}

/// Prints clap's message; `--help` and `--version` are not errors, the
/// rest is a usage error (64, where clap would exit 2).
fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(exit::USAGE),
    }
}
