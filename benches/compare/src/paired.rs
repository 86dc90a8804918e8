//! Paired, interleaved sampling: the clients of one comparison take turns
//! sample by sample, so that each sees the same noise of this machine. The
//! order of a round comes from a balanced Latin square ([`order`]): over a
//! cycle of rounds every client is first equally often and follows every
//! other client equally often (a plain rotation would put B after A in
//! every round), and the cycle is the same in every run of the program. A figure is then compared with the
//! reference's figure *of the same run*, and the per-run ratios are
//! summarized over the runs (median, min-max), like `--fencing-cost`.

use std::time::{Duration, Instant};

use crate::stats::{Spread, percentile};

/// One operation to sample.
pub type Op<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;
/// Untimed work after each sample of an arm.
pub type After<'a> = Box<dyn FnMut() + 'a>;

/// The order of round `round` among `k` clients: row `round` of a
/// Williams design (a balanced Latin square: 0, 1, k-1, 2, k-2, ... shifted
/// by the row), and for an odd `k` its mirror rows after it. Over one cycle
/// (`k` rounds, `2k` for an odd `k`) each client takes each position
/// equally often and directly follows each other client equally often.
/// Deterministic: every run of the benchmark uses the same orders.
pub fn order(round: usize, k: usize) -> Vec<usize> {
    if k == 0 {
        return Vec::new();
    }
    let cycle = if k.is_multiple_of(2) { k } else { 2 * k };
    let r = round % cycle;
    let shift = r % k;
    let mut row: Vec<usize> = (0..k)
        .map(|j| {
            // 0, 1, k-1, 2, k-2, ...
            let base = if j == 0 {
                0
            } else if j % 2 == 1 {
                j.div_ceil(2)
            } else {
                k - j / 2
            };
            (base + shift) % k
        })
        .collect();
    if r >= k {
        row.reverse();
    }
    row
}

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
            for a in order(r, k) {
                let arm = &mut arms[a];
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
                for a in order(r, k) {
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

#[cfg(test)]
mod tests {
    use super::order;

    #[test]
    fn every_client_follows_every_other_equally_often() {
        for k in 1usize..=7 {
            let cycle = if k.is_multiple_of(2) { k } else { 2 * k };
            let mut first = vec![0usize; k];
            let mut follows = vec![vec![0usize; k]; k];
            for r in 0..cycle {
                let row = order(r, k);
                let mut sorted = row.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..k).collect::<Vec<_>>(), "k={k} r={r}");
                first[row[0]] += 1;
                for w in row.windows(2) {
                    follows[w[0]][w[1]] += 1;
                }
            }
            assert!(first.iter().all(|&f| f == first[0]), "k={k}: {first:?}");
            let want = if k.is_multiple_of(2) { 1 } else { 2 };
            for (a, row) in follows.iter().enumerate() {
                for (b, &n) in row.iter().enumerate() {
                    if a != b {
                        assert_eq!(n, want, "k={k}: {b} after {a}");
                    }
                }
            }
        }
    }
}
