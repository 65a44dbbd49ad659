//! Result checking (§4, §5): each expected result of the test document is
//! matched with the engine's responses and, where the test names them,
//! with expected patched or generated resources, giving the table's rows.

use super::evaluate::Evaluated;
use super::load::Loaded;
use super::{Outcome, Row, Selector};
use crate::cli::resources::{load_resources, resource_key};
use crate::cli::test_file::TestDoc;
use crate::engine::{PolicyResponse, RuleStatus, RuleType};
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

/// Compares expected results with engine responses (§4).
pub(super) fn check_results(
    doc: &TestDoc,
    loaded: &Loaded,
    evaluated: &[Evaluated],
    selector: &Selector,
) -> Vec<Row> {
    let dir = doc.path.parent().unwrap_or(Path::new("."));
    let mut expected_files = ExpectedFiles::default();
    let mut rows = Vec::new();
    for expected in &doc.results {
        if !selector.keeps(&expected.policy, &expected.rule, &expected.resources) {
            continue;
        }
        let names: Vec<String> = if selector.resource != "*" {
            vec![selector.resource.clone()]
        } else {
            expected.resources.clone()
        };
        // A name listed twice gives its rows twice, as Kyverno appends the
        // resources of each listed name without removing repeats
        // (commands/test/output.go, printTestResult).
        let mut chosen: Vec<usize> = Vec::new();
        for n in &names {
            for (i, r) in loaded.resources.iter().enumerate() {
                let (_, _, ns, name) = resource_key(r);
                let hit = match n.split_once('/') {
                    Some((want_ns, want_name)) => ns == want_ns && name == want_name,
                    None => name == *n,
                };
                if hit {
                    chosen.push(i);
                }
            }
        }
        if chosen.is_empty() {
            chosen = (0..loaded.resources.len()).collect();
        }
        let policy_name = expected
            .policy
            .rsplit('/')
            .next()
            .unwrap_or(&expected.policy);
        for i in chosen {
            let resource = &loaded.resources[i];
            let shown = display_resource(resource);
            let ev = &evaluated[i];
            // (index among classic policies, response, scored)
            let mut matching: Vec<(Option<usize>, &PolicyResponse, bool)> = ev
                .responses
                .iter()
                .zip(&loaded.policies)
                .enumerate()
                .filter(|(_, (_, p))| p.name == policy_name)
                .filter_map(|(pi, (r, p))| r.as_ref().map(|r| (Some(pi), r, p.scored)))
                .collect();
            matching.extend(
                ev.mutating
                    .iter()
                    .chain(&ev.validating)
                    .filter(|r| r.policy == policy_name)
                    .map(|r| (None, r, true)),
            );
            let row = |rule: &str,
                       result: &'static str,
                       reason: String,
                       message: String,
                       outcome: Outcome| Row {
                policy: expected.policy.clone(),
                rule: rule.to_string(),
                resource: shown.clone(),
                result,
                reason,
                message,
                outcome,
            };
            if matching.is_empty() {
                if loaded.invalid.iter().any(|(n, _)| n == policy_name) {
                    rows.push(row(
                        &expected.rule,
                        "Skip",
                        "Invalid Policy".into(),
                        String::new(),
                        Outcome::Skip,
                    ));
                } else if let Some((_, kind)) =
                    loaded.unsupported.iter().find(|(n, _)| n == policy_name)
                {
                    rows.push(row(
                        &expected.rule,
                        "Fail",
                        "Not found".into(),
                        format!("unsupported: policy kind {kind}"),
                        Outcome::Fail,
                    ));
                } else {
                    rows.push(row(
                        &expected.rule,
                        "Fail",
                        "Not found".into(),
                        String::new(),
                        Outcome::Fail,
                    ));
                }
                continue;
            }
            for (pi, resp, scored) in matching {
                let rule_rows: Vec<_> = resp
                    .rules
                    .iter()
                    .filter(|r| {
                        expected.rule.is_empty()
                            || expected.is_cel_policy
                            || r.name == expected.rule
                            || r.name == format!("autogen-{}", expected.rule)
                            || r.name == format!("autogen-cronjob-{}", expected.rule)
                    })
                    .collect();
                if rule_rows.is_empty() {
                    rows.push(row(
                        &expected.rule,
                        "Pass",
                        "Excluded".into(),
                        String::new(),
                        Outcome::Skip,
                    ));
                    continue;
                }
                for r in rule_rows {
                    let mut actual = status_word(r.status);
                    if actual == "fail" && !scored {
                        actual = "warn";
                    }
                    // Resources to compare: (actual, expected file). A
                    // generate rule gives one row per downstream resource, a
                    // mutate-existing rule one per patched target.
                    let existing = r.rule_type == RuleType::Mutation && !r.resources().is_empty();
                    let mut compare: Vec<(&Value, &str)> = Vec::new();
                    if let Some(file) = &expected.patched_resources
                        && !existing
                    {
                        let resource = match (r.rule_type, pi) {
                            (RuleType::Mutation, Some(pi)) => &ev.patched[pi],
                            (_, Some(_)) => &ev.mutated,
                            (_, None) => &ev.cel_mutated,
                        };
                        compare.push((resource, file));
                    }
                    let produced_file = match r.rule_type {
                        RuleType::Generation => expected.generated_resource.as_deref(),
                        RuleType::Mutation if existing => expected.patched_resources.as_deref(),
                        _ => None,
                    };
                    let mut produced_rows: Vec<Option<&Value>> = vec![None];
                    if produced_file.is_some() && !r.resources().is_empty() {
                        produced_rows = r.resources().iter().map(Some).collect();
                    }
                    for produced in produced_rows {
                        let mut checks = compare.clone();
                        if let (Some(g), Some(file)) = (produced, produced_file) {
                            checks.push((g, file));
                        }
                        let mut diff = None;
                        let mut missing = false;
                        for (resource, file) in checks {
                            match expected_files.find(&dir.join(file), resource) {
                                Err(e) => diff = Some(e),
                                Ok(None) => missing = true,
                                Ok(Some(want)) => {
                                    if let Some(d) = resource_diff(resource, want) {
                                        diff = Some(d);
                                    }
                                }
                            }
                        }
                        // §4.6: a resource the expected file lacks drops the row.
                        if missing && diff.is_none() {
                            continue;
                        }
                        let mut row = if let Some(d) = diff {
                            row(r.name, "Fail", "Resource diff".into(), d, Outcome::Fail)
                        } else if actual == expected.result {
                            let outcome = if expected.result == "skip" {
                                Outcome::Skip
                            } else {
                                Outcome::Pass
                            };
                            row(r.name, "Pass", "Ok".into(), r.message.to_string(), outcome)
                        } else {
                            row(
                                r.name,
                                "Fail",
                                format!("Want {}, got {actual}", expected.result),
                                r.message.to_string(),
                                Outcome::Fail,
                            )
                        };
                        // A patched target's row names the target, as
                        // Kyverno's rows from its target responses do.
                        if let (true, Some(target)) = (existing, produced) {
                            row.resource = display_resource(target);
                        }
                        rows.push(row);
                    }
                }
            }
        }
    }
    rows
}

/// Expected-resource files, loaded once per test.
#[derive(Default)]
struct ExpectedFiles {
    loaded: std::collections::HashMap<PathBuf, Result<Vec<Value>, String>>,
}

impl ExpectedFiles {
    /// The document of `path` with the same apiVersion, kind, namespace and
    /// name as `actual` (§5); `None` when the file has none.
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
/// normalisation (§5), else a readable diff.
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
