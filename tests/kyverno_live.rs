//! Kyverno's behaviours in a live cluster that `kyverno test` never
//! exercises, on the real control plane of `e2e/cluster.sh`: the same
//! policies and objects applied with kubectl, each step asserting what a
//! Kyverno user sees (messages as Kyverno words them).
//!
//! The steps name no engine: they read only the API server's answers and
//! the objects it stores. `on_gavel` runs them with gavel's chart (one
//! replica); `on_kyverno` (ignored: it needs `e2e/cluster.sh build
//! kyverno`, a long Go build) runs the very same steps with Kyverno
//! v1.19.1's admission controller as its chart configures it, which is how
//! the expectations were settled: a step passes on both.
//!
//! One file's tests: `cargo test --release --test integration -- kyverno_live::`.

use crate::support;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::cluster::{RealCluster, eventually, versions_env};
use support::gavel::temp_dir;
use support::kyverno::{self, Kyverno};
use support::release::{Release, install_kyverno_crds, ready_at};

/// Every step, in order, on one cluster with one engine installed.
fn steps(cluster: &RealCluster) {
    step("status of the CEL policy kinds", || {
        cel_policy_status(cluster)
    });
    step("the policy webhook refuses what Kyverno refuses", || {
        policy_refusals(cluster)
    });
    step("DELETE requests", || delete_requests(cluster));
    step("deferred context entries", || deferred_context(cluster));
    step("range operators in patterns", || range_patterns(cluster));
    step("PolicyViolation events at admission", || {
        admission_events(cluster)
    });
}

#[test]
fn on_gavel() {
    let _heavy = support::heavy();
    let dir = temp_dir("kyverno-live");
    let cluster = RealCluster::start(&dir.join("cluster"), 2);
    install_kyverno_crds(&cluster);
    let _gavel = Release::install_direct(&cluster, &dir, "");
    steps(&cluster);
}

#[test]
#[ignore = "needs e2e/cluster.sh build kyverno; settles the expectations of on_gavel"]
fn on_kyverno() {
    let _heavy = support::heavy();
    assert!(
        kyverno::built(),
        "Kyverno is not built: run e2e/cluster.sh build kyverno"
    );
    let dir = temp_dir("kyverno-live-peer");
    let cluster = RealCluster::start(&dir.join("cluster"), 2);
    install_kyverno_crds(&cluster);
    let chart = kyverno::install_chart(&cluster, &kubernetes_version());
    // Kyverno's start waits for its webhook for Pods, which a Pod policy
    // makes it register; the policy goes before the steps.
    let pods = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "live-start"},
        "spec": {"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"failureAction": "Audit", "message": "m", "pattern": {"metadata": {"name": "?*"}}}}]}});
    cluster.apply(&pods);
    let _kyverno = Kyverno::start(&cluster, &dir.join("kyverno"), &chart);
    // Its policy webhook serves a little after the resource webhook.
    eventually("Kyverno's policy webhook", Duration::from_secs(120), || {
        try_kubectl(
            &cluster,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&pods),
        )
        .is_ok()
    });
    cluster.kubectl(&["delete", "clusterpolicy", "live-start"]);
    steps(&cluster);
}

fn kubernetes_version() -> String {
    versions_env("KUBERNETES_VERSION")
}

