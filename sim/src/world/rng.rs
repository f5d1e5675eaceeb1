//! The simulation's one source of chance: SplitMix64 from the seed, so
//! that a seed replays every choice.

/// A seeded generator (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        crate::splitmix64(&mut self.0)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// A number in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An index into a slice of `len` items.
    pub(crate) fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// An exponential draw of mean `mean`, capped at 20 means.
    pub(crate) fn exp(&mut self, mean: u64) -> u64 {
        let u = self.unit().max(1e-12);
        ((-u.ln() * mean as f64) as u64).min(mean.saturating_mul(20))
    }

    /// A generator of its own, for one part of the world, so that a change
    /// in how often one part draws does not move every other part's draws.
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}
