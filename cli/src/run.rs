//! `quorum-lock run`: hold a lock while a command runs.
//!
//! The lock is taken (one attempt, or retried for `--wait`), the command
//! started (`child.rs`), the lock extended and the command watched
//! (`supervise.rs`), and at the end the lock released, or with
//! `--min-hold` kept and left to expire (`hold.rs`). Exit codes: `exit.rs`.
//!
//! The lock is the lock NAME, one of K permits of the semaphore NAME
//! (`-n K`), or a side of the read-write lock NAME (`--shared`,
//! `--exclusive`): each is a guard that extends, releases and can be lost
//! alike, so past taking it the rest does not tell them apart.

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use quorum_lock::{CancellationToken, LockManager, LockOptions, RetryPolicy, Scripts};

use crate::args::{Global, RunArgs, Side};
use crate::child::{Child, Ended};
use crate::exit;
use crate::guardian::Guardian;
use crate::hold::{self, Cut};
use crate::logger::warn;
use crate::signals::Signals;
use crate::supervise::{Held, KILL_MARGIN, Outcome, Rest, Watch};
use crate::wording;

pub(crate) fn run(global: &Global, args: &RunArgs) -> u8 {
    // Found before any node is contacted: what the flags ask for cannot
    // work on any server.
    let needing = args.needing_scripts();
    if global.scripts == Scripts::Never && !needing.is_empty() {
        eprintln!(
            "quorum-lock: invalid configuration: {flags} cannot work with --scripts never \
             (fencing and the read-write lock have no script-free form on any server): leave \
             out --scripts never, or {flags}",
            flags = needing.join(" and ")
        );
        return exit::CONFIG;
    }
    let locks = match global.manager(args.ttl, Some(args.owner())) {
        Ok(locks) => locks,
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            return exit::for_error(&e);
        }
    };
    // Only a value the user gave: the default is a third of the TTL.
    if let Some(kill_after) = args.kill_after
        && kill_after + KILL_MARGIN >= args.ttl
    {
        warn(&format!(
            "--kill-after {} ms can never fit in the lock's validity (under --ttl {} ms): \
             after a loss the command gets SIGKILL {} ms before the validity ends instead",
            kill_after.as_millis(),
            args.ttl.as_millis(),
            KILL_MARGIN.as_millis()
        ));
    }
    let retry = match args.wait {
        Some(wait) => RetryPolicy::new()
            .max_wait(wait)
            .delay(Duration::from_millis(100))
            .jitter(Duration::from_millis(100)),
        None => RetryPolicy::none(),
    };
    // Caught from before the wait: a signal while the tool waits for the
    // lock cancels the wait (the library releases what an attempt in
    // flight took) and the tool exits 128+N, as if it had died of it.
    let signals = Signals::catch();
    let token = CancellationToken::new();
    // No auto-extension: the tool extends itself (see supervise.rs).
    let options = LockOptions::new()
        .ttl(args.ttl)
        .retry(retry)
        .fencing(args.fencing)
        .cancellation(&token);
    let waiting = signals.cancel_on_signal(&token);
    let side = args.side();
    let taken = match side {
        Side::Permit(permits) => locks
            .semaphore(&args.name, permits)
            .and_then(|semaphore| semaphore.acquire_with(&options)),
        Side::Shared => locks
            .rw_lock(&args.name)
            .and_then(|rw| rw.read_with(&options)),
        Side::Exclusive => locks
            .rw_lock(&args.name)
            .and_then(|rw| rw.write_with(&options)),
        Side::Mutex => locks.lock_with(&args.name, &options),
    };
    drop(waiting);
    let guard = match taken {
        Ok(guard) => guard,
        Err(e) if e.is_cancelled() => return interrupted_wait(&signals, &args.name),
        Err(e) if e.is_contended() => {
            let name = &args.name;
            warn(&match side {
                Side::Permit(k) => format!("all {k} permits of {name} are held elsewhere"),
                Side::Shared => format!(
                    "{name} is held elsewhere by a writer, or a writer waits for it \
                     (--exclusive)"
                ),
                Side::Exclusive => {
                    format!("{name} is held elsewhere (by readers, --shared, or a writer)")
                }
                Side::Mutex => format!("{name} is held elsewhere"),
            });
            return args.conflict_exit_code;
        }
        Err(e) if e.is_lost() => {
            // Only the write side loses before it holds: its claim (the
            // writer's key, which stops new readers) could not be kept
            // while it waited for readers to leave. The command never ran,
            // so not the exit code of a loss while it runs.
            eprintln!(
                "quorum-lock: {}: the command was not started",
                wording::flags(&e.to_string())
            );
            return exit::UNAVAILABLE;
        }
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            return exit::for_error(&e);
        }
    };
    if signals.pending().is_some() {
        // The signal came as the lock was taken: the command never starts.
        if let Err(e) = guard.release() {
            warn(&format!("releasing {}: {e}", args.name));
        }
        return interrupted_wait(&signals, &args.name);
    }
    let taken = Instant::now();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("QUORUM_LOCK_NAME", &args.name);
    if let Some(fence) = guard.fence() {
        command.env("QUORUM_LOCK_FENCE", fence.to_string());
    }
    if let Side::Permit(_) = side {
        // The slot is what follows the last ':' of the permit's lock name.
        let slot = guard
            .resource()
            .rsplit(|b| *b == b':')
            .next()
            .unwrap_or_default();
        command.env("QUORUM_LOCK_PERMIT", String::from_utf8_lossy(slot).as_ref());
    }
    let mut held = Held::new(guard, args.ttl);
    let guardian = match Guardian::start() {
        Ok(guardian) => guardian,
        Err(e) => {
            eprintln!("quorum-lock: cannot start the guardian of the command's process group: {e}");
            let _ = held.guard.release();
            return exit::OS_ERROR;
        }
    };
    let mut child = match Child::spawn(command, guardian) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("quorum-lock: cannot run {:?}: {e}", args.command[0]);
            // Nothing ran: no reason to hold it for --min-hold.
            let _ = held.guard.release();
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    held.notices = crate::notice::degraded_run(&locks, &args.name, global.node_timeout * 2);
    let watch = Watch {
        locks: &locks,
        signals: &signals,
        kill_after: args.kill_after(),
        rest: if args.wait_group {
            Rest::Wait
        } else if args.leave_group {
            Rest::Leave
        } else {
            Rest::Stop
        },
        name: &args.name,
    };
    let outcome = watch.run(&mut held, &mut child);
    if let Outcome::Failed(_) = outcome {
        // Whether processes of the command still run is unknown: none may
        // go on once the lock is released.
        child.signal(Signal::SIGKILL);
    }
    // The group is gone (or let go on purpose): the guardian is no longer
    // needed, and must not kill a group whose id may be reused.
    child.let_go();
    let cx = Context {
        taken,
        node_timeout: global.node_timeout,
        locks: &locks,
        signals: &signals,
        args,
    };
    finish(held, outcome, &cx)
}

