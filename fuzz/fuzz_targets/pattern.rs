//! Pattern evaluation (validate.pattern and anyPattern, with anchors,
//! wildcards, operators and quantities): input is a JSON array
//! `[resource, pattern]`.
#![no_main]

use gavel::pattern::{CompiledPattern, validate};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [resource, pattern] = pair.as_slice() else { return };
    let direct = validate(resource, pattern).is_ok();
    let compiled = CompiledPattern::compile(pattern).validate(resource).is_ok();
    // The compiled form is an optimisation of the direct one: same verdict.
    assert_eq!(direct, compiled, "pattern {pattern} on {resource}");
});
