//! The checks Kyverno's policy webhook makes on a policy beyond what
//! compiling it checks, in its order and with its words
//! (docs/kyverno-semantics.md#policy-admission): a policy Kyverno refuses
//! when it is written is refused here too, with the message a user of
//! Kyverno's would see (kubectl prints it after the API server's
//! `admission webhook "..." denied the request: `).
//!
//! Each check reads the policy object as the API server sends it; what
//! needs discovery reads gavel's table of built-in kinds, so a check on a
//! custom resource's scope is left out rather than guessed.

use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

/// Kyverno's refusal of `object` (any policy kind), or None.
pub fn refusal(object: &Value) -> Option<String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let spec = &object["spec"];
    match kind {
        "ClusterPolicy" | "Policy" => classic(object, kind == "Policy"),
        "ValidatingPolicy"
        | "NamespacedValidatingPolicy"
        | "GeneratingPolicy"
        | "NamespacedGeneratingPolicy"
        | "DeletingPolicy" => {
            resource_rules_required(spec).or_else(|| namespaced_cel(kind, object))
        }
        "MutatingPolicy" | "NamespacedMutatingPolicy" => resource_rules_required(spec)
            .or_else(|| {
                let enabled = |mode: &str, default: bool| {
                    spec["evaluation"][mode]["enabled"]
                        .as_bool()
                        .unwrap_or(default)
                };
                (!enabled("admission", true) && !enabled("mutateExisting", false)).then(|| {
                    "spec.evaluation: Forbidden: disabling both admission and mutateExisting \
                     evaluation modes is not allowed"
                        .to_string()
                })
            })
            .or_else(|| namespaced_cel(kind, object)),
        "ImageValidatingPolicy" | "NamespacedImageValidatingPolicy" => namespaced_cel(kind, object),
        _ => None,
    }
}

/// `matchConstraints` must name at least one resource rule.
fn resource_rules_required(spec: &Value) -> Option<String> {
    let rules = spec["matchConstraints"]["resourceRules"].as_array();
    // A policy of another evaluation mode (JSON) has no matchConstraints.
    if spec["matchConstraints"].is_null() || rules.is_some_and(|r| !r.is_empty()) {
        return None;
    }
    Some(
        "spec.matchConstraints: Required value: a matchConstraints with at least one resource \
         rule is required"
            .into(),
    )
}

static GLOBAL_CONTEXT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^.\w])globalContext\s*\.").expect("pattern"));
static HTTP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^.\w])http\s*\.").expect("pattern"));

