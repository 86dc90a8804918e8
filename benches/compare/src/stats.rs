//! Samples, percentiles, medians of repeated runs.

use std::time::{Duration, Instant};

/// Latency samples of one measurement, bounded in count and in time.
#[derive(Debug)]
pub struct Recorder {
    samples: Vec<Duration>,
    target: usize,
    deadline: Instant,
    errors: usize,
    first_error: Option<String>,
}

impl Recorder {
    /// Collects up to `target` samples, and stops at `budget` from now.
    pub fn new(target: usize, budget: Duration) -> Self {
        let started = Instant::now();
        Self {
            samples: Vec::with_capacity(target),
            target,
            deadline: started + budget,
            errors: 0,
            first_error: None,
        }
    }

    /// Whether to stop: enough samples, or out of time.
    pub fn done(&self) -> bool {
        self.samples.len() + self.errors >= self.target || Instant::now() >= self.deadline
    }

    /// One operation's outcome and its latency (errors are counted, not
    /// sampled).
    pub fn record(&mut self, elapsed: Duration, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => self.samples.push(elapsed),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    /// The summary of what was recorded.
    pub fn finish(mut self) -> Latency {
        self.samples.sort_unstable();
        let total: Duration = self.samples.iter().sum();
        Latency {
            p50: percentile(&self.samples, 0.50),
            p99: percentile(&self.samples, 0.99),
            ops_per_sec: per_sec(self.samples.len(), total),
            samples: self.samples.len(),
            errors: self.errors,
            first_error: self.first_error,
        }
    }
}

/// One latency measurement.
#[derive(Debug, Clone)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    /// Sequential operations per second (samples / their summed time).
    pub ops_per_sec: f64,
    pub samples: usize,
    pub errors: usize,
    pub first_error: Option<String>,
}

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
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
