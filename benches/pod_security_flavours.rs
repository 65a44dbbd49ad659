//! The Pod Security policies in their three forms, on the same Pods:
//! `validate.pattern` (`pod-security`), `validate.cel` (`pod-security-cel`)
//! and ValidatingPolicy (`pod-security-vpol`), with an empty policy set as
//! the baseline measured in the same run.
//!
//! Only the 16 policies all three folders have are used (the pattern set
//! also has restrict-apparmor-profiles, the CEL set disallow-host-ports-range).
//!
//! `pss16` holds the Pod as the CLI does, a document made from the
//! `serde_json::Value` it read (`Request::offline`); `pss16-doc` as the
//! webhook holds it, a document decoded from its JSON text (every form
//! reads either in place); `pss16-fresh` decodes a new
//! document for every evaluation (outside the measurement), as every
//! request brings one.
//!
//! `pss16-patterns` runs the pattern form's validate patterns alone on the
//! Pod as a `serde_json::Value` and as a decoded `json_doc::Doc`.

use criterion::{Criterion, criterion_group, criterion_main};
use gavel::context::NoResolver;
use gavel::engine::cel::{CelRequest, evaluate_validating_policy_over};
use gavel::engine::plan::Plan;
use gavel::engine::{EvalEnv, Request, RuleStatus, evaluate, evaluate_planned};
use gavel::policy::CompiledPolicy;
use gavel::policy::cel_policy::CompiledValidatingPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};
use std::hint::black_box;
use std::path::Path;

mod support;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const COMMON: &[&str] = &[
    "baseline/disallow-capabilities",
    "baseline/disallow-host-namespaces",
    "baseline/disallow-host-path",
    "baseline/disallow-host-ports",
    "baseline/disallow-host-process",
    "baseline/disallow-privileged-containers",
    "baseline/disallow-proc-mount",
    "baseline/disallow-selinux",
    "baseline/restrict-seccomp",
    "baseline/restrict-sysctls",
    "restricted/disallow-capabilities-strict",
    "restricted/disallow-privilege-escalation",
    "restricted/require-run-as-non-root-user",
    "restricted/require-run-as-nonroot",
    "restricted/restrict-seccomp-strict",
    "restricted/restrict-volume-types",
];

