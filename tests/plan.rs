//! A policy set's plan (`engine::plan`), and the engine's direct paths,
//! change the work, not the answers,
//! over the policy corpora (`../shared/conformance`, `examples/`):
//!
//! - every validate pattern of the corpora merged into one `PatternSet`
//!   (the most sharing of paths any set sees) says "passes" of a resource
//!   exactly when the pattern's own walk passes it, and names the path
//!   that walk fails at otherwise, for every pattern and every resource of
//!   the corpora, on values and on documents;
//! - every classic policy, evaluated by the engine with its folder's plan
//!   and without one, as CREATE, UPDATE and DELETE, on values and on
//!   documents, gives the same responses (every rule's name, type, status,
//!   message and outputs), the `validate.cel` rules whose checks the plan
//!   evaluates together (`cel::direct::set`) among them;
//! - every ValidatingPolicy, evaluated with its folder's plan attached to
//!   the request and without, gives the same responses, those whose
//!   validations the plan evaluates among them;
//! - the foreach deny conditions compiled to be decided on each element
//!   directly (`ForEach::deny_on_element`) give the scoped path's
//!   responses, over the same corpora;
//! - the set-operator conditions between a walk and a literal, decided as
//!   the walk streams (`Condition::streamed`), give the responses they
//!   give rendered, over the same corpora;
//! - the conditions a plan decides once per admission operation
//!   (`Condition::by_operation`) give the responses they give evaluated
//!   in each request, over the same corpora.
//!
//! The counts are floors from the run that introduced the test.

use corpus::kind;
use gavel::context::NoResolver;
use gavel::engine::cel::{CelRequest, evaluate_validating_policy};
use gavel::engine::{
    EvalEnv, Request, RuleStatus, evaluate, evaluate_planned, plan_policies, plan_set,
};
use gavel::json_doc::Doc;
use gavel::pattern::CompiledPattern;
use gavel::pattern::set::PatternSet;
use gavel::policy::compile::{ForEach, ValidateRule};
use gavel::policy::load::{LoadedDocument, classify};
use gavel::policy::set::{LoadOptions, Policy, PolicySet};
use gavel::policy::{CompiledPolicy, Conditions, RuleBody, ValidateCheck};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::corpus;

const MIN_PATTERNS: usize = 152;
const MIN_PLANNED_PATTERNS: usize = 142;
const MIN_PLANNED_PASSES: usize = 239_217;
const MIN_PLANNED_FAILURES: usize = 502_591;

fn is_resource(doc: &Value) -> bool {
    !matches!(
        kind(doc),
        "" | "Test" | "PolicyException" | "ClusterPolicy" | "Policy"
    )
}

