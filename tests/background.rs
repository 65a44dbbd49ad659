//! The background half on a real control plane (etcd, kube-apiserver,
//! kube-controller-manager and kwok built from Go modules by
//! `e2e/cluster.sh`): gavel's chart installed with the real Helm CLI, two
//! replicas running as host processes with the chart's ServiceAccount, and
//! policies from the Kyverno policy library applied with kubectl. Each step
//! watches objects appear, change and disappear in the API server as
//! Kyverno's documentation says they do.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::cluster::{RealCluster, eventually, repo};
use support::gavel::temp_dir;
use support::release::{
    MUTATING, NAMESPACE, RELEASE, Release, VALIDATING, deployment_args, install_kyverno_crds,
    ready, wait_ready, webhook_configurations,
};

/// What the generate rules of these steps write, granted as a user grants
/// it (the chart's `rbac.backgroundRules`).
const VALUES: &str = r#"
reports:
  backgroundScanInterval: 20s
rbac:
  backgroundRules:
    - apiGroups: ["networking.k8s.io"]
      resources: ["networkpolicies"]
      verbs: ["get", "list", "watch", "create", "update", "delete"]
    - apiGroups: [""]
      resources: ["configmaps", "secrets", "resourcequotas", "limitranges"]
      verbs: ["get", "list", "watch", "create", "update", "delete"]
"#;

#[test]
fn generate_on_a_real_control_plane() {
    let _heavy = support::heavy();
    let dir = temp_dir("background");
    let cluster = RealCluster::start(&dir.join("cluster"), 2);
    install_kyverno_crds(&cluster);
    let mut gavel = Release::install(&cluster, &dir, 2, VALUES);
    step(
        "data with synchronize: created, reverted, recreated, updated",
        || data_synchronized(&cluster),
    );
    step("clone: a Secret copied into new namespaces", || {
        clone_into_new_namespaces(&cluster)
    });
    step(
        "generateExisting: downstream for triggers made before the policy",
        || generate_existing(&cluster),
    );
    step(
        "a trigger deleted or no longer matching takes its downstream",
        || trigger_changes(&cluster),
    );
    step("a deleted policy takes its synchronized downstream", || {
        policy_deleted(&cluster)
    });
    step(
        "GeneratingPolicy: generated, kept in line, deleted with its trigger and policy",
        || generating_policy(&cluster),
    );
    step(
        "NamespacedGeneratingPolicy: generateExisting and admitted triggers",
        || namespaced_generating_policy(&cluster),
    );
    step("a generation that fails leaves a PolicyError event", || {
        generation_error_event(&cluster)
    });
    step("mutate existing: a trigger patches its targets", || {
        mutate_existing(&cluster)
    });
    step(
        "MutatingPolicy mutate existing: listed and expression targets",
        || mutating_policy_existing(&cluster),
    );
    step("background scan: PolicyReports per resource", || {
        policy_reports(&cluster)
    });
    step("ValidatingPolicy results in PolicyReports", || {
        validating_policy_reports(&cluster)
    });
    step(
        "PolicyExceptions of both groups, with the same name, exempt at admission",
        || exceptions_of_both_groups(&cluster),
    );
    step(
        "ImageValidatingPolicy: digests and image validations at admission",
        || image_validating_policy(&cluster),
    );
    step("admission results in PolicyReports", || {
        admission_reports(&cluster)
    });
    step("kill -9 of the leader during 500 triggers", || {
        leader_killed_mid_batch(&cluster, &mut gavel)
    });
    step(
        "an API server restart in the middle of a background scan",
        || scan_survives_api_server_restart(&cluster, &gavel),
    );
    step(
        "openreports.io: Report and ClusterReport, behind a flag",
        || openreports(&cluster, &mut gavel),
    );
}

fn step(name: &str, f: impl FnOnce()) {
    let started = Instant::now();
    eprintln!("background: {name} ...");
    f();
    eprintln!(
        "background: {name}: ok in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

fn library(path: &str) -> String {
    repo()
        .join("../shared/conformance/kyverno-policies")
        .join(path)
        .to_str()
        .unwrap()
        .to_string()
}

/// Applies a policy and waits until it is in force: Ready, and the
/// validating webhook registered for `resource`. The replicas load it from
/// their own watches; a moment more lets the slowest catch up.
fn apply_policy(cluster: &RealCluster, file: &str, kind: &str, name: &str, resource: &str) {
    cluster.kubectl(&["apply", "-f", file]);
    eventually(&format!("{name} Ready"), Duration::from_secs(60), || {
        ready(cluster, kind, name)
    });
    eventually(
        &format!("the validating webhook for {resource}"),
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| {
                    c["webhooks"]
                        .to_string()
                        .contains(&format!("\"{resource}\""))
                })
        },
    );
    std::thread::sleep(Duration::from_secs(2));
}

