//! Autogen (docs/kyverno-semantics.md#autogen): rules written for Pods also
//! get `autogen-<rule>` (for the pod controllers, template at
//! `spec.template`) and `autogen-cronjob-<rule>` (template at
//! `spec.jobTemplate.spec.template`) variants.

use super::types::{PolicyDoc, ResourceDescription, ResourceFilter, Rule};
use serde_json::{Value, json};

const ANNOTATION: &str = "pod-policies.kyverno.io/autogen-controllers";
const DEFAULT_CONTROLLERS: &[&str] = &[
    "DaemonSet",
    "Deployment",
    "Job",
    "StatefulSet",
    "ReplicaSet",
    "ReplicationController",
    "CronJob",
];
const MAX_NAME: usize = 63;

fn kind_is_pod(kind: &str) -> bool {
    // A selector may be `Pod`, `v1/Pod` or `*/Pod`; only the kind part counts.
    kind.rsplit('/').next() == Some("Pod") || kind == "Pod"
}

fn contains_pod(kinds: &[String]) -> bool {
    kinds.iter().any(|k| kind_is_pod(k))
}

fn descriptions(rule: &Rule) -> Vec<&ResourceDescription> {
    descriptions_of(&rule.match_resources)
        .chain(rule.exclude.iter().flat_map(descriptions_of))
        .collect()
}

/// The controllers to generate rules for, or `None` when autogen does not apply.
fn controllers(policy: &PolicyDoc) -> Option<Vec<String>> {
    let mut needed = false;
    for rule in &policy.spec.rules {
        if rule.generate.is_some() {
            return None;
        }
        if let Some(m) = &rule.mutate {
            let json_patch = m.get("patchesJson6902").is_some()
                || m.get("foreach")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|e| e.get("patchesJson6902").is_some()));
            if json_patch {
                return None;
            }
        }
        for d in descriptions(rule) {
            let pod_with_others = d.kinds.len() > 1 && contains_pod(&d.kinds);
            if d.name.as_deref().is_some_and(|n| !n.is_empty())
                || !d.names.is_empty()
                || d.selector.is_some()
                || !d.annotations.is_empty()
                || pod_with_others
            {
                return None;
            }
            needed |= contains_pod(&d.kinds);
        }
    }
    if !needed {
        return None;
    }
    match policy.metadata.annotations.get(ANNOTATION) {
        Some(v) if v.trim() == "none" => None,
        Some(v) if v.trim() == "all" || v.trim().is_empty() => {
            Some(DEFAULT_CONTROLLERS.iter().map(|s| s.to_string()).collect())
        }
        Some(v) => Some(
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
        None => Some(DEFAULT_CONTROLLERS.iter().map(|s| s.to_string()).collect()),
    }
}

fn truncate(name: String) -> String {
    if name.len() <= MAX_NAME {
        name
    } else {
        name.chars().take(MAX_NAME).collect()
    }
}

/// Generates the autogen rules of a policy (none when autogen does not apply).
pub fn generate(policy: &PolicyDoc) -> Vec<Rule> {
    let Some(controllers) = controllers(policy) else {
        return Vec::new();
    };
    let (cron, others): (Vec<String>, Vec<String>) =
        controllers.into_iter().partition(|c| c == "CronJob");
    let mut out = Vec::new();
    for rule in &policy.spec.rules {
        if rule.name.starts_with("autogen-") {
            continue;
        }
        let match_kinds: Vec<String> = descriptions_of(&rule.match_resources)
            .flat_map(|d| d.kinds.clone())
            .collect();
        let exclude_kinds: Vec<String> = rule
            .exclude
            .iter()
            .flat_map(descriptions_of)
            .flat_map(|d| d.kinds.clone())
            .collect();
        if !contains_pod(&match_kinds)
            || (!exclude_kinds.is_empty() && !contains_pod(&exclude_kinds))
        {
            continue;
        }
        if !others.is_empty()
            && let Some(r) = rewrite(
                rule,
                &others,
                &["spec", "template"],
                "spec.template",
                format!("autogen-{}", rule.name),
            )
        {
            out.push(r);
        }
        if !cron.is_empty()
            && let Some(r) = rewrite(
                rule,
                &cron,
                &["spec", "jobTemplate", "spec", "template"],
                "spec.jobTemplate.spec.template",
                format!("autogen-cronjob-{}", rule.name),
            )
        {
            out.push(r);
        }
    }
    out
}

fn descriptions_of(
    m: &crate::policy::types::MatchResources,
) -> impl Iterator<Item = &ResourceDescription> {
    m.resources.iter().chain(
        m.any
            .iter()
            .chain(m.all.iter())
            .filter_map(|f| f.resources.as_ref()),
    )
}

fn replace_kinds(filters: &mut [ResourceFilter], kinds: &[String]) {
    for f in filters {
        if let Some(d) = &mut f.resources
            && contains_pod(&d.kinds)
        {
            d.kinds = kinds.to_vec();
        }
    }
}

