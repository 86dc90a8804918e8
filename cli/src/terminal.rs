//! Interactive use: the command runs in its own process group (see
//! `child.rs`), so when the tool has the terminal's foreground it hands it
//! to the command's group: the command can read the terminal, and Ctrl-C
//! reaches it once, from the terminal itself. Ctrl-Z stops the command;
//! the tool then stops itself too, so that the shell sees its job stop,
//! and on `fg` gives the terminal back and continues the command.
//!
//! Without a terminal (cron, systemd, CI) none of this happens.

use std::io::{IsTerminal, stdin};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask, raise};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// The tool's controlling terminal, lent to the command.
#[derive(Debug)]
pub(crate) struct Terminal {
    /// The tool's own process group, which gets the terminal back.
    tool: Pid,
}

impl Terminal {
    /// Hands the terminal on stdin to the process group `command` when
    /// the tool's group has its foreground; `None` otherwise.
    pub(crate) fn hand_to(command: Pid) -> Option<Self> {
        let tool = getpgrp();
        let input = stdin();
        if !input.is_terminal() || tcgetpgrp(&input).ok() != Some(tool) {
            return None;
        }
        tcsetpgrp(&input, command).ok()?;
        // If the command touched the terminal before it had it, it was
        // stopped (SIGTTIN/SIGTTOU); `stopped` continues it.
        Some(Self { tool })
    }

    /// The command's group stopped with `signal`.
    pub(crate) fn stopped(&self, command: Pid, signal: Signal) {
        let lent = tcgetpgrp(stdin()).ok() == Some(command);
        if lent && matches!(signal, Signal::SIGTTIN | Signal::SIGTTOU) {
            // It touched the terminal just before it was handed over.
            let _ = killpg(command, Signal::SIGCONT);
            return;
        }
        // Ctrl-Z, SIGSTOP, or a job in the background touching the
        // terminal: the job stops. The tool stops too, so that the shell
        // sees its job stop and gets its prompt back; `raise` returns on
        // `fg` or `bg`.
        self.take_back(command);
        let _ = raise(Signal::SIGSTOP);
        // `fg` gave the tool the terminal: the command gets it again. `bg`
        // did not: the command runs on without it.
        if tcgetpgrp(stdin()).ok() == Some(self.tool) {
            let _ = tcsetpgrp(stdin(), command);
        }
        let _ = killpg(command, Signal::SIGCONT);
    }

    /// Gives the terminal back to the tool's group if the command's group
    /// `command` has it (never taking it from the shell). The tool is then
    /// in the background: SIGTTOU, which would stop it, is blocked
    /// meanwhile.
    pub(crate) fn take_back(&self, command: Pid) {
        if tcgetpgrp(stdin()).ok() != Some(command) {
            return;
        }
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut old = SigSet::empty();
        if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_ok() {
            let _ = tcsetpgrp(stdin(), self.tool);
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        }
    }
}