fn apply_text(cluster: &RealCluster, yaml: &str) {
    let out = cluster.kubectl_in(&["apply", "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn label<'a>(object: &'a Value, key: &str) -> &'a str {
    object["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
}

fn update_requests(cluster: &RealCluster) -> Vec<Value> {
    cluster
        .get(&["updaterequests.kyverno.io", "-n", NAMESPACE])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

/// No UpdateRequest left: all the work is done.
fn drained(cluster: &RealCluster, timeout: Duration) {
    eventually("every UpdateRequest worked off", timeout, || {
        update_requests(cluster).is_empty()
    });
}

/// best-practices/add-network-policy (data, `synchronize: true`): a
/// Namespace gets a default-deny NetworkPolicy with Kyverno's labels; a
/// hand edit is reverted, a deletion undone, a policy change carried over.
fn data_synchronized(cluster: &RealCluster) {
    apply_policy(
        cluster,
        &library("best-practices/add-network-policy/add-network-policy.yaml"),
        "clusterpolicy",
        "add-networkpolicy",
        "namespaces",
    );
    cluster.kubectl(&["create", "namespace", "team-a"]);
    let netpol = || cluster.get(&["networkpolicy", "default-deny", "-n", "team-a"]);
    eventually(
        "the NetworkPolicy generated",
        Duration::from_secs(30),
        || netpol().is_some(),
    );
    let generated = netpol().unwrap();
    assert_eq!(label(&generated, "app.kubernetes.io/managed-by"), "kyverno");
    assert_eq!(
        label(&generated, "generate.kyverno.io/policy-name"),
        "add-networkpolicy"
    );
    assert_eq!(
        label(&generated, "generate.kyverno.io/rule-name"),
        "default-deny"
    );
    assert_eq!(
        label(&generated, "generate.kyverno.io/trigger-kind"),
        "Namespace"
    );
    assert_eq!(
        label(&generated, "generate.kyverno.io/trigger-name"),
        "team-a"
    );
    let namespace = cluster.get(&["namespace", "team-a"]).unwrap();
    assert_eq!(
        label(&generated, "generate.kyverno.io/trigger-uid"),
        namespace["metadata"]["uid"].as_str().unwrap()
    );
    assert_eq!(
        generated["spec"]["policyTypes"],
        json!(["Ingress", "Egress"])
    );

    // Modified by hand: reverted to the rule's data.
    cluster.kubectl(&[
        "patch",
        "networkpolicy",
        "default-deny",
        "-n",
        "team-a",
        "--type=merge",
        "-p",
        r#"{"spec":{"policyTypes":["Ingress"]}}"#,
    ]);
    eventually("the hand edit reverted", Duration::from_secs(30), || {
        netpol().is_some_and(|n| n["spec"]["policyTypes"] == json!(["Ingress", "Egress"]))
    });
    // Deleted: created again.
    let uid = netpol().unwrap()["metadata"]["uid"].clone();
    cluster.kubectl(&["delete", "networkpolicy", "default-deny", "-n", "team-a"]);
    eventually(
        "the deleted NetworkPolicy recreated",
        Duration::from_secs(30),
        || netpol().is_some_and(|n| n["metadata"]["uid"] != uid),
    );
    // The rule's data changed: the downstream follows.
    let text = std::fs::read_to_string(library(
        "best-practices/add-network-policy/add-network-policy.yaml",
    ))
    .unwrap();
    let changed = text.replace("          - Egress", "");
    assert_ne!(changed, text);
    apply_text(cluster, &changed);
    eventually(
        "the policy change carried over",
        Duration::from_secs(30),
        || netpol().is_some_and(|n| n["spec"]["policyTypes"] == json!(["Ingress"])),
    );
    drained(cluster, Duration::from_secs(30));
}

const GENERATING_POLICY: &str = r#"
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata:
  name: team-settings
spec:
  evaluation:
    synchronize:
      enabled: true
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [namespaces]
    objectSelector:
      matchLabels:
        team-settings: "yes"
  variables:
  - name: ns
    expression: object.metadata.name
  generate:
  - expression: >-
      generator.Apply(variables.ns, [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "team-settings"},
        "data": {"team": variables.ns}}])
"#;

/// The Ignore validating webhook registered for `resource` (where
/// GeneratingPolicies are), and a moment for the other replica.
fn ignore_webhook_for(cluster: &RealCluster, resource: &str) {
    eventually(
        &format!("the Ignore validating webhook for {resource}"),
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| {
                    c["webhooks"].as_array().into_iter().flatten().any(|w| {
                        w["failurePolicy"] == "Ignore"
                            && w["rules"].to_string().contains(&format!("\"{resource}\""))
                            && w["rules"].to_string().contains("DELETE")
                    })
                })
        },
    );
    std::thread::sleep(Duration::from_secs(3));
}

fn labelled_namespace(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    team-settings: \"yes\"\n"
    )
}

/// A GeneratingPolicy with `synchronize`: a labelled Namespace gets a
/// ConfigMap with Kyverno's labels (no rule name); a hand edit is
/// reverted and a deletion undone; a policy change carried over; the
/// label removed takes the ConfigMap along, and so does the policy's
/// deletion.
fn generating_policy(cluster: &RealCluster) {
    apply_text(cluster, GENERATING_POLICY);
    eventually(
        "the GeneratingPolicy READY",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["generatingpolicy", "team-settings"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
        },
    );
    ignore_webhook_for(cluster, "namespaces");
    apply_text(cluster, &labelled_namespace("gp-a"));
    apply_text(cluster, &labelled_namespace("gp-c"));
    let settings = |ns: &str| cluster.get(&["configmap", "team-settings", "-n", ns]);
    eventually("the ConfigMaps generated", Duration::from_secs(30), || {
        settings("gp-a").is_some() && settings("gp-c").is_some()
    });
    let generated = settings("gp-a").unwrap();
    assert_eq!(generated["data"], json!({"team": "gp-a"}));
    assert_eq!(label(&generated, "app.kubernetes.io/managed-by"), "kyverno");
    assert_eq!(
        label(&generated, "generate.kyverno.io/policy-name"),
        "team-settings"
    );
    assert_eq!(label(&generated, "generate.kyverno.io/rule-name"), "");
    assert_eq!(
        label(&generated, "generate.kyverno.io/trigger-kind"),
        "Namespace"
    );
    let namespace = cluster.get(&["namespace", "gp-a"]).unwrap();
    assert_eq!(
        label(&generated, "generate.kyverno.io/trigger-uid"),
        namespace["metadata"]["uid"].as_str().unwrap()
    );

    // Edited by hand: reverted from the trigger.
    cluster.kubectl(&[
        "patch",
        "configmap",
        "team-settings",
        "-n",
        "gp-a",
        "--type=merge",
        "-p",
        r#"{"data":{"team":"someone-else"}}"#,
    ]);
    eventually("the hand edit reverted", Duration::from_secs(30), || {
        settings("gp-a").is_some_and(|c| c["data"] == json!({"team": "gp-a"}))
    });
    // Deleted: generated again.
    let uid = settings("gp-a").unwrap()["metadata"]["uid"].clone();
    cluster.kubectl(&["delete", "configmap", "team-settings", "-n", "gp-a"]);
    eventually(
        "the deleted ConfigMap generated again",
        Duration::from_secs(30),
        || settings("gp-a").is_some_and(|c| c["metadata"]["uid"] != uid),
    );
    // The policy changed: its downstream follows.
    apply_text(
        cluster,
        &GENERATING_POLICY.replace(
            r#""data": {"team": variables.ns}"#,
            r#""data": {"team": variables.ns, "tier": "gold"}"#,
        ),
    );
    eventually(
        "the policy change carried over",
        Duration::from_secs(30),
        || {
            ["gp-a", "gp-c"].iter().all(|ns| {
                settings(ns).is_some_and(|c| c["data"] == json!({"team": ns, "tier": "gold"}))
            })
        },
    );
    // The trigger no longer selected: its downstream goes.
    cluster.kubectl(&["label", "namespace", "gp-a", "team-settings-"]);
    eventually(
        "the unlabelled Namespace's ConfigMap deleted",
        Duration::from_secs(30),
        || settings("gp-a").is_none(),
    );
    assert!(settings("gp-c").is_some());
    // The policy deleted (not orphaning): its downstream goes.
    cluster.kubectl(&["delete", "generatingpolicy", "team-settings"]);
    eventually(
        "the deleted policy's ConfigMap deleted",
        Duration::from_secs(30),
        || settings("gp-c").is_none(),
    );
    drained(cluster, Duration::from_secs(30));
}

