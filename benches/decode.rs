//! Decoding an AdmissionReview body into what the engine consumes
//! ([`Review`]): serde_json against simd-json, for a 3.5 KB and a 20.8 KB Pod
//! review (`benches/data/pod-review-{3k,20k}.json`, compact as the API
//! server sends them).
//!
//! - `serde_json`: `serde_json::from_slice` straight into the wire struct,
//!   which checks UTF-8 string by string.
//! - `serde_json_str`: [`review::decode_as`] with the objects as
//!   `serde_json::Value`s, what the server runs for the routes whose
//!   policies read those (CEL, mutation): one UTF-8 check of the whole
//!   body, then `serde_json::from_str` (a path-tracking re-parse runs only
//!   for a body that fails).
//! - `serde_json_str_document`: the same with the objects decoded into
//!   documents, what the validate routes run when every policy reads
//!   documents.
//! - `simd_json`: simd-json's serde deserializer into the same wire struct,
//!   including the copy into a mutable buffer that simd-json needs (a
//!   request body arrives as immutable `Bytes`).
//!
//! The group `document` decodes the same bodies as a whole, built and
//! dropped: into a `serde_json::Value` (a `BTreeMap` per object, a `String`
//! per key and string) and into a [`Doc`] (two contiguous buffers), the
//! request representation of the evaluation core's next step. `lookups`
//! reads the paths the Pod Security policies read (`spec`, its container
//! lists, each container's `securityContext` and a key in it) in both.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gavel::admission::review::{self, ObjectForm, Review, ReviewIn};
use gavel::json_doc::{Doc, Kind, View};
use serde_json::Value;
use std::hint::black_box;

mod support;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[inline(never)]
fn with_serde_json(body: &[u8]) -> Review {
    let wire: ReviewIn = serde_json::from_slice(body).unwrap();
    Review::from_wire(wire).unwrap()
}

#[inline(never)]
fn with_simd_json(body: &[u8]) -> Review {
    let mut buf = body.to_vec();
    let wire: ReviewIn = simd_json::serde::from_slice(&mut buf).unwrap();
    Review::from_wire(wire).unwrap()
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    for name in ["pod-review-3k.json", "pod-review-20k.json"] {
        let body = support::read("benches/data", name);
        // All three must agree before their speed means anything.
        let reference = with_serde_json(&body);
        for other in [
            with_simd_json(&body),
            review::decode_as(&body, ObjectForm::Value).unwrap(),
            review::decode_as(&body, ObjectForm::Document).unwrap(),
        ] {
            assert_eq!(other.uid, reference.uid);
            assert_eq!(other.request.object, reference.request.object);
            assert_eq!(other.request.user.groups, reference.request.user.groups);
        }
        let size = name
            .trim_end_matches(".json")
            .trim_start_matches("pod-review-");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("serde_json", size), &body, |b, body| {
            b.iter(|| with_serde_json(black_box(body)))
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json_str", size),
            &body,
            |b, body| b.iter(|| review::decode_as(black_box(body), ObjectForm::Value).unwrap()),
        );
        group.bench_with_input(
            BenchmarkId::new("serde_json_str_document", size),
            &body,
            |b, body| b.iter(|| review::decode_as(black_box(body), ObjectForm::Document).unwrap()),
        );
        group.bench_with_input(BenchmarkId::new("simd_json", size), &body, |b, body| {
            b.iter(|| with_simd_json(black_box(body)))
        });
    }
    group.finish();
}

/// The Pod Security policies' reads of a review: the object's `spec`, its
/// three container lists, and per container `securityContext` and one key
/// of it (present or not), through either representation. The count of
/// hits, so that nothing is elided.
fn reads<'r>(review: impl View<'r>) -> usize {
    let mut hits = 0;
    let Some(spec) = review
        .get("request")
        .and_then(|r| r.get("object"))
        .and_then(|o| o.get("spec"))
    else {
        return 0;
    };
    for list in ["ephemeralContainers", "initContainers", "containers"] {
        for item in spec.get(list).into_iter().flat_map(View::elements) {
            if let Some(sc) = item
                .get("securityContext")
                .filter(|s| matches!(s.kind(), Kind::Object(_)))
            {
                hits += 1;
                for key in ["privileged", "allowPrivilegeEscalation", "runAsNonRoot"] {
                    hits += usize::from(sc.get(key).is_some());
                }
            }
        }
    }
    hits
}

fn document(c: &mut Criterion) {
    let mut group = c.benchmark_group("document");
    for name in ["pod-review-3k.json", "pod-review-20k.json"] {
        let body = support::read("benches/data", name);
        let text = std::str::from_utf8(&body).unwrap();
        let size = name
            .trim_end_matches(".json")
            .trim_start_matches("pod-review-");
        let value: Value = serde_json::from_str(text).unwrap();
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.root().to_value(), value);
        assert_eq!(reads(&value), reads(doc.root()));
        assert!(reads(&value) > 0, "{name}: the reads find nothing");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("value", size), text, |b, text| {
            b.iter(|| serde_json::from_str::<Value>(black_box(text)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("json_doc", size), text, |b, text| {
            b.iter(|| Doc::parse(black_box(text)).unwrap())
        });
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("lookups_value", size), |b| {
            b.iter(|| reads(black_box(&value)))
        });
        group.bench_function(BenchmarkId::new("lookups_json_doc", size), |b| {
            b.iter(|| reads(black_box(doc.root())))
        });
    }
    group.finish();
}

criterion_group!(benches, decode, document);
criterion_main!(benches);