fn step(name: &str, f: impl FnOnce()) {
    let started = Instant::now();
    eprintln!("kyverno_live: {name} ...");
    f();
    eprintln!(
        "kyverno_live: {name}: ok in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// `kubectl` with `args` (and `stdin`): Ok(stdout) or Err(stderr).
fn try_kubectl(
    cluster: &RealCluster,
    args: &[&str],
    stdin: Option<&Value>,
) -> Result<String, String> {
    let text = stdin.map(Value::to_string);
    let out = cluster.kubectl_in(args, text.as_deref());
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn create(cluster: &RealCluster, object: &Value) -> Result<String, String> {
    try_kubectl(cluster, &["create", "-f", "-"], Some(object))
}

/// `text` with each run of whitespace as one space: denials are YAML,
/// folded at 80 columns.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Applies `policy` and waits until it is Ready (ClusterPolicy and
/// Policy: the `Ready` condition both engines write).
fn apply_ready(cluster: &RealCluster, policy: &Value) {
    cluster.apply(policy);
    let kind = policy["kind"].as_str().unwrap().to_lowercase();
    let name = policy["metadata"]["name"].as_str().unwrap();
    let mut args = vec![kind.as_str(), name];
    if let Some(namespace) = policy["metadata"]["namespace"].as_str() {
        args.extend(["-n", namespace]);
    }
    eventually(
        &format!("{kind} {name} Ready"),
        Duration::from_secs(120),
        || ready_at(cluster, &args),
    );
}

/// Waits until `probe` (a server-side dry run the policy under test
/// refuses) is refused with `message`: the engine's webhook then covers
/// the policy, whatever it writes in the policy's status.
fn wait_refused(cluster: &RealCluster, what: &str, probe: &[&str], message: &str) {
    eventually(what, Duration::from_secs(120), || {
        try_kubectl(cluster, probe, None).is_err_and(|e| flat(&e).contains(message))
    });
}

/// 3. DELETE requests. Validate rules without `operations` see DELETE;
///    `request.object` is null on DELETE and `{{ }}` variables that read it
///    read `request.oldObject` instead; patterns are skipped on DELETE
///    (after their variables are substituted); a context entry is loaded
///    only when something the request reaches names it (Kyverno defers
///    every entry), so an entry that reads `request.object.metadata.name`
///    and is named only in a pattern rule's message does not stop a
///    Namespace from being deleted. A ValidatingPolicy sees `object` as an
///    empty object and the deleted object as `oldObject`.
fn delete_requests(cluster: &RealCluster) {
    apply_ready(
        cluster,
        &json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "namespace-owner"},
            "spec": {"rules": [{
                "name": "require-owner",
                "match": {"any": [{"resources": {"kinds": ["Namespace"], "names": ["live-*"]}}]},
                "context": [{"name": "nsName", "variable": {"jmesPath": "request.object.metadata.name"}}],
                "validate": {
                    "failureAction": "Enforce",
                    "message": "namespace {{ nsName }} needs an owner label",
                    "pattern": {"metadata": {"labels": {"owner": "?*"}}}
                }
            }]}
        }),
    );
    let namespace = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": labels}})
    };
    let denied = flat(&create(cluster, &namespace("live-unowned", json!({}))).unwrap_err());
    assert!(
        denied.contains("namespace live-unowned needs an owner label")
            && denied.contains("rule require-owner failed at path /metadata/labels/owner/"),
        "{denied}"
    );
    create(
        cluster,
        &namespace("live-owned", json!({"owner": "team-a"})),
    )
    .unwrap();
    // The entry is never loaded: the pattern is skipped on DELETE and the
    // message is not worded.
    try_kubectl(
        cluster,
        &["delete", "namespace", "live-owned", "--wait=false"],
        None,
    )
    .expect("deleting a Namespace the pattern rule matches");

    // Deny runs on DELETE; `{{ request.object... }}` reads the object
    // being deleted.
    apply_ready(
        cluster,
        &json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "keep-protected"},
            "spec": {"rules": [{
                "name": "no-delete",
                "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "namespaces": ["default"],
                                                 "operations": ["DELETE"]}}]},
                "validate": {
                    "failureAction": "Enforce",
                    "message": "{{ request.object.metadata.name }} is protected",
                    "deny": {"conditions": {"any": [{
                        "key": "{{ request.object.metadata.labels.protected || '' }}",
                        "operator": "Equals", "value": "true"
                    }]}}
                }
            }]}
        }),
    );
    let config_map = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default", "labels": labels}})
    };
    create(
        cluster,
        &config_map("live-protected", json!({"protected": "true"})),
    )
    .unwrap();
    create(cluster, &config_map("live-plain", json!({}))).unwrap();
    let refused =
        flat(&try_kubectl(cluster, &["delete", "configmap", "live-protected"], None).unwrap_err());
    assert!(refused.contains("live-protected is protected"), "{refused}");
    assert!(cluster.get(&["configmap", "live-protected"]).is_some());
    try_kubectl(cluster, &["delete", "configmap", "live-plain"], None).unwrap();

    // A ValidatingPolicy on DELETE: `object` holds no fields, `oldObject`
    // is the ConfigMap.
    cluster.apply(&json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
        "metadata": {"name": "keep-pinned"},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                "operations": ["DELETE"]
            }]},
            "validations": [{
                "expression": "!has(object.metadata) && oldObject.metadata.?labels.?pinned.orValue('') != 'true'",
                "message": "pinned ConfigMaps stay"
            }]
        }
    }));
    create(
        cluster,
        &config_map("live-pinned", json!({"pinned": "true"})),
    )
    .unwrap();
    create(cluster, &config_map("live-loose", json!({}))).unwrap();
    wait_refused(
        cluster,
        "the ValidatingPolicy refusing a DELETE",
        &["delete", "configmap", "live-pinned", "--dry-run=server"],
        "pinned ConfigMaps stay",
    );
    try_kubectl(cluster, &["delete", "configmap", "live-loose"], None).unwrap();
    for (kind, name) in [
        ("clusterpolicy", "namespace-owner"),
        ("clusterpolicy", "keep-protected"),
        ("validatingpolicy", "keep-pinned"),
    ] {
        cluster.kubectl(&["delete", kind, name]);
    }
}