/// A NamespacedGeneratingPolicy with `generateExisting`: a labelled
/// ConfigMap made before the policy gets its copy when the policy
/// appears, one created after it at admission; both in the policy's
/// namespace (the one-argument `generator.Apply`).
fn namespaced_generating_policy(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "gp-n"]);
    let config_map = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: gp-n\n  labels:\n    copy: \"yes\"\ndata:\n  k: {name}\n"
        )
    };
    apply_text(cluster, &config_map("seed"));
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: NamespacedGeneratingPolicy
metadata:
  name: copies
  namespace: gp-n
spec:
  evaluation:
    generateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
    objectSelector:
      matchLabels:
        copy: "yes"
  generate:
  - expression: >-
      generator.Apply([{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": object.metadata.name + "-copy"},
        "data": object.data}])
"#,
    );
    let copy = |name: &str| cluster.get(&["configmap", &format!("{name}-copy"), "-n", "gp-n"]);
    eventually(
        "the existing trigger's copy generated",
        Duration::from_secs(60),
        || copy("seed").is_some(),
    );
    assert_eq!(copy("seed").unwrap()["data"], json!({"k": "seed"}));
    ignore_webhook_for(cluster, "configmaps");
    apply_text(cluster, &config_map("fresh"));
    eventually(
        "the admitted trigger's copy generated",
        Duration::from_secs(30),
        || copy("fresh").is_some(),
    );
    let fresh = copy("fresh").unwrap();
    assert_eq!(fresh["data"], json!({"k": "fresh"}));
    assert_eq!(label(&fresh, "generate.kyverno.io/policy-name"), "copies");
    assert_eq!(label(&fresh, "generate.kyverno.io/trigger-name"), "fresh");
    cluster.kubectl(&[
        "delete",
        "namespacedgeneratingpolicy",
        "copies",
        "-n",
        "gp-n",
    ]);
    drained(cluster, Duration::from_secs(30));
}

/// A GeneratingPolicy whose downstream the controller may not write (the
/// chart grants no ServiceAccounts here): the request fails, and
/// Kyverno's `PolicyError` event (Warning, reporting controller
/// `kyverno-generate`) names the policy, with the trigger as related.
fn generation_error_event(cluster: &RealCluster) {
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata:
  name: sa-per-namespace
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [namespaces]
    objectSelector:
      matchLabels:
        sa-gen: "yes"
  generate:
  - expression: >-
      generator.Apply(object.metadata.name, [{"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "generated"}}])
"#,
    );
    eventually(
        "the GeneratingPolicy READY",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["generatingpolicy", "sa-per-namespace"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    apply_text(
        cluster,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ev-a\n  labels:\n    sa-gen: \"yes\"\n",
    );
    let event = || {
        cluster.get(&["events.events.k8s.io", "-n", "default"])?["items"]
            .as_array()?
            .iter()
            .find(|e| {
                e["reason"] == "PolicyError"
                    && e["regarding"]["kind"] == "GeneratingPolicy"
                    && e["regarding"]["name"] == "sa-per-namespace"
            })
            .cloned()
    };
    eventually("the PolicyError event", Duration::from_secs(60), || {
        event().is_some()
    });
    let event = event().unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reportingController"], "kyverno-generate");
    assert_eq!(event["related"]["name"], "ev-a");
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("policy sa-per-namespace error: ")),
        "{event}"
    );
    assert!(
        cluster
            .get(&["serviceaccount", "generated", "-n", "ev-a"])
            .is_none()
    );
    cluster.kubectl(&["delete", "generatingpolicy", "sa-per-namespace"]);
    cluster.kubectl(&[
        "delete",
        "updaterequests.kyverno.io",
        "-n",
        NAMESPACE,
        "-l",
        "generate.kyverno.io/policy-name=sa-per-namespace",
    ]);
    drained(cluster, Duration::from_secs(30));
}

/// other/sync-secrets (clone, `synchronize: true`): a new Namespace gets a
/// copy of the `regcred` Secret of `default`, with the source labels.
fn clone_into_new_namespaces(cluster: &RealCluster) {
    cluster.kubectl(&[
        "create",
        "secret",
        "generic",
        "regcred",
        "-n",
        "default",
        "--from-literal=token=s3cr3t",
    ]);
    let policy = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: sync-secrets
spec:
  rules:
  - name: sync-image-pull-secret
    match:
      any:
      - resources:
          kinds:
          - Namespace
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      clone:
        namespace: default
        name: regcred
"#;
    let file = temp_dir("background-sync-secrets").join("sync-secrets.yaml");
    std::fs::write(&file, policy).unwrap();
    apply_policy(
        cluster,
        file.to_str().unwrap(),
        "clusterpolicy",
        "sync-secrets",
        "namespaces",
    );
    cluster.kubectl(&["create", "namespace", "team-b"]);
    let copy = || cluster.get(&["secret", "regcred", "-n", "team-b"]);
    eventually("the Secret cloned", Duration::from_secs(30), || {
        copy().is_some()
    });
    let copy = copy().unwrap();
    let source = cluster
        .get(&["secret", "regcred", "-n", "default"])
        .unwrap();
    assert_eq!(copy["data"], source["data"]);
    assert_eq!(label(&copy, "generate.kyverno.io/source-name"), "regcred");
    assert_eq!(
        label(&copy, "generate.kyverno.io/source-namespace"),
        "default"
    );
    assert_eq!(
        label(&copy, "generate.kyverno.io/source-uid"),
        source["metadata"]["uid"].as_str().unwrap()
    );
    drained(cluster, Duration::from_secs(30));
}

/// best-practices/add-ns-quota with `generateExisting: true` on its quota
/// rule: Namespaces made before the policy get their ResourceQuota.
fn generate_existing(cluster: &RealCluster) {
    let text =
        std::fs::read_to_string(library("best-practices/add-ns-quota/add-ns-quota.yaml")).unwrap();
    let with_existing = text.replacen(
        "      synchronize: true\n",
        "      synchronize: true\n      generateExisting: true\n",
        1,
    );
    assert_ne!(with_existing, text);
    apply_text(cluster, &with_existing);
    for ns in ["team-a", "team-b"] {
        eventually(
            &format!("the ResourceQuota of the existing namespace {ns}"),
            Duration::from_secs(60),
            || {
                cluster
                    .get(&["resourcequota", "default-resourcequota", "-n", ns])
                    .is_some()
            },
        );
    }
    drained(cluster, Duration::from_secs(60));
}

/// A ConfigMap labelled `copy: "yes"` gets a `<name>-copy` ConfigMap
/// (`synchronize: true`): deleting the trigger, or taking its label away,
/// deletes the copy.
fn trigger_changes(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "triggers"]);
    let policy = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: copy-configmaps
spec:
  rules:
  - name: copy
    match:
      any:
      - resources:
          kinds:
          - ConfigMap
          namespaces:
          - triggers
          - batch
          selector:
            matchLabels:
              copy: "yes"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: "{{request.object.metadata.name}}-copy"
      namespace: "{{request.object.metadata.namespace}}"
      synchronize: true
      data:
        data:
          from: "{{request.object.metadata.name}}"
"#;
    let file = temp_dir("background-copy").join("copy-configmaps.yaml");
    std::fs::write(&file, policy).unwrap();
    apply_policy(
        cluster,
        file.to_str().unwrap(),
        "clusterpolicy",
        "copy-configmaps",
        "configmaps",
    );
    for name in ["one", "two"] {
        apply_text(
            cluster,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: triggers\n  labels:\n    copy: \"yes\"\ndata:\n  a: b\n"
            ),
        );
    }
    let copy = |name: &str| cluster.get(&["configmap", &format!("{name}-copy"), "-n", "triggers"]);
    eventually("both copies generated", Duration::from_secs(30), || {
        copy("one").is_some() && copy("two").is_some()
    });
    assert_eq!(copy("one").unwrap()["data"]["from"], "one");
    cluster.kubectl(&["delete", "configmap", "one", "-n", "triggers"]);
    eventually(
        "the deleted trigger's copy deleted",
        Duration::from_secs(30),
        || copy("one").is_none(),
    );
    cluster.kubectl(&["label", "configmap", "two", "-n", "triggers", "copy-"]);
    eventually(
        "the unmatched trigger's copy deleted",
        Duration::from_secs(30),
        || copy("two").is_none(),
    );
    drained(cluster, Duration::from_secs(30));
}

