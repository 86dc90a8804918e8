//! The signals the tool catches while the command runs, to forward them.
//!
//! The command runs in its own process group (`child.rs`), so a signal to
//! the tool's group (a terminal's Ctrl-C, `kill -INT -PGID`) reaches the
//! tool alone, and a signal to the tool's pid reaches the tool alone too:
//! in both cases the tool forwards one copy, and the command gets it
//! exactly once. (With the terminal handed to the command, Ctrl-C goes to
//! the command's group directly and never to the tool.)
//!
//! One case the tool cannot see: systemd's default `KillMode=control-group`
//! signals every process of the unit itself, the command included, so the
//! command would get systemd's copy and the tool's. Units should use
//! `KillMode=mixed` (SIGTERM to the tool, SIGKILL to all at the end), as
//! systemd recommends for a main process that manages its children; the
//! README says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;
use quorum_lock::CancellationToken;

/// How often the wait for the lock looks at the signal flags: a signal
/// ends the wait within this (a handler itself may not cancel: that takes
/// a lock, which is not async-signal-safe).
const WAIT_POLL: Duration = Duration::from_millis(5);

/// Signals that ask a program to end, in the order they are forwarded when
/// several came at once: SIGTERM last, as it starts the `--kill-after`
/// clock.
const CAUGHT: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

/// One flag per caught signal, set by its handler.
#[derive(Debug)]
pub(crate) struct Signals {
    flags: Vec<(Signal, Arc<AtomicBool>)>,
}

impl Signals {
    /// Catches the signals from now on (instead of dying of them).
    pub(crate) fn catch() -> Self {
        let mut flags = Vec::new();
        for signal in CAUGHT {
            let flag = Arc::new(AtomicBool::new(false));
            match signal_hook::flag::register(signal as i32, Arc::clone(&flag)) {
                Ok(_) => flags.push((signal, flag)),
                Err(e) => crate::logger::warn(&format!("cannot catch {signal}: {e}")),
            }
        }
        Self { flags }
    }

    /// The first caught signal not taken yet, without taking it.
    pub(crate) fn pending(&self) -> Option<Signal> {
        self.flags
            .iter()
            .find(|(_, flag)| flag.load(Ordering::SeqCst))
            .map(|(signal, _)| *signal)
    }

    /// Cancels `token` as soon as a signal is caught, until the returned
    /// watcher is dropped: a signal that arrives while the tool waits for
    /// the lock ends the wait at once (the library releases whatever an
    /// attempt in flight took).
    pub(crate) fn cancel_on_signal(&self, token: &CancellationToken) -> CancelOnSignal {
        let stop = Arc::new(AtomicBool::new(false));
        let flags: Vec<Arc<AtomicBool>> = self.flags.iter().map(|(_, f)| Arc::clone(f)).collect();
        let (token, stopped) = (token.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("quorum-lock-signals".into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    if flags.iter().any(|f| f.load(Ordering::SeqCst)) {
                        token.cancel();
                        return;
                    }
                    std::thread::sleep(WAIT_POLL);
                }
            });
        if let Err(e) = &thread {
            crate::logger::warn(&format!(
                "cannot watch for signals while waiting for the lock: {e}"
            ));
        }
        CancelOnSignal {
            stop,
            thread: thread.ok(),
        }
    }

    /// The signals caught since the last call, in forwarding order. (Two
    /// of the same kind before a call count once, as the kernel merges
    /// them too.)
    pub(crate) fn take(&self) -> Vec<Signal> {
        self.flags
            .iter()
            .filter(|(_, flag)| flag.swap(false, Ordering::SeqCst))
            .map(|(signal, _)| *signal)
            .collect()
    }
}

/// Watches the signal flags for [`Signals::cancel_on_signal`]; stops on
/// drop.
#[derive(Debug)]
pub(crate) struct CancelOnSignal {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for CancelOnSignal {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
