//! Result checking (docs/kyverno-test-semantics.md#matching-results,
//! docs/kyverno-test-semantics.md#resource-comparison): each expected
//! result of the test document is matched with the engine's responses
//! and, where the test names them, with expected patched or generated
//! resources, giving the table's rows.

use super::evaluate::Evaluated;
use super::load::Loaded;
use super::{Outcome, Row, Selector};
use crate::cli::kyverno_test::file::{ExpectedResult, TestDoc};
use crate::cli::resources::{load_resources, resource_key};
use crate::engine::{PolicyResponse, RuleResponse, RuleStatus, RuleType};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn display_resource(r: &Value) -> String {
    let (api, kind, ns, name) = resource_key(r);
    if ns.is_empty() {
        format!("{api}/{kind}/{name}")
    } else {
        format!("{api}/{kind}/{ns}/{name}")
    }
}

fn status_word(s: RuleStatus) -> &'static str {
    match s {
        RuleStatus::Pass => "pass",
        RuleStatus::Fail => "fail",
        RuleStatus::Warn => "warn",
        RuleStatus::Error => "error",
        RuleStatus::Skip => "skip",
    }
}

/// A resource an expected result names, as Kyverno's CLI keys them: a
/// trigger (one of the test's resources) or a target that some rule
/// patched (mutate existing).
#[derive(Debug, Clone, Copy)]
enum Keyed {
    Trigger(usize),
    Target(usize),
}

/// A response that patched a target: the response, the rule, the target
/// as patched.
type PatchedBy<'e, 'l> = (&'e PolicyResponse<'l>, &'e RuleResponse<'l>, &'e Value);

/// Every response of one trigger, in Kyverno's order: each classic
/// policy's phases (with the policy's index), then the CEL kinds.
fn all_responses<'e, 'l>(
    ev: &'e Evaluated<'l>,
) -> impl Iterator<Item = (Option<usize>, &'e PolicyResponse<'l>)> {
    ev.responses
        .iter()
        .enumerate()
        .flat_map(|(pi, phases)| phases.iter().map(move |r| (Some(pi), r)))
        .chain(ev.mutating.iter().chain(&ev.validating).map(|r| (None, r)))
}

/// Whether a listed name (`name` or `namespace/name`) names `r`.
fn named(n: &str, r: &Value) -> bool {
    let (_, _, ns, name) = resource_key(r);
    match n.split_once('/') {
        Some((want_ns, want_name)) => ns == want_ns && name == want_name,
        None => name == n,
    }
}

/// Compares expected results with engine responses
/// (docs/kyverno-test-semantics.md#matching-results), as Kyverno's
/// `printTestResult` does: each listed name picks the patched targets and
/// the triggers it names (all of them when it names none); a trigger gets
/// a row per rule of each response of the policy (or one `Excluded` row
/// before any other), a target a row per response that patched it.
pub(super) fn check_results(
    doc: &TestDoc,
    loaded: &Loaded,
    default_run: &[Evaluated],
    by_operation: &std::collections::BTreeMap<&str, Vec<Evaluated>>,
    selector: &Selector,
) -> Vec<Row> {
    let dir = doc.path.parent().unwrap_or(Path::new("."));
    let mut files = ExpectedFiles::default();
    let patched_targets = patched_targets(loaded, default_run);
    let mut rows = Vec::new();
    for expected in &doc.results {
        if !selector.keeps(&expected.policy, &expected.rule, &expected.resources) {
            continue;
        }
        let policy_name = expected
            .policy
            .rsplit('/')
            .next()
            .unwrap_or(&expected.policy);
        for key in result_keys(expected, selector, loaded, &patched_targets) {
            let shown = match key {
                Keyed::Trigger(i) => match loaded.resources.get(i) {
                    Some(r) => display_resource(r),
                    None => loaded.payloads[i - loaded.resources.len()].name.clone(),
                },
                Keyed::Target(t) => display_resource(patched_targets[t].0),
            };
            let mut judge = Judge {
                expected,
                shown,
                dir,
                files: &mut files,
            };
            let (mut here, skipped) = match key {
                Keyed::Trigger(i) => {
                    // A result naming an operation reads that run.
                    let ev = match expected.operation.as_deref() {
                        Some(op) => &by_operation[op][i],
                        None => &default_run[i],
                    };
                    judge.trigger_rows(ev, loaded, policy_name)
                }
                Keyed::Target(t) => (judge.target_rows(&patched_targets[t].1, loaded), false),
            };
            if here.is_empty() && !skipped {
                here.push(judge.not_found(loaded, policy_name));
            }
            rows.extend(here);
        }
    }
    rows
}

/// Kyverno's target map: each target resource, with the responses (of
/// any trigger and policy) that patched it and the rule and object.
fn patched_targets<'e, 'l>(
    loaded: &'e Loaded,
    evaluated: &'e [Evaluated<'l>],
) -> Vec<(&'e Value, Vec<PatchedBy<'e, 'l>>)> {
    loaded
        .targets
        .iter()
        .map(|target| {
            let key = resource_key(target);
            let found = evaluated
                .iter()
                .flat_map(all_responses)
                .filter_map(|(_, resp)| {
                    resp.rules.iter().find_map(|rule| {
                        rule.resources()
                            .iter()
                            .find(|p| {
                                rule.rule_type == RuleType::Mutation && resource_key(p) == key
                            })
                            .map(|p| (resp, rule, p))
                    })
                })
                .collect();
            (target, found)
        })
        .filter(|(_, found): &(_, Vec<_>)| !found.is_empty())
        .collect()
}