/// Deleting add-networkpolicy (a synchronized data rule, no
/// orphanDownstreamOnPolicyDelete) deletes the NetworkPolicies it made;
/// deleting sync-secrets (a clone) keeps the copies.
fn policy_deleted(cluster: &RealCluster) {
    cluster.kubectl(&["delete", "clusterpolicy", "add-networkpolicy"]);
    eventually(
        "the NetworkPolicies deleted with their policy",
        Duration::from_secs(30),
        || {
            cluster
                .get(&["networkpolicy", "default-deny", "-n", "team-a"])
                .is_none()
        },
    );
    cluster.kubectl(&["delete", "clusterpolicy", "sync-secrets"]);
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        cluster
            .get(&["secret", "regcred", "-n", "team-b"])
            .is_some(),
        "a clone outlives its policy"
    );
}

/// Kyverno's documented mutate-existing example (mutate-existing-secret):
/// creating the ConfigMap `dictionary-1` in `staging` labels the Secret
/// `secret-1` there; a second policy with `mutateExistingOnPolicyUpdate`
/// labels it when the policy is created, the trigger already existing.
fn mutate_existing(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "staging"]);
    cluster.kubectl(&[
        "create",
        "secret",
        "generic",
        "secret-1",
        "-n",
        "staging",
        "--from-literal=k=v",
    ]);
    let policy = |name: &str, label: &str, on_update: bool| {
        format!(
            r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: {name}
spec:
  mutateExistingOnPolicyUpdate: {on_update}
  rules:
  - name: mutate-secret-on-configmap-create
    match:
      any:
      - resources:
          kinds:
          - ConfigMap
          names:
          - dictionary-1
          namespaces:
          - staging
    mutate:
      targets:
      - apiVersion: v1
        kind: Secret
        name: secret-1
        namespace: "{{{{ request.object.metadata.namespace }}}}"
      patchStrategicMerge:
        metadata:
          labels:
            {label}
"#
        )
    };
    let dir = temp_dir("background-mutate");
    let file = dir.join("mutate-existing-secret.yaml");
    std::fs::write(&file, policy("mutate-existing-secret", "foo: bar", false)).unwrap();
    apply_policy(
        cluster,
        file.to_str().unwrap(),
        "clusterpolicy",
        "mutate-existing-secret",
        "configmaps",
    );
    let secret = || {
        cluster
            .get(&["secret", "secret-1", "-n", "staging"])
            .unwrap()
    };
    assert_eq!(label(&secret(), "foo"), "", "not before its trigger");
    apply_text(
        cluster,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dictionary-1\n  namespace: staging\ndata:\n  a: b\n",
    );
    eventually(
        "the target Secret labelled",
        Duration::from_secs(30),
        || label(&secret(), "foo") == "bar",
    );
    assert_eq!(
        secret()["data"]["k"],
        "dg==",
        "the rest of the target is kept"
    );
    let file = dir.join("label-existing.yaml");
    std::fs::write(&file, policy("label-existing", "team: blue", true)).unwrap();
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    eventually(
        "the target labelled for the existing trigger",
        Duration::from_secs(60),
        || label(&secret(), "team") == "blue",
    );
    assert_eq!(label(&secret(), "foo"), "bar");
    drained(cluster, Duration::from_secs(30));
}

/// MutatingPolicy with `evaluation.mutateExisting` (Kyverno's `cel-mutate`
/// requests), in a labelled namespace:
/// - targets listed by `targetMatchConstraints` (ConfigMaps with a label):
///   the policy's creation mutates those that exist, each seeing an
///   UPDATE of itself as `request`; an admitted Secret mutates them again
///   with itself as `request`; an unlabelled ConfigMap and the Secret
///   itself are left alone;
/// - a target named by an expression on the trigger (`resource.get`): the
///   policy's creation mutates it for the existing trigger, and a change
///   of the trigger undoes a hand edit of the target.
fn mutating_policy_existing(cluster: &RealCluster) {
    let ns = "mpol-existing";
    apply_text(
        cluster,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    rotation: \"on\"\n"
        ),
    );
    let config_map = |name: &str, labels: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\ndata:\n  a: b\n"
        )
    };
    apply_text(cluster, &config_map("stamped", "stamp: \"yes\""));
    apply_text(cluster, &config_map("plain", ""));
    apply_text(cluster, &config_map("app", ""));
    let annotation = |kind: &str, name: &str, key: &str| {
        cluster
            .get(&[kind, name, "-n", ns])
            .and_then(|o| o["metadata"]["annotations"][key].as_str().map(String::from))
            .unwrap_or_default()
    };
    let stamp = r#"
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata:
  name: stamp-on-rotation
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    namespaceSelector:
      matchLabels: {rotation: "on"}
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}
  targetMatchConstraints:
    namespaceSelector:
      matchLabels: {rotation: "on"}
    objectSelector:
      matchLabels: {stamp: "yes"}
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{annotations: {"rotated-by": request.name}}}'
"#;
    apply_text(cluster, stamp);
    eventually("the MutatingPolicy READY", Duration::from_secs(60), || {
        cluster
            .get(&["mutatingpolicy", "stamp-on-rotation"])
            .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
    });
    eventually(
        "the existing target mutated as an UPDATE of itself",
        Duration::from_secs(60),
        || annotation("configmap", "stamped", "rotated-by") == "stamped",
    );
    eventually(
        "the mutating webhook for secrets",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["mutatingwebhookconfiguration", MUTATING])
                .is_some_and(|c| c["webhooks"].to_string().contains("\"secrets\""))
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    cluster.kubectl(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        ns,
        "--from-literal=password=one",
    ]);
    eventually(
        "the target mutated with the admitted trigger as request",
        Duration::from_secs(30),
        || annotation("configmap", "stamped", "rotated-by") == "db",
    );
    assert_eq!(
        annotation("configmap", "plain", "rotated-by"),
        "",
        "not selected"
    );
    assert_eq!(
        annotation("secret", "db", "rotated-by"),
        "",
        "a policy with targetMatchConstraints leaves its trigger alone"
    );
    let restart = r#"
apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata:
  name: restart-app
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets], resourceNames: [db]}
  targetMatchConstraints:
    expression: resource.get("v1", "configmaps", object.metadata.namespace, "app")
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/annotations", value: {"restarted-for": request.name}}]'
"#;
    apply_text(cluster, restart);
    eventually(
        "the expression's target mutated for the existing trigger",
        Duration::from_secs(60),
        || annotation("configmap", "app", "restarted-for") == "db",
    );
    cluster.kubectl(&["annotate", "configmap", "app", "-n", ns, "restarted-for-"]);
    assert_eq!(annotation("configmap", "app", "restarted-for"), "");
    cluster.kubectl(&["label", "secret", "db", "-n", ns, "version=2"]);
    eventually(
        "a change of the trigger mutates the target again",
        Duration::from_secs(30),
        || annotation("configmap", "app", "restarted-for") == "db",
    );
    drained(cluster, Duration::from_secs(30));
    cluster.kubectl(&[
        "delete",
        "mutatingpolicy",
        "stamp-on-rotation",
        "restart-app",
    ]);
}

fn pod_in(namespace: &str, name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

/// best-practices/disallow-latest-tag (Audit, `background: true`): the
/// scan the policy's creation starts writes one PolicyReport per Pod,
/// named after its uid and owned by it, with a result per rule; a Pod
/// created later is reported by the next scan; a deleted Pod's report
/// goes with it (the garbage collector, through the owner reference);
/// deleting the policy empties and deletes the reports.
fn policy_reports(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "reports"]);
    apply_text(cluster, &pod_in("reports", "good", "nginx:1.27"));
    apply_text(cluster, &pod_in("reports", "bad", "nginx:latest"));
    cluster.kubectl(&[
        "apply",
        "-f",
        &library("best-practices/disallow-latest-tag/disallow-latest-tag.yaml"),
    ]);
    let report = |pod: &str| {
        let uid = cluster.get(&["pod", pod, "-n", "reports"])?["metadata"]["uid"]
            .as_str()?
            .to_string();
        cluster.get(&["policyreport", &uid, "-n", "reports"])
    };
    eventually("both Pods reported", Duration::from_secs(60), || {
        report("good").is_some() && report("bad").is_some()
    });
    let bad = report("bad").unwrap();
    assert_eq!(bad["scope"]["kind"], "Pod");
    assert_eq!(bad["scope"]["name"], "bad");
    assert_eq!(bad["metadata"]["ownerReferences"][0]["name"], "bad");
    assert_eq!(label(&bad, "app.kubernetes.io/managed-by"), "kyverno");
    assert_eq!(
        bad["summary"],
        json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0})
    );
    let failed: Vec<&Value> = bad["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["result"] == "fail")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["policy"], "disallow-latest-tag");
    assert_eq!(failed[0]["rule"], "validate-image-tag");
    assert_eq!(failed[0]["source"], "kyverno");
    assert_eq!(failed[0]["properties"]["process"], "background scan");
    assert_eq!(report("good").unwrap()["summary"]["pass"], 2);
    // `kubectl get polr`, as users read them.
    let table = cluster.kubectl(&["get", "polr", "-n", "reports"]);
    assert!(table.contains("Pod") && table.contains("bad"), "{table}");

    // A Pod made after the scan: reported by the next one (20 s here).
    apply_text(cluster, &pod_in("reports", "later", "busybox:latest"));
    eventually("the later Pod reported", Duration::from_secs(60), || {
        report("later").is_some_and(|r| r["summary"]["fail"] == 1)
    });
    let uid = cluster.get(&["pod", "bad", "-n", "reports"]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    cluster.kubectl(&[
        "delete",
        "pod",
        "bad",
        "-n",
        "reports",
        "--grace-period=0",
        "--force",
    ]);
    eventually(
        "the deleted Pod's report gone",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["policyreport", &uid, "-n", "reports"])
                .is_none()
        },
    );
    cluster.kubectl(&["delete", "clusterpolicy", "disallow-latest-tag"]);
    eventually(
        "the reports emptied with their policy",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["policyreport", "-n", "reports"])
                .is_some_and(|l| l["items"].as_array().is_some_and(Vec::is_empty))
        },
    );
}

/// An Audit ValidatingPolicy's results, as Kyverno writes them (source
/// `KyvernoValidatingPolicy`, rule named after the policy): from the
/// background scan for ConfigMaps made before it, from admission for one
/// made after; gone with the policy.
fn validating_policy_reports(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "vpol-reports"]);
    let config_map = |name: &str, labels: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: vpol-reports\n  labels: {labels}\n"
        )
    };
    apply_text(cluster, &config_map("labelled", "{team: a}"));
    apply_text(cluster, &config_map("plain", "{}"));
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: require-team
  annotations:
    policies.kyverno.io/severity: medium
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: vpol-reports
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: a team label is required
"#,
    );
    let report = |name: &str| {
        let uid = cluster.get(&["configmap", name, "-n", "vpol-reports"])?["metadata"]["uid"]
            .as_str()?
            .to_string();
        cluster.get(&["policyreport", &uid, "-n", "vpol-reports"])
    };
    let result = |name: &str| -> Option<Value> {
        report(name)?["results"]
            .as_array()?
            .iter()
            .find(|r| r["policy"] == "require-team")
            .cloned()
    };
    eventually("both ConfigMaps scanned", Duration::from_secs(60), || {
        result("labelled").is_some() && result("plain").is_some()
    });
    assert_eq!(result("labelled").unwrap()["result"], "pass");
    let failed = result("plain").unwrap();
    assert_eq!(failed["result"], "fail");
    assert_eq!(failed["source"], "KyvernoValidatingPolicy");
    assert_eq!(failed["rule"], "require-team");
    assert_eq!(failed["severity"], "medium");
    assert_eq!(failed["message"], "a team label is required");
    assert_eq!(failed["properties"]["process"], "background scan");

    // Admitted (Audit) after the scan: its result comes from admission.
    eventually(
        "the ValidatingPolicy READY",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingpolicy", "require-team"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    apply_text(cluster, &config_map("late", "{}"));
    eventually(
        "the admitted ConfigMap reported",
        Duration::from_secs(30),
        || result("late").is_some(),
    );
    let late = result("late").unwrap();
    assert_eq!(late["result"], "fail");
    assert_eq!(late["properties"]["process"], "admission review");

    cluster.kubectl(&["delete", "validatingpolicy", "require-team"]);
    eventually(
        "the results gone with their policy",
        Duration::from_secs(60),
        || {
            ["labelled", "plain", "late"]
                .iter()
                .all(|n| result(n).is_none())
        },
    );
}

