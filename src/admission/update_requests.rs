//! The background work an admitted request leaves behind (see
//! docs/kyverno-semantics.md#mutate-existing, #generate-flow, #updaterequests),
//! as Kyverno's webhook leaves it: one `UpdateRequest`
//! (kyverno.io/v2) per policy whose generate rules the request concerns,
//! and one per mutate-existing rule it triggers. The request only
//! names the work; the background controller does it, on the leader,
//! after reading the trigger back from the API server. So the hot path
//! checks `match`/`exclude` alone (no context entries, no preconditions,
//! no API calls) and the background controller evaluates the rest; a rule
//! whose preconditions fail leaves a request that completes with nothing
//! to create.
//!
//! What counts as work:
//! - a trigger created or updated: generate its downstream;
//! - a trigger deleted, or updated so that it no longer matches, under
//!   `synchronize: true`: delete its downstream (a rule that lists DELETE
//!   among its operations generates on deletion instead);
//! - a downstream resource of a `synchronize: true` rule changed or
//!   deleted by someone else: generate it again from its trigger (the
//!   labels Kyverno puts on downstream resources name the policy, rule and
//!   trigger);
//! - a trigger of a mutate-existing rule (`mutate.targets`) created or
//!   updated (deleted, when the rule lists DELETE): patch its targets;
//! - a trigger of a MutatingPolicy with mutate existing, for an operation
//!   its matchConstraints list: patch its targets (Kyverno's `cel-mutate`).

use super::review::Review;
use crate::engine::Request;
use crate::engine::cel::constraints_select;
use crate::json_doc::JsonRef;
use crate::matching::MatchInput;
use crate::policy::cel_policy::{CompiledGeneratingPolicy, CompiledMutatingPolicy};
use crate::policy::{CompiledPolicy, CompiledRule, RuleBody};
use serde_json::{Map, Value, json};

/// Where admitted requests hand their generate work; the cluster writes it
/// to the API server. `submit` itself does not block; the server awaits
/// what it returns, within the request's deadline, before it answers, so
/// that work a replica admitted is in the API server before the trigger is
/// (a replica killed after answering loses nothing).
pub trait UpdateRequestSink: Send + Sync {
    fn submit(&self, requests: Vec<UpdateRequestSpec>) -> Written;
}

/// Completes once the submitted requests are written (or refused for good).
pub type Written = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Standalone (no cluster): nothing to hand the work to.
pub struct NoUpdateRequests;

impl UpdateRequestSink for NoUpdateRequests {
    fn submit(&self, _: Vec<UpdateRequestSpec>) -> Written {
        Box::pin(std::future::ready(()))
    }
}

/// One UpdateRequest to create: its `spec`, and who caused it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRequestSpec {
    pub spec: Value,
    /// Work that gavel's own writes must not cause: a change to a
    /// downstream resource, or a mutate-existing trigger. The sink drops
    /// it when the background controller made the change itself (as
    /// Kyverno skips its own service account), or it would chase its own
    /// writes.
    pub not_for_own_writes: bool,
    pub username: String,
}

/// Kyverno's labels on downstream resources
/// (docs/kyverno-semantics.md#downstream-labels).
pub mod labels {
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const POLICY_NAME: &str = "generate.kyverno.io/policy-name";
    pub const POLICY_NAMESPACE: &str = "generate.kyverno.io/policy-namespace";
    pub const RULE_NAME: &str = "generate.kyverno.io/rule-name";
    pub const TRIGGER_NAME: &str = "generate.kyverno.io/trigger-name";
    pub const TRIGGER_NAMESPACE: &str = "generate.kyverno.io/trigger-namespace";
    pub const TRIGGER_UID: &str = "generate.kyverno.io/trigger-uid";
    pub const TRIGGER_KIND: &str = "generate.kyverno.io/trigger-kind";
    pub const TRIGGER_GROUP: &str = "generate.kyverno.io/trigger-group";
    pub const TRIGGER_VERSION: &str = "generate.kyverno.io/trigger-version";
}