/// The resources an expected result names: each listed name's patched
/// targets, triggers and payloads; all of them when it names none. A
/// name listed twice gives its rows twice, as Kyverno appends the
/// resources of each listed name without removing repeats.
fn result_keys(
    expected: &ExpectedResult,
    selector: &Selector,
    loaded: &Loaded,
    patched_targets: &[(&Value, Vec<PatchedBy>)],
) -> Vec<Keyed> {
    let names: Vec<String> = if selector.resource != "*" {
        vec![selector.resource.clone()]
    } else {
        expected.resources.clone()
    };
    let mut keys: Vec<Keyed> = Vec::new();
    for n in &names {
        for (t, (target, _)) in patched_targets.iter().enumerate() {
            if named(n, target) {
                keys.push(Keyed::Target(t));
            }
        }
        for (i, r) in loaded.resources.iter().enumerate() {
            if named(n, r) {
                keys.push(Keyed::Trigger(i));
            }
        }
        // A JSON payload by the name the test gave it.
        for (i, payload) in loaded.payloads.iter().enumerate() {
            if payload.name == *n {
                keys.push(Keyed::Trigger(loaded.resources.len() + i));
            }
        }
    }
    if keys.is_empty() {
        keys.extend((0..patched_targets.len()).map(Keyed::Target));
        keys.extend((0..loaded.resources.len() + loaded.payloads.len()).map(Keyed::Trigger));
    }
    keys
}

/// The rows of one expected result for one resource it names.
struct Judge<'a> {
    expected: &'a ExpectedResult,
    /// The resource as the table shows it.
    shown: String,
    /// The test's folder, where the expected files are.
    dir: &'a Path,
    files: &'a mut ExpectedFiles,
}

