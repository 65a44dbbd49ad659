//! Decoding an AdmissionReview body into what the engine consumes
//! ([`Review`]): serde_json against simd-json, for a 3.5 KB and a 20.8 KB Pod
//! review (`benches/data/pod-review-{3k,20k}.json`, compact as the API
//! server sends them).
//!
//! - `serde_json`: `serde_json::from_slice` straight into the wire struct,
//!   which checks UTF-8 string by string.
//! - `serde_json_str`: [`review::decode`], what the server runs: one UTF-8
//!   check of the whole body, then `serde_json::from_str` (a path-tracking
//!   re-parse runs only for a body that fails).
//! - `simd_json`: simd-json's serde deserializer into the same wire struct,
//!   including the copy into a mutable buffer that simd-json needs (a
//!   request body arrives as immutable `Bytes`).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gavel::admission::review::{self, Review, ReviewIn};
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
        for other in [with_simd_json(&body), review::decode(&body).unwrap()] {
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
            |b, body| b.iter(|| review::decode(black_box(body)).unwrap()),
        );
        group.bench_with_input(BenchmarkId::new("simd_json", size), &body, |b, body| {
            b.iter(|| with_simd_json(black_box(body)))
        });
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