/// The UpdateRequests of an admitted `review` for the policies `selected`
/// (indexes into `policies`). Dry runs leave none.
pub fn for_review(
    policies: &[CompiledPolicy],
    selected: &[usize],
    review: &Review,
) -> Vec<UpdateRequestSpec> {
    if review.dry_run || selected.is_empty() {
        return Vec::new();
    }
    let req = &review.request;
    // The request's match input, once for every rule; the old object's
    // only when a synchronized rule no longer matches an update.
    let input = req.match_input();
    let old = std::cell::OnceCell::new();
    let old_request = || {
        old.get_or_init(|| Request {
            object: req.old_object.clone(),
            ..req.clone()
        })
    };
    let mut out = Vec::new();
    for &i in selected {
        let policy = &policies[i];
        if !in_scope(policy, req) {
            continue;
        }
        let contexts = rule_contexts(policy, req, &input, old_request);
        if !contexts.is_empty() {
            let resource = contexts[0]["trigger"].clone();
            out.push(UpdateRequestSpec {
                spec: spec(policy.qualified_name(), contexts, resource, review),
                not_for_own_writes: false,
                username: req.user.username.clone(),
            });
        }
        out.extend(mutate_existing(policy, review, &input));
    }
    if let Some(regenerate) = downstream_change(policies, review) {
        out.push(regenerate);
    }
    out
}

/// A namespaced Policy sees only its own namespace.
fn in_scope(policy: &CompiledPolicy, req: &Request) -> bool {
    policy.namespace.is_none() || policy.namespace.as_deref() == Some(req.namespace())
}

/// Whether a rule lists DELETE among its operations (then a deletion
/// triggers it, rather than deleting its downstream).
fn lists_delete(rule: &CompiledRule) -> bool {
    rule.match_resources
        .possible_operations()
        .is_some_and(|ops| ops.iter().any(|o| o == "DELETE"))
}

/// The rule contexts of one policy for a trigger request.
fn rule_contexts<'r>(
    policy: &CompiledPolicy,
    req: &Request,
    input: &MatchInput,
    old_request: impl Fn() -> &'r Request,
) -> Vec<Value> {
    let mut out = Vec::new();
    for rule in &policy.rules {
        let RuleBody::Generate(g) = &rule.body else {
            continue;
        };
        let synchronize = g.spec.synchronize.unwrap_or(false);
        let context = |delete: bool, trigger: &Value| {
            json!({
                "rule": rule.name,
                "deleteDownstream": delete,
                "synchronize": synchronize,
                "trigger": resource_spec(trigger),
            })
        };
        let matched = rule.selects(input);
        match req.operation.as_str() {
            "DELETE" if matched && lists_delete(rule) => {
                out.push(context(false, req.old_object.value()))
            }
            "DELETE" if matched && synchronize => out.push(context(true, req.old_object.value())),
            "DELETE" => {}
            _ if matched => out.push(context(false, req.object.value())),
            "UPDATE" if synchronize && rule.selects(&old_request().match_input()) => {
                out.push(context(true, req.old_object.value()))
            }
            _ => {}
        }
    }
    out
}

/// The mutate-existing requests of one policy: one per rule its trigger
/// matches (Kyverno's shape: `rule` and `resource`, no ruleContext).
fn mutate_existing(
    policy: &CompiledPolicy,
    review: &Review,
    input: &MatchInput,
) -> Vec<UpdateRequestSpec> {
    let req = &review.request;
    let delete = req.operation == "DELETE";
    let mut out = Vec::new();
    for rule in &policy.rules {
        let RuleBody::Mutate(m) = &rule.body else {
            continue;
        };
        if m.targets.is_empty() || !rule.selects(input) || (delete && !lists_delete(rule)) {
            continue;
        }
        let mut spec = spec(
            policy.qualified_name(),
            Vec::new(),
            resource_spec(req.resource().value()),
            review,
        );
        spec["requestType"] = Value::from("mutate");
        spec["rule"] = Value::from(rule.name.as_str());
        if let Value::Object(m) = &mut spec {
            m.remove("ruleContext");
        }
        out.push(UpdateRequestSpec {
            spec,
            not_for_own_writes: true,
            username: req.user.username.clone(),
        });
    }
    out
}

