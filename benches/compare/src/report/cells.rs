//! How a table cell writes a number: a duration (us, ms or s by size), a
//! rate, a spread of runs (median and range), a ratio, a thread census,
//! and an error clipped to fit a cell; and a section that renders itself
//! under its title ([`titled`]). Apart from the sections because every
//! section writes its cells the same way.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::stats::Spread;

pub fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} us")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 1000.0 {
        format!("{:.1}k/s", r / 1000.0)
    } else {
        format!("{r:.0}/s")
    }
}

/// A section that renders itself: `title` as its heading, then its text,
/// or why it failed; nothing when it did not run.
pub(super) fn titled<T>(
    title: &str,
    section: Option<&Result<T, String>>,
    render: impl FnOnce(&T) -> String,
) -> String {
    match section {
        None => String::new(),
        Some(Ok(t)) => format!("\n#### {title}\n\n{}", render(t)),
        Some(Err(e)) => format!("\n#### {title}\n\nfailed: {}\n", clip(e, 120)),
    }
}

pub fn clip(s: &str, max: usize) -> String {
    let s = s.replace('|', "/").replace('\n', " ");
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}...")
    }
}

pub(super) fn fmt_us(secs: f64) -> String {
    fmt_dur(Duration::from_secs_f64(secs.max(0.0)))
}

pub(super) fn spread_us(s: Option<Spread>) -> String {
    s.map_or_else(
        || "-".into(),
        |s| format!("{} ({}-{})", fmt_us(s.median), fmt_us(s.min), fmt_us(s.max)),
    )
}

pub(super) fn spread_ratio(s: Option<Spread>) -> String {
    s.map_or_else(|| "-".into(), |s| s.ratio_text())
}

pub(super) fn census_text(c: &BTreeMap<String, usize>) -> String {
    let total: usize = c.values().sum();
    let names: Vec<String> = c.iter().map(|(n, k)| format!("{k} x `{n}`")).collect();
    format!("{total} ({})", names.join(", "))
}
