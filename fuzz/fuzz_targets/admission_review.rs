//! An AdmissionReview body through the whole `admit` path (decode, match,
//! evaluate, encode) on both routes, against the example policies: what the
//! API server, or anyone who can reach the webhook, sends. The body also
//! goes through `json_doc`'s decoder, which must read what serde_json reads
//! (the same value, or an error for both), and is decoded with its objects
//! in both forms, which must give the same request or the same error.
#![no_main]

use gavel::admission::pipeline::{Webhook, admit};
use gavel::admission::policies::Snapshot;
use gavel::admission::review::{self, ObjectForm};
use gavel::context::NoResolver;
use gavel::json_doc::Doc;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static POLICIES: LazyLock<Snapshot> = LazyLock::new(gavel_fuzz::example_snapshot);

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    for route in [Webhook::Validate(None), Webhook::Mutate(None)] {
        // An error is an answer (400 with its reason); only a panic is a bug.
        let _ = admit(route, data, &POLICIES, None, &NoResolver);
    }
    match (
        review::decode_as(data, ObjectForm::Document),
        review::decode_as(data, ObjectForm::Value),
    ) {
        (Ok(d), Ok(v)) => {
            assert_eq!(d.request.object, v.request.object);
            assert_eq!(d.request.old_object, v.request.old_object);
        }
        (Err(d), Err(v)) => assert_eq!(d.to_string(), v.to_string()),
        (d, v) => panic!("documents {:?} but values {:?}", d.map(|_| ()), v.map(|_| ())),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let doc = Doc::parse(text);
        let value = serde_json::from_str::<serde_json::Value>(text);
        match (doc, value) {
            (Ok(doc), Ok(value)) => assert_eq!(doc.root().to_value(), value),
            (Err(d), Err(v)) => assert_eq!(d.to_string(), v.to_string()),
            (doc, value) => panic!("json_doc {:?} but serde_json {:?}", doc.map(|_| ()), value.map(|_| ())),
        }
    }
});