#[test]
fn one_set_of_every_corpus_pattern_agrees_with_each_pattern_alone() {
    let docs: Vec<Value> = corpus::documents_by_folder()
        .into_values()
        .flatten()
        .collect();
    let mut raw = Vec::new();
    for doc in &docs {
        if matches!(kind(doc), "ClusterPolicy" | "Policy") {
            corpus::collect_patterns(doc.get("spec").unwrap_or(&Value::Null), &mut raw);
        }
    }
    let patterns: Vec<CompiledPattern> = raw.iter().map(CompiledPattern::compile).collect();
    let mut set = PatternSet::new();
    let ids: Vec<Option<u32>> = patterns.iter().map(|p| set.add(p)).collect();
    let resources: Vec<&Value> = docs.iter().filter(|d| is_resource(d)).collect();
    let (mut passes, mut failures) = (0, 0);
    let mut differences = Vec::new();
    for resource in &resources {
        let doc = Doc::parse(&serde_json::to_string(resource).unwrap()).unwrap();
        let on_value = set.passing(*resource);
        let on_doc = set.passing(doc.root());
        assert_eq!(on_value, on_doc, "{resource}");
        for ((p, id), text) in patterns.iter().zip(&ids).zip(&raw) {
            let Some(id) = id else { continue };
            let alone = p.validate(*resource);
            if alone.is_ok() {
                passes += 1;
            } else {
                failures += 1;
            }
            let alone = alone.as_ref().err().map(|e| e.path.as_str());
            let merged = set.failure_path(&on_value, *id);
            let merged = merged.as_deref();
            if on_value.passes(*id) != alone.is_none() || merged != alone {
                let name = resource.pointer("/metadata/name").unwrap_or(&Value::Null);
                differences.push(format!(
                    "{text} on {name}: alone fails at {alone:?}, in the set at {merged:?}"
                ));
            }
        }
    }
    let planned = ids.iter().flatten().count();
    eprintln!(
        "{} patterns, {planned} in the set, {} resources: {passes} passes, {failures} failures",
        patterns.len(),
        resources.len()
    );
    assert_none(&differences, 10);
    assert!(
        patterns.len() >= MIN_PATTERNS,
        "{} patterns",
        patterns.len()
    );
    assert!(planned >= MIN_PLANNED_PATTERNS, "{planned} in the set");
    assert!(passes >= MIN_PLANNED_PASSES, "{passes} passes");
    assert!(failures >= MIN_PLANNED_FAILURES, "{failures} failures");
}

const MIN_POLICIES: usize = 376;
const MIN_POLICY_EVALUATIONS: usize = 10_557;
const MIN_RULE_RESPONSES: usize = 9_370;
const MIN_PLANNED_RULE_PASSES: usize = 3_592;
const MIN_PLANNED_RULE_FAILURES: usize = 1_050;
const MIN_PLANNED_ANY_PATTERN_FAILURES: usize = 276;
const MIN_PLANNED_CEL_RULE_PASSES: usize = 4_500;
const MIN_PLANNED_CEL_RULE_FAILURES: usize = 3_416;

