//! Key lookup in a JSON object, tuned for the small maps of Kubernetes
//! objects; the Go type a decoded JSON value has.
//!
//! `serde_json::Map` is a `BTreeMap`, whose search compares the key with
//! each key of a node in order, through a call to `memcmp` per key. Most
//! lookups of the engine are in maps of a few keys, where comparing lengths
//! first rules out almost every key without touching its bytes.

use serde_json::{Map, Value};

/// Maps up to this many keys are scanned; larger ones are searched.
const SCAN_UP_TO: usize = 12;

/// `map.get(key)`, faster for small maps.
#[inline]
pub fn get<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() > SCAN_UP_TO {
        return map.get(key);
    }
    let key = key.as_bytes();
    map.iter()
        .find(|(k, _)| crate::text::same_bytes(k.as_bytes(), key))
        .map(|(_, v)| v)
}

/// Go's `%T` of the value as an unstructured object holds it (what
/// Kyverno's and Kubernetes' messages print).
pub fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_get_finds_in_small_and_large_maps() {
        for size in [0, 1, 3, SCAN_UP_TO, SCAN_UP_TO + 1, 40] {
            let map: Map<String, Value> =
                (0..size).map(|i| (format!("k{i:02}"), json!(i))).collect();
            for probe in ["k00", "k05", "k39", "k40", "k0", "", "k000"] {
                assert_eq!(
                    get(&map, probe),
                    map.get(probe),
                    "size {size}, key {probe:?}"
                );
            }
        }
    }
}