/// The UpdateRequests of an admitted `review` for GeneratingPolicies
/// (Kyverno's `cel-generate` requests, one rule context named after the
/// policy). Only matchConstraints are checked here; the background
/// controller evaluates the matchConditions and the generation.
/// - CREATE, UPDATE, DELETE the policy lists: generate (an UPDATE under
///   `synchronize` also deletes what the trigger no longer generates);
/// - an UPDATE after which the object no longer fits the constraints, or
///   a DELETE the policy does not list, under `synchronize`: delete the
///   trigger's downstream.
pub fn for_generating(
    policies: &[CompiledGeneratingPolicy],
    review: &Review,
) -> Vec<UpdateRequestSpec> {
    if review.dry_run || policies.is_empty() {
        return Vec::new();
    }
    let req = &review.request;
    let (object, old) = (req.object.value(), req.old_object.value());
    let selects = |p: &CompiledGeneratingPolicy, o: &Value, op: Option<&str>| {
        !o.is_null() && constraints_select(&p.scope, req, JsonRef::Value(o), op)
    };
    let mut out = Vec::new();
    for policy in policies.iter().filter(|p| p.settings.admission) {
        let sync = policy.settings.synchronize;
        let op = req.operation.as_str();
        let (delete, synchronize, trigger) = match op {
            "CREATE" if selects(policy, object, Some(op)) => (false, false, object),
            "UPDATE" if selects(policy, object, Some(op)) => (false, sync, object),
            "UPDATE" if sync && selects(policy, old, None) && !selects(policy, object, None) => {
                (true, false, old)
            }
            "DELETE" if selects(policy, old, Some(op)) => (false, false, old),
            "DELETE" if sync && selects(policy, old, None) => (true, false, old),
            _ => continue,
        };
        let trigger = resource_spec(trigger);
        let context = json!({
            "rule": policy.scope.name,
            "deleteDownstream": delete,
            "synchronize": synchronize,
            "cacheRestore": false,
            "trigger": trigger,
        });
        let mut spec = spec(&policy.key, vec![context], trigger, review);
        spec["requestType"] = Value::from(CEL_GENERATE);
        out.push(UpdateRequestSpec {
            spec,
            not_for_own_writes: policy.settings.skip_background_requests,
            username: req.user.username.clone(),
        });
    }
    out
}

/// The request type of GeneratingPolicy work (kyverno.io/v2).
pub const CEL_GENERATE: &str = "cel-generate";

/// The request type of MutatingPolicy mutate-existing work (kyverno.io/v2).
pub const CEL_MUTATE: &str = "cel-mutate";

/// The UpdateRequests of an admitted `review` for MutatingPolicies with
/// mutate existing: one per policy whose matchConstraints select the
/// trigger for the request's operation (its last state on DELETE), in
/// Kyverno's `cel-mutate` shape (the policy key, the whole admission
/// request, no rule context). The matchConditions are left to the
/// background controller, as the generation's are.
pub fn for_mutating<'p>(
    policies: impl Iterator<Item = &'p CompiledMutatingPolicy>,
    review: &Review,
) -> Vec<UpdateRequestSpec> {
    if review.dry_run {
        return Vec::new();
    }
    let req = &review.request;
    let trigger = match req.operation.as_str() {
        "DELETE" => req.old_object.value(),
        _ => req.object.value(),
    };
    if trigger.is_null() {
        return Vec::new();
    }
    policies
        .filter(|p| p.admission)
        .filter_map(|p| Some((p, p.existing.as_ref()?)))
        .filter(|(p, _)| {
            constraints_select(&p.scope, req, JsonRef::Value(trigger), Some(&req.operation))
        })
        .map(|(policy, existing)| {
            let mut spec = spec(&policy.key, Vec::new(), resource_spec(trigger), review);
            spec["requestType"] = Value::from(CEL_MUTATE);
            if let Value::Object(m) = &mut spec {
                m.remove("ruleContext");
            }
            UpdateRequestSpec {
                spec,
                not_for_own_writes: existing.skip_background_requests,
                username: req.user.username.clone(),
            }
        })
        .collect()
}

