//! The type checking of a written policy's CEL expressions: each is
//! checked ([`crate::cel::type_check`]) against the schema of every
//! built-in kind the policy matches, as the API server checks a
//! ValidatingAdmissionPolicy's into `status.typeChecking`. The result is
//! warnings, one per mistake, each naming the field that holds the
//! expression:
//!
//! `spec.validations[0].expression: apps/v1, Kind=Deployment: undefined field 'replicass' (...)`
//!
//! Checked: the variables and match conditions of the policies.kyverno.io
//! kinds (namespaced or not) and their own expressions: a
//! ValidatingPolicy's or ImageValidatingPolicy's validations, messages
//! and audit annotations, a MutatingPolicy's mutations, a
//! GeneratingPolicy's generate expressions, a DeletingPolicy's
//! conditions; and the `validate.cel` rules of ClusterPolicy and Policy
//! (with their CEL preconditions).
//!
//! The kinds are read as the API server reads them for a
//! ValidatingAdmissionPolicy: a rule with a wildcard group or version, a
//! wildcard resource or a subresource adds none, and at most
//! [`MAX_KINDS`] are checked. Unlike the API server, which reports each
//! kind's mistakes, a mistake is reported when every kind matched has it
//! (`check_expressions`). A policy that matches no built-in kind is
//! still checked with `object` of unknown type, which finds undeclared
//! variables and operators on the wrong types.
//!
//! The schema is that of the Kubernetes release gavel's table was built
//! from (`crate::kinds::schema`); a field a later release added is
//! reported as undefined. The warnings never change what the policy does.

use crate::cel::type_check::{Environment, Type, check_source};
use crate::kinds::schema::Schema;
use crate::kinds::{builtin_for_resource, builtin_kinds, split_api_version};
use crate::matching::KindSelector;
use serde_json::Value;

/// At most this many kinds are checked per policy (the API server's
/// `maxTypesToCheck`).
pub const MAX_KINDS: usize = 10;

/// At most this many warnings are returned: the API server drops a
/// response's warnings past 4 KiB.
const MAX_WARNINGS: usize = 16;

/// One expression to check, and where the policy holds it.
struct Expression<'p> {
    field_ref: String,
    source: &'p str,
    /// `Some(name)` for a variable's: later expressions see its type.
    declares: Option<&'p str>,
}

/// The type warnings of a policy document (none for kinds without CEL
/// expressions, and for expressions that do not compile, which the
/// policy's compile reports).
pub fn type_warnings(policy: &Value) -> Vec<String> {
    let api_group = split_api_version(policy["apiVersion"].as_str().unwrap_or_default()).0;
    let spec = &policy["spec"];
    let mut warnings = match (api_group, policy["kind"].as_str().unwrap_or_default()) {
        ("policies.kyverno.io", kind) => {
            let expressions = cel_policy_expressions(kind.trim_start_matches("Namespaced"), spec);
            if expressions.is_empty() {
                return Vec::new();
            }
            let kinds = resource_rule_kinds(&spec["matchConstraints"]["resourceRules"]);
            check_expressions(&kinds, &expressions)
        }
        ("kyverno.io", "ClusterPolicy" | "Policy") => items(&spec["rules"])
            .enumerate()
            .filter(|(_, rule)| rule["validate"]["cel"].is_object())
            .flat_map(|(i, rule)| {
                let kinds = match_kinds(&rule["match"]);
                check_expressions(&kinds, &cel_rule_expressions(i, rule))
            })
            .collect(),
        _ => Vec::new(),
    };
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - MAX_WARNINGS + 1;
        warnings.truncate(MAX_WARNINGS - 1);
        warnings.push(format!("{more} more type checking warnings"));
    }
    warnings
}

fn items(list: &Value) -> impl Iterator<Item = &Value> {
    list.as_array().into_iter().flatten()
}