/// A namespaced CEL policy may not read the global context nor make HTTP
/// calls: they would reach beyond its namespace.
fn namespaced_cel(kind: &str, object: &Value) -> Option<String> {
    let namespaced = kind.starts_with("Namespaced")
        || object["metadata"]["namespace"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
    if !namespaced {
        return None;
    }
    let mut texts = Vec::new();
    strings(&object["spec"], &mut texts);
    if texts.iter().any(|t| GLOBAL_CONTEXT.is_match(t)) {
        return Some(
            "spec: Forbidden: globalContext.* is not allowed in namespaced policies".into(),
        );
    }
    if texts.iter().any(|t| HTTP.is_match(t)) {
        return Some(
            "spec: Forbidden: http.* is not allowed in namespaced policies; set \
             --allowHTTPInNamespacedPolicies to enable"
                .into(),
        );
    }
    None
}

fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(m) => m.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// ClusterPolicy and Policy, in the order Kyverno's validation runs.
fn classic(object: &Value, namespaced: bool) -> Option<String> {
    let spec = &object["spec"];
    let rules: &[Value] = spec["rules"].as_array().map_or(&[], Vec::as_slice);
    let background = spec["background"].as_bool() != Some(false);
    if background && let Some(why) = admission_only_variables(spec, rules) {
        return Some(format!(
            "only select variables are allowed in background mode. Set spec.background=false to \
             disable background mode for this policy rule: {why} "
        ));
    }
    let policy_namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let errors = field_errors(spec, rules, namespaced, policy_namespace);
    match errors.len() {
        0 => {}
        1 => return errors.into_iter().next(),
        _ => return Some(format!("[{}]", errors.join(", "))),
    }
    let admission = spec["admission"].as_bool() != Some(false);
    if !admission && !background {
        return Some("disabling both admission and background processing is not allowed".into());
    }
    if !admission
        && rules.iter().any(|r| {
            r.get("mutate").is_some()
                || r.get("generate").is_some()
                || r.get("verifyImages").is_some()
        })
    {
        return Some(
            "disabling admission processing is only allowed with validation policies".into(),
        );
    }
    if background {
        for (i, rule) in rules.iter().enumerate() {
            for (path, kinds) in kind_lists(rule) {
                if kinds.iter().any(|k| k == "*") {
                    return Some(format!(
                        "path: spec.rules[{i}].{path}: wildcard policy not allowed in background \
                         mode. Set spec.background=false to disable background mode for this \
                         policy rule "
                    ));
                }
            }
        }
    }
    None
}

/// The variables a background rule may not read: who made the request.
static ADMISSION_ONLY: LazyLock<[Regex; 5]> = LazyLock::new(|| {
    [
        "serviceAccountName",
        "serviceAccountNamespace",
        "request.userInfo",
        "request.roles",
        "request.clusterRoles",
    ]
    .map(|v| Regex::new(&format!(r"[^\.]({})(?-u:\b)", regex::escape(v))).expect("pattern"))
});

/// Kyverno's `{{ }}` token (one level of nested braces), not after `\`.
static TOKEN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})").expect("pattern"));

/// Why a rule in background mode reads what only an admission request
/// has: roles, cluster roles or subjects in a match or exclude block, or
/// a variable of the requester (not checked when a rule mutates existing
/// resources, whose triggers are admission requests).
fn admission_only_variables(spec: &Value, rules: &[Value]) -> Option<String> {
    for (i, rule) in rules.iter().enumerate() {
        for (block, name) in [(&rule["match"], "match"), (&rule["exclude"], "exclude")] {
            let lists: [(&str, &Value); 3] = if name == "match" {
                [("", block), ("any", &block["any"]), ("all", &block["all"])]
            } else {
                [("", block), ("all", &block["all"]), ("any", &block["any"])]
            };
            for (list, entries) in lists {
                let each: Vec<(String, &Value)> = if list.is_empty() {
                    vec![(String::new(), entries)]
                } else {
                    entries
                        .as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                        .map(|(j, e)| (format!("{list}[{j}]/"), e))
                        .collect()
                };
                for (at, entry) in each {
                    let field = ["roles", "clusterRoles", "subjects"]
                        .into_iter()
                        .find(|f| entry[*f].as_array().is_some_and(|a| !a.is_empty()));
                    if let Some(field) = field {
                        return Some(format!(
                            "invalid variable used at path: spec/rules[{i}]/{name}/{at}{field}"
                        ));
                    }
                }
            }
        }
    }
    if rules.iter().any(|r| {
        r["mutate"]["targets"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    }) {
        return None;
    }
    let text = spec.to_string();
    TOKEN
        .captures_iter(&text)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str())
        .find(|token| ADMISSION_ONLY.iter().any(|re| re.is_match(token)))
        .map(|token| format!("variable {} is not allowed", unescape(token)))
}

/// A token as it reads in the policy, not as JSON text.
fn unescape(token: &str) -> String {
    serde_json::from_str::<String>(&format!("\"{token}\"")).unwrap_or_else(|_| token.to_string())
}

/// The kind lists of a rule's match and exclude blocks, with the paths
/// Kyverno names them by.
fn kind_lists(rule: &Value) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for block in ["match", "exclude"] {
        let b = &rule[block];
        for list in ["any", "all"] {
            for (j, entry) in b[list].as_array().into_iter().flatten().enumerate() {
                out.push((
                    format!("{block}.{list}[{j}].kinds"),
                    texts(&entry["resources"]["kinds"]),
                ));
            }
        }
        out.push((block.to_string(), texts(&b["resources"]["kinds"])));
    }
    out
}