/// 13. Context entries load when first named, an entry reading only the
///     entries before it (Kyverno's conformance cases
///     `deferred/resolve-overriden-variable`, `deferred/recursive` and
///     `deferred/two-rules`, applied as they are).
fn deferred_context(cluster: &RealCluster) {
    let foreach = |data: Value| json!({"foreach": [{"list": "['dummy']", "patchStrategicMerge": {"data": data}}]});
    let rule = |name: &str, context: Value, mutate: Value| {
        json!({"name": name,
               "match": {"all": [{"resources": {"kinds": ["v1/ConfigMap"], "names": [format!("deferred-{name}")]}}]},
               "context": context, "mutate": mutate})
    };
    let mut overridden = foreach(json!({"one": "{{ one }}"}));
    overridden["foreach"][0]["context"] = json!([{"name": "foo", "variable": {"value": "bar"}}]);
    apply_ready(
        cluster,
        &json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "deferred"},
            "spec": {"rules": [
                rule("overridden", json!([
                    {"name": "foo", "variable": {"value": "foo"}},
                    {"name": "one", "variable": {"jmesPath": "foo"}},
                    {"name": "foo", "variable": {"value": "baz"}}
                ]), overridden),
                rule("recursive", json!([
                    {"name": "one", "variable": {"value": "one"}},
                    {"name": "one", "variable": {"jmesPath": "one"}}
                ]), foreach(json!({"one": "{{ one }}"}))),
                rule("first", json!([{"name": "var", "variable": {"value": "test"}}]),
                     foreach(json!({"one": "{{ to_string(var) }}"}))),
                {"name": "second",
                 "match": {"all": [{"resources": {"kinds": ["v1/ConfigMap"], "names": ["deferred-first"]}}]},
                 "mutate": foreach(json!({"two": "{{ to_string(var) }}"}))}
            ]}
        }),
    );
    for (name, want) in [
        ("overridden", json!({"one": "foo"})),
        ("recursive", json!({"one": "one"})),
        ("first", json!({"one": "test", "two": "null"})),
    ] {
        let name = format!("deferred-{name}");
        let created = create(
            cluster,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default"}}),
        );
        assert!(created.is_ok(), "{name}: {created:?}");
        let stored = cluster.get(&["configmap", &name, "-n", "default"]).unwrap();
        assert_eq!(stored["data"], want, "{name}");
    }
    cluster.kubectl(&["delete", "clusterpolicy", "deferred"]);
}

/// 13. Range operators in patterns (`1-10`, `1!-10`) at admission.
fn range_patterns(cluster: &RealCluster) {
    apply_ready(
        cluster,
        &json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "replica-range"},
            "spec": {"rules": [{
                "name": "replicas",
                "match": {"any": [{"resources": {"kinds": ["Deployment"], "namespaces": ["default"]}}]},
                "validate": {
                    "failureAction": "Enforce",
                    "message": "replicas out of range",
                    "pattern": {"spec": {"replicas": "1-10", "=(revisionHistoryLimit)": "0!-2"}}
                }
            }]}
        }),
    );
    let deployment = |name: &str, replicas: u32, history: u32| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"replicas": replicas, "revisionHistoryLimit": history,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1"}]}}}})
    };
    for (name, replicas, history, allowed) in [
        ("range-in", 5, 5, true),
        ("range-edge", 10, 3, true),
        ("range-over", 11, 5, false),
        ("range-zero", 0, 5, false),
        ("range-history", 5, 1, false),
    ] {
        let out = create(cluster, &deployment(name, replicas, history));
        match out {
            Ok(_) => assert!(allowed, "{name} was admitted"),
            Err(e) => assert!(
                !allowed && flat(&e).contains("replicas out of range"),
                "{name}: {e}"
            ),
        }
    }
    cluster.kubectl(&["delete", "clusterpolicy", "replica-range"]);
    cluster.kubectl(&["delete", "deployment", "--all", "-n", "default"]);
}