/// `kubectl create --dry-run=server` of `object`: the API server's answer
/// (its admission webhooks included), stdout or the error.
fn create_dry_run(cluster: &RealCluster, object: &str) -> Result<String, String> {
    let out = cluster.kubectl_in(&["create", "--dry-run=server", "-f", "-"], Some(object));
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

/// An ImageValidatingPolicy watched from the cluster and enforced at
/// admission: a matched image without a digest is denied, a pinned one
/// goes on to the validations, and images it does not match are left
/// alone. Nothing here needs an image registry.
fn image_validating_policy(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "images"]);
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata:
  name: acme-images
spec:
  validationActions: [Deny]
  validationConfigurations:
    required: false
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: images
  matchImageReferences:
  - glob: "ghcr.io/acme/*"
  attestors: []
  validations:
  - expression: "images.containers.size() <= 1"
    messageExpression: "'one acme image per Pod, got ' + string(images.containers.size())"
"#,
    );
    let digest = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2";
    let dry_run = |images: &[String]| -> Result<String, String> {
        let containers: String = images
            .iter()
            .enumerate()
            .map(|(i, image)| format!("  - {{name: c{i}, image: \"{image}\"}}\n"))
            .collect();
        let object = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: images\nspec:\n  containers:\n{containers}"
        );
        create_dry_run(cluster, &object)
    };
    eventually(
        "a tagged acme image denied for its missing digest",
        Duration::from_secs(60),
        || {
            dry_run(&["ghcr.io/acme/api:2.1".to_string()]).is_err_and(|e| {
                e.contains("acme-images")
                    && e.contains("image ghcr.io/acme/api:2.1 does not have a digest")
            })
        },
    );
    let pinned = format!("ghcr.io/acme/api@{digest}");
    assert!(dry_run(std::slice::from_ref(&pinned)).is_ok());
    // Not an acme image: not the policy's concern.
    assert!(dry_run(&["nginx:1.27".to_string()]).is_ok());
    let two = dry_run(&[pinned.clone(), format!("ghcr.io/acme/worker@{digest}")]);
    assert!(
        two.as_ref()
            .is_err_and(|e| e.contains("one acme image per Pod, got 2")),
        "{two:?}"
    );
    eventually(
        "the ImageValidatingPolicy Ready",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["imagevalidatingpolicy", "acme-images"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
        },
    );
    // An admitted Pod: the policy's result in its PolicyReport.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pinned\n  namespace: images\nspec:\n  containers:\n  - {{name: c, image: \"{pinned}\"}}\n"
    );
    let out = cluster.kubectl_in(&["create", "-f", "-"], Some(&pod));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = || -> Option<Value> {
        let uid = cluster.get(&["pod", "pinned", "-n", "images"])?["metadata"]["uid"]
            .as_str()?
            .to_string();
        cluster.get(&["policyreport", &uid, "-n", "images"])?["results"]
            .as_array()?
            .iter()
            .find(|r| r["policy"] == "acme-images")
            .cloned()
    };
    eventually(
        "the ImageValidatingPolicy's result reported",
        Duration::from_secs(60),
        || result().is_some(),
    );
    let reported = result().unwrap();
    assert_eq!(reported["source"], "KyvernoImageValidatingPolicy");
    assert_eq!(reported["result"], "pass");
    assert_eq!(reported["message"], "success");
    cluster.kubectl(&["delete", "imagevalidatingpolicy", "acme-images"]);
    eventually(
        "the ImageValidatingPolicy gone",
        Duration::from_secs(60),
        || dry_run(&["ghcr.io/acme/api:2.1".to_string()]).is_ok(),
    );
}

/// A ValidatingPolicy and a ClusterPolicy (both Deny/Enforce) exempted by
/// a policies.kyverno.io PolicyException and a kyverno.io one of the same
/// name and namespace: each exception lifts its own policy, and deleting
/// one leaves the other in force.
fn exceptions_of_both_groups(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "exempt"]);
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: require-team-label
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: exempt
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: a team label is required
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-owner-annotation
spec:
  validationFailureAction: Enforce
  background: false
  rules:
  - name: owner
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          namespaces: [exempt]
    validate:
      message: an owner annotation is required
      pattern:
        metadata:
          annotations:
            owner: "?*"
---
apiVersion: policies.kyverno.io/v1beta1
kind: PolicyException
metadata:
  name: legacy
  namespace: exempt
spec:
  policyRefs:
  - name: require-team-label
    kind: ValidatingPolicy
  matchConditions:
  - name: legacy-names
    expression: "object.metadata.name.startsWith('legacy-')"
---
apiVersion: kyverno.io/v2
kind: PolicyException
metadata:
  name: legacy
  namespace: exempt
spec:
  exceptions:
  - policyName: require-owner-annotation
    ruleNames: [owner]
  match:
    any:
    - resources:
        kinds: [ConfigMap]
        names: ["legacy-*"]
