//! Two ways of doing one thing, timed paired and interleaved: the two
//! alternate sample by sample (in ABBA order), so both see the same
//! noise of this machine; the figure is the ratio of their medians, per
//! run, and its spread over the runs. `--fencing-cost` and
//! `--scripts-cost` are such comparisons.

use std::time::Duration;

use crate::stats::{median, percentile};

/// Samples per side per run, after the warm-up.
const SAMPLES: usize = 2_000;
const WARMUP: usize = 200;

/// One side: its name, and one timed sample.
pub type Side<'a> = (&'a str, Box<dyn FnMut() -> Result<Duration, String> + 'a>);

/// Runs `a` and `b` paired, `runs` times, and returns a markdown table of
/// their medians per run and the ratio `b / a`, with a summary line that
/// says what was measured (`what`).
pub fn compare(runs: usize, what: &str, a: Side<'_>, b: Side<'_>) -> Result<String, String> {
    let ((a_name, mut a), (b_name, mut b)) = (a, b);
    for _ in 0..WARMUP {
        a()?;
        b()?;
    }
    let mut out =
        format!("| run | {a_name} p50 | {b_name} p50 | {b_name} / {a_name} |\n|---|---|---|---|\n");
    let mut ratios = Vec::new();
    for run in 1..=runs {
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
        let (pa, pb) = (percentile(&sa, 0.5), percentile(&sb, 0.5));
        let ratio = pb.as_secs_f64() / pa.as_secs_f64();
        ratios.push(ratio);
        out.push_str(&format!("| {run} | {pa:?} | {pb:?} | {ratio:.2}x |\n"));
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    out.push_str(&format!(
        "\n{b_name} / {a_name} {what} p50: median {:.2}x over {runs} runs \
         (min {lo:.2}x, max {hi:.2}x), {SAMPLES} paired samples each\n",
        median(&ratios)
    ));
    Ok(out)
}
