//! Strategic merge, JSON patch and the diff that writes a mutation's patch:
//! input is a JSON array `[document, patch]`. Checks that the JSON patch
//! gavel sends the API server turns the original into the mutated object.
#![no_main]

use gavel::patch::json_patch;
use gavel::patch::strategic;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [document, patch] = pair.as_slice() else { return };
    if let Ok(merged) = strategic::merge(document, patch) {
        let ops = json_patch::diff(document, &merged);
        let mut replayed = document.clone();
        json_patch::apply(&mut replayed, &ops).expect("a diff applies to its source");
        assert_eq!(replayed, merged, "diff {ops:?}");
    }
    if let Value::Array(ops) = patch {
        let mut patched = document.clone();
        let _ = json_patch::apply(&mut patched, ops);
    }
});
