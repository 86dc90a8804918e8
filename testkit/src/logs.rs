//! The library's events in a test binary, captured: the `log` facade has
//! one logger per process, so one capture serves every test of a binary,
//! and each test looks only at the lines naming something of its own (a
//! node's name, a URL with its ports).

use std::sync::{Mutex, OnceLock, PoisonError};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The most events kept: a bound far above what any test logs, so that a
/// binary whose tests log without end cannot grow without end.
const MAX_KEPT: usize = 100_000;

/// Every event at or above the level asked for at the first
/// [`capture`], from then on (at most 100,000: `MAX_KEPT`).
#[derive(Debug)]
pub struct Capture {
    level: LevelFilter,
    events: Mutex<Vec<(Level, String)>>,
}

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let mut kept = self.events.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.len() < MAX_KEPT {
                kept.push((record.level(), record.args().to_string()));
            }
        }
    }

    fn flush(&self) {}
}

impl Capture {
    /// The events kept so far whose text contains every one of `texts`.
    pub fn events_with(&self, texts: &[&str]) -> Vec<(Level, String)> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, text)| texts.iter().all(|t| text.contains(t)))
            .cloned()
            .collect()
    }
}

/// This binary's capture, installed as the process's logger at the first
/// call with `level` (later calls get the same capture, whatever level
/// they ask). Panics if another logger was installed first.
pub fn capture(level: LevelFilter) -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::new(Capture {
            level,
            events: Mutex::new(Vec::new()),
        }));
        log::set_logger(capture).expect("no other logger in this test binary");
        log::set_max_level(level);
        capture
    })
}