fn documents(folder: &str) -> Vec<LoadedDocument> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance/kyverno-policies")
        .join(folder);
    let mut out = Vec::new();
    for dir in COMMON {
        let name = dir.rsplit('/').next().unwrap();
        let path = root.join(dir).join(format!("{name}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.extend(load_policy_text(&path.display().to_string(), &text).unwrap());
    }
    out
}

/// The Pod of `file` as a request: as the CLI makes it from the value it
/// read, or (`as_document`) decoded from its JSON text as the webhook
/// decodes it.
fn pod(file: &str, as_document: bool) -> Request {
    let text = String::from_utf8(support::read("benches/data", file)).unwrap();
    let object = parse_yaml_documents(file, &text).unwrap().remove(0);
    let request = Request::offline(&object, "CREATE", Default::default(), None);
    if !as_document {
        return request;
    }
    let json = serde_json::to_string(&object).unwrap();
    Request {
        object: gavel::json_doc::Document::from_doc(gavel::json_doc::Doc::parse(&json).unwrap()),
        ..request
    }
}

/// The Pod of `file` as a value and as the JSON text a request brings.
fn pod_json(file: &str) -> (serde_json::Value, String) {
    let value = pod(file, false).object.into_value();
    let text = serde_json::to_string(&value).unwrap();
    (value, text)
}

/// A request for `value` whose object is decoded from `text` now, as
/// every request brings its own.
fn decoded_afresh(value: &serde_json::Value, text: &str) -> Request {
    Request {
        object: gavel::json_doc::Document::from_doc(gavel::json_doc::Doc::parse(text).unwrap()),
        ..Request::offline(value, "CREATE", Default::default(), None)
    }
}

/// As the webhook's validate route: one CEL root for the whole set.
/// Never inlined, so that callgrind can collect exactly its calls (each
/// a whole Pod's evaluation, as `evaluate` is for the other forms).
#[inline(never)]
fn run_validating(policies: &[CompiledValidatingPolicy], req: &Request) -> usize {
    run_validating_planned(None, policies, req)
}

/// [`run_validating`] with the set's plan attached to the request, as the
/// webhook's snapshot attaches its own.
#[inline(never)]
fn run_validating_planned(
    plan: Option<&Plan>,
    policies: &[CompiledValidatingPolicy],
    req: &Request,
) -> usize {
    let mut input = CelRequest::of(req);
    if let Some(plan) = plan {
        input.attach_plan(plan);
    }
    let root = input.activation();
    policies
        .iter()
        .map(|p| evaluate_validating_policy_over(p, req, &input, Some(&root), &NoResolver))
        .flat_map(|r| r.rules)
        .filter(|r| r.status == RuleStatus::Fail)
        .count()
}

fn bench(c: &mut Criterion) {
    // The 16 controls all three forms have.
    let pattern: Vec<CompiledPolicy> = support::pss_policies()
        .into_iter()
        .filter(|p| p.qualified_name() != "restrict-apparmor-profiles")
        .collect();
    assert_eq!(pattern.len(), COMMON.len());
    let cel = support::pss_cel_policies();
    let vpol = support::pss_validating_policies();
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let fails = |policies: &[CompiledPolicy], req: &Request| -> usize {
        evaluate(policies, req, &env)
            .iter()
            .flat_map(|r| r.rules.iter())
            .filter(|r| r.status == RuleStatus::Fail)
            .count()
    };
    for (name, as_document) in [("pss16", false), ("pss16-doc", true)] {
        let mut group = c.benchmark_group(name);
        for (id, file) in [
            ("compliant", "pod-compliant.yaml"),
            ("violating", "pod-violating.yaml"),
        ] {
            let req = pod(file, as_document);
            let violating = id == "violating";
            // Sanity: the three forms agree on which Pod violates.
            assert_eq!(fails(&pattern, &req) > 0, violating, "pattern {id}");
            assert_eq!(fails(&cel, &req) > 0, violating, "validate.cel {id}");
            assert_eq!(run_validating(&vpol, &req) > 0, violating, "vpol {id}");
            group.bench_function(format!("empty/{id}"), |b| {
                b.iter(|| evaluate(black_box(&[]), black_box(&req), &env))
            });
            group.bench_function(format!("pattern/{id}"), |b| {
                b.iter(|| evaluate(black_box(&pattern), black_box(&req), &env))
            });
            group.bench_function(format!("validate-cel/{id}"), |b| {
                b.iter(|| evaluate(black_box(&cel), black_box(&req), &env))
            });
            group.bench_function(format!("vpol/{id}"), |b| {
                b.iter(|| run_validating(black_box(&vpol), black_box(&req)))
            });
        }
        group.finish();
    }
    // A request decoded afresh for every evaluation, as the webhook gets
    // one: what a form reads of the document (or converts it to) is paid
    // on every request, not once for the benchmark. The decoding itself is
    // set up outside the measurement.
    let mut group = c.benchmark_group("pss16-fresh");
    for (id, file) in [
        ("compliant", "pod-compliant.yaml"),
        ("violating", "pod-violating.yaml"),
    ] {
        let (value, text) = pod_json(file);
        let fresh = || decoded_afresh(&value, &text);
        let batch = criterion::BatchSize::SmallInput;
        group.bench_function(format!("pattern/{id}"), |b| {
            b.iter_batched_ref(fresh, |req| evaluate(black_box(&pattern), req, &env), batch)
        });
        group.bench_function(format!("validate-cel/{id}"), |b| {
            b.iter_batched_ref(fresh, |req| evaluate(black_box(&cel), req, &env), batch)
        });
        group.bench_function(format!("vpol/{id}"), |b| {
            b.iter_batched_ref(fresh, |req| run_validating(black_box(&vpol), req), batch)
        });
    }
    group.finish();
    planned(c, &pattern, &cel, &vpol, &env);
    each_control(c, &pattern, &cel, &vpol, &env);
}

/// The two kyverno.io forms as the server evaluates them: with the set's
/// plan, built once as a snapshot builds it (`engine::plan_set`), on a
/// request decoded afresh for every evaluation (`pss16-planned`); and the
/// ValidatingPolicies with theirs, as a snapshot attaches it to the request.
fn planned(
    c: &mut Criterion,
    pattern: &[CompiledPolicy],
    cel: &[CompiledPolicy],
    vpol: &[CompiledValidatingPolicy],
    env: &EvalEnv,
) {
    let (mut pattern, mut cel, mut vpol) = (pattern.to_vec(), cel.to_vec(), vpol.to_vec());
    let pattern_plan = gavel::engine::plan_set(&mut pattern);
    let cel_plan = gavel::engine::plan_set(&mut cel);
    let vpol_plan = gavel::engine::plan_policies(&mut [], &mut vpol);
    let mut group = c.benchmark_group("pss16-planned");
    for (id, file) in [
        ("compliant", "pod-compliant.yaml"),
        ("violating", "pod-violating.yaml"),
    ] {
        let (value, text) = pod_json(file);
        let fresh = || decoded_afresh(&value, &text);
        // The plan changes the work, not the answers.
        for (set, plan) in [(&pattern, &pattern_plan), (&cel, &cel_plan)] {
            let req = fresh();
            let statuses = |responses: Vec<gavel::engine::PolicyResponse>| -> Vec<RuleStatus> {
                responses
                    .iter()
                    .flat_map(|r| r.rules.iter().map(|r| r.status))
                    .collect()
            };
            assert_eq!(
                statuses(evaluate_planned(Some(plan), set, &req, env)),
                statuses(evaluate(set, &req, env)),
                "{id}"
            );
        }
        let req = fresh();
        assert_eq!(
            run_validating_planned(Some(&vpol_plan), &vpol, &req),
            run_validating(&vpol, &req),
            "vpol {id}"
        );
        let batch = criterion::BatchSize::SmallInput;
        for (form, set, plan) in [
            ("pattern", &pattern, &pattern_plan),
            ("validate-cel", &cel, &cel_plan),
        ] {
            group.bench_function(format!("{form}/{id}"), |b| {
                b.iter_batched_ref(
                    fresh,
                    |req| evaluate_planned(Some(plan), black_box(set), req, env),
                    batch,
                )
            });
        }
        group.bench_function(format!("vpol/{id}"), |b| {
            b.iter_batched_ref(
                fresh,
                |req| run_validating_planned(Some(&vpol_plan), black_box(&vpol), req),
                batch,
            )
        });
    }
    group.finish();
}

/// Each control alone in each form (`pss16-each/<control>/<form>`), on
/// the compliant Pod as a decoded document: which controls a form's extra
/// time over the pattern form is spent on.
fn each_control(
    c: &mut Criterion,
    pattern: &[CompiledPolicy],
    cel: &[CompiledPolicy],
    vpol: &[CompiledValidatingPolicy],
    env: &EvalEnv,
) {
    let req = pod("pod-compliant.yaml", true);
    let mut group = c.benchmark_group("pss16-each");
    for dir in COMMON {
        let name = dir.rsplit('/').next().unwrap();
        let one = |set: &[CompiledPolicy]| -> Vec<CompiledPolicy> {
            let found: Vec<_> = set
                .iter()
                .filter(|p| p.qualified_name() == name)
                .cloned()
                .collect();
            assert_eq!(found.len(), 1, "{name}");
            found
        };
        let (pattern, cel) = (one(pattern), one(cel));
        let vpol: Vec<_> = vpol.iter().filter(|p| p.name() == name).cloned().collect();
        assert_eq!(vpol.len(), 1, "{name}");
        group.bench_function(format!("{name}/pattern"), |b| {
            b.iter(|| evaluate(black_box(&pattern), black_box(&req), env))
        });
        group.bench_function(format!("{name}/validate-cel"), |b| {
            b.iter(|| evaluate(black_box(&cel), black_box(&req), env))
        });
        group.bench_function(format!("{name}/vpol"), |b| {
            b.iter(|| run_validating(black_box(&vpol), black_box(&req)))
        });
    }
    group.finish();
}

/// The validate patterns alone (no rule machinery): every top-level
/// `pattern` of the pattern-form policies, compiled, on the Pod held as a
/// `serde_json::Value` and as a decoded document (`json_doc`, the request
/// representation of the evaluation core's next step). Both must give the
/// same answers before their speed means anything.
fn patterns_on_documents(c: &mut Criterion) {
    use gavel::json_doc::Doc;
    use gavel::pattern::CompiledPattern;
    let patterns: Vec<CompiledPattern> = documents("pod-security")
        .into_iter()
        .filter_map(|d| match d {
            LoadedDocument::Policy(p) => Some(p),
            _ => None,
        })
        .flat_map(|p| p.spec.rules)
        .filter_map(|r| r.validate.and_then(|v| v.pattern))
        .map(|p| CompiledPattern::compile(&p))
        .collect();
    assert!(patterns.len() >= 10, "{} patterns", patterns.len());
    let mut group = c.benchmark_group("pss16-patterns");
    for (id, file) in [
        ("compliant", "pod-compliant.yaml"),
        ("violating", "pod-violating.yaml"),
    ] {
        let text = String::from_utf8(support::read("benches/data", file)).unwrap();
        let value = parse_yaml_documents(file, &text).unwrap().remove(0);
        let doc = Doc::parse(&serde_json::to_string(&value).unwrap()).unwrap();
        let on_value = outcomes(&patterns, &value);
        let on_doc = outcomes(&patterns, doc.root());
        assert_eq!(on_value, on_doc, "{id}");
        assert_eq!(
            on_value.iter().any(Result::is_err),
            id == "violating",
            "{id}"
        );
        group.bench_function(format!("value/{id}"), |b| {
            b.iter(|| {
                patterns
                    .iter()
                    .filter(|p| p.validate(black_box(&value)).is_err())
                    .count()
            })
        });
        group.bench_function(format!("json_doc/{id}"), |b| {
            b.iter(|| {
                patterns
                    .iter()
                    .filter(|p| p.validate(black_box(doc.root())).is_err())
                    .count()
            })
        });
    }
    group.finish();
}

/// Each pattern's outcome on one resource: pass, or its path and message.
fn outcomes<'r>(
    patterns: &[gavel::pattern::CompiledPattern],
    resource: impl gavel::json_doc::View<'r>,
) -> Vec<Result<(), String>> {
    patterns
        .iter()
        .map(|p| {
            p.validate(resource)
                .map_err(|e| format!("{} {}", e.path, e.message()))
        })
        .collect()
}

criterion_group!(benches, bench, patterns_on_documents);
criterion_main!(benches);