#[test]
fn the_engine_answers_alike_with_and_without_its_plan() {
    let folders = corpus::documents_by_folder();
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let (mut policies, mut evaluations, mut rules) = (0, 0, 0);
    let (mut pattern_passes, mut pattern_failures) = (0, 0);
    // anyPatterns whose every alternative the plan decides: when none
    // passes, the plan words the failure of each.
    let mut any_pattern_failures = 0;
    // `validate.cel` rules whose validations the plan evaluates together.
    let (mut cel_passes, mut cel_failures) = (0, 0);
    let mut differences = Vec::new();
    for (dir, docs) in &folders {
        let mut dir_policies = compiled_policies(docs);
        if dir_policies.is_empty() {
            continue;
        }
        policies += dir_policies.len();
        let plan = plan_set(&mut dir_policies);
        let dir_policies = &dir_policies;
        // The rules whose pattern (or an anyPattern alternative) the plan
        // decides, and the anyPatterns it decides in full.
        let planned = rules_whose_check(dir_policies, |check| match check {
            ValidateCheck::Pattern(p) => p.plan_slot.is_some(),
            ValidateCheck::AnyPattern(ps) => ps.iter().any(|p| p.plan_slot.is_some()),
            _ => false,
        });
        let planned_any = rules_whose_check(dir_policies, |check| match check {
            ValidateCheck::AnyPattern(ps) => ps.iter().all(|p| p.plan_slot.is_some()),
            _ => false,
        });
        let planned_cel = rules_whose_check(
            dir_policies,
            |check| matches!(check, ValidateCheck::Cel(c) if c.plan_slot.is_some()),
        );
        for resource in resources_under(&folders, dir) {
            each_request(resource, |operation, req| {
                let want = evaluate(dir_policies, req, &env);
                let got = evaluate_planned(Some(&plan), dir_policies, req, &env);
                evaluations += dir_policies.len();
                for p in &want {
                    for r in &p.rules {
                        rules += 1;
                        if planned.contains(&(p.policy, r.name)) {
                            pattern_passes += usize::from(r.status == RuleStatus::Pass);
                            pattern_failures += usize::from(r.status == RuleStatus::Fail);
                        }
                        if planned_any.contains(&(p.policy, r.name)) {
                            any_pattern_failures += usize::from(r.status == RuleStatus::Fail);
                        }
                        if planned_cel.contains(&(p.policy, r.name)) {
                            cel_passes += usize::from(r.status == RuleStatus::Pass);
                            cel_failures += usize::from(r.status == RuleStatus::Fail);
                        }
                    }
                }
                let heading = format!("{} {operation}", dir.display());
                differences.extend(difference(
                    &heading,
                    resource,
                    ("without", &want),
                    ("with the plan", &got),
                ));
            });
        }
    }
    eprintln!(
        "{policies} policies, {evaluations} policy evaluations, {rules} rule responses, \
         {pattern_passes} passes and {pattern_failures} failures of planned patterns, \
         {any_pattern_failures} of them failures of planned anyPatterns, \
         {cel_passes} passes and {cel_failures} failures of planned validate.cel rules"
    );
    assert_none(&differences, 3);
    assert!(policies >= MIN_POLICIES, "{policies} policies");
    assert!(
        evaluations >= 2 * MIN_POLICY_EVALUATIONS,
        "{evaluations} evaluations"
    );
    assert!(rules >= 2 * MIN_RULE_RESPONSES, "{rules} rule responses");
    assert!(
        pattern_passes >= MIN_PLANNED_RULE_PASSES,
        "{pattern_passes} passes"
    );
    assert!(
        pattern_failures >= MIN_PLANNED_RULE_FAILURES,
        "{pattern_failures} failures"
    );
    assert!(
        any_pattern_failures >= MIN_PLANNED_ANY_PATTERN_FAILURES,
        "{any_pattern_failures} anyPattern failures"
    );
    assert!(
        cel_passes >= MIN_PLANNED_CEL_RULE_PASSES,
        "{cel_passes} planned validate.cel passes"
    );
    assert!(
        cel_failures >= MIN_PLANNED_CEL_RULE_FAILURES,
        "{cel_failures} planned validate.cel failures"
    );
}

const MIN_VALIDATING_POLICIES: usize = 103;
const MIN_PLANNED_VALIDATING_POLICIES: usize = 93;
const MIN_PLANNED_VALIDATING_PASSES: usize = 3_452;
const MIN_PLANNED_VALIDATING_FAILURES: usize = 2_972;

