//! Paired, interleaved sampling: the clients of one comparison take turns
//! sample by sample (in an order that rotates every round), so that each
//! sees the same noise of this machine. A figure is then compared with the
//! reference's figure *of the same run*, and the per-run ratios are
//! summarized over the runs (median, min-max), like `--fencing-cost`.

use std::time::{Duration, Instant};

use crate::stats::{Spread, percentile};

/// One operation to sample.
pub type Op<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;
/// Untimed work after each sample of an arm.
pub type After<'a> = Box<dyn FnMut() + 'a>;

/// One client of a paired comparison.
pub struct Arm<'a> {
    /// The arm's name in the figures (a client's `--only` name, say).
    pub label: String,
    /// What is timed: one lock + release.
    pub op: Op<'a>,
    /// Untimed, after each of this arm's samples: e.g. wait until a dropped
    /// guard's queued release is done, so the next client does not share
    /// the machine with it.
    pub after: Option<After<'a>>,
    /// Sampled in one round out of `every` (clients that connect per call
    /// are slow and get fewer samples).
    pub every: usize,
}

impl<'a> Arm<'a> {
    pub fn new(label: impl Into<String>, op: impl FnMut() -> Result<(), String> + 'a) -> Self {
        Self {
            label: label.into(),
            op: Box::new(op),
            after: None,
            every: 1,
        }
    }

    pub fn after(mut self, after: impl FnMut() + 'a) -> Self {
        self.after = Some(Box::new(after));
        self
    }

    pub fn every(mut self, every: usize) -> Self {
        self.every = every.max(1);
        self
    }
}

/// One arm's samples of one run.
#[derive(Debug, Clone, Default)]
pub struct ArmRun {
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    pub samples: usize,
    pub errors: usize,
    pub first_error: Option<String>,
}

/// Every run of one comparison: `runs[r][a]` is arm `a` in run `r`.
#[derive(Debug, Clone, Default)]
pub struct Paired {
    pub labels: Vec<String>,
    pub runs: Vec<Vec<ArmRun>>,
}

/// How many rounds a run makes, at most, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    pub warmup: usize,
    pub rounds: usize,
    pub budget: Duration,
}

impl Paired {
    /// Runs `runs` runs of `rounds.rounds` rounds each (or until the
    /// budget of a run is spent), after `rounds.warmup` unrecorded rounds.
    pub fn measure(arms: &mut [Arm<'_>], runs: usize, rounds: Rounds) -> Self {
        let k = arms.len();
        let mut out = Paired {
            labels: arms.iter().map(|a| a.label.clone()).collect(),
            runs: Vec::with_capacity(runs),
        };
        for r in 0..rounds.warmup {
            for i in 0..k {
                let arm = &mut arms[(r + i) % k];
                let _ = (arm.op)();
                if let Some(after) = arm.after.as_mut() {
                    after();
                }
            }
        }
        for _ in 0..runs {
            let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); k];
            let mut errors = vec![0usize; k];
            let mut first: Vec<Option<String>> = vec![None; k];
            let deadline = Instant::now() + rounds.budget;
            for r in 0..rounds.rounds {
                if Instant::now() >= deadline {
                    break;
                }
                for i in 0..k {
                    let a = (r + i) % k;
                    let arm = &mut arms[a];
                    if r % arm.every != 0 {
                        continue;
                    }
                    let started = Instant::now();
                    let outcome = (arm.op)();
                    let elapsed = started.elapsed();
                    match outcome {
                        Ok(()) => samples[a].push(elapsed),
                        Err(e) => {
                            errors[a] += 1;
                            first[a].get_or_insert(e);
                        }
                    }
                    if let Some(after) = arm.after.as_mut() {
                        after();
                    }
                }
            }
            let run = samples
                .into_iter()
                .zip(errors)
                .zip(first)
                .map(|((mut s, errors), first_error)| {
                    s.sort_unstable();
                    let some = !s.is_empty();
                    ArmRun {
                        p50: some.then(|| percentile(&s, 0.50)),
                        p99: some.then(|| percentile(&s, 0.99)),
                        samples: s.len(),
                        errors,
                        first_error,
                    }
                })
                .collect();
            out.runs.push(run);
        }
        out
    }

    fn index(&self, label: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == label)
    }

    /// Per run, `a`'s p50 / `b`'s p50; summarized over the runs.
    pub fn ratio(&self, a: &str, b: &str) -> Option<Spread> {
        let (ia, ib) = (self.index(a)?, self.index(b)?);
        let ratios: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|run| {
                let (x, y) = (run[ia].p50?, run[ib].p50?);
                Some(x.as_secs_f64() / y.as_secs_f64())
            })
            .collect();
        Spread::of(&ratios)
    }

    /// `label`'s p50 and p99 per run, summarized (seconds).
    pub fn p50(&self, label: &str) -> Option<Spread> {
        self.figure(label, |r| r.p50)
    }

    pub fn p99(&self, label: &str) -> Option<Spread> {
        self.figure(label, |r| r.p99)
    }

    fn figure(&self, label: &str, f: impl Fn(&ArmRun) -> Option<Duration>) -> Option<Spread> {
        let i = self.index(label)?;
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|run| f(&run[i]).map(|d| d.as_secs_f64()))
            .collect();
        Spread::of(&v)
    }

    /// Samples and errors of `label` over every run, and its first error.
    pub fn totals(&self, label: &str) -> (usize, usize, Option<String>) {
        let Some(i) = self.index(label) else {
            return (0, 0, None);
        };
        self.runs.iter().fold((0, 0, None), |(s, e, f), run| {
            let r = &run[i];
            (
                s + r.samples,
                e + r.errors,
                f.or_else(|| r.first_error.clone()),
            )
        })
    }
}
