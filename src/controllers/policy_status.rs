//! The leader's policy status duty, as Kyverno's controllers write it
//! (docs/kyverno-semantics.md#policy-status). The kyverno.io kinds get a
//! `Ready` condition in `status.conditions`: `True` (reason `Succeeded`)
//! when the latest version is in force, `False` (reason `Failed`, with
//! why) when it was rejected. The policies.kyverno.io kinds get
//! `status.conditionStatus` with Kyverno's conditions, `WebhookConfigured`
//! (the webhook configuration covers what the policy matches) and
//! `RBACPermissionsGranted` (gavel's identity may read what the policy's
//! reports need), `ready` the AND of every condition; a rejected version
//! gets `PolicyCached` False with why. Written through the status
//! subresource, only when it differs from what the object has, so running
//! it twice changes nothing; a condition's `lastTransitionTime` moves only
//! when its status flips.

use crate::cluster::policy_sync::Statuses;
use crate::cluster::stores::{cluster_policy_resource, policy_resource, qualified_kind};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Whether a kind keeps its conditions in `status.conditionStatus` (the
/// policies.kyverno.io kinds).
pub fn uses_condition_status(api_version: &str) -> bool {
    api_version.starts_with("policies.kyverno.io/")
}

/// The status patch that says whether a policy's latest version is in
/// force; None when `object` says so already.
pub fn ready_patch(
    condition_status: bool,
    status: &Result<(), String>,
    object: &Value,
) -> Option<Value> {
    let (state, reason, message) = match status {
        Ok(()) => ("True", "Succeeded", "Ready".to_string()),
        Err(reason) => ("False", "Failed", reason.clone()),
    };
    let held = if condition_status {
        &object["status"]["conditionStatus"]["conditions"]
    } else {
        &object["status"]["conditions"]
    };
    let current = held
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    if current.is_some_and(|c| {
        c["status"] == state && c["reason"] == reason && c["message"] == message.as_str()
    }) {
        return None;
    }
    let condition = json!({
        "type": "Ready", "status": state, "reason": reason, "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
    });
    Some(if condition_status {
        json!({"status": {"conditionStatus": {
            "ready": state == "True", "message": message, "conditions": [condition],
        }}})
    } else {
        json!({"status": {"conditions": [condition]}})
    })
}

/// The kinds whose status the cleanup duty writes (with [`ready_patch`]).
fn written_by_cleanup(kind: &str) -> bool {
    matches!(kind, "DeletingPolicy" | "NamespacedDeletingPolicy")
}

/// The condition of one type a policy should hold, without its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub type_: &'static str,
    pub ok: bool,
    pub message: String,
}

impl Condition {
    fn new(type_: &'static str, ok: bool, message: impl Into<String>) -> Condition {
        Condition {
            type_,
            ok,
            message: message.into(),
        }
    }
}

/// The condition types this duty manages on the policies.kyverno.io
/// kinds; others found on an object are kept, as Kyverno keeps them. The
/// `Ready` type is gavel's earlier one, replaced by these.
const MANAGED: [&str; 4] = [
    "WebhookConfigured",
    "RBACPermissionsGranted",
    "PolicyCached",
    "Ready",
];

/// The `conditionStatus` patch that gives `object` the conditions
/// `wanted`; None when it holds them already. Conditions of other types
/// stay; one whose status is unchanged keeps its `lastTransitionTime`.
pub fn condition_status_patch(
    object: &Value,
    wanted: &[Condition],
    message: &str,
) -> Option<Value> {
    let held = &object["status"]["conditionStatus"];
    let current: Vec<Value> = held["conditions"].as_array().cloned().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut conditions: Vec<Value> = current
        .iter()
        .filter(|c| {
            let t = c["type"].as_str().unwrap_or_default();
            !MANAGED.contains(&t) || wanted.iter().any(|w| w.type_ == t)
        })
        .cloned()
        .collect();
    for w in wanted {
        let (status, reason) = if w.ok {
            ("True", "Succeeded")
        } else {
            ("False", "Failed")
        };
        let condition = |time: &Value| {
            json!({"type": w.type_, "status": status, "reason": reason,
                   "message": w.message, "lastTransitionTime": time})
        };
        match conditions.iter_mut().find(|c| c["type"] == w.type_) {
            Some(c) => {
                let time = if c["status"] == status {
                    c["lastTransitionTime"].clone()
                } else {
                    Value::String(now.clone())
                };
                *c = condition(&time);
            }
            None => conditions.push(condition(&Value::String(now.clone()))),
        }
    }
    let ready = conditions.iter().all(|c| c["status"] == "True");
    let unchanged = held["ready"] == ready
        && held["message"] == message
        && held["conditions"].as_array().is_some_and(|cs| {
            cs.len() == conditions.len()
                && cs.iter().zip(&conditions).all(|(a, b)| {
                    ["type", "status", "reason", "message"]
                        .iter()
                        .all(|k| a[k] == b[k])
                })
        });
    if unchanged {
        return None;
    }
    Some(json!({"status": {"conditionStatus": {
        "ready": ready, "message": message, "conditions": conditions,
    }}}))
}

