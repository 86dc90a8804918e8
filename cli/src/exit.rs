//! Exit codes, as `flock(1)` and sysexits.h use them, so that cron, systemd
//! and CI scripts can tell "someone else has it" from "the servers are
//! down" from "you made a mistake".

use quorum_lock::Error;

/// Held elsewhere (the default of `run -E`), as `flock -n`.
pub(crate) const CONFLICT: u8 = 1;
/// Usage: an unknown flag, a missing argument, a malformed duration, an
/// empty lock name, `break` with no terminal and no `--force`
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
/// `--max-ttl` or not above `--node-timeout`, `--scripts never` with
/// `--fencing`, `--shared` or `--exclusive`, or a malformed node URL
/// (`EX_CONFIG`).
pub(crate) const CONFIG: u8 = 78;
/// 128 + N: the command (or, while waiting for the lock, the tool) ended
/// by signal N, as shells report it.
pub(crate) const SIGNALED: u8 = 128;

/// The table `--help` and the README show.
pub(crate) const HELP: &str = "\
Exit codes:
  run      the command's own exit status, except:
  128+N    the command died of signal N (a signal to the tool while it waits for the lock
           ends it the same way)
  1        the lock is held elsewhere (-E/--conflict-exit-code to change it)
  75       the lock was lost while the command ran; it was stopped (--lost-exit-code)
  126/127  the command could not be started / was not found
  status   0 held, 1 free, 3 split (the nodes that answered disagree), 69 unknown; when the
           read-write lock NAME has holders: 0 when either lock is held
  doctor   0 every node ok, 1 warnings (a quorum can vote now), 3 no quorum now (failing or
           quarantined nodes)
  break    0 no node holds it any more, 1 not confirmed, 69 a node could not be read or cleared
  64       usage error (unknown flag, missing argument, malformed duration, an empty lock name;
           break without a terminal to ask on and without --force)
  69       servers unavailable: no quorum of nodes answered (or too slowly for a safe lock);
           run --exclusive: its claim was lost while it waited for readers (not started)
  71       the operating system failed the tool (a thread, the random source, waitpid)
  78       configuration error (--ttl above --max-ttl or not above --node-timeout, a bad node URL,
           --quorum below a majority, --scripts never with --fencing, --shared or --exclusive)";

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