/// Every ValidatingPolicy of the corpora (with the CEL PolicyExceptions of
/// its folder), evaluated with the folder's plan attached to the request
/// (as a snapshot attaches its own) and without, on its folder's
/// resources as CREATE, UPDATE and DELETE, on values and on documents,
/// gives the same response: the rule's name, status and message.
#[test]
fn validating_policies_answer_alike_with_and_without_their_plan() {
    let folders = corpus::documents_by_folder();
    let (mut policies, mut planned_policies) = (0, 0);
    let (mut passes, mut failures) = (0, 0);
    let mut differences = Vec::new();
    for (dir, docs) in &folders {
        let mut set = PolicySet::default();
        for doc in docs {
            let Ok(loaded) = classify("corpus", 0, doc.clone()) else {
                continue;
            };
            if let Ok(Some(p @ (Policy::Validating(_) | Policy::CelException(_)))) =
                Policy::compile(loaded, &LoadOptions::SERVER)
            {
                set.add(p);
            }
        }
        if set.validating.is_empty() {
            continue;
        }
        set.attach_cel_exceptions();
        let mut validating = set.validating;
        let plan = plan_policies(&mut [], &mut validating);
        policies += validating.len();
        let planned: Vec<bool> = validating
            .iter()
            .map(|p| p.checks.plan_slot.is_some())
            .collect();
        planned_policies += planned.iter().filter(|&&p| p).count();
        for resource in resources_under(&folders, dir) {
            each_request(resource, |operation, req| {
                let alone = CelRequest::of(req);
                let with_plan = CelRequest::of(req).with_plan(&plan);
                for (p, &planned) in validating.iter().zip(&planned) {
                    let want = evaluate_validating_policy(p, req, &alone, &NoResolver);
                    let got = evaluate_validating_policy(p, req, &with_plan, &NoResolver);
                    let answers = |r: &gavel::engine::PolicyResponse| -> Vec<_> {
                        r.rules
                            .iter()
                            .map(|r| (r.name.to_string(), r.status, r.message.to_string()))
                            .collect()
                    };
                    let (want, got) = (answers(&want), answers(&got));
                    if planned {
                        passes += want.iter().filter(|r| r.1 == RuleStatus::Pass).count();
                        failures += want.iter().filter(|r| r.1 == RuleStatus::Fail).count();
                    }
                    let heading = format!("{} {operation} {}", dir.display(), p.key);
                    differences.extend(difference(
                        &heading,
                        resource,
                        ("without", &want),
                        ("with the plan", &got),
                    ));
                }
            });
        }
    }
    eprintln!(
        "{policies} ValidatingPolicies, {planned_policies} planned: \
         {passes} passes and {failures} failures of planned ones"
    );
    assert_none(&differences, 3);
    assert!(policies >= MIN_VALIDATING_POLICIES, "{policies} policies");
    assert!(
        planned_policies >= MIN_PLANNED_VALIDATING_POLICIES,
        "{planned_policies} planned"
    );
    assert!(passes >= MIN_PLANNED_VALIDATING_PASSES, "{passes} passes");
    assert!(
        failures >= MIN_PLANNED_VALIDATING_FAILURES,
        "{failures} failures"
    );
}

/// The foreach deny conditions a policy compiles to be decided on each
/// element directly (`ForEach::deny_on_element`) clear and deny the
/// elements the scoped path clears and denies, with the same responses:
/// every classic policy of the corpora, evaluated with those foreach
/// entries decided directly and with all of them on the scoped path, on
/// its folder's resources as CREATE, UPDATE and DELETE, on values and on
/// documents.
#[test]
fn foreach_deny_decided_on_the_element_answers_as_the_scoped_path() {
    fn scoped(list: &mut [ForEach]) -> usize {
        let mut n = 0;
        for fe in list {
            n += usize::from(fe.deny_on_element);
            fe.deny_on_element = false;
            if let ValidateCheck::Foreach(inner) = &mut fe.check {
                n += scoped(inner);
            }
        }
        n
    }
    let (direct_entries, responses, failures) = answers_alike(
        |policies| {
            let mut entries = 0;
            for policy in policies {
                for rule in &mut policy.rules {
                    if let RuleBody::Validate(ValidateRule {
                        check: ValidateCheck::Foreach(list),
                        ..
                    }) = &mut rule.body
                    {
                        entries += scoped(list);
                    }
                }
            }
            entries
        },
        ("scoped", "direct"),
    );
    eprintln!(
        "{direct_entries} foreach entries decided directly; {responses} rule responses, {failures} failures"
    );
    assert!(
        direct_entries >= MIN_DIRECT_FOREACH,
        "{direct_entries} entries"
    );
    assert!(
        failures >= MIN_DIRECT_FOREACH_FAILURES,
        "{failures} failures"
    );
}

