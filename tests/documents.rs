//! The evaluators on the request's two representations, each case once
//! with the object as a `serde_json::Value` (as offline runs hold it) and
//! once as a `json_doc::Doc` decoded from its JSON text (as the webhook
//! holds it), over the policy corpora (`../shared/conformance`,
//! `examples/`), each policy on every resource of its folder:
//!
//! - every validate pattern (`pattern`, each of `anyPattern`, foreach
//!   patterns) must give the same outcome: pass, or the same kind of
//!   failure at the same path with the same message;
//! - every classic policy, evaluated by the engine as CREATE, UPDATE and
//!   DELETE, must give the same responses: every rule's name, type,
//!   status, message and outputs (matching, preconditions, deny
//!   conditions, JMESPath, foreach and patterns read the document where
//!   it is);
//! - every ValidatingPolicy likewise (CEL reads the `Value` a document
//!   converts to, once per request).
//!
//! The counts are floors from the runs that introduced each test.

use corpus::kind;
use gavel::context::NoResolver;
use gavel::engine::cel::{CelRequest, evaluate_validating_policy, evaluate_validating_policy_over};
use gavel::engine::{EvalEnv, PolicyResponse, Request, RuleStatus, evaluate};
use gavel::json_doc::Doc;
use gavel::pattern::CompiledPattern;
use gavel::policy::CompiledPolicy;
use gavel::policy::cel_policy::CompiledValidatingPolicy;
use gavel::policy::load::{LoadedDocument, classify};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::corpus;

const MIN_PATTERNS: usize = 152;
const MIN_PATTERN_EVALUATIONS: usize = 1882;
const MIN_PATTERN_FAILURES: usize = 1236;

fn outcome(r: Result<(), Box<gavel::pattern::PatternError>>) -> String {
    match r {
        Ok(()) => "pass".into(),
        Err(e) => format!("{:?} at {:?}: {}", e.kind, e.path, e.message()),
    }
}

#[test]
fn patterns_read_documents_as_they_read_values() {
    let mut by_dir: BTreeMap<PathBuf, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for (dir, docs) in corpus::documents_by_folder() {
        for doc in docs {
            let entry = by_dir.entry(dir.clone()).or_default();
            match kind(&doc) {
                "ClusterPolicy" | "Policy" => {
                    corpus::collect_patterns(doc.get("spec").unwrap_or(&Value::Null), &mut entry.0)
                }
                "" | "Test" | "PolicyException" => {}
                _ => entry.1.push(doc),
            }
        }
    }

    let (mut patterns, mut evaluations, mut failures) = (0, 0, 0);
    let mut differences = Vec::new();
    for (dir, (dir_patterns, _)) in &by_dir {
        // A policy's resources are those of its folder and below.
        let resources: Vec<&Value> = by_dir
            .iter()
            .filter(|(d, _)| d.starts_with(dir))
            .flat_map(|(_, (_, r))| r.iter())
            .collect();
        let docs: Vec<Doc> = resources
            .iter()
            .map(|r| Doc::parse(&serde_json::to_string(r).unwrap()).unwrap())
            .collect();
        for raw in dir_patterns {
            patterns += 1;
            let pattern = CompiledPattern::compile(raw);
            for (value, doc) in resources.iter().zip(&docs) {
                evaluations += 1;
                let on_value = outcome(pattern.validate(*value));
                let on_doc = outcome(pattern.validate(doc.root()));
                if on_value != "pass" {
                    failures += 1;
                }
                if on_value != on_doc {
                    differences.push(format!(
                        "{}: {raw}\n  value: {on_value}\n  doc:   {on_doc}",
                        dir.display()
                    ));
                }
            }
        }
    }
    eprintln!("{patterns} patterns, {evaluations} evaluations, {failures} failures");
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences[..differences.len().min(10)].join("\n")
    );
    assert!(patterns >= MIN_PATTERNS, "{patterns} patterns");
    assert!(
        evaluations >= MIN_PATTERN_EVALUATIONS,
        "{evaluations} evaluations"
    );
    assert!(failures >= MIN_PATTERN_FAILURES, "{failures} failures");
}