fn texts(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The field errors of Kyverno's API validation of a spec, in its order.
fn field_errors(
    spec: &Value,
    rules: &[Value],
    namespaced: bool,
    policy_namespace: &str,
) -> Vec<String> {
    let mut errs = Vec::new();
    let spec_update = spec["mutateExistingOnPolicyUpdate"].as_bool() == Some(true);
    for (i, rule) in rules.iter().enumerate() {
        let mutate = &rule["mutate"];
        if mutate.is_null() {
            continue;
        }
        let rule_update = mutate["mutateExistingOnPolicyUpdate"].as_bool() == Some(true);
        if (spec_update || rule_update) && mutate["targets"].as_array().is_none_or(Vec::is_empty) {
            errs.push(format!(
                "spec.mutateExistingOnPolicyUpdate: Forbidden: rules[{i}].mutate.targets has to \
                 be specified when mutateExistingOnPolicyUpdate is set"
            ));
        }
    }
    for (path, value) in [
        ("spec.webhookTimeoutSeconds", &spec["webhookTimeoutSeconds"]),
        (
            "spec.webhookConfiguration.timeoutSeconds",
            &spec["webhookConfiguration"]["timeoutSeconds"],
        ),
    ] {
        if let Some(t) = value.as_i64()
            && !(1..=30).contains(&t)
        {
            errs.push(format!(
                "{path}: Invalid value: {t}: the timeout value must be between 1 and 30 seconds"
            ));
        }
    }
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if namespaced {
            for (j, target) in rule["mutate"]["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Some(ns) = target["namespace"].as_str()
                    && !ns.is_empty()
                    && ns != policy_namespace
                {
                    errs.push(format!(
                        "{path}.targets[{j}].namespace: Invalid value: {ns:?}: This field can be \
                         ignored or should have value of the namespace where the policy is being \
                         created"
                    ));
                }
            }
        }
        errs.extend(pod_security_excludes(&path, rule));
        errs.extend(generate_scope(&path, rule, namespaced, policy_namespace));
    }
    if namespaced
        && spec["validationFailureActionOverrides"]
            .as_array()
            .is_some_and(|o| !o.is_empty())
    {
        errs.push(
            "spec.validationFailureActionOverrides: Forbidden: Use of \
             validationFailureActionOverrides is supported only with ClusterPolicy"
                .into(),
        );
    }
    errs
}

const RESTRICTED_CONTROLS: [&str; 6] = [
    "Volume Types",
    "Privilege Escalation",
    "Running as Non-root",
    "Running as Non-root user",
    "Seccomp",
    "Capabilities",
];
const POD_LEVEL_CONTROLS: [&str; 4] = [
    "Host Namespaces",
    "HostPath Volumes",
    "Sysctls",
    "Volume Types",
];
const CONTAINER_LEVEL_CONTROLS: [&str; 5] = [
    "Capabilities",
    "Privileged Containers",
    "Host Ports",
    "/proc Mount Type",
    "Privilege Escalation",
];

/// A podSecurity exclusion names images for a container-level control
/// and none for a pod-level one, `values` with `restrictedField`, and at
/// `baseline` no control only `restricted` has.
fn pod_security_excludes(path: &str, rule: &Value) -> Vec<String> {
    let ps = &rule["validate"]["podSecurity"];
    let mut errs = Vec::new();
    let baseline = ps["level"] == "baseline";
    for (i, ex) in ps["exclude"].as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}.podSecurity.exclude[{i}]");
        let control = ex["controlName"].as_str().unwrap_or_default();
        let images = ex["images"].as_array().is_some_and(|a| !a.is_empty());
        if CONTAINER_LEVEL_CONTROLS.contains(&control) && !images {
            errs.push(format!(
                "{at}.controlName: Invalid value: {control:?}: exclude.images must be specified for \
                 the container level control"
            ));
        } else if POD_LEVEL_CONTROLS.contains(&control) && images {
            errs.push(format!(
                "{at}.controlName: Invalid value: {control:?}: exclude.images must not be specified \
                 for the pod level control"
            ));
        }
        let field = ex["restrictedField"]
            .as_str()
            .is_some_and(|f| !f.is_empty());
        let values = ex["values"].as_array().is_some_and(|a| !a.is_empty());
        if field && !values {
            errs.push(format!("{at}.values: Forbidden: values is required"));
        }
        if !field && values {
            errs.push(format!(
                "{at}.restrictedField: Forbidden: restrictedField is required"
            ));
        }
        if baseline
            && !matches!(control, "Seccomp" | "Capabilities")
            && RESTRICTED_CONTROLS.contains(&control)
        {
            errs.push(format!(
                "{at}.controlName: Invalid value: {control:?}: Invalid control name defined at the \
                 given level"
            ));
        }
    }
    errs
}

