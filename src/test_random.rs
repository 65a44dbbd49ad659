//! A small deterministic generator for the randomized unit tests (the
//! pattern sets', the JMESPath walks'): the same sequence on every run,
//! and no dependency for it.

use serde_json::{Value, json};

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

    /// A value of keys `a`, `b`, `c`, with arrays, nested arrays, nulls
    /// and scalars at any depth.
    pub(crate) fn nested(&mut self, depth: u32) -> Value {
        let leaf = depth == 0 || self.next(4) == 0;
        match if leaf { 3 + self.next(4) } else { self.next(3) } {
            0 | 1 => {
                let mut m = serde_json::Map::new();
                for k in ["a", "b", "c"] {
                    if self.next(3) != 0 {
                        m.insert(k.into(), self.nested(depth - 1));
                    }
                }
                Value::Object(m)
            }
            2 => Value::Array((0..self.next(4)).map(|_| self.nested(depth - 1)).collect()),
            3 => Value::Null,
            4 => json!("s"),
            5 => json!(""),
            _ => json!(1),
        }
    }
}