/// 9. A denied request leaves a `PolicyViolation` Warning on the policy
///    (ClusterPolicy and Policy alike), reported by `kyverno-admission`,
///    with the resource as `related` and Kyverno's note.
fn admission_events(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "live-events"]);
    let rule = json!({
        "name": "need-team",
        "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "names": ["events-*"]}}]},
        "validate": {
            "failureAction": "Enforce",
            "message": "label team is required",
            "pattern": {"metadata": {"labels": {"team": "?*"}}}
        }
    });
    apply_ready(
        cluster,
        &json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "events-cluster"}, "spec": {"rules": [rule]}}),
    );
    let config_map = |name: &str, namespace: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": namespace}})
    };
    create(cluster, &config_map("events-one", "live-events")).unwrap_err();
    let event_of = |namespace: &str, kind: &str, policy: &str| {
        let mut found = None;
        eventually(
            &format!("a PolicyViolation event on {kind} {policy}"),
            Duration::from_secs(60),
            || {
                let list = cluster
                    .get(&["events.v1.events.k8s.io", "-n", namespace])
                    .unwrap_or_default();
                found = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|e| {
                        e["reason"] == "PolicyViolation"
                            && e["regarding"]["kind"] == kind
                            && e["regarding"]["name"] == policy
                    })
                    .cloned();
                found.is_some()
            },
        );
        found.unwrap()
    };
    // A cluster-scoped object's events are in `default`.
    let event = event_of("default", "ClusterPolicy", "events-cluster");
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["reportingController"], "kyverno-admission", "{event}");
    assert_eq!(event["action"], "Resource Blocked", "{event}");
    assert_eq!(event["related"]["kind"], "ConfigMap", "{event}");
    assert_eq!(event["related"]["name"], "events-one", "{event}");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.starts_with("ConfigMap live-events/events-one: [need-team] fail (blocked); ")
            && note.contains("label team is required"),
        "{note}"
    );
    cluster.kubectl(&["delete", "clusterpolicy", "events-cluster"]);
    apply_ready(
        cluster,
        &json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
                "metadata": {"name": "events-namespaced", "namespace": "live-events"},
                "spec": {"rules": [rule]}}),
    );
    eventually("the Policy to deny", Duration::from_secs(60), || {
        create(cluster, &config_map("events-two", "live-events")).is_err()
    });
    let event = event_of("live-events", "Policy", "events-namespaced");
    assert_eq!(event["action"], "Resource Blocked", "{event}");
    cluster.kubectl(&["delete", "policy", "events-namespaced", "-n", "live-events"]);
}

/// 1. A ValidatingPolicy gets Kyverno's `status.conditionStatus`:
///    `WebhookConfigured` once the webhook covers it, and
///    `RBACPermissionsGranted` once its reports can be made (or needs none:
///    background off), `ready` their AND; tools wait on it
///    (`kubectl wait --for=jsonpath='{.status.conditionStatus.ready}'=true`).
fn cel_policy_status(cluster: &RealCluster) {
    let policy = |name: &str, background: bool| {
        json!({
            "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name},
            "spec": {
                "validationActions": ["Deny"],
                "evaluation": {"background": {"enabled": background}},
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                    "operations": ["CREATE", "UPDATE"]
                }]},
                "validations": [{"expression": "object.metadata.name != 'forbidden'", "message": "no"}]
            }
        })
    };
    for (name, background, rbac) in [
        ("status-reports", true, "Policy is ready for reporting."),
        (
            "status-admission-only",
            false,
            "Background scanning disabled; reporting permissions not required.",
        ),
    ] {
        cluster.apply(&policy(name, background));
        let waited = cluster.kubectl_in(
            &[
                "wait",
                "validatingpolicy",
                name,
                "--for=jsonpath={.status.conditionStatus.ready}=true",
                "--timeout=120s",
            ],
            None,
        );
        assert!(
            waited.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&waited.stderr)
        );
        // Kyverno adds WebhookConfigured when its webhook controller has
        // registered the policy, which may come after `ready`.
        let mut stored = Value::Null;
        eventually(
            &format!("{name}: both conditions"),
            Duration::from_secs(60),
            || {
                stored = cluster.get(&["validatingpolicy", name]).unwrap();
                let conditions = &stored["status"]["conditionStatus"]["conditions"];
                ["WebhookConfigured", "RBACPermissionsGranted"]
                    .iter()
                    .all(|t| {
                        conditions
                            .as_array()
                            .is_some_and(|cs| cs.iter().any(|c| c["type"] == *t))
                    })
            },
        );
        assert_eq!(
            stored["status"]["conditionStatus"]["ready"], true,
            "{stored}"
        );
        let conditions = stored["status"]["conditionStatus"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let condition = |t: &str| conditions.iter().find(|c| c["type"] == t).unwrap().clone();
        let webhook = condition("WebhookConfigured");
        assert_eq!(
            (&webhook["status"], &webhook["reason"], &webhook["message"]),
            (
                &json!("True"),
                &json!("Succeeded"),
                &json!("Webhook configured.")
            ),
            "{name}"
        );
        let reports = condition("RBACPermissionsGranted");
        assert_eq!(
            (&reports["status"], &reports["message"]),
            (&json!("True"), &json!(rbac)),
            "{name}"
        );
        cluster.kubectl(&["delete", "validatingpolicy", name]);
    }
}

