//! The whole admission handler without TLS: decode the AdmissionReview,
//! evaluate the 17 Pod Security Standard policies (Enforce), encode the
//! response. A compliant and a violating Pod (`examples/reviews/`), and
//! the same bodies against an empty policy set as the baseline measured in
//! the same run. `pss-cel` and `pss-vpol` answer with the same controls
//! written as `validate.cel` rules and as ValidatingPolicies.
//!
//! `pss17-cold` writes 8 MiB (more than L1 and L2, less than L3) before
//! every call, outside the timing: in the server, TLS, hyper and the
//! kernel evict the engine's data between requests, and this variant is
//! the closer estimate of in-server cost.

use criterion::{Criterion, criterion_group, criterion_main};
use gavel::admission::pipeline::{Webhook, admit};
use gavel::admission::policies::{PolicySet, Snapshot};
use gavel::context::NoResolver;
use std::hint::black_box;

mod support;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn handler(c: &mut Criterion) {
    let pss = Snapshot::new(
        PolicySet {
            policies: support::pss_policies(),
            ..PolicySet::default()
        },
        1,
    );
    let cel = Snapshot::new(
        PolicySet {
            policies: support::pss_cel_policies(),
            ..PolicySet::default()
        },
        1,
    );
    let vpol = Snapshot::new(
        PolicySet {
            validating: support::pss_validating_policies(),
            ..PolicySet::default()
        },
        1,
    );
    let empty = Snapshot::new(PolicySet::default(), 1);
    let route = Webhook::Validate(None);
    let mut group = c.benchmark_group("handler");
    for (id, file) in [
        ("compliant", "pod-compliant.json"),
        ("violating", "pod-violating.json"),
    ] {
        let body = support::read("examples/reviews", file);
        let outcome = admit(route, &body, &pss, None, &NoResolver).unwrap();
        assert_eq!(outcome.allowed, id == "compliant", "{id}");
        assert!(
            admit(route, &body, &empty, None, &NoResolver)
                .unwrap()
                .allowed
        );
        group.bench_function(format!("pss17/{id}"), |b| {
            b.iter(|| admit(route, black_box(&body), &pss, None, &NoResolver).unwrap())
        });
        for (name, snapshot) in [("pss-cel", &cel), ("pss-vpol", &vpol)] {
            let outcome = admit(route, &body, snapshot, None, &NoResolver).unwrap();
            assert_eq!(outcome.allowed, id == "compliant", "{name} {id}");
            group.bench_function(format!("{name}/{id}"), |b| {
                b.iter(|| admit(route, black_box(&body), snapshot, None, &NoResolver).unwrap())
            });
        }
        let mut junk = vec![0u64; 1 << 20]; // 8 MiB
        group.bench_function(format!("pss17-cold/{id}"), |b| {
            b.iter_batched(
                || {
                    for (i, x) in junk.iter_mut().enumerate() {
                        *x = x.wrapping_add(i as u64);
                    }
                },
                |_| admit(route, black_box(&body), &pss, None, &NoResolver).unwrap(),
                criterion::BatchSize::PerIteration,
            )
        });
        group.bench_function(format!("empty/{id}"), |b| {
            b.iter(|| admit(route, black_box(&body), &empty, None, &NoResolver).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, handler);
criterion_main!(benches);
