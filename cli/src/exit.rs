//! Exit codes, as `flock(1)` and sysexits.h use them, so that cron, systemd
//! and CI scripts can tell "someone else has it" from "the servers are
//! down" from "you made a mistake".

use quorum_lock::Error;

/// Held elsewhere (the default of `run -E`), as `flock -n`.
pub(crate) const CONFLICT: u8 = 1;
/// Usage: an unknown flag, a missing argument, a malformed duration
/// (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// The servers: no quorum of them reachable, or too slow for a safe lock
/// (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The operating system failed the tool: no thread, no random bytes, no
/// `waitpid` (`EX_OSERR`).
pub(crate) const OS_ERROR: u8 = 71;
/// The lock was lost while the command ran; the command was stopped (the
/// default of `run --lost-exit-code`; `EX_TEMPFAIL`).
pub(crate) const LOST: u8 = 75;
/// Configuration: values that cannot work together, such as `--ttl` above
/// `--max-ttl` or not above `--node-timeout`, or a malformed node URL
/// (`EX_CONFIG`).
pub(crate) const CONFIG: u8 = 78;
/// 128 + N: the command (or, while waiting for the lock, the tool) ended
/// by signal N, as shells report it.
pub(crate) const SIGNALED: u8 = 128;

/// The table `--help` and the README show.
pub(crate) const HELP: &str = "\
Exit codes:
  0..=255  run: the command's own exit status
  128+N    run: the command died of signal N (or, while waiting for the lock, the tool got signal N)
  1        run: the lock is held elsewhere (-E/--conflict-exit-code to change it);
           status: the lock is free
  3        status: split (the nodes that answered disagree); doctor: no quorum of usable nodes
  64       usage error (unknown flag, missing argument, malformed duration)
  69       servers unavailable: no quorum of nodes answered (or too slowly for a safe lock)
  71       the operating system failed the tool (thread, random source, waitpid)
  75       run: the lock was lost while the command ran; the command was stopped (--lost-exit-code)
  78       configuration error (--ttl above --max-ttl or not above --node-timeout, bad node URL)
  126/127  run: the command could not be started / was not found";

/// The exit code for a library error that is not the lock's answer.
pub(crate) fn for_error(e: &Error) -> u8 {
    match e {
        e if e.is_invalid() => CONFIG,
        e if e.is_contended() => CONFLICT,
        e if e.is_lost() => LOST,
        Error::Runtime { .. } => OS_ERROR,
        _ => UNAVAILABLE,
    }
}
