//! The command `run` starts: in its own process group, tied to the tool's
//! life, signalled as a group, and waited for, with every process it left
//! in its group.
//!
//! * Its own process group: a terminal's Ctrl-C and `kill -INT -PGID` of
//!   the tool's group then reach the tool alone, which forwards one copy to
//!   the command's group (see `signals.rs`). Without it the command would
//!   get two. The group is also what the tool stops, waits for or lets go
//!   when the command has ended (`--wait-group`, `--leave-group`).
//! * A guardian (`guardian.rs`) kills the whole group with SIGKILL if the
//!   tool dies without a word (`kill -9`, the OOM killer): nobody extends
//!   the lock any more. SIGKILL and not SIGTERM: with the tool gone nobody
//!   could bound a grace period by the lock's validity.
//! * `PR_SET_PDEATHSIG` = SIGKILL as well, for the command itself: it
//!   holds even if the guardian was killed too.

use std::io::{self, PipeWriter};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgid, getpid, getppid};

use crate::exit;
use crate::guardian::{self, Guardian};
use crate::terminal::Terminal;

/// The longest a group that only zombies are left in is taken for alive.
const SCAN_EVERY: Duration = Duration::from_millis(500);

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// Signal N ended it.
    Signaled(Signal),
}

impl Ended {
    /// Its status as a shell reports it: the exit code, or 128 + N.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Exited(code) => u8::try_from(code & 0xff).unwrap_or(1),
            Self::Signaled(signal) => {
                exit::SIGNALED.saturating_add(u8::try_from(signal as i32).unwrap_or(127))
            }
        }
    }
}

/// The running command, and its process group.
#[derive(Debug)]
pub(crate) struct Child {
    /// Its pid, which is also its process group's id.
    pid: Pid,
    /// Whether its status was collected: from then on the pid may be
    /// reused, only the group is signalled.
    ended: bool,
    /// The terminal it was handed, when the tool ran in a terminal's
    /// foreground.
    terminal: Option<Terminal>,
    /// Kills the group if the tool dies; `None` once let go.
    guardian: Option<Guardian>,
    /// When /proc was last read for the group's members.
    scanned: Option<Instant>,
}

