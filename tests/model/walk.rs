//! The random walks: a run's [`Mode`] (fencing, mixed plain and fenced
//! locks, eviction risk accepted, read-write clients), the seeds of one
//! shape walked step by step with every oracle after each step (a failure
//! is shrunk before it is reported), and the [`Coverage`] the walks must
//! reach.

use crate::config::{SEEDS, STEPS, Shape};
use crate::draws::Draws;
use crate::rw_oracles::RwCounts;
use crate::shrink::{Schedule, panic_text};
use crate::world::World;

/// How a run is set up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mode {
    pub(crate) fencing: bool,
    pub(crate) mixed: bool,
    pub(crate) accept_eviction: bool,
    /// Read-write clients take part (`rw.rs`).
    pub(crate) rw: bool,
}

impl Mode {
    /// The mode as replay flags: `f` fencing, `m` mixed, `e` eviction
    /// accepted, `r` read-write clients, `-` none.
    pub(crate) fn flags(self) -> String {
        let flags: String = [
            (self.fencing, 'f'),
            (self.mixed, 'm'),
            (self.accept_eviction, 'e'),
            (self.rw, 'r'),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| *c)
        .collect();
        if flags.is_empty() { "-".into() } else { flags }
    }

    pub(crate) fn from_flags(flags: &str) -> Self {
        Self {
            fencing: flags.contains('f'),
            mixed: flags.contains('m'),
            accept_eviction: flags.contains('e'),
            rw: flags.contains('r'),
        }
    }
}

/// What a run did, for the ingredients' coverage.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    pub(crate) hand_overs: u64,
    pub(crate) released_hand_overs: u64,
    pub(crate) evicting_worlds: u64,
    pub(crate) permits_taken: u64,
    pub(crate) semaphore_full: u64,
    pub(crate) inspected_held: u64,
    pub(crate) sets_taken: u64,
    /// What the read-write clients did (mode `r`).
    pub(crate) rw: RwCounts,
}

pub(crate) fn run(shape: Shape) {
    let coverage = run_with(shape, Mode::default());
    assert!(coverage.hand_overs > 0, "no hand-over: {coverage:?}");
    assert!(
        coverage.released_hand_overs > 0,
        "no hand-over by release(): {coverage:?}"
    );
    assert!(
        coverage.evicting_worlds > 0,
        "no evicting node: {coverage:?}"
    );
    assert!(
        coverage.permits_taken > 0 && coverage.semaphore_full > 0,
        "the semaphore was not taken, or never full: {coverage:?}"
    );
    assert!(
        coverage.inspected_held > 0,
        "no inspection saw a held lock: {coverage:?}"
    );
    assert!(coverage.sets_taken > 0, "no set was taken: {coverage:?}");
}

pub(crate) fn run_with(shape: Shape, mode: Mode) -> Coverage {
    let mut coverage = Coverage::default();
    for seed in 1..=SEEDS {
        let mut rng = Draws::random(seed);
        let mut world = World::new(shape, true, &mut rng).with_mode(mode);
        let setup = rng.take();
        let mut steps = Vec::with_capacity(STEPS);
        for step in 0..STEPS {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                world.step(&mut rng, step);
                world.check(seed);
            }));
            steps.push((step, rng.take()));
            if let Err(panic) = outcome {
                let schedule = Schedule {
                    shape,
                    mode,
                    seed,
                    setup,
                };
                panic!("{}", schedule.shrink(steps, &panic_text(&panic)));
            }
        }
        coverage.hand_overs += world.hand_overs();
        coverage.released_hand_overs += world.released_hand_overs;
        coverage.evicting_worlds += u64::from(world.evicting.contains(&true));
        coverage.permits_taken += world.permits_taken;
        coverage.semaphore_full += world.semaphore_full;
        coverage.inspected_held += world.inspected_held.get();
        coverage.sets_taken += world.sets_taken;
        world.heal_and_check_liveness(seed);
        if let Some(counts) = world.rw_heal_and_check(seed) {
            coverage.rw.add(&counts);
        }
    }
    coverage
}