/// Every set-operator condition of the corpora's classic policies that
/// evaluation decides as its walk streams (`Condition::streamed`) gives
/// the responses it gives with its key and value rendered: each policy
/// evaluated both ways on its folder's resources as CREATE, UPDATE and
/// DELETE, on values and on documents. The foreach entries decided on the
/// element stay on, so their streamed conditions are compared too.
#[test]
fn streamed_conditions_answer_as_rendered_ones() {
    fn rendered(c: &mut Conditions) -> usize {
        let mut n = 0;
        for c in [&mut c.any, &mut c.all].into_iter().flatten().flatten() {
            n += usize::from(c.streamed.take().is_some());
        }
        n
    }
    fn rendered_check(check: &mut ValidateCheck) -> usize {
        match check {
            ValidateCheck::Deny(c) => rendered(c),
            ValidateCheck::Foreach(list) => list
                .iter_mut()
                .map(|fe| {
                    fe.preconditions.as_mut().map_or(0, rendered) + rendered_check(&mut fe.check)
                })
                .sum(),
            _ => 0,
        }
    }
    let (streamed_conditions, responses, failures) = answers_alike(
        |policies| {
            let mut conditions = 0;
            for policy in policies {
                for rule in &mut policy.rules {
                    if let Ok(Some(pre)) = &mut rule.preconditions {
                        conditions += rendered(pre);
                    }
                    if let RuleBody::Validate(v) = &mut rule.body {
                        conditions += rendered_check(&mut v.check);
                    }
                }
            }
            conditions
        },
        ("rendered", "streamed"),
    );
    eprintln!(
        "{streamed_conditions} conditions streamed; {responses} rule responses, {failures} failures"
    );
    assert!(
        streamed_conditions >= MIN_STREAMED_CONDITIONS,
        "{streamed_conditions} conditions"
    );
    assert!(failures >= MIN_STREAMED_FAILURES, "{failures} failures");
}

/// Every condition of the corpora's classic policies that a plan decides
/// once per admission operation (`Condition::by_operation`) gives the
/// responses it gives evaluated in each request: each policy evaluated
/// with the tables its plan fills and with them cleared, on its folder's
/// resources as CREATE, UPDATE and DELETE, on values and on documents.
#[test]
fn conditions_decided_by_operation_answer_as_evaluated() {
    fn evaluated(c: &mut Conditions) -> usize {
        let mut n = 0;
        for c in [&mut c.any, &mut c.all].into_iter().flatten().flatten() {
            n += usize::from(c.by_operation.take().is_some());
        }
        n
    }
    let (decided, responses, failures) = answers_alike(
        |policies| {
            let mut conditions = 0;
            for policy in policies {
                for rule in &mut policy.rules {
                    if let Ok(Some(pre)) = &mut rule.preconditions {
                        conditions += evaluated(pre);
                    }
                    if let RuleBody::Validate(ValidateRule {
                        check: ValidateCheck::Deny(c),
                        ..
                    }) = &mut rule.body
                    {
                        conditions += evaluated(c);
                    }
                }
            }
            conditions
        },
        ("evaluated", "by operation"),
    );
    eprintln!(
        "{decided} conditions decided by operation; {responses} rule responses, {failures} failures"
    );
    assert!(decided >= MIN_DECIDED_BY_OPERATION, "{decided} conditions");
    assert!(
        responses >= MIN_DECIDED_BY_OPERATION_RESPONSES,
        "{responses} responses"
    );
}

const MIN_DECIDED_BY_OPERATION: usize = 168;
const MIN_DECIDED_BY_OPERATION_RESPONSES: usize = 3_616;

const MIN_STREAMED_CONDITIONS: usize = 43;
const MIN_STREAMED_FAILURES: usize = 1_000;

const MIN_DIRECT_FOREACH: usize = 15;
const MIN_DIRECT_FOREACH_FAILURES: usize = 520;

