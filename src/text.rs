//! Equality of the short texts the engine compares on every request (API
//! groups, subresources, map keys), without a call to `memcmp` where it
//! costs far more than the comparison.
//!
//! Rust compares two strings of the same length with `memcmp`, also at
//! length 0, where an empty `String`'s pointer is dangling (not mapped).
//! glibc's AVX-512 `memcmp` (the `evex` variant it picks on these machines,
//! and on most current x86 servers) reads through masked loads, and a
//! masked load from an unmapped address takes a microcode assist: `"" ==
//! ""` between two empty `String`s measured 135 ns, against 1.2 ns for a
//! short non-empty pair (a `rustc -O` loop of `black_box`ed compares). The
//! core API group is `""`: every ValidatingPolicy matched a Pod through
//! one, at 38% of a small policy's time.

/// `a == b`, with empty strings compared by length alone.
#[inline]
pub fn same(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// `a == b`, with empty slices compared by length alone, and keys of the
/// same length ruled out by their first and last bytes before the rest
/// (`spec`/`kind`, `name`/`type`: most map keys differ there).
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && (a.is_empty()
            || (a[0] == b[0] && a[a.len() - 1] == b[b.len() - 1] && same_of_one_length(a, b)))
}

/// `a == b` for slices of the same length. Up to 16 bytes (nearly every
/// key and kind name) by two overlapping word loads per side, in a few
/// instructions where a call to `memcmp` costs some 40; past that by
/// `memcmp`.
#[inline]
pub fn same_of_one_length(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => {
            let word =
                |s: &[u8], at: usize| u32::from_ne_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
            word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4)
        }
        8..=16 => {
            let word = |s: &[u8], at: usize| {
                u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"))
            };
            word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_equality() {
        let texts = [
            "", "a", "b", "ab", "ba", "aa", "spec", "kind", "sped", "v1", "pods",
        ];
        for a in texts {
            for b in texts {
                assert_eq!(
                    same(&String::from(a), &String::from(b)),
                    a == b,
                    "{a:?} {b:?}"
                );
            }
        }
    }

    /// Every length up to past the word loads, every byte position
    /// differing alone.
    #[test]
    fn one_length_compare_sees_every_byte() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            assert!(same_of_one_length(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_of_one_length(&a, &b), "length {n}, byte {at}");
            }
            assert!(!same_of_one_length(&a, &[a.as_slice(), b"x"].concat()));
        }
    }
}