/// Where a generate rule writes: a namespaced Policy only into its own
/// namespace (and clones only from it), a namespaced kind into a
/// namespace and a cluster-wide kind into none. The scope of a kind comes
/// from gavel's table of built-in kinds; another kind's is not checked.
fn generate_scope(
    path: &str,
    rule: &Value,
    namespaced: bool,
    policy_namespace: &str,
) -> Vec<String> {
    let generate = &rule["generate"];
    if generate.is_null() {
        return Vec::new();
    }
    let patterns: Vec<(String, &Value)> = match generate["foreach"].as_array() {
        Some(each) if !each.is_empty() => each
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("{path}.foreach[{i}]"), g))
            .collect(),
        _ => vec![(path.to_string(), generate)],
    };
    let mut errs = Vec::new();
    for (at, g) in patterns {
        let text = |f: &str| g[f].as_str().unwrap_or_default();
        let (api_version, kind, namespace) = (text("apiVersion"), text("kind"), text("namespace"));
        let cluster_wide = crate::kinds::builtin(api_version, kind).map(|k| !k.namespaced);
        if namespaced {
            let mismatch = if cluster_wide == Some(true) {
                Some(format!(
                    "the target must be a namespaced resource: {api_version}/{kind}"
                ))
            } else if namespace != policy_namespace {
                Some(format!(
                    "a namespaced policy cannot generate resources in other namespaces, expected: \
                     {policy_namespace}, received: {namespace}"
                ))
            } else {
                let clone = &g["clone"];
                (clone["name"].as_str().is_some_and(|n| !n.is_empty())
                    && clone["namespace"].as_str().unwrap_or_default() != policy_namespace)
                    .then(|| {
                        format!(
                            "a namespaced policy cannot clone resources from other namespaces, \
                             expected: {policy_namespace}, received: {}",
                            clone["namespace"].as_str().unwrap_or_default()
                        )
                    })
            };
            if let Some(why) = mismatch {
                errs.push(format!(
                    "{at}.namespace: Forbidden: target resource scope mismatched: {why} "
                ));
            }
        }
        if !kind.is_empty() && !kind.contains("{{") {
            match cluster_wide {
                Some(false) if namespace.is_empty() => errs.push(format!(
                    "{at}.namespace: Forbidden: target namespace must be set for a namespaced \
                     resource"
                )),
                Some(true) if !namespace.is_empty() => errs.push(format!(
                    "{at}.namespace: Forbidden: target namespace must not be set for a \
                     cluster-wide resource"
                )),
                _ => {}
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster_policy(spec: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
               "metadata": {"name": "p"}, "spec": spec})
    }

    fn rule(extra: Value) -> Value {
        let mut r = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}});
        r.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        r
    }

    fn deny() -> Value {
        json!({"validate": {"message": "m", "deny": {}}})
    }

    #[test]
    fn kyverno_s_refusals_in_its_words() {
        let cases = [
            (
                json!({"rules": [rule(json!({"validate": {"message": "{{ request.userInfo.username }}", "deny": {}}}))]}),
                "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: variable {{ request.userInfo.username }} is not allowed ",
            ),
            (
                json!({"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}, "clusterRoles": ["admin"]}]}, "validate": {"message": "m", "deny": {}}}]}),
                "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: invalid variable used at path: spec/rules[0]/match/any[0]/clusterRoles ",
            ),
            (
                json!({"admission": false, "background": false, "rules": [rule(deny())]}),
                "disabling both admission and background processing is not allowed",
            ),
            (
                json!({"admission": false, "rules": [rule(json!({"mutate": {"patchStrategicMerge": {}}}))]}),
                "disabling admission processing is only allowed with validation policies",
            ),
            (
                json!({"webhookConfiguration": {"timeoutSeconds": 31}, "rules": [rule(deny())]}),
                "spec.webhookConfiguration.timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            ),
            (
                json!({"rules": [rule(json!({"mutate": {"mutateExistingOnPolicyUpdate": true, "patchStrategicMerge": {}}}))]}),
                "spec.mutateExistingOnPolicyUpdate: Forbidden: rules[0].mutate.targets has to be specified when mutateExistingOnPolicyUpdate is set",
            ),
            (
                json!({"rules": [rule(json!({"validate": {"podSecurity": {"level": "baseline", "exclude": [{"controlName": "Capabilities"}]}}}))]}),
                "spec.rules[0].podSecurity.exclude[0].controlName: Invalid value: \"Capabilities\": exclude.images must be specified for the container level control",
            ),
            (
                json!({"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["*"]}}]}, "validate": {"message": "m", "deny": {}}}]}),
                "path: spec.rules[0].match.any[0].kinds: wildcard policy not allowed in background mode. Set spec.background=false to disable background mode for this policy rule ",
            ),
            (
                json!({"rules": [rule(json!({"generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "data": {}}}))]}),
                "spec.rules[0].namespace: Forbidden: target namespace must be set for a namespaced resource",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(
                refusal(&cluster_policy(spec.clone())).as_deref(),
                Some(want),
                "{spec}"
            );
        }
        // Two field errors are listed together.
        let two = json!({"webhookTimeoutSeconds": 0, "webhookConfiguration": {"timeoutSeconds": 40}, "rules": [rule(deny())]});
        assert!(
            refusal(&cluster_policy(two))
                .unwrap()
                .starts_with("[spec.webhookTimeoutSeconds: Invalid value: 0")
        );
        // In force as written: nothing refused.
        assert_eq!(
            refusal(&cluster_policy(json!({"rules": [rule(deny())]}))),
            None
        );
        assert_eq!(
            refusal(&cluster_policy(
                json!({"background": false, "rules": [rule(json!({"validate": {"message": "{{ request.userInfo.username }}", "deny": {}}}))]})
            )),
            None
        );
    }

    #[test]
    fn a_namespaced_policy_generates_into_its_own_namespace() {
        let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"rules": [rule(json!({"generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "b", "data": {}}}))]}});
        assert_eq!(
            refusal(&policy).as_deref(),
            Some(
                "spec.rules[0].namespace: Forbidden: target resource scope mismatched: a namespaced policy cannot generate resources in other namespaces, expected: a, received: b "
            )
        );
    }

    #[test]
    fn cel_kinds_refusals() {
        let mpol = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
            "metadata": {"name": "m"},
            "spec": {"evaluation": {"admission": {"enabled": false}},
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]}}});
        assert_eq!(
            refusal(&mpol).as_deref(),
            Some(
                "spec.evaluation: Forbidden: disabling both admission and mutateExisting evaluation modes is not allowed"
            )
        );
        let nvpol = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy",
            "metadata": {"name": "v", "namespace": "a"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]},
                     "validations": [{"expression": "globalContext.Get('e', '') == null"}]}});
        assert_eq!(
            refusal(&nvpol).as_deref(),
            Some("spec: Forbidden: globalContext.* is not allowed in namespaced policies")
        );
        let empty = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": "v"}, "spec": {"matchConstraints": {"resourceRules": []}}});
        assert!(
            refusal(&empty)
                .unwrap()
                .starts_with("spec.matchConstraints: Required value")
        );
    }
}
