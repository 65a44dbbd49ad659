//! CEL with Kyverno's and Kubernetes' libraries: input is
//! `expression NUL json`, the JSON bound as `object` (and `request.object`).
//!
//! Differential: the direct evaluator (gavel's own, on the JSON in place)
//! and the cel crate's interpreter must give the same value or the same
//! error; a difference is a crash.
#![no_main]

use gavel::cel::library::NoLookups;
use gavel::cel::values::cel_to_json;
use gavel::cel::{Activation, CelError, Program};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn error(e: CelError) -> String {
    // A map prints its entries in hash order.
    let e = e.to_string();
    format!("error {}", e.split("Map {").next().unwrap_or(&e))
}

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let (expression, json) = gavel_fuzz::split(data);
    let Ok(expression) = std::str::from_utf8(expression) else { return };
    let Ok(program) = Program::compile(expression) else { return };
    let object: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
    let request = json!({"object": object.clone(), "operation": "CREATE"});
    let mut vars = Activation::new();
    vars.set_json("request", &request);
    vars.set_json("object", &object);
    vars.start_variables();
    let outcome = |r: Result<_, CelError>| match r {
        Ok(v) => match cel_to_json(&v) {
            Ok(j) => format!("ok {j}"),
            Err(_) => format!("ok {v:?}"),
        },
        Err(e) => error(e),
    };
    let direct = outcome(program.eval(&vars, &NoLookups));
    if !program.is_direct() || expression.contains("now") {
        return;
    }
    let interpreted = outcome(program.interpreted_only().eval(&vars, &NoLookups));
    // Both fail: the direct evaluator names a missing key as cel-go does
    // (the first one cel-go meets, `||` and `&&` left first); the cel
    // crate may meet another error first, or hide the argument's error of
    // a global function behind "Missing argument or target".
    if direct.starts_with("error no such key: ") && interpreted.starts_with("error ") {
        return;
    }
    assert_eq!(direct, interpreted, "direct and interpreter differ on {expression:?}");
});
