//! The guardian of the command's process group: a small process (this
//! binary, started with [`ARG`]) that kills the whole group with SIGKILL
//! when the tool dies without a word (`kill -9`, the OOM killer, a
//! panic), so that no process of the command works on without the lock.
//!
//! Why a process of its own, and why it watches a pipe:
//!
//! * The parent-death signal (`child.rs`) is per process: it kills the
//!   command, not the processes the command started (a shell script that
//!   does not `exec` leaves them running). A subreaper does not help
//!   either: `kill -9` of the tool ends the subreaper.
//! * The guardian runs in a process group of its own, so a `kill -9
//!   -PGID` of the tool's group (a shell killing its job, a service
//!   manager) does not take it along; it ignores the signals a terminal
//!   sends (SIGINT, SIGHUP, SIGQUIT) and SIGTERM: only SIGKILL by its own
//!   pid ends it, and the tool then starts a new one.
//! * It reads a pipe whose only writer is the tool (close-on-exec: the
//!   command never holds it). The command, before it `exec`s, writes its
//!   pid there (the group's id: the group exists from then on); when the
//!   tool is done with the group it writes one more byte (disarmed). End
//!   of file without that byte means the tool is gone, however it died:
//!   the kernel closes the pipe. No polling, no pid of the tool that could
//!   be reused.
//!
//! The guardian is started from `/proc/self/exe` (the tool's binary even
//! if it was replaced on disk since), so it holds none of the tool's
//! connections, and with stdout on `/dev/null` (a caller reading the
//! tool's output is not kept waiting).
//!
//! Out of reach: a process that left the group (`setsid`, `setpgid`, a
//! shell's job control with `set -m`).

use std::io::{self, PipeWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The first argument that starts the binary as a guardian.
pub(crate) const ARG: &str = "__quorum-lock-guardian";

/// What the tool writes after the group's id when it is done with the
/// group: no kill on end of file.
const DISARM: u8 = b'd';
/// SIGKILL to the group is repeated (a process that was forking when the
/// first one came) until the group is gone, at most this many times...
const KILL_ROUNDS: u32 = 50;
/// ...this far apart.
const KILL_PAUSE: Duration = Duration::from_millis(20);

/// A running guardian, as the tool sees it.
#[derive(Debug)]
pub(crate) struct Guardian {
    process: std::process::Child,
    pipe: PipeWriter,
}

impl Guardian {
    /// Starts a guardian that is not armed yet (it knows no group).
    pub(crate) fn start() -> io::Result<Self> {
        let (reader, pipe) = io::pipe()?;
        let exe = Path::new("/proc/self/exe");
        let exe = if exe.exists() {
            exe.to_path_buf()
        } else {
            std::env::current_exe()?
        };
        let process = Command::new(exe)
            .arg0("quorum-lock")
            .arg(ARG)
            .stdin(reader)
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Self { process, pipe })
    }

    /// A second writer, for the command to announce its group with
    /// [`announce`] before it `exec`s (closed there: close-on-exec).
    pub(crate) fn announcer(&self) -> io::Result<PipeWriter> {
        self.pipe.try_clone()
    }

    /// Tells the guardian the group to kill, when the command could not
    /// announce it (a new guardian for a running command).
    pub(crate) fn arm(&mut self, group: Pid) -> io::Result<()> {
        announce(&self.pipe, group)
    }

    /// Whether the guardian still runs.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.process.try_wait(), Ok(None))
    }

    /// The tool is done with the group (gone, or let go on purpose): the
    /// guardian exits without killing it.
    pub(crate) fn disarm(mut self) {
        let _ = self.pipe.write_all(&[DISARM]);
        drop(self.pipe);
        // It exits at once; collected if it already has (otherwise the
        // tool's own exit leaves it to init).
        let _ = self.process.try_wait();
    }
}

/// Writes `group` to a guardian's pipe. Async-signal-safe (one `write`,
/// no allocation): the command calls it between `fork` and `exec`.
pub(crate) fn announce(pipe: &PipeWriter, group: Pid) -> io::Result<()> {
    let mut pipe = pipe;
    pipe.write_all(&group.as_raw().to_ne_bytes())
}

/// The guardian process: waits for a group's id, then for the tool to
/// disarm it or to be gone; kills the group when the tool is gone.
pub(crate) fn main() -> ExitCode {
    // Caught into flags nobody reads: ignored, but reset at `exec` (the
    // guardian execs nothing anyway).
    for signal in [
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTERM,
    ] {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _ = signal_hook::flag::register(signal as i32, flag);
    }
    let mut pipe = io::stdin().lock();
    let mut id = [0; 4];
    if pipe.read_exact(&mut id).is_err() {
        // Never armed: no command started.
        return ExitCode::SUCCESS;
    }
    let group = i32::from_ne_bytes(id);
    let mut byte = [0; 1];
    let disarmed = loop {
        match pipe.read(&mut byte) {
            Ok(1) => break byte[0] == DISARM,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // End of file (the tool is gone) or an error: kill.
            _ => break false,
        }
    };
    if disarmed || group <= 1 {
        return ExitCode::SUCCESS;
    }
    let group = Pid::from_raw(group);
    for _ in 0..KILL_ROUNDS {
        if killpg(group, Signal::SIGKILL) == Err(Errno::ESRCH) {
            break;
        }
        std::thread::sleep(KILL_PAUSE);
    }
    ExitCode::SUCCESS
}
