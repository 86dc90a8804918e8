//! Two ways of doing one thing, timed paired and interleaved: the two
//! alternate sample by sample (in ABBA order), so both see the same
//! noise of this machine; the figure is the ratio of their medians, per
//! run, and its spread over the runs. `--fencing-cost`, `--scripts-cost`
//! and the latency parts of `--rw-cost` are such comparisons.

use std::time::Duration;

use crate::stats::{Spread, median, percentile};

/// Samples per side per run, after the warm-up.
pub const SAMPLES: usize = 2_000;
const WARMUP: usize = 200;

/// One side: its name, and one timed sample.
pub type Side<'a> = (&'a str, Box<dyn FnMut() -> Result<Duration, String> + 'a>);

/// Every run of one comparison, at the percentiles it was asked for.
#[derive(Debug, Clone)]
pub struct Ab {
    pub a_name: String,
    pub b_name: String,
    /// The percentiles read from each run's samples: (`"p50"`, 0.5), ...
    pub percentiles: Vec<(String, f64)>,
    /// `runs[r][k]`: side a's and side b's percentile `k` in run `r`.
    pub runs: Vec<Vec<(Duration, Duration)>>,
}

impl Ab {
    /// Per run, `b / a` at percentile `k`.
    pub fn ratios(&self, k: usize) -> Vec<f64> {
        self.runs
            .iter()
            .map(|run| run[k].1.as_secs_f64() / run[k].0.as_secs_f64())
            .collect()
    }

    /// `b / a` at percentile `k`, summarized over the runs.
    pub fn ratio(&self, k: usize) -> Option<Spread> {
        Spread::of(&self.ratios(k))
    }

    /// The median over the runs of each side's percentile `k`.
    pub fn medians(&self, k: usize) -> (Duration, Duration) {
        let side = |f: fn(&(Duration, Duration)) -> Duration| {
            let v: Vec<f64> = self.runs.iter().map(|r| f(&r[k]).as_secs_f64()).collect();
            Duration::from_secs_f64(median(&v).max(0.0))
        };
        (side(|p| p.0), side(|p| p.1))
    }

    /// A markdown table of every run (each side's percentiles and the
    /// ratios `b / a`), with a summary line per percentile that says what
    /// was measured (`what`).
    pub fn table(&self, what: &str) -> String {
        let (a_name, b_name) = (&self.a_name, &self.b_name);
        let one = self.percentiles.len() == 1;
        let mut out = String::from("| run |");
        let mut rule = String::from("|---|");
        for (label, _) in &self.percentiles {
            // With one percentile, the ratio column keeps its short name.
            let ratio = if one {
                format!("{b_name} / {a_name}")
            } else {
                format!("{b_name} / {a_name} {label}")
            };
            out.push_str(&format!(" {a_name} {label} | {b_name} {label} | {ratio} |"));
            rule.push_str("---|---|---|");
        }
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        for (r, run) in self.runs.iter().enumerate() {
            out.push_str(&format!("| {} |", r + 1));
            for (pa, pb) in run {
                let ratio = pb.as_secs_f64() / pa.as_secs_f64();
                out.push_str(&format!(" {pa:?} | {pb:?} | {ratio:.2}x |"));
            }
            out.push('\n');
        }
        out.push('\n');
        let runs = self.runs.len();
        for (k, (label, _)) in self.percentiles.iter().enumerate() {
            let ratios = self.ratios(k);
            let (lo, hi) = ratios
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            out.push_str(&format!(
                "{b_name} / {a_name} {what} {label}: median {:.2}x over {runs} runs \
                 (min {lo:.2}x, max {hi:.2}x), {SAMPLES} paired samples each\n",
                median(&ratios)
            ));
        }
        out
    }
}

/// Runs `a` and `b` paired, `runs` times, and returns a markdown table of
/// their medians per run and the ratio `b / a`, with a summary line that
/// says what was measured (`what`).
pub fn compare(runs: usize, what: &str, a: Side<'_>, b: Side<'_>) -> Result<String, String> {
    Ok(measure(runs, &[("p50", 0.5)], a, b)?.table(what))
}

/// Runs `a` and `b` paired, `runs` times, and keeps each run's
/// `percentiles` of both sides.
pub fn measure(
    runs: usize,
    percentiles: &[(&str, f64)],
    a: Side<'_>,
    b: Side<'_>,
) -> Result<Ab, String> {
    let ((a_name, mut a), (b_name, mut b)) = (a, b);
    for _ in 0..WARMUP {
        a()?;
        b()?;
    }
    let mut out = Ab {
        a_name: a_name.to_string(),
        b_name: b_name.to_string(),
        percentiles: percentiles
            .iter()
            .map(|(label, p)| (label.to_string(), *p))
            .collect(),
        runs: Vec::with_capacity(runs),
    };
    for _ in 0..runs {
        let (mut sa, mut sb) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
        for i in 0..SAMPLES {
            // ABBA: neither side always goes first.
            if i % 2 == 0 {
                sa.push(a()?);
                sb.push(b()?);
            } else {
                sb.push(b()?);
                sa.push(a()?);
            }
        }
        sa.sort_unstable();
        sb.sort_unstable();
        out.runs.push(
            percentiles
                .iter()
                .map(|&(_, p)| (percentile(&sa, p), percentile(&sb, p)))
                .collect(),
        );
    }
    Ok(out)
}
