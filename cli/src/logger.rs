//! The library reports a degraded cluster (a node marked down, the same
//! server under two names, a lock that may be lost) through the `log`
//! facade; without a logger those warnings vanish. This one writes them to
//! stderr, one line each, naming flags where the library names its
//! settings (`wording.rs`). A dependency (env_logger and its friends) would
//! bring formatting and filters this tool does not need.
//!
//! One warning is left out: the library's "the lock on NAME may be lost".
//! The only lock the tool holds is `run`'s, and `run` reports its loss
//! itself, once, with what it does about it (the command stopped).

use std::io::Write;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Writes the library's warnings and errors to stderr.
struct Stderr;

static LOGGER: Stderr = Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Warn
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = record.args().to_string();
        // The library's messages start with the crate's name already.
        let text = text.strip_prefix("quorum-lock: ").unwrap_or(&text);
        if reported_by_run(text) {
            return;
        }
        let text = crate::wording::flags(text);
        let level = if record.level() == Level::Error {
            "error"
        } else {
            "warning"
        };
        // One write of one line, so that lines from several threads do
        // not interleave; a closed stderr is not worth dying for.
        let line = format!(
            "quorum-lock: {level}: {}\n",
            text.replace(['\r', '\n'], " ")
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The library's loss warning (`the lock on "job" may be lost: ...`),
/// which `run` reports itself.
fn reported_by_run(text: &str) -> bool {
    text.starts_with("the lock on ") && text.contains(" may be lost: ")
}

/// Installs the logger, unless `quiet`: then nothing is logged at all.
pub(crate) fn install(quiet: bool) {
    if quiet {
        log::set_max_level(LevelFilter::Off);
        return;
    }
    // Fails only if a logger is already installed, which nothing else does.
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Warn);
    }
}

/// A notice of the tool itself (a degraded run, a shortened grace), in the
/// logger's form, and silenced by `-q` as the library's warnings are.
pub(crate) fn warn(text: &str) {
    log::warn!("{text}");
}