impl Judge<'_> {
    fn row(
        &self,
        rule: &str,
        result: &'static str,
        reason: String,
        message: String,
        outcome: Outcome,
    ) -> Row {
        Row {
            policy: self.expected.policy.clone(),
            rule: rule.to_string(),
            resource: self.shown.clone(),
            result,
            reason,
            message,
            outcome,
        }
    }

    /// Compares `resource` with the expected file (None: the file lacks
    /// it), then the status.
    fn judge(
        &mut self,
        r: &RuleResponse,
        scored: bool,
        resource: Option<&Value>,
        file: Option<&str>,
    ) -> Option<Row> {
        let expected = self.expected;
        if let Some(file) = file {
            let found = match resource {
                Some(resource) => self
                    .files
                    .find(&self.dir.join(file), resource)
                    .map(|w| w.map(|w| (resource, w))),
                None => Ok(None),
            };
            match found {
                Err(e) => {
                    let reason = "Resource error".into();
                    return Some(self.row(r.name, "Fail", reason, e, Outcome::Fail));
                }
                Ok(None) => return None,
                Ok(Some((resource, want))) => {
                    if let Some(d) = resource_diff(resource, want) {
                        let reason = "Resource diff".into();
                        return Some(self.row(r.name, "Fail", reason, d, Outcome::Fail));
                    }
                }
            }
        }
        let mut actual = status_word(r.status);
        if actual == "fail" && !scored {
            actual = "warn";
        }
        Some(if actual == expected.result {
            let outcome = if expected.result == "skip" {
                Outcome::Skip
            } else {
                Outcome::Pass
            };
            self.row(r.name, "Pass", "Ok".into(), r.message.to_string(), outcome)
        } else {
            self.row(
                r.name,
                "Fail",
                format!("Want {}, got {actual}", expected.result),
                r.message.to_string(),
                Outcome::Fail,
            )
        })
    }

    /// A trigger's rows: one per checked rule of each response of the
    /// policy (or one `Excluded` row); with whether a rule was skipped
    /// because the expected file lacks its resource.
    fn trigger_rows(
        &mut self,
        ev: &Evaluated,
        loaded: &Loaded,
        policy_name: &str,
    ) -> (Vec<Row>, bool) {
        let expected = self.expected;
        let mut here: Vec<Row> = Vec::new();
        let mut skipped = false;
        let scored_of =
            |pi: Option<usize>| pi.is_none_or(|pi| loaded.set.policies[pi].report.scored);
        // A classic policy by its own name (a namespaced Policy's response
        // carries `namespace/name`).
        let of_policy = |(pi, r): &(Option<usize>, &PolicyResponse)| match pi {
            Some(pi) => loaded.set.policies[*pi].name == policy_name,
            None => r.policy == policy_name,
        };
        for (pi, resp) in all_responses(ev).filter(of_policy) {
            let scored = scored_of(pi);
            let checked = resp.rules.iter().filter(|r| {
                expected.rule.is_empty()
                    || expected.is_cel_policy
                    || pi.is_none()
                    || r.name == expected.rule
                    || r.name == format!("autogen-{}", expected.rule)
                    || r.name == format!("autogen-cronjob-{}", expected.rule)
            });
            for r in checked {
                if r.rule_type == RuleType::Generation {
                    here.extend(self.generated_rows(r, scored));
                    continue;
                }
                // What Kyverno compares: the response's patched resource
                // for a mutation (none for a MutatingPolicy's target
                // response), else the resource the phase saw.
                let cel_target =
                    pi.is_none() && r.rule_type == RuleType::Mutation && !r.resources().is_empty();
                let resource = match (r.rule_type, pi) {
                    _ if cel_target => None,
                    (RuleType::Mutation, Some(pi)) => Some(&ev.patched[pi]),
                    (_, Some(_)) => Some(&ev.mutated),
                    (_, None) => Some(&ev.cel_mutated),
                };
                match self.judge(r, scored, resource, expected.patched_resources.as_deref()) {
                    Some(row) => here.push(row),
                    // Not in the expected file: skipped (see
                    // docs/kyverno-test-semantics.md#matching-results).
                    None => skipped = true,
                }
            }
            if here.is_empty() && !skipped {
                let rule = &expected.rule;
                here.push(self.row(
                    rule,
                    "Pass",
                    "Excluded".into(),
                    String::new(),
                    Outcome::Skip,
                ));
            }
        }
        (here, skipped)
    }

    /// A generate rule's rows: one per generated resource, compared with
    /// the expected file (a resource the file lacks is a resource error in
    /// Kyverno); one for the status when it generated none.
    fn generated_rows(&mut self, r: &RuleResponse, scored: bool) -> Vec<Row> {
        let produced = r.resources();
        if produced.is_empty() {
            return self.judge(r, scored, None, None).into_iter().collect();
        }
        let file = self.expected.generated_resource.as_deref();
        let mut rows = Vec::with_capacity(produced.len());
        for g in produced {
            let mut judged = self.judge(r, scored, Some(g), file).unwrap_or_else(|| {
                self.row(
                    r.name,
                    "Fail",
                    "Resource error".into(),
                    format!(
                        "resource {} not found in the expected file",
                        display_resource(g)
                    ),
                    Outcome::Fail,
                )
            });
            judged.resource = resource_key(g).3.to_string();
            rows.push(judged);
        }
        rows
    }

    /// A patched target's rows: one per response that patched it.
    fn target_rows(&mut self, patched_by: &[PatchedBy], loaded: &Loaded) -> Vec<Row> {
        let file = self.expected.patched_resources.as_deref();
        let mut rows = Vec::with_capacity(patched_by.len());
        for (resp, r, patched) in patched_by {
            let scored = !loaded
                .set
                .policies
                .iter()
                .any(|p| p.name == resp.policy && !p.report.scored);
            let judged = self.judge(r, scored, Some(patched), file);
            rows.push(judged.unwrap_or_else(|| {
                self.row(
                    r.name,
                    "Fail",
                    "Resource error".into(),
                    format!("resource {} not found in the expected file", self.shown),
                    Outcome::Fail,
                )
            }));
        }
        rows
    }

    /// The row of a result no response answered: the policy was invalid,
    /// of a kind gavel does not evaluate, or not found.
    fn not_found(&self, loaded: &Loaded, policy_name: &str) -> Row {
        let rule = &self.expected.rule;
        if loaded.invalid.iter().any(|(n, _)| n == policy_name) {
            self.row(
                rule,
                "Skip",
                "Invalid Policy".into(),
                String::new(),
                Outcome::Skip,
            )
        } else if let Some((_, kind)) = loaded.unsupported.iter().find(|(n, _)| n == policy_name) {
            let message = format!("unsupported: policy kind {kind}");
            self.row(rule, "Fail", "Not found".into(), message, Outcome::Fail)
        } else {
            self.row(
                rule,
                "Fail",
                "Not found".into(),
                String::new(),
                Outcome::Fail,
            )
        }
    }
}

