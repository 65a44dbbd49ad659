//! CEL with Kyverno's and Kubernetes' libraries: input is
//! `expression NUL json`, the JSON bound as `object` (and `request.object`).
//!
//! Differential: the direct evaluator (gavel's own, on the JSON in place)
//! and the cel crate's interpreter must give the same value or the same
//! error, and the direct evaluator must answer the same with `object` held
//! as a decoded document (as the webhook holds it) instead of a
//! `serde_json::Value`; a difference is a crash.
#![no_main]

use gavel::cel::library::NoLookups;
use gavel::cel::values::cel_to_json;
use gavel::cel::{Activation, CelError, Program};
use gavel::json_doc::{Doc, JsonRef};
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
    vars.start_variables(0);
    let outcome = |r: Result<_, CelError>| match r {
        Ok(v) => match cel_to_json(&v) {
            Ok(j) => format!("ok {j}"),
            Err(_) => format!("ok {v:?}"),
        },
        Err(e) => error(e),
    };
    let direct = outcome(program.eval(&vars, &NoLookups));
    if expression.contains("now") {
        return;
    }
    let doc = Doc::from_value(&object);
    let mut doc_vars = Activation::new();
    doc_vars.set_json("request", &request);
    doc_vars.set_json_ref("object", JsonRef::Doc(doc.root()));
    doc_vars.start_variables(0);
    let on_document = outcome(program.eval(&doc_vars, &NoLookups));
    // Maps print in hash order when only the interpreter answered.
    if !direct.contains("Map {") {
        assert_eq!(direct, on_document, "value and document differ on {expression:?}");
    }
    if !program.is_direct() {
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
