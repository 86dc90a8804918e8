//! `quorum-lock run`: hold a lock while a command runs.
//!
//! Exit codes: the command's own status (128 + N when a signal N ended
//! it); the conflict code (default 1, as `flock -n`) when the lock is held
//! elsewhere; the lost code (default 75) when the lock was lost while the
//! command ran and the command was stopped; 69 when no quorum of nodes can
//! be reached; 126 or 127 when the command cannot be started; 2 for usage
//! errors (clap).

use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use quorum_lock::{LockGuard, LockOptions, LostSignal, RetryPolicy};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::EXIT_UNAVAILABLE;
use crate::args::{Global, RunArgs};

/// How often the tool looks at the command, the signals and the lock.
const POLL: Duration = Duration::from_millis(50);

pub(crate) fn run(global: &Global, args: &RunArgs) -> u8 {
    let locks = match global.manager(args.ttl) {
        Ok(locks) => locks,
        Err(e) => {
            eprintln!("quorum-lock: {e}");
            return EXIT_UNAVAILABLE;
        }
    };
    let retry = match args.wait {
        Some(wait) => RetryPolicy::new()
            .max_wait(wait)
            .delay(Duration::from_millis(100))
            .jitter(Duration::from_millis(100)),
        None => RetryPolicy::none(),
    };
    // Renewed for as long as the command runs: no hold bound.
    let options = LockOptions::new()
        .ttl(args.ttl)
        .retry(retry)
        .fencing(args.fencing)
        .auto_extend(true)
        .max_hold(Duration::MAX);
    let guard = match locks.lock_with(&args.name, &options) {
        Ok(guard) => guard,
        Err(e) if e.is_contended() => {
            eprintln!("quorum-lock: {} is held elsewhere", args.name);
            return args.conflict_exit_code;
        }
        Err(e) => {
            eprintln!("quorum-lock: {e}");
            return EXIT_UNAVAILABLE;
        }
    };
    let signals = Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM] {
        // Caught for forwarding; the tool itself ends when the command does.
        if let Err(e) =
            signal_hook::flag::register_usize(signal, Arc::clone(&signals), signal as usize)
        {
            eprintln!("quorum-lock: cannot catch signal {signal}: {e}");
        }
    }
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("QUORUM_LOCK_NAME", &args.name);
    if let Some(fence) = guard.fence() {
        command.env("QUORUM_LOCK_FENCE", fence.to_string());
    }
    let child = command.spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("quorum-lock: cannot run {:?}: {e}", args.command[0]);
            let _ = guard.release();
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let lost = guard.lost_signal();
    let outcome = watch(&mut child, &lost, &signals, args.kill_after);
    finish(guard, outcome, args)
}

/// How the command's run ended.
enum Outcome {
    /// It exited on its own (or after a forwarded signal).
    Exited(ExitStatus),
    /// The lock was lost; the command was stopped.
    Lost(String),
    /// Waiting for it failed.
    Failed(std::io::Error),
}

/// Waits for the command, forwarding SIGINT/SIGTERM to it and stopping it
/// when the lock is lost.
fn watch(
    child: &mut Child,
    lost: &LostSignal,
    signals: &AtomicUsize,
    kill_after: Duration,
) -> Outcome {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Outcome::Exited(status),
            Ok(None) => {}
            Err(e) => return Outcome::Failed(e),
        }
        let caught = signals.swap(0, Ordering::SeqCst);
        if caught != 0 {
            let signal = if caught == SIGINT as usize {
                Signal::SIGINT
            } else {
                Signal::SIGTERM
            };
            let _ = kill(pid, signal);
        }
        if let Some(notice) = lost.recv_timeout(POLL) {
            stop(child, pid, kill_after);
            return Outcome::Lost(notice.to_string());
        }
    }
}

/// SIGTERM, then SIGKILL after `kill_after` if it is still running.
fn stop(child: &mut Child, pid: Pid, kill_after: Duration) {
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + kill_after;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn finish(guard: LockGuard, outcome: Outcome, args: &RunArgs) -> u8 {
    // Released before exiting, in every case (after a loss it only cleans
    // up what may be left).
    let released = guard.release();
    match outcome {
        Outcome::Exited(status) => {
            if let Err(e) = released {
                eprintln!("quorum-lock: releasing {}: {e}", args.name);
            }
            exit_code(status)
        }
        Outcome::Lost(why) => {
            eprintln!("quorum-lock: {why}; the command was stopped");
            args.lost_exit_code
        }
        Outcome::Failed(e) => {
            eprintln!("quorum-lock: waiting for the command: {e}");
            EXIT_UNAVAILABLE
        }
    }
}

/// The command's exit code, or 128 + the signal that ended it (as shells do).
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(255),
        (None, None) => 1,
    }
}
