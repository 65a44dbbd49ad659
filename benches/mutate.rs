//! The mutate engine on a Pod with three containers: a sidecar-injection
//! `patchStrategicMerge` (a container, an init container and a volume,
//! behind a conditional anchor) and a three-operation `patchesJson6902`.
//! Baseline in the same run: cloning the Pod, the copy every mutation
//! makes of its input.
//!
//! Inputs: `benches/data/mutate-policies.yaml`, `benches/data/pod-three-containers.yaml`.

use criterion::{Criterion, criterion_group, criterion_main};
use gavel::context::NoResolver;
use gavel::engine::json_context::Builtins;
use gavel::engine::mutate::mutate_policy;
use gavel::engine::{EvalEnv, Request, RuleStatus};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};
use std::hint::black_box;

mod support;

// The same allocator as the gavel binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn bench(c: &mut Criterion) {
    let text = String::from_utf8(support::read("benches/data", "mutate-policies.yaml")).unwrap();
    let policies: Vec<CompiledPolicy> = load_policy_text("mutate-policies.yaml", &text)
        .unwrap()
        .into_iter()
        .map(|d| match d {
            LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
            _ => panic!("not a policy"),
        })
        .collect();
    let text =
        String::from_utf8(support::read("benches/data", "pod-three-containers.yaml")).unwrap();
    let pod = parse_yaml_documents("pod", &text).unwrap().remove(0);
    let req = Request::offline(&pod, "CREATE", Default::default(), None);
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let mut group = c.benchmark_group("mutate");
    for (id, policy) in [
        ("smp-sidecar", &policies[0]),
        ("json6902-3ops", &policies[1]),
    ] {
        // Sanity: each policy changes the Pod.
        let ctx = req.json_context(Builtins::default());
        let out = mutate_policy(policy, &req, &ctx, &env);
        assert_eq!(out.response.rules[0].status, RuleStatus::Pass, "{id}");
        assert!(out.patched.is_some_and(|p| p != pod), "{id}");
        group.bench_function(id, |b| {
            b.iter(|| {
                let ctx = req.json_context(Builtins::default());
                mutate_policy(black_box(policy), black_box(&req), &ctx, &env)
            })
        });
    }
    group.bench_function("clone-pod", |b| b.iter(|| black_box(&pod).clone()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