/// The conditions Kyverno's status controller gives a CEL policy in
/// force: whether the webhook covers it (not for a policy evaluated only
/// in the background), and whether its reports can be made.
async fn cel_conditions(
    client: &Client,
    (validating_name, mutating_name): &(String, String),
    kind: &str,
    object: &Value,
) -> Vec<Condition> {
    let spec = &object["spec"];
    let enabled = |mode: &str| spec["evaluation"][mode]["enabled"].as_bool() != Some(false);
    let mutating = kind.ends_with("MutatingPolicy");
    let generating = kind.ends_with("GeneratingPolicy");
    let background_only = if mutating {
        !enabled("admission")
    } else {
        !generating && !enabled("admission") && enabled("background")
    };
    let rules = resource_rules(spec);
    let mut out = Vec::new();
    if !background_only {
        let configuration = if mutating {
            ("mutatingwebhookconfigurations", mutating_name.as_str())
        } else {
            ("validatingwebhookconfigurations", validating_name.as_str())
        };
        let covered = webhook_covers(client, configuration, &rules).await;
        out.push(if covered {
            Condition::new("WebhookConfigured", true, "Webhook configured.")
        } else {
            Condition::new(
                "WebhookConfigured",
                false,
                "Policy is not configured in the webhook.",
            )
        });
    }
    out.push(if !generating && !enabled("background") {
        Condition::new(
            "RBACPermissionsGranted",
            true,
            "Background scanning disabled; reporting permissions not required.",
        )
    } else {
        let mut targets = rules.clone();
        if pods_only(&rules) {
            targets.extend(
                AUTOGEN_TARGETS
                    .iter()
                    .map(|(g, v, r)| Gvr::new(g, v, r, &[])),
            );
        }
        match missing_permissions(client, &targets).await {
            missing if missing.is_empty() => Condition::new(
                "RBACPermissionsGranted",
                true,
                "Policy is ready for reporting.",
            ),
            missing => Condition::new(
                "RBACPermissionsGranted",
                false,
                format!(
                    "Policy is not ready for reporting, missing permissions: {}.",
                    missing.join("; ")
                ),
            ),
        }
    });
    out
}

/// The Pod controllers Kyverno's CEL autogen adds for a Pod policy,
/// whose reports it also checks.
const AUTOGEN_TARGETS: [(&str, &str, &str); 6] = [
    ("apps", "v1", "daemonsets"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "statefulsets"),
    ("batch", "v1", "jobs"),
    ("batch", "v1", "cronjobs"),
];

/// One group, version and resource a policy matches, with the operations.
#[derive(Debug, Clone, PartialEq)]
struct Gvr {
    group: String,
    version: String,
    resource: String,
    operations: Vec<String>,
}

impl Gvr {
    fn new(group: &str, version: &str, resource: &str, operations: &[String]) -> Gvr {
        Gvr {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            operations: operations.to_vec(),
        }
    }
}

/// Every group x version x resource of `spec.matchConstraints.resourceRules`.
fn resource_rules(spec: &Value) -> Vec<Gvr> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let mut out = Vec::new();
    for rule in spec["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let operations = strings(&rule["operations"]);
        for group in strings(&rule["apiGroups"]) {
            for version in strings(&rule["apiVersions"]) {
                for resource in strings(&rule["resources"]) {
                    out.push(Gvr::new(&group, &version, &resource, &operations));
                }
            }
        }
    }
    out
}

/// Whether `rules` match Pods and nothing else, as Kyverno's CEL autogen
/// requires.
fn pods_only(rules: &[Gvr]) -> bool {
    rules.len() == 1
        && rules[0].group.is_empty()
        && rules[0].version == "v1"
        && rules[0].resource == "pods"
}

