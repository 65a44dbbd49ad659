//! JMESPath with Kyverno's functions: input is `expression NUL json`.
#![no_main]

use gavel::jmespath::Expression;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let (expression, json) = gavel_fuzz::split(data);
    let Ok(expression) = std::str::from_utf8(expression) else { return };
    let Ok(expression) = Expression::parse(expression) else { return };
    let data: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
    let _ = expression.search(&data);
});
