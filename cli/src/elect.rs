//! `quorum-lock elect NAME --value TEXT -- COMMAND...`: run a command only
//! while this process leads the election NAME, and `quorum-lock leader
//! NAME [--json]`: who leads it.
//!
//! `elect` campaigns (until it leads, or once with `--once`), proclaims
//! `--value`, and runs the command with its term as `QUORUM_LOCK_TERM`
//! (a fence: it strictly increases from one leader to the next). The
//! leadership is extended by the library; when it is lost the command is
//! stopped as `run` stops it (SIGTERM, SIGKILL after `--kill-after` but
//! never later than the validity allows, less a margin), and the tool
//! campaigns again (not with `--once`: it then exits 75). When the command
//! ends the tool resigns and exits with the command's status.

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use quorum_lock::{CancellationToken, Election, Leader, Leadership, LockOptions, RetryPolicy};

use crate::args::{ElectArgs, Global, LeaderArgs, default_owner};
use crate::child::{Child, Ended};
use crate::exit;
use crate::guardian::Guardian;
use crate::json::Json;
use crate::logger::warn;
use crate::signals::Signals;
use crate::supervise::{KILL_MARGIN, POLL};
use crate::wording;

/// The default `--kill-after`: a third of the TTL, at most 10 s.
fn kill_after(args: &ElectArgs) -> Duration {
    args.kill_after
        .unwrap_or(Duration::from_secs(10).min(args.ttl / 3))
}

pub(crate) fn elect(global: &Global, args: &ElectArgs) -> u8 {
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| default_owner(&args.name));
    let election = match global
        .manager(args.ttl, Some(owner))
        .and_then(|locks| locks.election(&args.name))
    {
        Ok(election) => election,
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            return exit::for_error(&e);
        }
    };
    let signals = Signals::catch();
    loop {
        let leading = match campaign(&election, args, &signals) {
            Ok(leading) => leading,
            Err(code) => return code,
        };
        match lead(leading, args, &signals) {
            Led::Ended(code) => return code,
            Led::Lost if args.once => return args.lost_exit_code,
            Led::Lost => warn(&format!("campaigning again for {}", args.name)),
        }
    }
}

/// Campaigns until this process leads (once with `--once`); the exit code
/// otherwise.
fn campaign(election: &Election, args: &ElectArgs, signals: &Signals) -> Result<Leadership, u8> {
    let token = CancellationToken::new();
    let mut options = LockOptions::new().ttl(args.ttl).cancellation(&token);
    if args.once {
        options = options.retry(RetryPolicy::none());
    }
    let waiting = signals.cancel_on_signal(&token);
    let taken = election.campaign_with(args.value.as_bytes(), &options);
    drop(waiting);
    match taken {
        Ok(leading) => Ok(leading),
        Err(e) if e.is_cancelled() => {
            let signal = signals.take().into_iter().next().unwrap_or(Signal::SIGTERM);
            warn(&format!(
                "{signal} while campaigning for {}: not leading",
                args.name
            ));
            Err(exit::SIGNALED.saturating_add(u8::try_from(signal as i32).unwrap_or(0)))
        }
        Err(e) if e.is_contended() => {
            warn(&format!("{} is led elsewhere", args.name));
            Err(args.conflict_exit_code)
        }
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            Err(exit::for_error(&e))
        }
    }
}

/// How one leadership ended.
enum Led {
    /// The command ended (or could not start): exit with this.
    Ended(u8),
    /// The leadership was lost; the command was stopped.
    Lost,
}

/// Runs the command while `leading` holds; stops it on a loss.
fn lead(leading: Leadership, args: &ElectArgs, signals: &Signals) -> Led {
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("QUORUM_LOCK_NAME", &args.name)
        .env("QUORUM_LOCK_TERM", leading.term().to_string());
    let guardian = match Guardian::start() {
        Ok(guardian) => guardian,
        Err(e) => {
            eprintln!("quorum-lock: cannot start the guardian of the command's process group: {e}");
            let _ = leading.resign();
            return Led::Ended(exit::OS_ERROR);
        }
    };
    let mut child = match Child::spawn(command, guardian) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("quorum-lock: cannot run {:?}: {e}", args.command[0]);
            let _ = leading.resign();
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Led::Ended(code);
        }
    };
    let outcome = watch(&leading, &mut child, kill_after(args), signals);
    // Nothing of the command may run on once the leadership is let go.
    child.signal(Signal::SIGKILL);
    child.let_go();
    match outcome {
        Watched::Ended(ended) => {
            if let Err(e) = leading.resign() {
                warn(&format!("resigning {}: {e}", args.name));
            }
            Led::Ended(ended.code())
        }
        Watched::Lost => {
            drop(leading);
            Led::Lost
        }
        Watched::Failed(e) => {
            let _ = leading.resign();
            eprintln!("quorum-lock: waiting for the command: {e}");
            Led::Ended(exit::OS_ERROR)
        }
    }
}