/// 2. Policies Kyverno's policy webhook refuses, refused with its words.
fn policy_refusals(cluster: &RealCluster) {
    let rule = |extra: Value| {
        let mut r = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}});
        r.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        r
    };
    let cluster_policy = |name: &str, spec: Value| {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
               "metadata": {"name": name}, "spec": spec})
    };
    cluster.kubectl(&["create", "namespace", "live-refusals"]);
    let cases = [
        (
            cluster_policy(
                "refuse-user-info",
                json!({"rules": [rule(json!({"validate": {
                "message": "{{ request.userInfo.username }}", "deny": {}}}))]}),
            ),
            "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: variable {{ request.userInfo.username }} is not allowed",
        ),
        (
            cluster_policy(
                "refuse-modes",
                json!({"admission": false, "background": false,
                "rules": [rule(json!({"validate": {"message": "m", "deny": {}}}))]}),
            ),
            "disabling both admission and background processing is not allowed",
        ),
        (
            cluster_policy(
                "refuse-timeout",
                json!({"webhookConfiguration": {"timeoutSeconds": 31},
                "rules": [rule(json!({"validate": {"message": "m", "deny": {}}}))]}),
            ),
            "spec.webhookConfiguration.timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        (
            cluster_policy(
                "refuse-targets",
                json!({"rules": [rule(json!({"mutate": {
                "mutateExistingOnPolicyUpdate": true,
                "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}}))]}),
            ),
            "spec.mutateExistingOnPolicyUpdate: Forbidden: rules[0].mutate.targets has to be specified when mutateExistingOnPolicyUpdate is set",
        ),
        (
            cluster_policy(
                "refuse-exclude",
                json!({"rules": [rule(json!({"validate": {
                "podSecurity": {"level": "baseline", "version": "latest",
                                "exclude": [{"controlName": "Capabilities"}]}}}))]}),
            ),
            "spec.rules[0].podSecurity.exclude[0].controlName: Invalid value: \"Capabilities\": exclude.images must be specified for the container level control",
        ),
        (
            json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
                   "metadata": {"name": "refuse-elsewhere", "namespace": "live-refusals"},
                   "spec": {"rules": [{"name": "r",
                       "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
                       "generate": {"apiVersion": "v1", "kind": "Secret", "name": "s",
                                    "namespace": "default", "data": {}}}]}}),
            "spec.rules[0].namespace: Forbidden: target resource scope mismatched: a namespaced policy cannot generate resources in other namespaces, expected: live-refusals, received: default",
        ),
        (
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
                   "metadata": {"name": "refuse-no-mode"},
                   "spec": {"evaluation": {"admission": {"enabled": false}},
                            "matchConstraints": {"resourceRules": [{"apiGroups": [""],
                                "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}]},
                            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                                "expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]}}),
            "spec.evaluation: Forbidden: disabling both admission and mutateExisting evaluation modes is not allowed",
        ),
    ];
    for (policy, message) in cases {
        let name = policy["metadata"]["name"].as_str().unwrap().to_string();
        // The policy webhook may still be registering: wait for the refusal.
        eventually(
            &format!("{name} refused"),
            Duration::from_secs(60),
            || match create(cluster, &policy) {
                Ok(_) => {
                    let kind = policy["kind"].as_str().unwrap().to_lowercase();
                    let mut args = vec!["delete", kind.as_str(), name.as_str()];
                    if let Some(ns) = policy["metadata"]["namespace"].as_str() {
                        args.extend(["-n", ns]);
                    }
                    cluster.kubectl(&args);
                    false
                }
                Err(e) => {
                    let e = flat(&e);
                    assert!(e.contains(message), "{name}: {e}");
                    true
                }
            },
        );
    }
}