/// The exit code after a signal ended the wait for the lock: 128+N, as a
/// shell reports a program killed by signal N.
fn interrupted_wait(signals: &Signals, name: &str) -> u8 {
    let signal = signals.take().into_iter().next().unwrap_or(Signal::SIGTERM);
    warn(&format!("{signal} while waiting for {name}: not taken"));
    exit::SIGNALED.saturating_add(u8::try_from(signal as i32).unwrap_or(0))
}

/// What `finish` needs besides the lock and the outcome.
struct Context<'a> {
    taken: Instant,
    node_timeout: Duration,
    locks: &'a LockManager,
    signals: &'a Signals,
    args: &'a RunArgs,
}

fn finish(held: Held, outcome: Outcome, cx: &Context<'_>) -> u8 {
    let Context {
        taken,
        node_timeout,
        locks,
        signals,
        args,
    } = *cx;
    match outcome {
        Outcome::Ended(ended, interrupted) => match args.min_hold {
            Some(min_hold) if Instant::now() < taken + min_hold => {
                let hold = Hold {
                    until: taken + min_hold,
                    slack: node_timeout,
                    locks,
                    signals,
                };
                keep(held, &hold, ended, interrupted)
            }
            _ => {
                if let Err(e) = held.release() {
                    warn(&format!("releasing {}: {e}", args.name));
                }
                ended.code()
            }
        },
        Outcome::Lost => {
            // Only cleans up what may be left. The loss was said when it
            // was found (`supervise.rs`): the exit code says the rest.
            let _ = held.guard.release();
            args.lost_exit_code
        }
        Outcome::Failed(e) => {
            let _ = held.guard.release();
            eprintln!("quorum-lock: waiting for the command: {e}");
            exit::OS_ERROR
        }
    }
}

/// What `--min-hold` needs after the command ended.
struct Hold<'a> {
    until: Instant,
    slack: Duration,
    locks: &'a LockManager,
    signals: &'a Signals,
}

/// `--min-hold`: the command ended; the lock stays until `hold.until`. The
/// exit code is still the command's (its work is done).
fn keep(held: Held, hold: &Hold<'_>, ended: Ended, interrupted: Option<Signal>) -> u8 {
    let cut = match interrupted {
        // Asked to stop: no more extends, and no early release either.
        Some(signal) => {
            let left = held.deadline.saturating_duration_since(Instant::now());
            held.guard.forget();
            Err((format!("{signal} to the tool"), left))
        }
        None => hold::hold(held, hold.until, hold.slack, hold.locks, hold.signals).map_err(
            |(cut, left)| match cut {
                Cut::Lost(why) => (why, left),
                Cut::Signal(signal) => (format!("{signal} to the tool"), left),
            },
        ),
    };
    if let Err((why, left)) = cut
        && Instant::now() < hold.until
    {
        warn(&format!(
            "--min-hold cut short ({why}): the lock is left to expire in {} ms",
            left.as_millis()
        ));
    }
    ended.code()
}
