//! Percentiles, medians and spreads of repeated runs.

use std::time::Duration;

use crate::cpu::CpuUse;

/// One throughput or wall-time measurement with several threads.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Operations that completed.
    pub ops: usize,
    /// Operations that failed (or were not reached before the deadline).
    pub errors: usize,
    pub first_error: Option<String>,
    pub wall: Duration,
    /// For the contention scenario: the shared counter at the end.
    pub counter: Option<u64>,
    /// For the scaling scenario: the CPU time the block used (`None` where
    /// it is not measured or could not be read).
    pub cpu: Option<CpuUse>,
}

impl Throughput {
    pub fn ops_per_sec(&self) -> f64 {
        per_sec(self.ops, self.wall)
    }
}

fn per_sec(ops: usize, time: Duration) -> f64 {
    if time.is_zero() {
        return 0.0;
    }
    ops as f64 / time.as_secs_f64()
}

/// Nearest-rank percentile of sorted samples (zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median of `values` (the lower middle for an even count; NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// A per-run figure over several runs: its median and its range.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Runs that gave a figure.
    pub runs: usize,
}

impl Spread {
    /// `None` when no run gave a (finite) figure.
    pub fn of(values: &[f64]) -> Option<Self> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        let (min, max) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        Some(Self {
            median: median(&v),
            min,
            max,
            runs: v.len(),
        })
    }

    /// [`of`](Self::of) the runs that gave a figure (a failed run gives
    /// `None`).
    pub fn of_runs(per_run: Vec<Option<f64>>) -> Option<Self> {
        Self::of(&per_run.into_iter().flatten().collect::<Vec<_>>())
    }

    /// `1.02x (0.98-1.10x, 5 runs)`.
    pub fn ratio_text(&self) -> String {
        format!(
            "{:.2}x ({:.2}-{:.2}x, {} runs)",
            self.median, self.min, self.max, self.runs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&s, 0.50), Duration::from_micros(50));
        assert_eq!(percentile(&s, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&s[..1], 0.99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn spreads() {
        let s = Spread::of(&[1.2, f64::NAN, 0.9, 1.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (1.0, 0.9, 1.2, 3));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