/// The expressions of a policies.kyverno.io policy's spec (by its kind
/// without `Namespaced`), variables first (each sees the ones before
/// it); none for a kind this does not check.
fn cel_policy_expressions<'p>(kind: &str, spec: &'p Value) -> Vec<Expression<'p>> {
    let body: &[(&str, &[&str])] = match kind {
        "ValidatingPolicy" | "ImageValidatingPolicy" => &[
            ("validations", &["expression", "messageExpression"]),
            ("auditAnnotations", &["valueExpression"]),
        ],
        "MutatingPolicy" => &[(
            "mutations",
            &["applyConfiguration.expression", "jsonPatch.expression"],
        )],
        "GeneratingPolicy" => &[("generate", &["expression"])],
        "DeletingPolicy" => &[("conditions", &["expression"])],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    push_expressions(&mut out, spec, "spec", "variables", &["expression"], true);
    push_expressions(
        &mut out,
        spec,
        "spec",
        "matchConditions",
        &["expression"],
        false,
    );
    for (list, fields) in body {
        push_expressions(&mut out, spec, "spec", list, fields, false);
    }
    out
}

/// The expressions of a `validate.cel` rule, variables first.
fn cel_rule_expressions(index: usize, rule: &Value) -> Vec<Expression<'_>> {
    let rule_ref = format!("spec.rules[{index}]");
    let cel_ref = format!("{rule_ref}.validate.cel");
    let cel = &rule["validate"]["cel"];
    let mut out = Vec::new();
    push_expressions(&mut out, cel, &cel_ref, "variables", &["expression"], true);
    push_expressions(
        &mut out,
        rule,
        &rule_ref,
        "celPreconditions",
        &["expression"],
        false,
    );
    push_expressions(
        &mut out,
        cel,
        &cel_ref,
        "expressions",
        &["expression", "messageExpression"],
        false,
    );
    push_expressions(
        &mut out,
        cel,
        &cel_ref,
        "auditAnnotations",
        &["valueExpression"],
        false,
    );
    out
}

/// The `fields` of each item of `parent.<list>`, in order.
fn push_expressions<'p>(
    out: &mut Vec<Expression<'p>>,
    parent: &'p Value,
    parent_ref: &str,
    list: &str,
    fields: &[&str],
    variables: bool,
) {
    for (i, item) in items(&parent[list]).enumerate() {
        for field in fields {
            // A dotted field is nested (`applyConfiguration.expression`).
            let value = field.split('.').fold(item, |v, name| &v[name]);
            if let Some(source) = value.as_str().filter(|s| !s.trim().is_empty()) {
                out.push(Expression {
                    field_ref: format!("{parent_ref}.{list}[{i}].{field}"),
                    source,
                    declares: variables.then(|| item["name"].as_str().unwrap_or_default()),
                });
            }
        }
    }
}

/// A kind checked: its `apiVersion`, name and schema.
type CheckedKind = (&'static str, &'static str, Schema);

/// Checks the expressions against each kind (or, with none, against an
/// `object` of unknown type). With several kinds, a mistake is reported
/// when the expression has it for every one: a policy that matches Pods
/// and Deployments reads `object.spec.containers` or
/// `object.spec.template` by the object's kind (`has()`, `object.kind ==`),
/// and each is right for some kind.
fn check_expressions(kinds: &[CheckedKind], expressions: &[Expression]) -> Vec<String> {
    let schemas: Vec<Option<Schema>> = if kinds.is_empty() {
        vec![None]
    } else {
        kinds.iter().map(|(_, _, schema)| Some(*schema)).collect()
    };
    // By expression, the issues every kind has so far.
    let mut common: Vec<Option<Vec<String>>> = vec![None; expressions.len()];
    for schema in schemas {
        let mut env = Environment::admission(schema);
        for (e, common) in expressions.iter().zip(&mut common) {
            let (ty, issues) = check_source(e.source, &env)
                // The policy's compile reports it.
                .unwrap_or((Type::Dyn, Vec::new()));
            match common {
                Some(so_far) => so_far.retain(|i| issues.contains(i)),
                None => *common = Some(issues),
            }
            if let Some(name) = e.declares {
                env.declare_variable(name, ty);
            }
        }
    }
    let kinds = match kinds {
        [] => String::new(),
        [(api_version, kind, _)] => {
            let (group, version) = split_api_version(api_version);
            format!("{group}/{version}, Kind={kind}: ")
        }
        many => format!("all {} kinds matched: ", many.len()),
    };
    expressions
        .iter()
        .zip(common)
        .flat_map(|(e, issues)| {
            let kinds = &kinds;
            issues
                .unwrap_or_default()
                .into_iter()
                .map(move |issue| format!("{}: {kinds}{issue}", e.field_ref))
        })
        .collect()
}