fn rewrite_strings(v: &mut Value, f: &dyn Fn(&str) -> String) {
    match v {
        Value::String(s) => *s = f(s),
        Value::Array(items) => items.iter_mut().for_each(|x| rewrite_strings(x, f)),
        Value::Object(m) => m.values_mut().for_each(|x| rewrite_strings(x, f)),
        _ => {}
    }
}

fn wrap(pattern: Value, path: &[&str]) -> Value {
    path.iter()
        .rev()
        .fold(pattern, |inner, key| json!({ *key: inner }))
}

fn rewrite(
    rule: &Rule,
    kinds: &[String],
    template_path: &[&str],
    template_expr: &str,
    name: String,
) -> Option<Rule> {
    let mut r = rule.clone();
    r.name = truncate(name);
    for m in std::iter::once(&mut r.match_resources).chain(r.exclude.iter_mut()) {
        if let Some(d) = &mut m.resources
            && contains_pod(&d.kinds)
        {
            d.kinds = kinds.to_vec();
        }
        replace_kinds(&mut m.any, kinds);
        replace_kinds(&mut m.all, kinds);
    }
    if let Some(v) = &mut r.validate {
        if let Some(p) = v.pattern.take() {
            v.pattern = Some(wrap(p, template_path));
        }
        if let Some(Value::Array(pats)) = v.any_pattern.take() {
            v.any_pattern = Some(Value::Array(
                pats.into_iter().map(|p| wrap(p, template_path)).collect(),
            ));
        }
    }
    // CEL reads the template through `object.spec`/`object.metadata`.
    let cel_path = |s: &str| {
        s.replace("object.spec", &format!("object.{template_expr}.spec"))
            .replace(
                "object.metadata",
                &format!("object.{template_expr}.metadata"),
            )
    };
    if let Some(cel) = r.validate.as_mut().and_then(|v| v.cel.as_mut()) {
        rewrite_strings(cel, &cel_path);
    }
    for p in &mut r.cel_preconditions {
        rewrite_strings(p, &cel_path);
    }
    if let Some(m) = &mut r.mutate
        && let Some(p) = m.get_mut("patchStrategicMerge")
    {
        *p = wrap(p.take(), template_path);
    }
    // Textual rewrite of variable paths, as Kyverno does on the marshalled rule.
    let text = serde_json::to_string(&r).ok()?;
    let text = text
        .replace(
            "request.object.spec",
            &format!("request.object.{template_expr}.spec"),
        )
        .replace(
            "request.oldObject.spec",
            &format!("request.oldObject.{template_expr}.spec"),
        )
        .replace(
            "request.object.metadata",
            &format!("request.object.{template_expr}.metadata"),
        )
        .replace(
            "request.oldObject.metadata",
            &format!("request.oldObject.{template_expr}.metadata"),
        );
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load::{LoadedDocument, load_policy_text};

    fn policy(text: &str) -> PolicyDoc {
        match load_policy_text("t.yaml", text).unwrap().remove(0) {
            LoadedDocument::Policy(p) => *p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pod_rule_gets_controller_and_cronjob_variants() {
        let p = policy(
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate:\n      message: \"{{ request.object.metadata.name }}\"\n      pattern: {spec: {hostNetwork: false}}\n",
        );
        let rules = generate(&p);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].name, "autogen-r");
        assert_eq!(
            rules[0].match_resources.any[0]
                .resources
                .as_ref()
                .unwrap()
                .kinds
                .len(),
            6
        );
        assert_eq!(
            rules[0].validate.as_ref().unwrap().pattern,
            Some(json!({"spec": {"template": {"spec": {"hostNetwork": false}}}}))
        );
        assert_eq!(
            rules[0].validate.as_ref().unwrap().message.as_deref(),
            Some("{{ request.object.spec.template.metadata.name }}")
        );
        assert_eq!(rules[1].name, "autogen-cronjob-r");
        assert_eq!(
            rules[1].match_resources.any[0]
                .resources
                .as_ref()
                .unwrap()
                .kinds,
            vec!["CronJob"]
        );
    }

    #[test]
    fn skipped_for_names_selectors_and_annotation_none() {
        for extra in [
            "    match: {any: [{resources: {kinds: [Pod], names: [a]}}]}\n",
            "    match: {any: [{resources: {kinds: [Pod, Service]}}]}\n",
            "    match: {any: [{resources: {kinds: [Service]}}]}\n",
        ] {
            let text = format!(
                "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {{name: p}}\nspec:\n  rules:\n  - name: r\n{extra}    validate: {{deny: {{}}}}\n"
            );
            assert!(generate(&policy(&text)).is_empty(), "{extra}");
        }
        let text = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p, annotations: {pod-policies.kyverno.io/autogen-controllers: none}}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate: {deny: {}}\n";
        assert!(generate(&policy(text)).is_empty());
    }
}
