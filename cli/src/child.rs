//! The command `run` starts: in its own process group, tied to the tool's
//! life, signalled as a group, and waited for.
//!
//! * Its own process group: a terminal's Ctrl-C and `kill -INT -PGID` of
//!   the tool's group then reach the tool alone, which forwards one copy to
//!   the command's group (see `signals.rs`). Without it the command would
//!   get two.
//! * `PR_SET_PDEATHSIG` = SIGKILL: if the tool dies without a word (`kill
//!   -9`, the OOM killer), nobody extends the lock any more, and the kernel
//!   kills the command at once instead of letting it run on unprotected.
//!   SIGKILL and not SIGTERM: with the tool gone nobody could bound a grace
//!   period by the lock's validity.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgid, getpid, getppid};

use crate::exit;
use crate::terminal::Terminal;

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

/// The running command.
#[derive(Debug)]
pub(crate) struct Child {
    /// Its pid, which is also its process group's id.
    pid: Pid,
    /// The terminal it was handed, when the tool ran in a terminal's
    /// foreground.
    terminal: Option<Terminal>,
}

impl Child {
    /// Starts `command` in its own process group, to be killed if the tool
    /// dies; hands it the terminal when the tool has it.
    pub(crate) fn spawn(mut command: Command) -> io::Result<Self> {
        let tool = getpid();
        command.process_group(0);
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the forked child before exec, where
        // only async-signal-safe calls are allowed: it makes two system
        // calls (prctl, getppid) and allocates nothing (an `Errno` becomes
        // an `io::Error` without allocating).
        unsafe {
            command.pre_exec(move || die_with(tool));
        }
        // The parent-death signal is tied to the thread that forks: this
        // is the main thread, which lives until the tool exits.
        let child = command.spawn()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        // `child` is dropped without waiting: the waiting is done by pid,
        // below, to see the command stop (Ctrl-Z) as well as end.
        drop(child);
        let terminal = Terminal::hand_to(pid);
        Ok(Self { pid, terminal })
    }

    /// Whether it ended, without blocking. A command stopped by job
    /// control (Ctrl-Z) stops the tool too, as a shell job would, and both
    /// go on together.
    pub(crate) fn poll(&mut self) -> io::Result<Option<Ended>> {
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
    pub(crate) fn signal(&self, signal: Signal) {
        let in_group = getpgid(Some(self.pid)).is_ok_and(|group| group == self.pid);
        if !in_group || killpg(self.pid, signal).is_err() {
            let _ = kill(self.pid, signal);
        }
    }

    fn ended(&mut self, how: Ended) -> Ended {
        if let Some(terminal) = self.terminal.take() {
            terminal.take_back(self.pid);
        }
        how
    }
}

/// In the child before exec: SIGKILL when the tool dies. If the tool died
/// before `prctl` took effect, the signal will never come: the command
/// must not start then.
fn die_with(tool: Pid) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if getppid() != tool {
        return Err(Errno::ESRCH.into());
    }
    Ok(())
}