/// The built-in kinds a ValidatingPolicy's `resourceRules` name, as the
/// API server's type checking reads them.
fn resource_rule_kinds(rules: &Value) -> Vec<CheckedKind> {
    let strings = |v: &Value| -> Vec<String> {
        items(v)
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for rule in items(rules) {
        let groups = strings(&rule["apiGroups"]);
        let versions = strings(&rule["apiVersions"]);
        if [&groups, &versions]
            .iter()
            .any(|list| list.is_empty() || list.iter().any(|s| s.contains('*')))
        {
            continue;
        }
        for group in &groups {
            for version in &versions {
                let api_version = if group.is_empty() {
                    version.clone()
                } else {
                    format!("{group}/{version}")
                };
                for resource in strings(&rule["resources"]) {
                    if resource.contains(['*', '/']) {
                        continue;
                    }
                    if let Some(kind) = builtin_for_resource(&api_version, &resource) {
                        add_kind(&mut out, kind.api_version, kind.kind);
                    }
                }
            }
        }
    }
    out
}

/// The built-in kinds a kyverno.io rule's `match` names (in `resources`,
/// `any` and `all`), each at its group's preferred version when the
/// selector names none.
fn match_kinds(rule_match: &Value) -> Vec<CheckedKind> {
    let filters = std::iter::once(rule_match)
        .chain(items(&rule_match["any"]))
        .chain(items(&rule_match["all"]));
    let mut out = Vec::new();
    for filter in filters {
        for text in items(&filter["resources"]["kinds"]).filter_map(Value::as_str) {
            let Ok(selector) = KindSelector::parse(text) else {
                continue;
            };
            if selector.subresource.is_some() || selector.kind.is_wildcard() {
                continue;
            }
            // Per group, the best version the selector accepts.
            let mut best: Vec<(&str, &'static str, &'static str)> = Vec::new();
            for k in builtin_kinds() {
                let (group, version) = split_api_version(k.api_version);
                if !(selector.kind.matches(k.kind)
                    && selector.group.matches(group)
                    && selector.version.matches(version))
                {
                    continue;
                }
                match best.iter_mut().find(|(g, _, _)| *g == group) {
                    Some(b) if version_rank(version) > version_rank(split_api_version(b.1).1) => {
                        *b = (group, k.api_version, k.kind)
                    }
                    Some(_) => {}
                    None => best.push((group, k.api_version, k.kind)),
                }
            }
            for (_, api_version, kind) in best {
                add_kind(&mut out, api_version, kind);
            }
        }
    }
    out
}

fn add_kind(out: &mut Vec<CheckedKind>, api_version: &'static str, kind: &'static str) {
    if out.len() >= MAX_KINDS || out.iter().any(|(a, k, _)| (*a, *k) == (api_version, kind)) {
        return;
    }
    if let Some(schema) = Schema::for_kind(api_version, kind) {
        out.push((api_version, kind, schema));
    }
}

/// How preferred a version is: GA over beta over alpha, then the higher
/// number (`v2` over `v1`, `v1beta2` over `v1beta1`), as the API server
/// orders the built-in groups' versions.
fn version_rank(version: &str) -> (u8, u32, u32) {
    let rest = version.strip_prefix('v').unwrap_or(version);
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let major = rest[..digits].parse().unwrap_or(0);
    let tail = &rest[digits..];
    let (stage, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n)
    } else {
        (2, tail)
    };
    (stage, major, minor.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests;
