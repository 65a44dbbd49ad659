//! A small deterministic generator for the randomized unit tests (the
//! pattern sets', the JMESPath walks'): the same sequence on every run,
//! and no dependency for it.

pub(crate) struct Gen(pub(crate) u64);

impl Gen {
    /// The next number below `n` (a 64-bit linear congruential step).
    pub(crate) fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}
