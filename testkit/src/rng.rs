//! The one seedable generator of the tests: xorshift64*, so a failing
//! seed replays exactly.

use std::time::Duration;

/// A small deterministic generator (xorshift64*). Not for cryptography:
/// it picks faults, steps and timings in tests.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`; every seed (0 too) gives a usable,
    /// distinct stream.
    pub fn new(seed: u64) -> Self {
        // Spread the seed over the state; xorshift must not start at 0.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_seeds_differ() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert_ne!(draw(0), vec![0; 8]);
        let mut rng = Rng::new(3);
        for _ in 0..1000 {
            assert!(rng.below(5) < 5);
            let d = rng.millis(10, 20);
            assert!((10..=20).contains(&(d.as_millis() as u64)));
        }
    }
}