/// A change by someone else to a downstream resource of a synchronized
/// rule: the request to generate it again from its trigger.
fn downstream_change(policies: &[CompiledPolicy], review: &Review) -> Option<UpdateRequestSpec> {
    let req = &review.request;
    if !matches!(req.operation.as_str(), "UPDATE" | "DELETE") {
        return None;
    }
    let labels = req
        .old_object
        .value()
        .pointer("/metadata/labels")?
        .as_object()?;
    let label = |k: &str| labels.get(k).and_then(Value::as_str).unwrap_or_default();
    if label(labels::MANAGED_BY) != "kyverno" || label(labels::POLICY_NAME).is_empty() {
        return None;
    }
    let (name, namespace) = (label(labels::POLICY_NAME), label(labels::POLICY_NAMESPACE));
    let policy = policies
        .iter()
        .find(|p| p.name == name && p.namespace.as_deref().unwrap_or_default() == namespace)?;
    let rule_name = label(labels::RULE_NAME);
    let synchronized = policy.rules.iter().any(|r| {
        r.name == rule_name
            && matches!(&r.body, RuleBody::Generate(g) if g.spec.synchronize == Some(true))
    });
    if !synchronized {
        return None;
    }
    let trigger = trigger_from_labels(label);
    let context = json!({
        "rule": rule_name,
        "deleteDownstream": false,
        "synchronize": true,
        "trigger": trigger,
    });
    let mut spec = spec(policy.qualified_name(), vec![context], trigger, review);
    // The trigger's own admission is long past: what is kept is the
    // change that brought the request, not the trigger's.
    spec["context"]["admissionRequestInfo"] = json!({ "operation": req.operation });
    Some(UpdateRequestSpec {
        spec,
        not_for_own_writes: true,
        username: req.user.username.clone(),
    })
}

/// `{apiVersion, kind, namespace, name, uid}` of the trigger a downstream
/// object's labels name (`label` reads one label, "" when absent).
pub fn trigger_from_labels<'a>(label: impl Fn(&str) -> &'a str) -> Value {
    let (group, version) = (label(labels::TRIGGER_GROUP), label(labels::TRIGGER_VERSION));
    json!({
        "apiVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
        "kind": label(labels::TRIGGER_KIND),
        "namespace": label(labels::TRIGGER_NAMESPACE),
        "name": label(labels::TRIGGER_NAME),
        "uid": label(labels::TRIGGER_UID),
    })
}

/// `{apiVersion, kind, namespace, name, uid}` of an object.
pub fn resource_spec(object: &Value) -> Value {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    json!({
        "apiVersion": text("/apiVersion"),
        "kind": text("/kind"),
        "namespace": text("/metadata/namespace"),
        "name": text("/metadata/name"),
        "uid": text("/metadata/uid"),
    })
}