/// Whether gavel's webhook configuration (`plural`, `name`) has a rule
/// for every resource and operation of `rules`. A resource the policy
/// names with `*` is covered by any rule of its group: gavel registers
/// the kinds discovery resolves it to.
async fn webhook_covers(client: &Client, (plural, name): (&str, &str), rules: &[Gvr]) -> bool {
    let Some(registered) = webhook_rules(client, plural, name).await else {
        return false;
    };
    let lists = |r: &Value, field: &str, want: &str| {
        r[field]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == want))
    };
    !rules.is_empty()
        && rules.iter().all(|gvr| {
            registered.iter().any(|r| {
                lists(r, "apiGroups", &gvr.group)
                    && lists(r, "apiVersions", &gvr.version)
                    && (lists(r, "resources", &gvr.resource)
                        || gvr.resource.starts_with('*')
                            && r["resources"].as_array().is_some_and(|l| !l.is_empty()))
                    && gvr
                        .operations
                        .iter()
                        .all(|op| op == "*" || lists(r, "operations", op))
            })
        })
}

/// Whether gavel's webhook configurations cover every kind a ClusterPolicy
/// or Policy matches: as Kyverno's, its `Ready` condition says the policy
/// is enforced, not only loaded. Mutate rules (not mutate existing) are on
/// the mutating side, every other rule on the validating side. A kind is
/// covered when a webhook rule names its resource (the API server's
/// plural for a built-in kind, the guessed plural for another) or `*`;
/// a `*` kind by any rule.
async fn classic_covered(
    client: &Client,
    (validating, mutating): &(String, String),
    object: &Value,
) -> bool {
    let mut sides: [(Vec<String>, bool); 2] = [(Vec::new(), false), (Vec::new(), false)];
    for rule in object["spec"]["rules"].as_array().into_iter().flatten() {
        let side = usize::from(
            rule.get("mutate")
                .is_some_and(|m| m.get("targets").is_none()),
        );
        sides[side].1 = true;
        let m = &rule["match"];
        let filters = m["any"]
            .as_array()
            .into_iter()
            .chain(m["all"].as_array())
            .flatten()
            .map(|f| &f["resources"])
            .chain(std::iter::once(&m["resources"]));
        for resources in filters {
            for kind in resources["kinds"].as_array().into_iter().flatten() {
                if let Some(k) = kind.as_str() {
                    sides[side].0.push(k.to_string());
                }
            }
        }
    }
    for ((kinds, used), (plural, name)) in sides.iter().zip([
        ("validatingwebhookconfigurations", validating),
        ("mutatingwebhookconfigurations", mutating),
    ]) {
        if !used {
            continue;
        }
        let Some(registered) = webhook_rules(client, plural, name).await else {
            return false;
        };
        let names = |r: &Value, want: &str| {
            r["resources"].as_array().is_some_and(|l| {
                l.iter().any(|x| {
                    x == "*"
                        || x == want
                        || x.as_str().is_some_and(|x| {
                            x.strip_prefix(want)
                                .is_some_and(|rest| rest.starts_with('/'))
                        })
                })
            })
        };
        let covered = kinds
            .iter()
            .all(|selector| match selector_resource(selector) {
                None => !registered.is_empty(),
                Some(plural) => registered.iter().any(|r| names(r, &plural)),
            });
        if !covered {
            return false;
        }
    }
    true
}

/// The resource a kind selector (`Kind`, `Version/Kind`,
/// `Group/Version/Kind`, with an optional subresource: `Pod/exec`,
/// `Pod.status`) names: the API server's plural for a built-in kind, the
/// guessed plural for another; None for `*`.
fn selector_resource(selector: &str) -> Option<String> {
    let kind = selector
        .split('/')
        .rev()
        .find(|p| p.starts_with(|c: char| c.is_ascii_uppercase()) || *p == "*")
        .unwrap_or(selector);
    let kind = kind.split('.').next().unwrap_or(kind);
    if kind == "*" {
        return None;
    }
    Some(
        crate::kinds::builtin_kinds()
            .iter()
            .find(|k| k.kind == kind)
            .map_or_else(
                || crate::kinds::guess_plural(kind),
                |k| k.plural.to_string(),
            ),
    )
}