"#,
    );
    let dry_run = |name: &str| -> Result<String, String> {
        let object = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: exempt\n"
        );
        create_dry_run(cluster, &object)
    };
    eventually(
        "both policies deny an unlabelled ConfigMap",
        Duration::from_secs(60),
        || {
            dry_run("plain").is_err_and(|e| {
                e.contains("a team label is required") && e.contains("require-owner-annotation")
            })
        },
    );
    eventually("both exceptions in force", Duration::from_secs(30), || {
        dry_run("legacy-a").is_ok()
    });
    // The policy status duty writes no condition to an exception (their
    // CRDs have no status subresource), and the policies are Ready.
    eventually("both policies Ready", Duration::from_secs(60), || {
        ready(cluster, "clusterpolicy", "require-owner-annotation")
            && cluster
                .get(&["validatingpolicy", "require-team-label"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
    });

    cluster.kubectl(&[
        "delete",
        "policyexceptions.policies.kyverno.io",
        "legacy",
        "-n",
        "exempt",
    ]);
    eventually(
        "the ValidatingPolicy in force again, the ClusterPolicy still exempted",
        Duration::from_secs(30),
        || {
            dry_run("legacy-b").is_err_and(|e| {
                e.contains("a team label is required") && !e.contains("require-owner-annotation")
            })
        },
    );
    cluster.kubectl(&[
        "delete",
        "validatingpolicy/require-team-label",
        "clusterpolicy/require-owner-annotation",
    ]);
    cluster.kubectl(&[
        "delete",
        "policyexceptions.kyverno.io",
        "legacy",
        "-n",
        "exempt",
    ]);
}

fn holder(cluster: &RealCluster, lease: &str) -> Option<String> {
    cluster.get(&["lease", lease, "-n", NAMESPACE])?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

/// An Audit policy with `background: false` (never scanned): its results
/// come from admission, written by the replica that admitted the request,
/// marked "admission review"; an update changes them; a scan leaves them;
/// an update the policy no longer selects removes them (the report goes).
fn admission_reports(cluster: &RealCluster) {
    cluster.kubectl(&["create", "namespace", "audited"]);
    apply_text(
        cluster,
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-owner
spec:
  validationFailureAction: Audit
  background: false
  rules:
    - name: owner-label
      match:
        any:
          - resources:
              kinds: [ConfigMap]
              namespaces: [audited]
              selector:
                matchLabels:
                  audit: "yes"
      validate:
        message: "an owner label is required"
        pattern:
          metadata:
            labels:
              owner: "?*"
"#,
    );
    eventually("require-owner Ready", Duration::from_secs(60), || {
        ready(cluster, "clusterpolicy", "require-owner")
    });
    eventually(
        "the validating webhook for configmaps",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| c["webhooks"].to_string().contains("\"configmaps\""))
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    apply_text(
        cluster,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unowned\n  namespace: audited\n  labels:\n    audit: \"yes\"\n",
    );
    let uid = cluster
        .get(&["configmap", "unowned", "-n", "audited"])
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let result = || {
        let report = cluster.get(&["policyreport", &uid, "-n", "audited"])?;
        report["results"]
            .as_array()?
            .iter()
            .find(|r| r["policy"] == "require-owner")
            .cloned()
    };
    eventually(
        "the admission result reported",
        Duration::from_secs(30),
        || result().is_some(),
    );
    let failed = result().unwrap();
    assert_eq!(failed["result"], "fail", "{failed}");
    assert_eq!(failed["rule"], "owner-label");
    assert_eq!(failed["properties"]["process"], "admission review");
    let report = cluster
        .get(&["policyreport", &uid, "-n", "audited"])
        .unwrap();
    assert_eq!(
        report["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );
    assert_eq!(report["scope"]["name"], "unowned");
    cluster.kubectl(&["label", "configmap", "unowned", "-n", "audited", "owner=me"]);
    eventually(
        "the update's result reported",
        Duration::from_secs(30),
        || result().is_some_and(|r| r["result"] == "pass"),
    );
    // A background scan (every 20 s here) keeps what it does not evaluate.
    std::thread::sleep(Duration::from_secs(25));
    assert_eq!(result().expect("kept by the scans")["result"], "pass");
    // An update the policy no longer selects takes its result away.
    cluster.kubectl(&["label", "configmap", "unowned", "-n", "audited", "audit-"]);
    eventually(
        "the result of a policy no longer selecting it removed",
        Duration::from_secs(30),
        || result().is_none(),
    );
    cluster.kubectl(&["delete", "clusterpolicy", "require-owner"]);
    eventually(
        "the report emptied with its policy",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["policyreport", &uid, "-n", "audited"])
                .is_none()
        },
    );
}

/// 500 trigger ConfigMaps created in one go; the generate leader is
/// killed (SIGKILL) once a part of their copies exists. After another
/// replica takes the lead, every trigger has exactly one copy, each copy
/// was created once (the audit log), and no UpdateRequest is left.
fn leader_killed_mid_batch(cluster: &RealCluster, gavel: &mut Release) {
    const N: usize = 500;
    cluster.kubectl(&["create", "namespace", "batch"]);
    let items: Vec<Value> = (0..N)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("t-{i:03}"), "namespace": "batch", "labels": {"copy": "yes"}},
                "data": {"i": i.to_string()},
            })
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let (_, mark) = cluster.audit_since(0);
    let started = Instant::now();
    let creating = {
        let kubeconfig = cluster.kubeconfig.clone();
        std::thread::spawn(move || {
            let mut command = std::process::Command::new(RealCluster::bin("kubectl"));
            command
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["create", "-f", "-"]);
            support::cluster::run_piped(command, Some(&list))
        })
    };
    let copies = || {
        cluster
            .get(&[
                "configmap",
                "-n",
                "batch",
                "-l",
                "generate.kyverno.io/policy-name=copy-configmaps",
            ])
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
    };
    let created = creating.join().unwrap();
    assert!(
        created.status.success(),
        "creating the triggers: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    eprintln!(
        "background: {N} triggers admitted in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    eventually(
        "a part of the copies made",
        Duration::from_secs(120),
        || copies().len() >= 50,
    );
    let leader = holder(cluster, "gavel-background").expect("a generate leader");
    let index = gavel
        .replicas
        .iter()
        .position(|r| r.identity == leader)
        .unwrap();
    gavel.replicas[index].child.kill().unwrap();
    gavel.replicas[index].child.wait().unwrap();
    let made_before = copies().len();
    let waiting = update_requests(cluster).len();
    eprintln!(
        "background: {leader} killed with {made_before} of {N} copies made and {waiting} UpdateRequests waiting, {:.1}s in",
        started.elapsed().as_secs_f64()
    );
    assert!(
        made_before < N,
        "the leader was not killed in the middle of the batch"
    );
    // Another replica takes the lead and the rest of the batch (the killed
    // one comes back only then, as a restarted pod would).
    let mut successor = None;
    eventually("another generate leader", Duration::from_secs(40), || {
        successor = holder(cluster, "gavel-background").filter(|h| *h != leader);
        successor.is_some()
    });
    eprintln!(
        "background: {} leads after {:.1}s",
        successor.unwrap(),
        started.elapsed().as_secs_f64()
    );
    gavel.replicas[index] = gavel.spawn(&leader);
    gavel.balancer.set_backends(gavel.ports());
    wait_ready(&gavel.replicas[index], Duration::from_secs(60));
    eventually("every trigger's copy", Duration::from_secs(240), || {
        copies().len() >= N
    });
    drained(cluster, Duration::from_secs(120));
    eprintln!(
        "background: {N} copies and no UpdateRequest left {:.1}s after the first trigger; lead now with {:?}",
        started.elapsed().as_secs_f64(),
        holder(cluster, "gavel-background")
    );
    let copies = copies();
    let mut per_trigger: BTreeMap<String, usize> = BTreeMap::new();
    for c in &copies {
        *per_trigger
            .entry(label(c, "generate.kyverno.io/trigger-name").to_string())
            .or_default() += 1;
    }
    assert_eq!(copies.len(), N, "one copy per trigger");
    assert_eq!(per_trigger.len(), N);
    assert!(per_trigger.values().all(|&n| n == 1));
    let (events, _) = cluster.audit_since(mark);
    let mut creates: BTreeMap<String, usize> = BTreeMap::new();
    let mut deletes = 0;
    for e in &events {
        if e["objectRef"]["resource"] != "configmaps" || e["objectRef"]["namespace"] != "batch" {
            continue;
        }
        let name = e["objectRef"]["name"].as_str().unwrap_or_default();
        if !name.ends_with("-copy") || e["stage"] != "ResponseComplete" {
            continue;
        }
        match e["verb"].as_str() {
            Some("create") if e["responseStatus"]["code"] == 201 => {
                *creates.entry(name.to_string()).or_default() += 1
            }
            Some("delete") => deletes += 1,
            _ => {}
        }
    }
    let twice: Vec<_> = creates.iter().filter(|(_, n)| **n > 1).collect();
    eprintln!(
        "background: audit: {} copies created, {} created twice, {deletes} deleted",
        creates.len(),
        twice.len()
    );
    assert!(twice.is_empty(), "created more than once: {twice:?}");
    assert_eq!(deletes, 0);
}