const MIN_POLICIES: usize = 376;
const MIN_POLICY_EVALUATIONS: usize = 10_557;
const MIN_RULE_RESPONSES: usize = 9_370;
const MIN_RULE_FAILURES: usize = 3_150;

/// Policies of `kinds` compiled by `compile`, and every other document
/// but tests and exceptions as a resource, by folder.
fn by_folder<P>(
    kinds: &[&str],
    compile: impl Fn(Value) -> Option<P>,
) -> BTreeMap<PathBuf, (Vec<P>, Vec<Value>)> {
    let mut by_dir: BTreeMap<PathBuf, (Vec<P>, Vec<Value>)> = BTreeMap::new();
    for (dir, docs) in corpus::documents_by_folder() {
        let entry = by_dir.entry(dir).or_default();
        for doc in docs {
            if kinds.contains(&kind(&doc)) {
                entry.0.extend(compile(doc));
            } else if !matches!(kind(&doc), "" | "Test" | "PolicyException") {
                entry.1.push(doc);
            }
        }
    }
    by_dir
}

#[derive(Default)]
struct Tally {
    policies: usize,
    evaluations: usize,
    rules: usize,
    failures: usize,
    differences: Vec<String>,
}

/// Runs each folder's policies on every resource of the folder and below,
/// as CREATE, UPDATE and DELETE, once on values and once on documents, and
/// records where the responses differ.
fn compare_forms<P>(
    by_dir: &BTreeMap<PathBuf, (Vec<P>, Vec<Value>)>,
    run: impl for<'p> Fn(&'p [P], &Request) -> Vec<PolicyResponse<'p>>,
) -> Tally {
    let mut tally = Tally::default();
    for (dir, (dir_policies, _)) in by_dir {
        if dir_policies.is_empty() {
            continue;
        }
        tally.policies += dir_policies.len();
        let resources: Vec<&Value> = by_dir
            .iter()
            .filter(|(d, _)| d.starts_with(dir))
            .flat_map(|(_, (_, r))| r.iter())
            .collect();
        for resource in resources {
            for operation in ["CREATE", "UPDATE", "DELETE"] {
                let on_values = Request::offline(resource, operation, Default::default(), None);
                let on_docs = corpus::as_documents(&on_values);
                let want = run(dir_policies, &on_values);
                let got = run(dir_policies, &on_docs);
                tally.evaluations += dir_policies.len();
                for r in want.iter().flat_map(|p| &p.rules) {
                    tally.rules += 1;
                    tally.failures += usize::from(r.status == RuleStatus::Fail);
                }
                let (want, got) = (format!("{want:#?}"), format!("{got:#?}"));
                if want != got {
                    let name = resource.pointer("/metadata/name").unwrap_or(&Value::Null);
                    tally.differences.push(format!(
                        "{} {operation} {name}:\n--- values\n{want}\n--- documents\n{got}",
                        dir.display()
                    ));
                }
            }
        }
    }
    assert!(
        tally.differences.is_empty(),
        "{} differences:\n{}",
        tally.differences.len(),
        tally.differences[..tally.differences.len().min(3)].join("\n")
    );
    tally
}