impl Child {
    /// Starts `command` in its own process group, to be killed with its
    /// group if the tool dies (by `guardian`, which it tells its group
    /// before it `exec`s); hands it the terminal when the tool has it.
    pub(crate) fn spawn(mut command: Command, guardian: Guardian) -> io::Result<Self> {
        let tool = getpid();
        let announcer = guardian.announcer()?;
        command.process_group(0);
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the forked child before exec, where
        // only async-signal-safe calls are allowed: it makes four system
        // calls (prctl, getpid, write, getppid) and allocates nothing (an
        // `Errno` becomes an `io::Error` without allocating).
        unsafe {
            command.pre_exec(move || before_exec(tool, &announcer));
        }
        // The parent-death signal is tied to the thread that forks: this
        // is the main thread, which lives until the tool exits.
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                // Nothing runs (the failed child was collected).
                guardian.disarm();
                return Err(e);
            }
        };
        drop(command);
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        // `child` is dropped without waiting: the waiting is done by pid,
        // below, to see the command stop (Ctrl-Z) as well as end.
        drop(child);
        let terminal = Terminal::hand_to(pid);
        Ok(Self {
            pid,
            ended: false,
            terminal,
            guardian: Some(guardian),
            scanned: None,
        })
    }

    /// Whether it ended, without blocking. A command stopped by job
    /// control (Ctrl-Z) stops the tool too, as a shell job would, and both
    /// go on together.
    pub(crate) fn poll(&mut self) -> io::Result<Option<Ended>> {
        if self.ended {
            // Collected already: the pid may belong to another process.
            return Ok(None);
        }
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED;
        match waitpid(self.pid, Some(flags)) {
            Ok(WaitStatus::Exited(_, code)) => Ok(Some(self.ended(Ended::Exited(code)))),
            Ok(WaitStatus::Signaled(_, signal, _)) => Ok(Some(self.ended(Ended::Signaled(signal)))),
            Ok(WaitStatus::Stopped(_, signal)) => {
                if let Some(terminal) = &self.terminal {
                    terminal.stopped(self.pid, signal);
                }
                Ok(None)
            }
            Ok(_) => Ok(None),
            Err(Errno::EINTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends `signal` to the command's process group (its own children
    /// too, as a terminal would), and to the command itself only if it
    /// left the group: sending to both would deliver the signal to the
    /// command twice whenever the first copy was handled before the second
    /// arrived (a standard signal is merged only while it is pending).
    /// Once the command has ended, to its group only.
    pub(crate) fn signal(&self, signal: Signal) {
        if self.ended {
            let _ = killpg(self.pid, signal);
            return;
        }
        let in_group = getpgid(Some(self.pid)).is_ok_and(|group| group == self.pid);
        if !in_group || killpg(self.pid, signal).is_err() {
            let _ = kill(self.pid, signal);
        }
    }

    /// After the command ended: whether no process is left in its group
    /// (zombies aside: they run nothing, and wait for a parent to collect
    /// them). Collects those that are the tool's own children (the tool
    /// is the reaper of orphans when it runs as pid 1 in a container).
    pub(crate) fn group_gone(&mut self) -> bool {
        let group = Pid::from_raw(-self.pid.as_raw());
        while let Ok(status) = waitpid(group, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        if killpg(self.pid, None) == Err(Errno::ESRCH) {
            return true;
        }
        // Still there for the kernel: perhaps only zombies (a shell's
        // ended background job, between the shell's exit and init
        // collecting it). /proc tells; it is read at most once per
        // SCAN_EVERY, as a wait for the group may last long.
        let now = Instant::now();
        if self.scanned.is_some_and(|at| now < at + SCAN_EVERY) {
            return false;
        }
        self.scanned = Some(now);
        live_members(self.pid) == Some(0)
    }

    /// After the command ended: whether processes other than zombies are
    /// left in its group, read now.
    pub(crate) fn group_alive(&mut self) -> bool {
        self.scanned = None;
        !self.group_gone()
    }

    /// Starts a new guardian if the one watching the group ended (only
    /// SIGKILL by its pid ends it).
    pub(crate) fn keep_guardian(&mut self) {
        let Some(guardian) = &mut self.guardian else {
            return;
        };
        if guardian.alive() {
            return;
        }
        crate::logger::warn("the guardian of the command's process group ended: starting another");
        let started = Guardian::start().and_then(|mut new| new.arm(self.pid).map(|()| new));
        match started {
            Ok(new) => self.guardian = Some(new),
            Err(e) => crate::logger::warn(&format!(
                "cannot start a guardian ({e}): if the tool is killed, the command's \
                 processes will run on without the lock"
            )),
        }
    }

    /// The tool is done with the group (it is gone, or let go on
    /// purpose): its guardian will not kill it.
    pub(crate) fn let_go(&mut self) {
        if let Some(guardian) = self.guardian.take() {
            guardian.disarm();
        }
    }

    fn ended(&mut self, how: Ended) -> Ended {
        self.ended = true;
        if let Some(terminal) = self.terminal.take() {
            terminal.take_back(self.pid);
        }
        how
    }
}

/// In the child before exec: SIGKILL when the tool dies, and the group's
/// id to the guardian. If the tool died before `prctl` took effect, the
/// signal will never come: the command must not start then.
fn before_exec(tool: Pid, guardian: &PipeWriter) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    guardian::announce(guardian, getpid())?;
    if getppid() != tool {
        return Err(Errno::ESRCH.into());
    }
    Ok(())
}

/// How many processes of process group `group` are not zombies, from
/// /proc; `None` where /proc cannot be read.
fn live_members(group: Pid) -> Option<usize> {
    let mut live = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // Gone since the listing, or not ours to read: skipped.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and ')'.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_ascii_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        if pgrp == Some(group.as_raw()) && state != Some("Z") {
            live += 1;
        }
    }
    Some(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_members_counts_a_group_from_proc() {
        let own = nix::unistd::getpgrp();
        assert!(live_members(own).is_some_and(|n| n >= 1), "this process");
        // A group id no process has: pid_max is at most 2^22.
        assert_eq!(live_members(Pid::from_raw(i32::MAX)), Some(0));
    }
}