/// Each corpus folder's classic policies as compiled and planned, against a reference
/// copy that `change` makes of them (turning a direct path off) and
/// tells how many places it changed: where it changed any, both copies
/// evaluated on the folder's resources, six requests each, must give the
/// same responses. `sides` name the reference and the compiled copy in
/// the differences shown. Returns the places changed, the rule responses
/// compared and how many of them are failures.
fn answers_alike(
    change: impl Fn(&mut [CompiledPolicy]) -> usize,
    sides: (&str, &str),
) -> (usize, usize, usize) {
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let (mut changed, mut responses, mut failures) = (0, 0, 0);
    let mut differences = Vec::new();
    let folders = corpus::documents_by_folder();
    for (dir, docs) in &folders {
        let mut compiled = compiled_policies(docs);
        // With what a plan fills in the policies (the conditions' tables
        // by operation); evaluated without the plan itself.
        plan_set(&mut compiled);
        let mut reference = compiled.clone();
        let places = change(&mut reference);
        if places == 0 {
            continue;
        }
        changed += places;
        for resource in resources_under(&folders, dir) {
            each_request(resource, |operation, req| {
                let want = evaluate(&reference, req, &env);
                let got = evaluate(&compiled, req, &env);
                for r in want.iter().flat_map(|p| &p.rules) {
                    responses += 1;
                    failures += usize::from(r.status == RuleStatus::Fail);
                }
                differences.extend(difference(
                    operation,
                    resource,
                    (sides.0, &want),
                    (sides.1, &got),
                ));
            });
        }
    }
    assert_none(&differences, 3);
    (changed, responses, failures)
}

/// Two evaluations of `resource` side by side (`{:#?}` of each, under
/// its label), when they differ, for [`assert_none`].
fn difference(
    heading: &str,
    resource: &Value,
    (want_label, want): (&str, &dyn std::fmt::Debug),
    (got_label, got): (&str, &dyn std::fmt::Debug),
) -> Option<String> {
    let (want, got) = (format!("{want:#?}"), format!("{got:#?}"));
    let name = resource.pointer("/metadata/name").unwrap_or(&Value::Null);
    (want != got)
        .then(|| format!("{heading} {name}:\n--- {want_label}\n{want}\n--- {got_label}\n{got}"))
}

/// Fails with the first `shown` of `differences` and their count, if any.
fn assert_none(differences: &[String], shown: usize) {
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences[..differences.len().min(shown)].join("\n")
    );
}

/// (policy, rule) of each validate rule of `policies` whose check `pick` picks.
fn rules_whose_check(
    policies: &[CompiledPolicy],
    pick: impl Fn(&ValidateCheck) -> bool,
) -> std::collections::BTreeSet<(&str, &str)> {
    policies
        .iter()
        .flat_map(|p| p.rules.iter().map(move |r| (p, r)))
        .filter(|(_, r)| matches!(&r.body, RuleBody::Validate(ValidateRule { check, .. }) if pick(check)))
        .map(|(p, r)| (p.qualified_name(), r.name.as_str()))
        .collect()
}

/// The classic policies among a folder's documents, compiled.
fn compiled_policies(docs: &[Value]) -> Vec<CompiledPolicy> {
    docs.iter()
        .filter(|doc| matches!(kind(doc), "ClusterPolicy" | "Policy"))
        .filter_map(|doc| match classify("corpus", 0, doc.clone()) {
            Ok(LoadedDocument::Policy(p)) => CompiledPolicy::compile(&p).ok(),
            _ => None,
        })
        .collect()
}

/// The resources of folder `dir` and of its tests (in folders below it).
fn resources_under<'a>(
    folders: &'a BTreeMap<PathBuf, Vec<Value>>,
    dir: &'a Path,
) -> impl Iterator<Item = &'a Value> {
    folders
        .iter()
        .filter(move |(d, _)| d.starts_with(dir))
        .flat_map(|(_, docs)| docs.iter().filter(|d| is_resource(d)))
}

/// Calls `f` with `resource` as a CREATE, UPDATE and DELETE request, each
/// held as values and as documents.
fn each_request(resource: &Value, mut f: impl FnMut(&str, &Request)) {
    for operation in ["CREATE", "UPDATE", "DELETE"] {
        let on_values = Request::offline(resource, operation, Default::default(), None);
        let on_docs = corpus::as_documents(&on_values);
        f(operation, &on_values);
        f(operation, &on_docs);
    }
}