/// An Audit policy on the ~1,000 ConfigMaps of `batch` (the triggers and
/// copies of the step before): its scan starts on the policy's creation,
/// and the API server is stopped for 10 s once a part of the reports is
/// written. Afterwards every ConfigMap has exactly one report, with one
/// result, the failure its missing label is.
fn scan_survives_api_server_restart(cluster: &RealCluster, gavel: &Release) {
    let policy = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-team-label
  annotations:
    policies.kyverno.io/severity: medium
    policies.kyverno.io/category: Best Practices
spec:
  validationFailureAction: Audit
  background: true
  rules:
  - name: check-team
    match:
      any:
      - resources:
          kinds:
          - ConfigMap
          namespaces:
          - batch
    validate:
      message: "The label `team` is required."
      pattern:
        metadata:
          labels:
            team: "?*"
"#;
    let config_maps = || {
        cluster
            .get(&["configmap", "-n", "batch"])
            .and_then(|l| l["items"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    let reports = || {
        cluster
            .get(&["policyreport", "-n", "batch"])
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
    };
    let total = config_maps();
    assert!(total > 1000, "{total} ConfigMaps");
    apply_text(cluster, policy);
    let started = Instant::now();
    eventually(
        "a part of the reports written",
        Duration::from_secs(120),
        || reports().len() >= 100,
    );
    let before = reports().len();
    cluster.stop("kube-apiserver");
    std::thread::sleep(Duration::from_secs(10));
    cluster.start_again("kube-apiserver");
    gavel.api_relay.set_backends(vec![cluster.api_port()]);
    eprintln!(
        "background: API server stopped for 10 s with {before} of {total} reports written, {:.1}s into the scan",
        started.elapsed().as_secs_f64()
    );
    eventually("every ConfigMap reported", Duration::from_secs(240), || {
        reports().len() >= total
    });
    // The next scan (20 s) finds the same results and writes nothing.
    let (_, mark) = cluster.audit_since(0);
    std::thread::sleep(Duration::from_secs(45));
    let (events, _) = cluster.audit_since(mark);
    let rewrites = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "policyreports")
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            )
        })
        .count();
    assert_eq!(
        rewrites, 0,
        "a scan that finds the same results writes nothing"
    );
    let reports = reports();
    eprintln!(
        "background: {} reports {:.1}s after the policy",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(reports.len(), total);
    for r in &reports {
        assert_eq!(r["scope"]["kind"], "ConfigMap");
        assert_eq!(r["summary"]["fail"], 1, "{r}");
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "{r}");
        assert_eq!(results[0]["policy"], "require-team-label");
        assert_eq!(results[0]["severity"], "medium");
        assert_eq!(results[0]["category"], "Best Practices");
    }
}

/// With the chart's `reports.openreports`, results go to openreports.io
/// Reports (Kyverno's `--openreportsEnabled`), with the same content.
fn openreports(cluster: &RealCluster, gavel: &mut Release) {
    gavel.stop_all(cluster);
    let chart = support::cluster::repo().join("charts/gavel");
    let out = cluster.helm(&[
        "upgrade",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "reports.openreports=true",
    ]);
    assert!(
        out.status.success(),
        "helm upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    gavel.chart_args = deployment_args(cluster);
    assert!(
        gavel
            .chart_args
            .iter()
            .any(|a| a == "--openreports-enabled=true"),
        "{:?}",
        gavel.chart_args
    );
    gavel.scale_to(1);
    eventually(
        "the webhook configurations",
        Duration::from_secs(60),
        || webhook_configurations(cluster) == (true, true),
    );
    cluster.kubectl(&["create", "namespace", "open-reports"]);
    apply_text(
        cluster,
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata:
  name: require-owner
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: open-reports
  validations:
  - expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels"
    message: an owner label is required
"#,
    );
    eventually(
        "the ValidatingPolicy READY",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingpolicy", "require-owner"])
                .is_some_and(|p| p["status"]["conditionStatus"]["ready"] == true)
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    apply_text(
        cluster,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  namespace: open-reports\n",
    );
    let uid = cluster
        .get(&["configmap", "plain", "-n", "open-reports"])
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let report = || cluster.get(&["reports.openreports.io", &uid, "-n", "open-reports"]);
    eventually("the openreports.io Report", Duration::from_secs(60), || {
        report().is_some_and(|r| {
            r["results"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["policy"] == "require-owner" && x["result"] == "fail")
        })
    });
    let report = report().unwrap();
    assert_eq!(report["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(report["scope"]["name"], "plain");
    assert_eq!(report["summary"]["fail"], 1);
    assert!(
        cluster
            .get(&["policyreport", &uid, "-n", "open-reports"])
            .is_none(),
        "no wgpolicyk8s.io report besides"
    );
    cluster.kubectl(&["delete", "validatingpolicy", "require-owner"]);
}
