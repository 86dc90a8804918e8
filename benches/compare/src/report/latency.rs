//! The latency sections: per N, the paired comparison of the clients
//! (a summary, then each run against the floor of the same run), and
//! quorum-lock with its third node healthy, refused or blackholed (the
//! same paired form, against the healthy third).

use std::fmt::Write as _;

use super::cells::{clip, fmt_dur, fmt_us, spread_ratio, spread_us};
use super::results::Results;
use crate::clients::Client;
use crate::latency::third_label;

/// Latency: per N, one summary table and one table of the runs.
pub fn latency(results: &Results) -> String {
    let mut out = String::new();
    for (n, paired, failed) in &results.latency {
        let floor = Client::Floor.key();
        let _ = writeln!(
            out,
            "#### 1 thread, lock + release, N={n} (paired, interleaved)\n"
        );
        let _ = writeln!(
            out,
            "| client | p50, this machine: median (min-max of runs) | p99 (median) | p50 / floor p50 of the same run: median (min-max) | samples | errors |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
        for label in &paired.labels {
            let client: Option<Client> = label.parse().ok();
            let name = client.map_or_else(|| label.clone(), |c| c.to_string());
            let (samples, errors, first) = paired.totals(label);
            let err = if errors > 0 {
                format!(
                    "{errors}, first: {}",
                    clip(first.as_deref().unwrap_or(""), 80)
                )
            } else {
                "0".into()
            };
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {samples} | {err} |",
                spread_us(paired.p50(label)),
                paired
                    .p99(label)
                    .map_or_else(|| "-".into(), |s| fmt_us(s.median)),
                spread_ratio(paired.ratio(label, floor)),
            );
        }
        for (c, e) in failed {
            let _ = writeln!(out, "| {c} | could not start: {} | | | | |", clip(e, 80));
        }
        let _ = writeln!(out, "\nPer run (p50, and / floor p50 of the same run):\n");
        let _ = writeln!(out, "| run | {} |", paired.labels.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(paired.labels.len()));
        let fi = paired.labels.iter().position(|l| l == floor);
        for (r, run) in paired.runs.iter().enumerate() {
            let base = fi.and_then(|i| run[i].p50);
            let cells: Vec<String> = run
                .iter()
                .map(|a| match (a.p50, base) {
                    (Some(p), Some(b)) => {
                        format!("{} ({:.2}x)", fmt_dur(p), p.as_secs_f64() / b.as_secs_f64())
                    }
                    (Some(p), None) => fmt_dur(p),
                    _ => "-".into(),
                })
                .collect();
            let _ = writeln!(out, "| {} | {} |", r + 1, cells.join(" | "));
        }
        out.push('\n');
    }
    out
}

/// quorum-lock with the third of three nodes healthy or not.
pub fn third(results: &Results) -> String {
    let mut out = String::new();
    let Some(third) = &results.third else {
        return out;
    };
    let _ = writeln!(
        out,
        "#### quorum-lock, N=3, third node healthy / refused / blackholed (paired, interleaved)\n"
    );
    let paired = match third {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(out, "failed: {e}\n");
            return out;
        }
    };
    let _ = writeln!(
        out,
        "| third node, lock + | p50, this machine: median (min-max) | p99 (median) | p50 / healthy p50 (same run) | samples | errors |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for label in &paired.labels {
        let healthy = third_label("healthy", label.ends_with("/drop"));
        let (samples, errors, first) = paired.totals(label);
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {samples} | {} |",
            spread_us(paired.p50(label)),
            paired
                .p99(label)
                .map_or_else(|| "-".into(), |s| fmt_us(s.median)),
            spread_ratio(paired.ratio(label, &healthy)),
            if errors > 0 {
                format!(
                    "{errors}, first: {}",
                    clip(first.as_deref().unwrap_or(""), 60)
                )
            } else {
                "0".into()
            }
        );
    }
    out.push('\n');
    out
}