/// Expected-resource files, loaded once per test.
#[derive(Default)]
struct ExpectedFiles {
    loaded: std::collections::HashMap<PathBuf, Result<Vec<Value>, String>>,
}

impl ExpectedFiles {
    /// The document of `path` with the same apiVersion, kind, namespace and
    /// name as `actual` (docs/kyverno-test-semantics.md#resource-comparison);
    /// `None` when the file has none.
    fn find(&mut self, path: &Path, actual: &Value) -> Result<Option<&Value>, String> {
        let docs = self
            .loaded
            .entry(path.to_path_buf())
            .or_insert_with(|| load_resources(path).map_err(|e| e.to_string()));
        let docs = docs.as_ref().map_err(Clone::clone)?;
        let key = resource_key(actual);
        Ok(docs.iter().find(|d| resource_key(d) == key))
    }
}

/// `None` when `actual` and `expected` are equal after the comparison's
/// normalisation (docs/kyverno-test-semantics.md#resource-comparison), else
/// a readable diff.
fn resource_diff(actual: &Value, expected: &Value) -> Option<String> {
    let a = tidy(normalise_labels(actual.clone()));
    let e = tidy(normalise_labels(expected.clone()));
    if a == e {
        return None;
    }
    let ops = crate::patch::json_patch::diff(&e, &a);
    let lines: Vec<String> = ops.iter().map(|op| op.to_string()).collect();
    Some(format!(
        "actual differs from expected: {}",
        lines.join(", ")
    ))
}

/// Drops `generate.kyverno.io/` labels and adds `app.kubernetes.io/managed-by: kyverno`.
fn normalise_labels(mut v: Value) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(l) = labels {
            l.retain(|k, _| !k.starts_with("generate.kyverno.io/"));
            l.insert("app.kubernetes.io/managed-by".into(), json!("kyverno"));
        }
    }
    v
}

/// Removes nulls, empty maps and empty lists, recursively.
fn tidy(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, tidy(v)))
                .filter(|(_, v)| !is_empty_value(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .map(tidy)
                .filter(|v| !is_empty_value(v))
                .collect(),
        ),
        other => other,
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
