//! The random choices of a walk, in one place: every draw goes through
//! [`Draws`], which records it, so that a failing run can be replayed draw
//! for draw and shrunk (`shrink.rs`).

use testkit::Rng;

/// The draws a run takes: from the generator (and recorded), or replayed
/// from a recording, so a failing run can be shrunk and replayed.
pub(crate) struct Draws {
    rng: Rng,
    replay: Option<std::vec::IntoIter<u64>>,
    recorded: Vec<u64>,
}

impl Draws {
    pub(crate) fn random(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            replay: None,
            recorded: Vec::new(),
        }
    }

    /// Replays `draws` (then zeros, when a shrunk schedule asks for more).
    pub(crate) fn replaying(draws: Vec<u64>) -> Self {
        Self {
            // Not drawn from while replaying.
            rng: Rng::new(0),
            replay: Some(draws.into_iter()),
            recorded: Vec::new(),
        }
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        let value = match &mut self.replay {
            Some(draws) => draws.next().unwrap_or(0),
            None => self.rng.next_u64(),
        };
        self.recorded.push(value);
        (value % n as u64) as usize
    }

    /// The draws taken since the last call.
    pub(crate) fn take(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.recorded)
    }
}
