//! Engine evaluation of the 17 Pod Security Standard policies (baseline and
//! restricted, set to Enforce) against a compliant and a violating Pod, with
//! an empty policy set as the baseline measured in the same run.
//!
//! The Pod is held as the webhook holds it, a document decoded from its
//! JSON text; `pss17-value` holds it as a `serde_json::Value`, as the
//! webhook holds a mutation's output.
//!
//! `pss17` evaluates with the set's plan built once, as the server's
//! snapshot does (`engine::plan`); `pss17-unplanned` without it, rule by
//! rule.
//!
//! Policies come from `../shared/conformance/kyverno-policies/pod-security/`;
//! Pods from `benches/data/`. The `single` group evaluates each policy on
//! its own, to show which of the 17 the time goes to.

use criterion::{Criterion, criterion_group, criterion_main};
use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, evaluate, evaluate_planned};
use gavel::json_doc::{Doc, Document};
use gavel::policy::load::parse_yaml_documents;
use serde_json::Value;
use std::hint::black_box;
use std::time::Duration;

mod support;
use support::pss_policies;

// The same allocator as the gavel binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn pod(file: &str) -> Value {
    let text = String::from_utf8(support::read("benches/data", file)).unwrap();
    parse_yaml_documents(file, &text).unwrap().remove(0)
}

/// The request as the webhook holds it: the object decoded from its JSON
/// text into a document.
fn request(object: Value) -> Request {
    let text = serde_json::to_string(&object).unwrap();
    Request {
        object: Document::from_doc(Doc::parse(&text).unwrap()),
        ..value_request(object)
    }
}

/// The request with its object held as a `serde_json::Value`, as the
/// webhook holds a mutation's output for the policies after it (offline
/// runs make a document of theirs, as `request` does).
fn value_request(object: Value) -> Request {
    Request {
        object: Document::from_value(object.clone()),
        ..Request::offline(&object, "CREATE", Default::default(), None)
    }
}

fn bench(c: &mut Criterion) {
    let mut policies = pss_policies();
    let plan = gavel::engine::plan_set(&mut policies);
    // Every pattern of the set, each for Pods and for the two autogen
    // kinds' templates, restrict-apparmor-profiles' wildcard key included.
    assert_eq!(
        plan.planned_patterns(),
        51,
        "the PSS patterns the plan decides"
    );
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let requests = [
        ("compliant", request(pod("pod-compliant.yaml"))),
        ("violating", request(pod("pod-violating.yaml"))),
    ];
    let value_requests = [
        ("compliant", value_request(pod("pod-compliant.yaml"))),
        ("violating", value_request(pod("pod-violating.yaml"))),
    ];
    let mut group = c.benchmark_group("evaluate");
    for (id, req) in &requests {
        // Sanity: the violating Pod must fail and the compliant one must not.
        let fails = evaluate(&policies, req, &env)
            .iter()
            .flat_map(|r| r.rules.iter())
            .filter(|r| r.status == gavel::engine::RuleStatus::Fail)
            .count();
        assert_eq!(fails > 0, *id == "violating", "{id}: {fails} failing rules");
        // The plan changes the work, not the answers.
        let planned = evaluate_planned(Some(&plan), &policies, req, &env);
        let unplanned = evaluate(&policies, req, &env);
        for (a, b) in planned.iter().zip(&unplanned) {
            assert_eq!(a.rules, b.rules, "{id}: {}", a.policy);
        }
        group.bench_function(format!("pss17/{id}"), |b| {
            b.iter(|| {
                evaluate_planned(
                    Some(black_box(&plan)),
                    black_box(&policies),
                    black_box(req),
                    &env,
                )
            })
        });
        group.bench_function(format!("pss17-unplanned/{id}"), |b| {
            b.iter(|| evaluate(black_box(&policies), black_box(req), &env))
        });
        group.bench_function(format!("empty/{id}"), |b| {
            b.iter(|| evaluate(black_box(&[]), black_box(req), &env))
        });
    }
    // The same on the object as a `serde_json::Value` (a mutation's
    // output, and every request before requests became documents).
    for (id, req) in &value_requests {
        group.bench_function(format!("pss17-value/{id}"), |b| {
            b.iter(|| evaluate(black_box(&policies), black_box(req), &env))
        });
    }
    group.finish();
    // Short runs, one per policy and Pod. Each includes the per-call cost
    // that the empty set measures, so they add up to more than pss17.
    let mut single = c.benchmark_group("single");
    single
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for (id, req) in &requests {
        for policy in &policies {
            single.bench_function(format!("{}/{id}", policy.name), |b| {
                b.iter(|| {
                    evaluate(
                        black_box(std::slice::from_ref(policy)),
                        black_box(req),
                        &env,
                    )
                })
            });
        }
    }
    single.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
