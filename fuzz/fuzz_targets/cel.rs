//! CEL with Kyverno's and Kubernetes' libraries: input is
//! `expression NUL json`, the JSON bound as `object` (and `request.object`).
#![no_main]

use gavel::cel::library::NoLookups;
use gavel::cel::values::json_to_cel;
use gavel::cel::{Activation, Program};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let (expression, json) = gavel_fuzz::split(data);
    let Ok(expression) = std::str::from_utf8(expression) else { return };
    let Ok(program) = Program::compile(expression) else { return };
    let object: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
    let mut vars = Activation::new();
    let request = json!({"object": object.clone(), "operation": "CREATE"});
    if vars.set("request", json_to_cel(&request)).is_err()
        || vars.set("object", json_to_cel(&object)).is_err()
    {
        return;
    }
    let _ = program.eval(&vars, &NoLookups);
});