/// The rules of every webhook of gavel's configuration `name`; None when
/// it is not there.
async fn webhook_rules(client: &Client, plural: &str, name: &str) -> Option<Vec<Value>> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: String::new(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let configuration = api.get_opt(name).await.ok()??;
    let configuration = serde_json::to_value(&configuration).unwrap_or_default();
    Some(
        configuration["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|w| w["rules"].as_array().cloned().unwrap_or_default())
            .collect(),
    )
}

/// The reads gavel may not make on `targets` (get, list and watch in
/// every namespace, as reports need), asked of the API server with
/// SelfSubjectAccessReviews and worded as Kyverno words them
/// (`<verb> <group>/<version>, Resource=<resource>: <reason>`).
async fn missing_permissions(client: &Client, targets: &[Gvr]) -> Vec<String> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for gvr in targets {
        for verb in ["get", "list", "watch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(gvr.group.clone()),
                        version: Some(gvr.version.clone()),
                        resource: Some(gvr.resource.clone()),
                        verb: Some(verb.into()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let what = format!(
                "{verb} {}/{}, Resource={}",
                gvr.group, gvr.version, gvr.resource
            );
            match api.create(&Default::default(), &review).await {
                Ok(answer) => {
                    let status = answer.status.unwrap_or_default();
                    if !status.allowed {
                        missing.push(format!("{what}: {}", status.reason.unwrap_or_default()));
                    }
                }
                Err(e) => missing.push(format!("{what}: {e}")),
            }
        }
    }
    missing
}

/// Writes one object's status if it differs. Ok(true) when the policy
/// is in force but the webhook does not cover it yet: the webhooks duty
/// (perhaps on another replica) is about to register it, so the status is
/// looked at again shortly rather than at the next resync.
async fn reconcile_one(
    duty: &StatusDuty,
    (kind, namespace, name): &(String, String, String),
    status: &Result<(), String>,
) -> Result<bool, kube::Error> {
    let (client, cel_kinds) = (&duty.client, &duty.cel_kinds);
    // PolicyExceptions (of either group) have no status subresource: their
    // CRDs declare none, and Kyverno writes them no condition.
    let Some(resource) = [cluster_policy_resource(), policy_resource()]
        .into_iter()
        .chain(cel_kinds.iter().cloned())
        .filter(|r| r.kind != "PolicyException")
        .find(|r| qualified_kind(r) == *kind)
    else {
        return Ok(false);
    };
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    let Some(object) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let object = serde_json::to_value(&object).unwrap_or_default();
    let mut uncovered = false;
    let patch =
        if uses_condition_status(&resource.api_version) && !written_by_cleanup(&resource.kind) {
            let (wanted, message) = match status {
                Ok(()) => (
                    cel_conditions(client, &duty.webhooks, &resource.kind, &object).await,
                    String::new(),
                ),
                Err(reason) => (
                    vec![Condition::new("PolicyCached", false, reason.clone())],
                    reason.clone(),
                ),
            };
            uncovered = wanted
                .iter()
                .any(|c| c.type_ == "WebhookConfigured" && !c.ok);
            condition_status_patch(&object, &wanted, &message)
        } else if !written_by_cleanup(&resource.kind)
            && status.is_ok()
            && object["spec"]["admission"] != false
            && !classic_covered(client, &duty.webhooks, &object).await
        {
            uncovered = true;
            ready_patch(false, &Err("Not Ready".to_string()), &object)
        } else {
            ready_patch(
                uses_condition_status(&resource.api_version),
                status,
                &object,
            )
        };
    if let Some(patch) = patch {
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(uncovered)
}

/// What the duty writes with and reads.
pub struct StatusDuty {
    pub client: Client,
    /// The CEL policy kinds the API server serves.
    pub cel_kinds: Vec<ApiResource>,
    /// The names of the validating and mutating webhook configurations
    /// the webhooks duty keeps.
    pub webhooks: (String, String),
}

/// Runs the duty while `leading` says this replica leads: on every status
/// change, and every `resync` to repair edits made by others (and to see
/// the webhook configuration and permissions change).
pub async fn run(
    duty: StatusDuty,
    mut statuses: watch::Receiver<Arc<Statuses>>,
    mut leading: watch::Receiver<bool>,
    resync: Duration,
) {
    // Until when a policy waiting for the webhook is looked at often: a
    // minute after a policy changed or the lead was taken.
    let mut fast_window: Option<std::time::Instant> = None;
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let current = statuses.borrow_and_update().clone();
        let now = std::time::Instant::now();
        let fast_until = *fast_window.get_or_insert(now + Duration::from_secs(60));
        let mut waiting = false;
        for (key, status) in current.iter() {
            match reconcile_one(&duty, key, status).await {
                Ok(uncovered) => waiting |= uncovered,
                Err(e) => {
                    tracing::warn!(kind = key.0, namespace = key.1, name = key.2, error = %e, "policy status not written; retrying");
                }
            }
        }
        // A policy waiting for the webhook is looked at again within
        // seconds (tools wait on its status); one the webhook never covers
        // waits for the resync.
        let next = if waiting && std::time::Instant::now() < fast_until {
            resync.min(Duration::from_secs(2))
        } else {
            resync
        };
        tokio::select! {
            _ = statuses.changed() => fast_window = None,
            _ = tokio::time::sleep(next) => {}
            _ = leading.changed() => fast_window = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kyverno's conditions replace gavel's earlier `Ready`; `ready` is
    /// their AND; a condition keeps its time while its status holds, and
    /// types the duty does not manage stay.
    #[test]
    fn condition_status_is_kyverno_s() {
        let held = json!({"status": {"conditionStatus": {"ready": true, "message": "Ready", "conditions": [
            {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Custom", "status": "True", "reason": "Succeeded", "message": "kept",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}}});
        let wanted = [
            Condition::new("WebhookConfigured", true, "Webhook configured."),
            Condition::new(
                "RBACPermissionsGranted",
                false,
                "Policy is not ready for reporting, missing permissions: x.",
            ),
        ];
        let patch = condition_status_patch(&held, &wanted, "").unwrap();
        let cs = &patch["status"]["conditionStatus"];
        assert_eq!(cs["ready"], false);
        assert_eq!(cs["message"], "");
        let types: Vec<&str> = cs["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["Custom", "WebhookConfigured", "RBACPermissionsGranted"]
        );
        assert_eq!(cs["conditions"][2]["reason"], "Failed");
        // Written once: nothing more to write; a flip moves only its time.
        let now = json!({"status": {"conditionStatus": cs.clone()}});
        assert!(condition_status_patch(&now, &wanted, "").is_none());
        let mut aged = now.clone();
        for c in aged["status"]["conditionStatus"]["conditions"]
            .as_array_mut()
            .unwrap()
        {
            c["lastTransitionTime"] = json!("2026-01-01T00:00:00Z");
        }
        let granted = [
            wanted[0].clone(),
            Condition::new(
                "RBACPermissionsGranted",
                true,
                "Policy is ready for reporting.",
            ),
        ];
        let patch = condition_status_patch(&aged, &granted, "").unwrap();
        let cs = &patch["status"]["conditionStatus"];
        assert_eq!(cs["ready"], true);
        assert_eq!(
            cs["conditions"][1]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_ne!(
            cs["conditions"][2]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn kind_selectors_name_their_resources() {
        for (selector, resource) in [
            ("Pod", Some("pods")),
            ("apps/v1/Deployment", Some("deployments")),
            ("Deployment/scale", Some("deployments")),
            ("example.com/v1/Widget/scale", Some("widgets")),
            ("Pod.status", Some("pods")),
            ("v1/Endpoints", Some("endpoints")),
            ("*", None),
        ] {
            assert_eq!(
                selector_resource(selector).as_deref(),
                resource,
                "{selector}"
            );
        }
    }

    #[test]
    fn resource_rules_are_every_group_version_and_resource() {
        let spec = json!({"matchConstraints": {"resourceRules": [
            {"apiGroups": ["", "apps"], "apiVersions": ["v1"], "resources": ["pods", "deployments"],
             "operations": ["CREATE"]}
        ]}});
        let rules = resource_rules(&spec);
        assert_eq!(rules.len(), 4);
        assert!(!pods_only(&rules));
        assert!(pods_only(&rules[..1]));
    }

    #[test]
    fn ready_conditions_say_whether_a_policy_is_in_force() {
        let bad: Result<(), String> = Err("spec.schedule: invalid".into());
        let patch = ready_patch(false, &bad, &json!({})).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("Failed"))
        );
        assert_eq!(c["message"], "spec.schedule: invalid");
        let patch = ready_patch(true, &bad, &json!({})).unwrap();
        assert_eq!(patch["status"]["conditionStatus"]["ready"], false);
        // Written once: the object holding it needs no patch.
        let held =
            json!({"status": {"conditionStatus": patch["status"]["conditionStatus"].clone()}});
        assert!(ready_patch(true, &bad, &held).is_none());
        assert!(ready_patch(true, &Ok(()), &held).is_some());
        assert!(uses_condition_status("policies.kyverno.io/v1beta1"));
        assert!(!uses_condition_status("kyverno.io/v2"));
    }
}