/// An UpdateRequest spec as Kyverno's webhook writes it, the whole
/// AdmissionRequest included (the background controller evaluates
/// `request.*` from it).
fn spec(policy: &str, contexts: Vec<Value>, resource: Value, review: &Review) -> Value {
    let req = &review.request;
    let gvk =
        |k: &crate::kinds::Gvk| json!({"group": k.group, "version": k.version, "kind": k.kind});
    let gvr = |r: &crate::kinds::Gvr| json!({"group": r.group, "version": r.version, "resource": r.resource});
    let mut request = Map::new();
    request.insert("uid".into(), Value::String(review.uid.clone()));
    request.insert("kind".into(), gvk(&req.object_kind));
    request.insert("resource".into(), gvr(&req.gvr));
    request.insert("subResource".into(), Value::String(req.subresource.clone()));
    request.insert("requestKind".into(), gvk(&req.request_kind));
    request.insert("requestResource".into(), gvr(&req.request_resource));
    request.insert(
        "requestSubResource".into(),
        Value::String(req.request_sub_resource.clone()),
    );
    request.insert("name".into(), Value::String(req.name().to_string()));
    request.insert(
        "namespace".into(),
        Value::String(req.namespace().to_string()),
    );
    request.insert("operation".into(), Value::String(req.operation.clone()));
    request.insert(
        "userInfo".into(),
        json!({"username": req.user.username, "groups": req.user.groups}),
    );
    if !req.object.is_null() {
        request.insert("object".into(), req.object.value().clone());
    }
    if !req.old_object.is_null() {
        request.insert("oldObject".into(), req.old_object.value().clone());
    }
    json!({
        "requestType": "generate",
        "policy": policy,
        "rule": "",
        "deleteDownstream": false,
        "synchronize": false,
        "resource": resource,
        "ruleContext": contexts,
        "context": {
            "userInfo": {
                "roles": req.user.roles,
                "clusterRoles": req.user.cluster_roles,
                "userInfo": {"username": req.user.username, "groups": req.user.groups},
            },
            "admissionRequestInfo": {
                "admissionRequest": Value::Object(request),
                "operation": req.operation,
            },
        },
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mutate_existing_tests {
    use super::*;
    use crate::admission::policies::{Snapshot, load_text};
    use crate::admission::review;

    const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: mutate-existing-secret
spec:
  rules:
  - name: label-secret
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [dictionary-1]
    mutate:
      targets:
      - apiVersion: v1
        kind: Secret
        name: secret-1
        namespace: "{{ request.object.metadata.namespace }}"
      patchStrategicMerge:
        metadata:
          labels:
            foo: bar
"#;

    #[test]
    fn a_trigger_leaves_one_mutate_request_per_rule_in_kyvernos_shape() {
        let s = Snapshot::new(load_text("p.yaml", POLICY).unwrap(), 1);
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "r1", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "namespace": "staging",
                "userInfo": {"username": "bob"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "dictionary-1", "namespace": "staging", "uid": "u1"}},
            }
        });
        let r = review::decode(body.to_string().as_bytes()).unwrap();
        let out = for_review(&s.policies, s.background_indexes(None), &r);
        assert_eq!(out.len(), 1);
        let spec = &out[0].spec;
        assert_eq!(spec["requestType"], "mutate");
        assert_eq!(spec["rule"], "label-secret");
        assert_eq!(spec["resource"]["name"], "dictionary-1");
        assert!(spec.get("ruleContext").is_none());
        assert!(out[0].not_for_own_writes);
        // Deletion does not trigger a rule that does not list DELETE.
        let mut delete = body.clone();
        delete["request"]["operation"] = json!("DELETE");
        delete["request"]["oldObject"] = delete["request"]["object"].take();
        let r = review::decode(delete.to_string().as_bytes()).unwrap();
        assert!(for_review(&s.policies, s.background_indexes(None), &r).is_empty());
    }

    const MUTATING: &str = r#"
apiVersion: policies.kyverno.io/v1beta1
kind: NamespacedMutatingPolicy
metadata:
  name: stamp
  namespace: staging
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps], resourceNames: [dictionary-1]}
  targetMatchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]}
  mutations: []
"#;

    /// A MutatingPolicy with mutate existing leaves Kyverno's `cel-mutate`
    /// request, keyed `namespace/name`, for the operations and names its
    /// constraints list; nothing for a dry run or another namespace.
    #[test]
    fn mutating_policies_leave_cel_mutate_requests() {
        let s = Snapshot::new(load_text("m.yaml", MUTATING).unwrap(), 1);
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "r1", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "namespace": "staging",
                "userInfo": {"username": "bob"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "dictionary-1", "namespace": "staging", "uid": "u1"}},
            }
        });
        let run = |edit: &dyn Fn(&mut Value)| {
            let mut b = body.clone();
            edit(&mut b);
            let r = review::decode(b.to_string().as_bytes()).unwrap();
            for_mutating(s.mutating.iter(), &r)
        };
        let out = run(&|_| {});
        assert_eq!(out.len(), 1);
        let spec = &out[0].spec;
        assert_eq!(spec["requestType"], "cel-mutate");
        assert_eq!(spec["policy"], "staging/stamp");
        assert_eq!(spec["resource"]["uid"], "u1");
        assert!(spec.get("ruleContext").is_none());
        assert_eq!(
            spec["context"]["admissionRequestInfo"]["admissionRequest"]["object"]["metadata"]["name"],
            "dictionary-1"
        );
        assert!(out[0].not_for_own_writes);
        assert!(run(&|b| b["request"]["dryRun"] = json!(true)).is_empty());
        assert!(run(&|b| b["request"]["operation"] = json!("UPDATE")).is_empty());
        assert!(
            run(&|b| b["request"]["object"]["metadata"]["name"] = json!("other")).is_empty(),
            "resourceNames"
        );
        assert!(
            run(&|b| {
                b["request"]["namespace"] = json!("prod");
                b["request"]["object"]["metadata"]["namespace"] = json!("prod");
            })
            .is_empty()
        );
    }
}
