//! gavel against the peer engine on the same Pods, in one run: the 17 Pod
//! Security policies (Enforce) in gavel, and Gatekeeper's Pod Security
//! templates mapped to the same 17 controls
//! (`../shared/peers/gatekeeper-psp/README.md`) in regorus.
//!
//! Pods: the compliant and violating Pods of `benches/evaluate.rs` plus
//! every Pod of the tests under
//! `../shared/conformance/kyverno-policies/pod-security/`. One iteration
//! evaluates every Pod; the summary prints the median per Pod of each
//! engine and their ratio, read back from criterion's estimates.
//!
//! Both engines get their prepared path: gavel's policies compiled once and
//! each Pod's request built once; regorus with each template compiled once
//! in an engine of its own and each Pod's input converted once.

use criterion::{Criterion, Throughput};
use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, evaluate};
use gavel::policy::load::parse_yaml_documents;
use serde_json::Value;
use std::hint::black_box;

#[path = "../tests/support/gatekeeper.rs"]
mod gatekeeper;
mod support;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Every Pod of the Pod Security tests (each file read once).
fn corpus_pods() -> Vec<Value> {
    let root = gatekeeper::shared().join("conformance/kyverno-policies/pod-security");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.parent().is_some_and(|p| p.ends_with(".kyverno-test"))
                && path.extension().is_some_and(|e| e == "yaml")
                && !path.ends_with("kyverno-test.yaml")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut pods = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let Ok(docs) = parse_yaml_documents(&file.display().to_string(), &text) else {
            continue;
        };
        pods.extend(docs.into_iter().filter(|d| d["kind"] == "Pod"));
    }
    pods
}

fn bench_pods() -> Vec<Value> {
    let mut pods: Vec<Value> = ["pod-compliant.yaml", "pod-violating.yaml"]
        .iter()
        .map(|f| {
            let text = String::from_utf8(support::read("benches/data", f)).unwrap();
            parse_yaml_documents(f, &text).unwrap().remove(0)
        })
        .collect();
    pods.extend(corpus_pods());
    pods
}

/// The README's 17 rows (row 6 without its range variant; the strict
/// capabilities in one constraint, as the table gives it).
fn peer_constraints() -> Vec<gatekeeper::Constraint> {
    let mut out = Vec::new();
    for control in gatekeeper::controls() {
        if control.kyverno.ends_with("-range") || control.rule.is_some() {
            continue;
        }
        for (template, params) in control.constraints {
            out.push(gatekeeper::Constraint::new(template, params));
        }
    }
    out.push(gatekeeper::Constraint::new(
        "capabilities",
        serde_json::json!({"allowedCapabilities": ["NET_BIND_SERVICE"],
                           "requiredDropCapabilities": ["ALL"]}),
    ));
    out
}

fn bench(c: &mut Criterion, pods: &[Value]) {
    let policies = support::pss_policies();
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let requests: Vec<Request> = pods
        .iter()
        .map(|p| Request::offline(p, "CREATE", Default::default(), None))
        .collect();
    let mut constraints = peer_constraints();
    let inputs: Vec<Vec<regorus::Value>> = pods
        .iter()
        .map(|p| {
            let review = gatekeeper::review(p);
            constraints.iter().map(|c| c.input(&review)).collect()
        })
        .collect();

    // Both engines must be doing real work: each denies some Pods and admits others.
    let gavel_denied = requests
        .iter()
        .filter(|r| {
            evaluate(&policies, r, &env)
                .iter()
                .flat_map(|p| p.rules.iter())
                .any(|r| r.status == gavel::engine::RuleStatus::Fail)
        })
        .count();
    let peer_denied = inputs
        .iter()
        .filter(|per_pod| {
            constraints
                .iter_mut()
                .zip(per_pod.iter())
                .any(|(c, i)| c.violations(i.clone()) > 0)
        })
        .count();
    eprintln!(
        "{} Pods: gavel denies {gavel_denied}, Gatekeeper/regorus denies {peer_denied}",
        pods.len()
    );
    assert!(gavel_denied > 0 && gavel_denied < pods.len());
    assert!(peer_denied > 0 && peer_denied < pods.len());

    let mut group = c.benchmark_group("peers");
    group.throughput(Throughput::Elements(pods.len() as u64));
    group.sample_size(20);
    group.bench_function("gavel-pss17", |b| {
        b.iter(|| {
            for r in &requests {
                black_box(evaluate(black_box(&policies), r, &env));
            }
        })
    });
    group.bench_function("regorus-gatekeeper17", |b| {
        b.iter(|| {
            for per_pod in &inputs {
                for (c, i) in constraints.iter_mut().zip(per_pod.iter()) {
                    black_box(c.violations(i.clone()));
                }
            }
        })
    });
    group.finish();
}

/// Criterion's median estimate of `id` in this run, in nanoseconds.
fn median_ns(id: &str) -> Option<f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/criterion/peers")
        .join(id)
        .join("new/estimates.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn main() {
    let pods = bench_pods();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &pods);
    c.final_summary();
    let n = pods.len() as f64;
    if let (Some(ours), Some(peer)) = (median_ns("gavel-pss17"), median_ns("regorus-gatekeeper17"))
    {
        println!("\nmedian per Pod over {} Pods:", pods.len());
        println!(
            "  gavel (17 PSS policies)           {:>10.2} µs",
            ours / n / 1e3
        );
        println!(
            "  regorus (Gatekeeper, 17 controls) {:>10.2} µs",
            peer / n / 1e3
        );
        println!("  ratio regorus / gavel             {:>10.1}x", peer / ours);
    }
}
