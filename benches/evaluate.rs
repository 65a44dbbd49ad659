//! Engine evaluation of the 17 Pod Security Standard policies (baseline and
//! restricted, set to Enforce) against a compliant and a violating Pod, with
//! an empty policy set as the baseline measured in the same run.
//!
//! Policies come from `../shared/conformance/kyverno-policies/pod-security/`;
//! Pods from `benches/data/`.

use criterion::{Criterion, criterion_group, criterion_main};
use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, evaluate};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};
use serde_json::Value;
use std::hint::black_box;
use std::path::Path;

// The same allocator as the gavel binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const PSS_DIRS: &[&str] = &[
    "baseline/disallow-capabilities",
    "baseline/disallow-host-namespaces",
    "baseline/disallow-host-path",
    "baseline/disallow-host-ports",
    "baseline/disallow-host-process",
    "baseline/disallow-privileged-containers",
    "baseline/disallow-proc-mount",
    "baseline/disallow-selinux",
    "baseline/restrict-apparmor-profiles",
    "baseline/restrict-seccomp",
    "baseline/restrict-sysctls",
    "restricted/disallow-capabilities-strict",
    "restricted/disallow-privilege-escalation",
    "restricted/require-run-as-non-root-user",
    "restricted/require-run-as-nonroot",
    "restricted/restrict-seccomp-strict",
    "restricted/restrict-volume-types",
];

fn pss_policies() -> Vec<CompiledPolicy> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance/kyverno-policies/pod-security");
    let mut out = Vec::new();
    for dir in PSS_DIRS {
        let name = dir.rsplit('/').next().unwrap();
        let path = root.join(dir).join(format!("{name}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in load_policy_text(&path.display().to_string(), &text).unwrap() {
            if let LoadedDocument::Policy(mut p) = doc {
                p.spec.validation_failure_action = Some("Enforce".into());
                out.push(CompiledPolicy::compile(&p).unwrap());
            }
        }
    }
    assert_eq!(out.len(), 17);
    out
}

fn pod(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/data")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    parse_yaml_documents(file, &text).unwrap().remove(0)
}

fn request(object: Value) -> Request {
    Request::offline(&object, "CREATE", Default::default(), None)
}

fn bench(c: &mut Criterion) {
    let policies = pss_policies();
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let mut group = c.benchmark_group("evaluate");
    for (id, file) in [
        ("compliant", "pod-compliant.yaml"),
        ("violating", "pod-violating.yaml"),
    ] {
        let req = request(pod(file));
        // Sanity: the violating Pod must fail and the compliant one must not.
        let fails = evaluate(&policies, &req, &env)
            .iter()
            .flat_map(|r| r.rules.iter())
            .filter(|r| r.status == gavel::engine::RuleStatus::Fail)
            .count();
        assert_eq!(fails > 0, id == "violating", "{id}: {fails} failing rules");
        group.bench_function(format!("pss17/{id}"), |b| {
            b.iter(|| evaluate(black_box(&policies), black_box(&req), &env))
        });
        group.bench_function(format!("empty/{id}"), |b| {
            b.iter(|| evaluate(black_box(&[]), black_box(&req), &env))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
