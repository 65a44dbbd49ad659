//! A policy file as `gavel serve` loads it on hot reload (YAML, every kind,
//! compiled), then, when it loads, the compiled set answering the example
//! reviews on both routes.
#![no_main]

use gavel::admission::pipeline::{Webhook, admit};
use gavel::admission::policies::{Snapshot, load_text};
use gavel::context::NoResolver;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static REVIEWS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(gavel_fuzz::example_reviews);

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(set) = load_text("fuzz.yaml", text) else { return };
    let snapshot = Snapshot::new(set, 1);
    for review in REVIEWS.iter() {
        for route in [Webhook::Validate(None), Webhook::Mutate(None)] {
            let _ = admit(route, review, &snapshot, None, &NoResolver);
        }
    }
});