#[test]
fn the_engine_reads_documents_as_it_reads_values() {
    let by_dir = by_folder(&["ClusterPolicy", "Policy"], |doc| {
        match classify("corpus", 0, doc) {
            Ok(LoadedDocument::Policy(p)) => CompiledPolicy::compile(&p).ok(),
            _ => None,
        }
    });
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let t = compare_forms(&by_dir, |policies, req| evaluate(policies, req, &env));
    eprintln!(
        "{} policies, {} policy evaluations, {} rule responses, {} failures",
        t.policies, t.evaluations, t.rules, t.failures
    );
    assert!(t.policies >= MIN_POLICIES, "{} policies", t.policies);
    assert!(
        t.evaluations >= MIN_POLICY_EVALUATIONS,
        "{} evaluations",
        t.evaluations
    );
    assert!(t.rules >= MIN_RULE_RESPONSES, "{} rule responses", t.rules);
    assert!(t.failures >= MIN_RULE_FAILURES, "{} failures", t.failures);
}

const MIN_VALIDATING_POLICIES: usize = 103;
const MIN_VALIDATING_EVALUATIONS: usize = 5061;
const MIN_VALIDATING_FAILURES: usize = 1492;

/// The corpus's ValidatingPolicies and resources, by folder.
fn validating_policies_by_folder() -> BTreeMap<PathBuf, (Vec<CompiledValidatingPolicy>, Vec<Value>)>
{
    by_folder(
        &["ValidatingPolicy", "NamespacedValidatingPolicy"],
        |doc| match classify("corpus", 0, doc) {
            Ok(LoadedDocument::ValidatingPolicy(p)) => CompiledValidatingPolicy::compile(&p).ok(),
            _ => None,
        },
    )
}

/// The webhook evaluates a route's ValidatingPolicies over one root of the
/// request's CEL variables (`evaluate_validating_policy_over`); each
/// policy's response is the one it gives over a root of its own.
#[test]
fn validating_policies_answer_alike_over_one_shared_root() {
    let by_dir = validating_policies_by_folder();
    let (mut evaluations, mut differences) = (0, Vec::new());
    for (dir, (policies, _)) in &by_dir {
        if policies.is_empty() {
            continue;
        }
        let resources = by_dir
            .iter()
            .filter(|(d, _)| d.starts_with(dir))
            .flat_map(|(_, (_, r))| r.iter());
        for resource in resources {
            for operation in ["CREATE", "UPDATE", "DELETE"] {
                let values = Request::offline(resource, operation, Default::default(), None);
                let req = corpus::as_documents(&values);
                let input = CelRequest::of(&req);
                let root = input.activation();
                let own: Vec<_> = policies
                    .iter()
                    .map(|p| evaluate_validating_policy(p, &req, &input, &NoResolver))
                    .collect();
                let shared: Vec<_> = policies
                    .iter()
                    .map(|p| {
                        evaluate_validating_policy_over(p, &req, &input, Some(&root), &NoResolver)
                    })
                    .collect();
                evaluations += policies.len();
                let (own, shared) = (format!("{own:#?}"), format!("{shared:#?}"));
                if own != shared {
                    differences.push(format!(
                        "{} {operation}:\n{own}\n--- shared\n{shared}",
                        dir.display()
                    ));
                }
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{}",
        differences[..differences.len().min(2)].join("\n")
    );
    assert!(
        evaluations >= MIN_VALIDATING_EVALUATIONS,
        "{evaluations} evaluations"
    );
}

#[test]
fn validating_policies_read_documents_as_they_read_values() {
    let by_dir = validating_policies_by_folder();
    let t = compare_forms(&by_dir, |policies, req| {
        let input = CelRequest::of(req);
        policies
            .iter()
            .map(|p| evaluate_validating_policy(p, req, &input, &NoResolver))
            .collect()
    });
    eprintln!(
        "{} ValidatingPolicies, {} policy evaluations, {} failures",
        t.policies, t.evaluations, t.failures
    );
    assert!(
        t.policies >= MIN_VALIDATING_POLICIES,
        "{} policies",
        t.policies
    );
    assert!(
        t.evaluations >= MIN_VALIDATING_EVALUATIONS,
        "{} evaluations",
        t.evaluations
    );
    assert!(
        t.failures >= MIN_VALIDATING_FAILURES,
        "{} failures",
        t.failures
    );
}
