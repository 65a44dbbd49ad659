//! Key lookup in a JSON object, tuned for the small maps of Kubernetes
//! objects.
//!
//! `serde_json::Map` is a `BTreeMap`, whose search compares the key with
//! each key of a node in order, through a call to `memcmp` per key.

use ref_cast::RefCast;
use serde_json::{Map, Value};
use std::borrow::Borrow;
use std::cmp::Ordering;

/// `map.get(key)`, faster: the search compares first bytes before calling
/// `memcmp` (see [`Key`]).
#[inline]
pub fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(Key::ref_cast(key))
}

/// A key ordered as `String` orders (bytes, lexicographically), looking at
/// the first bytes before the rest: in a node of a Kubernetes object's map
/// most keys differ from the one searched in their first byte, which then
/// settles the comparison without a call to `memcmp`.
#[derive(RefCast, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Key(str);

impl Ord for Key {
    #[inline]
    fn cmp(&self, other: &Key) -> Ordering {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        match (a.first(), b.first()) {
            (Some(x), Some(y)) if x != y => x.cmp(y),
            _ => a.cmp(b),
        }
    }
}

impl PartialOrd for Key {
    #[inline]
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Borrow<Key> for String {
    #[inline]
    fn borrow(&self) -> &Key {
        Key::ref_cast(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEYS: [&str; 16] = [
        "",
        "a",
        "b",
        "ab",
        "abc",
        "abd",
        "b0",
        "containers",
        "hostIPC",
        "hostPID",
        "hostNetwork",
        "securityContext",
        "seccompProfile",
        "é",
        "Z",
        "z",
    ];

    #[test]
    fn keys_order_as_strings_do() {
        for a in KEYS {
            for b in KEYS {
                assert_eq!(
                    Key::ref_cast(a).cmp(Key::ref_cast(b)),
                    a.cmp(b),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn finds_what_get_finds_in_small_and_large_maps() {
        for size in [0, 1, 3, 11, 12, 13, 40, 200] {
            // Keys sharing their first bytes, and keys that do not.
            let map: Map<String, Value> = (0..size)
                .map(|i| (format!("k{i:02}"), json!(i)))
                .chain(KEYS.iter().take(size).map(|k| (k.to_string(), json!(k))))
                .collect();
            for probe in ["k00", "k05", "k39", "k40", "k0", "", "k000"]
                .into_iter()
                .chain(KEYS)
            {
                assert_eq!(
                    get(&map, probe),
                    map.get(probe),
                    "size {size}, key {probe:?}"
                );
            }
        }
    }
}
