//! An AdmissionReview body through the whole `admit` path (decode, match,
//! evaluate, encode) on both routes, against the example policies: what the
//! API server, or anyone who can reach the webhook, sends.
#![no_main]

use gavel::admission::pipeline::{Webhook, admit};
use gavel::admission::policies::Snapshot;
use gavel::context::NoResolver;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static POLICIES: LazyLock<Snapshot> = LazyLock::new(gavel_fuzz::example_snapshot);

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    for route in [Webhook::Validate(None), Webhook::Mutate(None)] {
        // An error is an answer (400 with its reason); only a panic is a bug.
        let _ = admit(route, data, &POLICIES, None, &NoResolver);
    }
});