/// How the command's run under a leadership ended.
enum Watched {
    Ended(Ended),
    Lost,
    Failed(std::io::Error),
}

/// Forwards signals, stops the command on a loss (before the validity
/// known last ends), and returns once it and its process group are gone.
fn watch(
    leading: &Leadership,
    child: &mut Child,
    kill_after: Duration,
    signals: &Signals,
) -> Watched {
    let lost_signal = leading.lost_signal();
    // The end of the validity as last known: the leadership reports zero
    // once lost, and the grace after SIGTERM is bounded by this.
    let mut deadline = Instant::now() + leading.validity();
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    let mut ended = None;
    loop {
        if ended.is_none() {
            match child.poll() {
                Ok(Some(how)) => {
                    ended = Some(how);
                    if child.group_alive() {
                        child.signal(Signal::SIGTERM);
                        child.signal(Signal::SIGCONT);
                        let at = Instant::now() + kill_after;
                        kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                    }
                }
                Ok(None) => {}
                Err(e) => return Watched::Failed(e),
            }
        }
        // A zombie whose parent does not collect it never goes: after
        // SIGKILL, a second is enough.
        let gone = || killed_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(1));
        if let Some(how) = ended
            && (child.group_gone() || gone())
        {
            return if lost {
                Watched::Lost
            } else {
                Watched::Ended(how)
            };
        }
        child.keep_guardian();
        for signal in signals.take() {
            child.signal(signal);
            if signal == Signal::SIGTERM {
                let at = Instant::now() + kill_after;
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
        }
        let now = Instant::now();
        if !lost {
            let why = lost_signal
                .try_recv()
                .map(|e| e.to_string())
                .or_else(|| leading.check().err().map(|e| e.to_string()));
            match why {
                None => deadline = deadline.max(now + leading.validity()),
                Some(why) => {
                    lost = true;
                    let grace = kill_after.min(
                        deadline
                            .saturating_duration_since(now)
                            .saturating_sub(KILL_MARGIN),
                    );
                    eprintln!(
                        "quorum-lock: leadership lost: {}; stopping the command: SIGTERM, \
                         SIGKILL in {} ms",
                        wording::flags(&why),
                        grace.as_millis()
                    );
                    child.signal(Signal::SIGTERM);
                    child.signal(Signal::SIGCONT);
                    let at = now + grace;
                    kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                }
            }
        }
        if kill_at.is_some_and(|at| now >= at) {
            child.signal(Signal::SIGKILL);
            killed_at.get_or_insert(now);
        }
        let mut wake = now + POLL;
        if let Some(at) = kill_at {
            wake = wake.min(at);
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
}

pub(crate) fn leader(global: &Global, args: &LeaderArgs) -> u8 {
    let election = match global
        .manager(Duration::from_secs(30).min(global.max_ttl), None)
        .and_then(|locks| locks.election(&args.name))
    {
        Ok(election) => election,
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            return exit::for_error(&e);
        }
    };
    let seen = match election.observe() {
        Ok(seen) => seen,
        Err(e) => {
            eprintln!("quorum-lock: {}", wording::flags(&e.to_string()));
            return exit::for_error(&e);
        }
    };
    if args.json {
        println!("{}", leader_json(&args.name, seen.as_ref()));
        return 0;
    }
    match seen {
        Some(leader) => println!(
            "{}: led by {} (term {}, at least {} ms left)",
            args.name,
            String::from_utf8_lossy(leader.value()),
            leader.term(),
            leader.time_left().as_millis()
        ),
        None => println!("{}: no leader", args.name),
    }
    0
}

/// `leader --json`: one object, with nulls when nobody leads.
fn leader_json(name: &str, seen: Option<&Leader>) -> Json {
    Json::Obj(vec![
        ("name", name.into()),
        ("leader", seen.is_some().into()),
        (
            "value",
            seen.map(|l| String::from_utf8_lossy(l.value()).into_owned())
                .into(),
        ),
        ("term", seen.map(Leader::term).into()),
        (
            "time_left_ms",
            seen.map_or(Json::Null, |l| Json::millis(l.time_left())),
        ),
    ])
}
