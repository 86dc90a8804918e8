//! Shrinking and replaying a failing walk: a [`Schedule`] (the run's shape,
//! mode, seed and setup draws) replays any subset of the run's steps with
//! their recorded draws, shrinks the run to a minimal failing schedule and
//! prints the line that replays it (the `replay` tool in `main.rs`).

use crate::config::Shape;
use crate::draws::Draws;
use crate::walk::Mode;
use crate::world::World;

pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned())
}

/// Most replays one shrink may run (each replays at most [`STEPS`] steps).
const SHRINK_REPLAYS: usize = 300;

/// A failing run's setup, for replaying subsets of its steps.
pub(crate) struct Schedule {
    pub(crate) shape: Shape,
    pub(crate) mode: Mode,
    pub(crate) seed: u64,
    /// The draws the world's construction took.
    pub(crate) setup: Vec<u64>,
}

/// One step of a run: its number in the original run and its draws.
pub(crate) type Step = (usize, Vec<u64>);

impl Schedule {
    /// Replays `steps` on a fresh world; the first failure, if any, with
    /// the world's log.
    pub(crate) fn play(&self, steps: &[Step]) -> Result<(), String> {
        let mut setup = Draws::replaying(self.setup.clone());
        let mut world = World::new(self.shape, true, &mut setup).with_mode(self.mode);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for (step, draws) in steps {
                world.step(&mut Draws::replaying(draws.clone()), *step);
                world.check(self.seed);
            }
        }));
        outcome.map_err(|panic| panic_text(&panic))
    }

    /// Shrinks a failing run to a minimal schedule (no single step, or
    /// chunk of steps, can be left out without the failure going away;
    /// at most [`SHRINK_REPLAYS`] replays) and describes it, with what
    /// replays it.
    pub(crate) fn shrink(&self, steps: Vec<Step>, failure: &str) -> String {
        // The replays fail on purpose: keep their panics off the output.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let report = self.shrink_quietly(steps, failure);
        std::panic::set_hook(hook);
        report
    }

    fn shrink_quietly(&self, steps: Vec<Step>, failure: &str) -> String {
        let original = steps.len();
        let mut kept = steps;
        let mut replays = 0;
        let mut chunk = kept.len().div_ceil(2);
        while chunk >= 1 && replays < SHRINK_REPLAYS {
            let mut i = 0;
            let mut progress = false;
            while i < kept.len() && replays < SHRINK_REPLAYS {
                let mut candidate = kept.clone();
                candidate.drain(i..(i + chunk).min(kept.len()));
                replays += 1;
                if self.play(&candidate).is_err() {
                    kept = candidate;
                    progress = true;
                } else {
                    i += chunk;
                }
            }
            if !progress {
                chunk /= 2;
            }
        }
        let last = self.play(&kept).err().unwrap_or_else(|| failure.to_owned());
        let numbers: Vec<String> = kept.iter().map(|(n, _)| n.to_string()).collect();
        format!(
            "{last}\nshrunk from {original} to {} steps in {replays} replays; replay with \
             QUORUM_LOCK_MODEL_REPLAY={}:{}:{}:{} cargo test --test model replay -- --ignored \
             --exact --nocapture",
            kept.len(),
            self.shape.name,
            self.mode.flags(),
            self.seed,
            numbers.join(","),
        )
    }

    /// The steps `keep` (by number) of the seed's run, with their draws.
    pub(crate) fn steps_of(&self, keep: &[usize]) -> Vec<Step> {
        let mut rng = Draws::random(self.seed);
        let mut world = World::new(self.shape, true, &mut rng).with_mode(self.mode);
        let _ = rng.take();
        let last = keep.iter().copied().max().unwrap_or(0);
        let mut steps = Vec::new();
        for step in 0..=last {
            // The original run failed at its last step: record it anyway.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                world.step(&mut rng, step);
            }));
            let draws = rng.take();
            if keep.contains(&step) {
                steps.push((step, draws));
            }
        }
        steps
    }
}
