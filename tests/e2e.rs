//! gavel on a real control plane: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok built from Go modules by
//! `e2e/cluster.sh`, gavel's chart installed with the real Helm CLI, and three
//! gavel replicas running as host processes with the identity of the
//! ServiceAccount the chart created (a TokenRequest token), so the chart's
//! RBAC is exactly what is enforced. The API server calls the replicas
//! through a loopback load balancer, at the URL gavel registers.
//!
//! One test walks the steps in order on one cluster (starting one costs
//! about half a minute of the machine's two cores); each step says what it
//! proves and what it measured.

use crate::support;

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use support::cluster::{RealCluster, eventually, repo};
use support::gavel::{sigterm, temp_dir};
use support::release::{
    MUTATING, NAMESPACE, RELEASE, Release, VALIDATING, deployment_args, get, install_kyverno_crds,
    post_review, ready, wait_ready, webhook_configurations,
};

const SERVICE_ACCOUNT: &str = "system:serviceaccount:gavel:gavel";
const LEASES: [&str; 6] = [
    "gavel-webhooks",
    "gavel-certs",
    "gavel-policy-status",
    "gavel-background",
    "gavel-reports",
    "gavel-cleanup",
];

#[test]
fn gavel_on_a_real_control_plane() {
    let _heavy = support::heavy();
    let dir = temp_dir("e2e");
    let cluster = RealCluster::start(&dir.join("cluster"), 10);
    install_kyverno_crds(&cluster);
    kinds_table_is_current(&cluster);
    // The GlobalContextEntry of the hot-path step reads Services: a user
    // grants that through the chart's extraReadRules.
    let values =
        "rbac:\n  extraReadRules:\n    - apiGroups: [\"\"]\n      resources: [\"services\"]\n";
    let mut gavel = Release::install(&cluster, &dir, 3, values);
    step("policies applied with kubectl are enforced", || {
        policies_are_enforced(&cluster, &gavel)
    });
    step("a policy's CEL is type checked when it is written", || {
        policies_are_type_checked(&cluster)
    });
    step("subresources match their parent's kind", || {
        subresources_match_their_parent(&cluster)
    });
    step("signed manifests are verified at admission", || {
        signed_manifests_at_admission(&cluster)
    });
    step("the hot path makes no API calls", || {
        hot_path_makes_no_api_calls(&cluster, &gavel)
    });
    step("the client keeps its QPS and burst under churn", || {
        churn_stays_within_qps(&cluster, &gavel)
    });
    step("a ConfigMap update reaches admissions at once", || {
        cache_freshness(&cluster, &gavel)
    });
    step(
        "the chart's webhook selection reaches the configurations",
        || webhook_selection(&cluster),
    );
    step("the dashboards read what gavel exports", || {
        dashboards_read_exported_metrics(&gavel, &dir)
    });
    // Early, so that the controller-manager's garbage collector has long
    // reconnected (with client-go's backoff) before the uninstall needs it.
    step("an API server outage and an etcd compaction", || {
        api_server_outage(&cluster, &gavel)
    });
    step("a killed leader is replaced", || {
        leader_failover(&cluster, &mut gavel)
    });
    step("helm upgrade rolls the replicas under load", || {
        upgrade_rolls_under_load(&cluster, &mut gavel)
    });
    step("helm uninstall leaves nothing behind", || {
        uninstall(&cluster, &mut gavel)
    });
}

/// A policy written through the API server gets the type checking
/// warnings of `/policyvalidate`, which kubectl prints: a field the Pod
/// schema does not declare, named with the field that holds the
/// expression. A server-side dry run, so nothing is served.
fn policies_are_type_checked(cluster: &RealCluster) {
    let policy = json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "typo"},
        "spec": {"validationFailureAction": "Audit", "rules": [{"name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"cel": {"expressions": [
                {"expression": "object.spec.hostNetwrk != true"}]}}}]},
    });
    let want = "Warning: spec.rules[0].validate.cel.expressions[0].expression: /v1, Kind=Pod: undefined field 'hostNetwrk' (object.spec.hostNetwrk)";
    eventually(
        "the policy webhook's type warning",
        Duration::from_secs(60),
        || {
            let out = cluster.kubectl_in(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&policy.to_string()),
            );
            out.status.success() && String::from_utf8_lossy(&out.stderr).contains(want)
        },
    );
}

/// validate.manifests at admission, on the objects the API server sends:
/// the example suite's `p256` rule (Enforce) admits a ConfigMap created
/// from its signed manifest, although the API server has added its uid,
/// timestamp and managedFields; of a Service it ignores the cluster IPs,
/// IP families, type and session affinity the API server adds, but not the
/// ports' protocol (the example policies' Pod Security rules would deny
/// the suite's Deployment for other reasons); it denies a ConfigMap changed after signing, naming the
/// difference, and one without a signature; a server-side dry run of the
/// changed one is allowed, as Kyverno allows dry runs.
fn signed_manifests_at_admission(cluster: &RealCluster) {
    let example = repo().join("examples/tests/manifest-signatures");
    let read = |file: &str| {
        let text = std::fs::read_to_string(example.join(file)).unwrap();
        gavel::policy::load::parse_yaml_documents(file, &text).unwrap()
    };
    let mut policy = read("policies.yaml").remove(0);
    let rules = policy["spec"]["rules"].as_array_mut().unwrap();
    rules.retain(|r| r["name"] == "p256");
    policy["metadata"]["name"] = json!("e2e-signed-manifests");
    let resources = read("resources.yaml");
    let named = |name: &str| {
        resources
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap()
            .clone()
    };
    cluster.kubectl(&["create", "namespace", "apps"]);
    cluster.kubectl_in(&["apply", "-f", "-"], Some(&policy.to_string()));
    eventually(
        "the manifests policy Ready",
        Duration::from_secs(60),
        || ready(cluster, "clusterpolicy", "e2e-signed-manifests"),
    );
    eventually(
        "a webhook rule for configmaps",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| c["webhooks"].to_string().contains("configmaps"))
        },
    );
    create(cluster, &named("cm-signed"), &[]).unwrap();
    // The Service as its manifest has it. Of all the API server adds, only
    // the ports' protocol is in no default ignore list (Kyverno's nor
    // k8s-manifest-sigstore's): a signer must write it, and without it
    // the Service is denied, naming that one difference.
    let mut service = named("svc-defaulted");
    let spec = service["spec"].as_object_mut().unwrap();
    spec.retain(|k, _| k == "selector" || k == "ports");
    let denied = create(cluster, &service, &[]).unwrap_err();
    assert!(
        denied.contains(
            r#"{"items":[{"key":"spec.ports.0.protocol","values":{"after":"TCP","before":null}}]}"#
        ),
        "{denied}"
    );
    let denied = create(cluster, &named("cm-tampered"), &[]).unwrap_err();
    assert!(
        denied.contains("failed to verify signature. diff found") && denied.contains("data.level"),
        "{denied}"
    );
    let denied = create(cluster, &named("cm-unsigned"), &[]).unwrap_err();
    assert!(
        denied.contains("YAML manifest not found for this resource: message not found"),
        "{denied}"
    );
    create(cluster, &named("cm-tampered"), &["--dry-run=server"]).unwrap();
    cluster.kubectl(&["delete", "clusterpolicy", "e2e-signed-manifests"]);
}

/// The chart's default `config.webhooks` (kube-system excluded) and
/// `excludeGavelNamespace` become every webhook's namespaceSelector.
fn webhook_selection(cluster: &RealCluster) {
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let name = if kind.starts_with("validating") {
            VALIDATING
        } else {
            MUTATING
        };
        let config = cluster.get(&[kind, name]).unwrap();
        for hook in config["webhooks"].as_array().unwrap() {
            let expressions = &hook["namespaceSelector"]["matchExpressions"];
            assert_eq!(
                expressions,
                &json!([{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": ["kube-system", NAMESPACE]}]),
                "{kind} {name}: {hook}"
            );
        }
    }
}

/// gavel's Grafana dashboard (charts/gavel/dashboards) reads only metrics
/// the replicas export, with the labels it groups by; Kyverno's dashboard
/// of the pinned release reads them too, but for the metrics
/// `.ci/check-dashboards.py` lists with their reasons.
fn dashboards_read_exported_metrics(gavel: &Release, dir: &std::path::Path) {
    let metrics: String = gavel
        .replicas
        .iter()
        .map(|r| support::release::scrape(r.port))
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join("metrics.txt");
    std::fs::write(&path, metrics).unwrap();
    let out = Command::new("python3")
        .arg(".ci/check-dashboards.py")
        .arg(&path)
        .arg("charts/gavel/dashboards/gavel.json")
        .arg(support::cluster::cache().join("kyverno-dashboards/kyverno-dashboard.json"))
        .current_dir(repo())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "{text}");
}

/// `src/kinds/builtin.rs`, the plural and scope of every kind, is what this
/// API server's discovery (with Kyverno's CRDs) says: `.ci/gen-kinds.py
/// --check` reads it from the running cluster.
fn kinds_table_is_current(cluster: &RealCluster) {
    let path = format!(
        "{}:{}",
        support::cluster::cache().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("python3")
        .args([".ci/gen-kinds.py", "--check", "--kubeconfig-given"])
        .current_dir(repo())
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn step(name: &str, f: impl FnOnce()) {
    let _ = std::io::Write::flush(&mut std::io::stderr());
    let started = Instant::now();
    eprintln!("e2e: {name} ...");
    f();
    eprintln!("e2e: {name}: ok in {:.1}s", started.elapsed().as_secs_f64());
}

fn pod(name: &str, compliant: bool, labels: Value) -> Value {
    let security = if compliant {
        json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    } else {
        json!({"privileged": true})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "e2e", "labels": labels},
        "spec": {
            "nodeName": "kwok-node-0",
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "app", "image": "registry.example.com/app:1.0", "securityContext": security}],
        },
    })
}

/// `kubectl create` of an object: Ok(stdout) or Err(stderr).
fn create(cluster: &RealCluster, object: &Value, extra: &[&str]) -> Result<String, String> {
    let mut args = vec!["create", "-f", "-"];
    args.extend_from_slice(extra);
    let out = cluster.kubectl_in(&args, Some(&object.to_string()));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// 1. Policies applied with kubectl become Ready; a violating Pod created
///    through the API server is denied with Kyverno's message, a compliant one
///    admitted; a mutate policy's patch is on the stored object; an Audit
///    policy admits and counts.
fn policies_are_enforced(cluster: &RealCluster, gavel: &Release) {
    cluster.kubectl(&["create", "namespace", "e2e"]);
    let policies = repo().join("examples/policies");
    cluster.kubectl(&[
        "apply",
        "-f",
        policies.join("pod-security").to_str().unwrap(),
    ]);
    cluster.kubectl(&[
        "apply",
        "-f",
        policies.join("add-pod-defaults.yaml").to_str().unwrap(),
    ]);
    cluster.kubectl(&[
        "apply",
        "-f",
        policies.join("require-labels.yaml").to_str().unwrap(),
    ]);
    let names: Vec<String> = support::release::pod_security_names()
        .into_iter()
        .chain(["add-pod-defaults".to_string(), "require-labels".to_string()])
        .collect();
    assert_eq!(names.len(), 19);
    eventually(
        "every policy Ready (status written by the leader)",
        Duration::from_secs(60),
        || names.iter().all(|n| ready(cluster, "clusterpolicy", n)),
    );
    // The leader registers the kinds the policies match, at the balancer's URL.
    let url = format!("https://127.0.0.1:{}/validate", gavel.balancer.port);
    eventually(
        "a validating webhook for Pods",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| {
                    c["webhooks"].as_array().into_iter().flatten().any(|w| {
                        w["clientConfig"]["url"]
                            .as_str()
                            .is_some_and(|u| u.starts_with(&url))
                            && w["rules"].to_string().contains("\"pods\"")
                    })
                })
        },
    );
    eventually(
        "the default ServiceAccount of e2e",
        Duration::from_secs(30),
        || {
            cluster
                .get(&["serviceaccount", "default", "-n", "e2e"])
                .is_some()
        },
    );

    // The replicas load the policies from their own watches: until every one
    // has them, a dry run may be admitted.
    eventually("the violating Pod denied", Duration::from_secs(30), || {
        create(
            cluster,
            &pod("probe", false, json!({})),
            &["--dry-run=server"],
        )
        .is_err()
    });
    let denial = create(
        cluster,
        &pod("privileged", false, json!({"app.kubernetes.io/name": "x"})),
        &[],
    )
    .unwrap_err();
    assert!(denial.contains("admission webhook"), "{denial}");
    assert!(
        denial.contains("resource Pod/e2e/privileged was blocked due to the following policies"),
        "{denial}"
    );
    assert!(
        denial.contains("disallow-privileged-containers:"),
        "{denial}"
    );
    assert!(cluster.get(&["pod", "privileged", "-n", "e2e"]).is_none());

    let before = gavel.metric_sum(
        "kyverno_policy_results_total",
        &["policy_name=\"require-labels\"", "rule_result=\"fail\""],
    );
    // No app.kubernetes.io/name label: require-labels (Audit) fails but admits.
    create(cluster, &pod("compliant", true, json!({})), &[]).unwrap();
    let stored = cluster.get(&["pod", "compliant", "-n", "e2e"]).unwrap();
    // add-pod-defaults' patch, made by gavel's mutating webhook.
    assert_eq!(
        stored["spec"]["securityContext"]["runAsNonRoot"], true,
        "{stored}"
    );
    assert_eq!(
        stored["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let after = gavel.metric_sum(
        "kyverno_policy_results_total",
        &["policy_name=\"require-labels\"", "rule_result=\"fail\""],
    );
    assert!(
        after > before,
        "the Audit failure was not counted ({before} -> {after})"
    );
    // kwok plays the kubelet on the fake node.
    eventually(
        "kwok runs the admitted Pod",
        Duration::from_secs(30),
        || {
            cluster
                .get(&["pod", "compliant", "-n", "e2e"])
                .is_some_and(|p| p["status"]["phase"] == "Running")
        },
    );
}

/// 1b. Rules on `Deployment/scale` and `Pod/eviction` see the requests the
///    API server sends for `kubectl scale` and an eviction, whose kinds are
///    `autoscaling/v1 Scale` and `policy/v1 Eviction`; the denial names
///    the object's kind, as Kyverno's does. The webhook rules register the
///    subresources.
fn subresources_match_their_parent(cluster: &RealCluster) {
    // A custom resource with a scale subresource: its kind comes from the
    // CRD, which gavel's replicas watch.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                         "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}},
                     "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas"}}}]},
    });
    cluster.kubectl_in(&["apply", "-f", "-"], Some(&crd.to_string()));
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=60s",
    ]);
    // A Scale to 0 carries no `spec.replicas` (omitempty): as in Kyverno,
    // a condition on a missing key is an error, so the keys are guarded.
    let policy = json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "subresources"},
        "spec": {"validationFailureAction": "Enforce", "background": false, "rules": [
            {"name": "scale-at-most-3",
             "match": {"any": [{"resources": {"kinds": ["Deployment/scale"]}}]},
             "validate": {"message": "scale {{ request.object.metadata.name }} to at most 3",
                          "deny": {"conditions": {"any": [
                              {"key": "{{ request.object.spec.replicas || `0` }}",
                               "operator": "GreaterThan", "value": 3}]}}}},
            {"name": "widgets-at-most-3",
             "match": {"any": [{"resources": {"kinds": ["example.com/v1/Widget/scale"]}}]},
             "validate": {"message": "widgets scale to at most 3",
                          "deny": {"conditions": {"any": [
                              {"key": "{{ request.object.spec.replicas || `0` }}",
                               "operator": "GreaterThan", "value": 3}]}}}},
            {"name": "protected-pods-stay",
             "match": {"any": [{"resources": {"kinds": ["Pod/eviction"]}}]},
             "validate": {"message": "{{ request.object.metadata.name }} is protected",
                          "deny": {"conditions": {"all": [
                              {"key": "{{ request.object.metadata.name }}",
                               "operator": "Equals", "value": "protected-*"},
                              {"key": "{{ request.kind.kind }}",
                               "operator": "Equals", "value": "Eviction"}]}}}},
        ]},
    });
    cluster.kubectl_in(&["apply", "-f", "-"], Some(&policy.to_string()));
    eventually(
        "the subresources policy Ready",
        Duration::from_secs(60),
        || ready(cluster, "clusterpolicy", "subresources"),
    );
    eventually(
        "webhook rules for deployments/scale and pods/eviction",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["validatingwebhookconfiguration", VALIDATING])
                .is_some_and(|c| {
                    let rules = c["webhooks"].to_string();
                    ["deployments/scale", "pods/eviction", "widgets/scale"]
                        .iter()
                        .all(|r| rules.contains(r))
                })
        },
    );
    // No replicas: the Deployment's Pods are not what this step is about.
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "e2e"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": pod("web", true, json!({"app": "web"}))
                     .as_object()
                     .map(|p| json!({"metadata": {"labels": {"app": "web"}}, "spec": p["spec"]}))
                     .unwrap()},
    });
    create(cluster, &deployment, &[]).unwrap();
    let scale = |replicas: u32| {
        let out = cluster.kubectl_in(
            &[
                "scale",
                "deployment",
                "web",
                "-n",
                "e2e",
                &format!("--replicas={replicas}"),
            ],
            None,
        );
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    // The replicas load the policy from their own watches.
    eventually("scaling to 5 denied", Duration::from_secs(30), || {
        scale(5).is_err()
    });
    let denial = scale(9).unwrap_err();
    assert!(denial.contains("scale web to at most 3"), "{denial}");
    assert!(
        denial.contains("resource Scale/e2e/web was blocked"),
        "{denial}"
    );
    scale(2).unwrap();
    let stored = cluster.get(&["deployment", "web", "-n", "e2e"]).unwrap();
    assert_eq!(stored["spec"]["replicas"], 2, "{stored}");
    scale(0).unwrap();

    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w", "namespace": "e2e"}, "spec": {"replicas": 1}});
    create(cluster, &widget, &[]).unwrap();
    let scale_widget = |replicas: u32| {
        let out = cluster.kubectl_in(
            &[
                "scale",
                "widget",
                "w",
                "-n",
                "e2e",
                &format!("--replicas={replicas}"),
            ],
            None,
        );
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    eventually(
        "scaling the Widget to 5 denied",
        Duration::from_secs(30),
        || scale_widget(5).is_err_and(|e| e.contains("widgets scale to at most 3")),
    );
    scale_widget(3).unwrap();
    let stored = cluster.get(&["widget", "w", "-n", "e2e"]).unwrap();
    assert_eq!(stored["spec"]["replicas"], 3, "{stored}");

    for name in ["protected-db", "evictable"] {
        create(cluster, &pod(name, true, json!({})), &[]).unwrap();
    }
    let evict = |name: &str| {
        let eviction = json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": "e2e"},
        });
        let path = format!("/api/v1/namespaces/e2e/pods/{name}/eviction");
        let out = cluster.kubectl_in(
            &["create", "--raw", &path, "-f", "-"],
            Some(&eviction.to_string()),
        );
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let denial = evict("protected-db").unwrap_err();
    assert!(denial.contains("protected-db is protected"), "{denial}");
    assert!(cluster.get(&["pod", "protected-db", "-n", "e2e"]).is_some());
    evict("evictable").unwrap();
    cluster.kubectl(&["delete", "clusterpolicy", "subresources"]);
    cluster.kubectl(&["delete", "crd", "widgets.example.com"]);
    cluster.kubectl(&["delete", "deployment", "web", "-n", "e2e"]);
    cluster.kubectl(&["delete", "pod", "protected-db", "-n", "e2e", "--wait=false"]);
}

/// 2. 5,000 admissions that read `configMap` and `globalReference` context
///    make no API request from gavel's identity, counted by the API server
///    (its audit log, which names the user of every request).
fn hot_path_makes_no_api_calls(cluster: &RealCluster, gavel: &Release) {
    cluster.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "freeze", "namespace": "default", "labels": {"cache.kyverno.io/enabled": "true"}},
        "data": {"frozen": "no"},
    }));
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
        "metadata": {"name": "default-services"},
        "spec": {
            "kubernetesResource": {"group": "", "version": "v1", "resource": "services", "namespace": "default"},
            "projections": [{"name": "names", "jmesPath": "[].metadata.name"}],
        },
    }));
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "context-lookups"},
        "spec": {"validationFailureAction": "Enforce", "rules": [{
            "name": "freeze-and-maintenance",
            "match": {"any": [{"resources": {"kinds": ["Pod"], "namespaces": ["e2e"]}}]},
            "context": [
                {"name": "settings", "configMap": {"name": "freeze", "namespace": "default"}},
                {"name": "services", "globalReference": {"name": "default-services.names"}},
            ],
            "validate": {
                "message": "deployments are frozen, or a maintenance window is open",
                "deny": {"conditions": {"any": [
                    {"key": "{{ settings.data.frozen }}", "operator": "Equals", "value": "yes"},
                    {"key": "maintenance", "operator": "AnyIn", "value": "{{ services }}"},
                ]}},
            },
        }]},
    }));
    eventually("context-lookups Ready", Duration::from_secs(60), || {
        ready(cluster, "clusterpolicy", "context-lookups")
    });
    // The API server keeps its connection to the webhook, so the balancer
    // sends every review to one replica: the policy is in force once that
    // replica evaluates it.
    let context_rule = ["policy_name=\"context-lookups\""];
    // Until the replica's GlobalContextEntry has synced, the rule errs
    // ("global context entry ... not found") and the Pod is denied.
    eventually("context-lookups evaluated", Duration::from_secs(30), || {
        create(
            cluster,
            &pod("warmup", true, json!({"app.kubernetes.io/name": "x"})),
            &["--dry-run=server"],
        )
        .is_ok()
            && gavel.metric_sum("kyverno_policy_results_total", &context_rule) > 0.0
    });

    let (_, mark) = cluster.audit_since(0);
    let before = gavel.metric_sum("kyverno_policy_results_total", &context_rule);
    let started = Instant::now();
    let (admitted, failed) = dry_run_creates(cluster, 5000, 16);
    let elapsed = started.elapsed().as_secs_f64();
    let evaluated = gavel.metric_sum("kyverno_policy_results_total", &context_rule) - before;
    assert_eq!((admitted, failed), (5000, 0));
    assert!(
        evaluated >= 5000.0,
        "the context policy was evaluated {evaluated} times"
    );
    // Let the API server flush the audit events of the last requests.
    std::thread::sleep(Duration::from_secs(2));
    let (events, _) = cluster.audit_since(mark);
    // Each gavel client names itself in its user agent (`gavel/v.. (os/arch)
    // <client>`): `fallback` is the admission path's API client, the only
    // one that may call the API server because of a review.
    let mut calls: std::collections::BTreeMap<String, usize> = Default::default();
    for event in events
        .iter()
        .filter(|e| e["user"]["username"] == SERVICE_ACCOUNT)
    {
        let verb = event["verb"].as_str().unwrap_or("");
        let resource = event["objectRef"]["resource"].as_str().unwrap_or("");
        let client = event["userAgent"]
            .as_str()
            .and_then(|a| a.strip_prefix("gavel/"))
            .and_then(|a| a.rsplit(' ').next())
            .unwrap_or("unnamed");
        // Watches are the stores themselves; Lease renewals are the
        // leaders' heartbeats, paced by time, not by admissions.
        if verb != "watch" && resource != "leases" {
            *calls
                .entry(format!("{client}: {verb} {resource}"))
                .or_default() += 1;
        }
    }
    eprintln!(
        "e2e: 5000 admissions through the API server in {elapsed:.1}s ({:.0}/s), {evaluated} context evaluations; \
         non-watch, non-lease requests by gavel meanwhile: {calls:?}",
        5000.0 / elapsed
    );
    // The admission path is the fallback client, and any read of what the
    // policy looks up (a ConfigMap, Services). The leader's duties
    // (`controllers`: discovery, the owner, the webhook configurations each
    // round) and a store's relist (`informers`) are paced by time and by
    // policy changes, not by admissions; an unnamed client is a bug.
    let hot: usize = calls
        .iter()
        .filter(|(k, _)| {
            k.starts_with("fallback: ")
                || k.starts_with("unnamed: ")
                || k.ends_with(" configmaps")
                || k.ends_with(" services")
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        hot, 0,
        "gavel called the API server on the hot path: {calls:?}"
    );
    let paced: usize = calls.values().sum();
    assert!(
        paced < 100,
        "the leader's duties made {paced} requests during 5000 admissions: {calls:?}"
    );
}

/// `n` server-side dry-run creates of a compliant Pod, `concurrency` at a
/// time, through the API server (each is a full admission: both webhooks
/// are called, nothing is stored). (admitted, failed).
fn dry_run_creates(cluster: &RealCluster, n: usize, concurrency: usize) -> (usize, usize) {
    let (admitted, failures) = dry_run_creates_while(cluster, concurrency, |i| i < n);
    (admitted, failures.len())
}

/// Dry-run creates as [`dry_run_creates`], the i-th started only while
/// `keep_going(i)`. (admitted, the failures' messages).
fn dry_run_creates_while(
    cluster: &RealCluster,
    concurrency: usize,
    keep_going: impl Fn(usize) -> bool,
) -> (usize, Vec<String>) {
    use futures_util::StreamExt;
    use kube::api::{Api, DynamicObject, PostParams};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let resource = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(client, "e2e", &resource);
        let params = PostParams {
            dry_run: true,
            field_manager: None,
        };
        let results: Vec<Result<(), String>> = futures_util::stream::iter(0..)
            .take_while(|i| std::future::ready(keep_going(*i)))
            .map(|i| {
                let api = api.clone();
                let params = params.clone();
                async move {
                    let object: DynamicObject = serde_json::from_value(pod(
                        &format!("load-{i}"),
                        true,
                        json!({"app.kubernetes.io/name": "x"}),
                    ))
                    .unwrap();
                    api.create(&params, &object)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let admitted = results.iter().filter(|r| r.is_ok()).count();
        (
            admitted,
            results.into_iter().filter_map(Result::err).collect(),
        )
    })
}

fn holder(cluster: &RealCluster, lease: &str) -> Option<String> {
    cluster.get(&["lease", lease, "-n", NAMESPACE])?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

/// 5. `kill -9` of the leader of each Lease: another replica holds it within
///    the lease duration; the webhook configurations and certificates stay as
///    they were, and the audit log shows no duplicate creates or rewrites.
fn leader_failover(cluster: &RealCluster, gavel: &mut Release) {
    let lease_seconds = 15.0;
    let webhooks_before = [VALIDATING, MUTATING].map(|n| webhook_client(cluster, n));
    let secrets_before = gavel_secrets(cluster);
    let (_, mark) = cluster.audit_since(0);
    for lease in LEASES {
        let leader = holder(cluster, lease).unwrap_or_else(|| panic!("no holder of {lease}"));
        let index = gavel
            .replicas
            .iter()
            .position(|r| r.identity == leader)
            .unwrap();
        let killed = Instant::now();
        let replica = &mut gavel.replicas[index];
        replica.child.kill().unwrap();
        replica.child.wait().unwrap();
        let mut new_holder = None;
        eventually(
            &format!("a new holder of {lease}"),
            Duration::from_secs(40),
            || {
                new_holder = holder(cluster, lease).filter(|h| *h != leader);
                new_holder.is_some()
            },
        );
        let took = killed.elapsed().as_secs_f64();
        eprintln!(
            "e2e: {lease}: {leader} killed, {} holds it after {took:.1}s",
            new_holder.unwrap()
        );
        // The lease is free once it expires; the next try comes within a retry period.
        assert!(
            took <= lease_seconds + 2.0 + 3.0,
            "{lease} was taken over after {took:.1}s"
        );
        // The killed replica comes back under its name, as a restarted pod would.
        let identity = leader.clone();
        gavel.replicas[index] = gavel.spawn(&identity);
        gavel.balancer.set_backends(gavel.ports());
        wait_ready(&gavel.replicas[index], Duration::from_secs(60));
    }
    assert_eq!(
        [VALIDATING, MUTATING].map(|n| webhook_client(cluster, n)),
        webhooks_before
    );
    assert_eq!(gavel_secrets(cluster), secrets_before);
    let (events, _) = cluster.audit_since(mark);
    let writes: Vec<String> = events
        .iter()
        .filter(|e| e["user"]["username"] == SERVICE_ACCOUNT)
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            )
        })
        .filter(|e| e["objectRef"]["resource"] != "leases")
        // A restarted replica asks who it is: a review, nothing stored.
        .filter(|e| e["objectRef"]["resource"] != "selfsubjectreviews")
        // A new cleanup leader asks which kinds it may delete (TTL label).
        .filter(|e| e["objectRef"]["resource"] != "selfsubjectaccessreviews")
        // A new reports leader scans at once, and the reports follow what
        // changed since the last scan (the outage step froze the
        // ConfigMap the context-lookups policy reads). That a scan finding
        // the same results writes nothing is tests/background.rs's to show.
        .filter(|e| e["objectRef"]["resource"] != "policyreports")
        .filter(|e| e["objectRef"]["resource"] != "clusterpolicyreports")
        .map(|e| {
            format!(
                "{} {} {} -> {}",
                e["verb"].as_str().unwrap_or(""),
                e["objectRef"]["resource"].as_str().unwrap_or(""),
                e["objectRef"]["name"].as_str().unwrap_or(""),
                e["responseStatus"]["code"]
            )
        })
        .collect();
    eprintln!("e2e: writes by gavel other than Leases during the failovers: {writes:?}");
    assert!(
        writes.is_empty(),
        "failover rewrote state that was correct: {writes:?}"
    );
}

/// An AdmissionReview of the CREATE of `object` (a Pod in e2e), as the API
/// server sends it.
fn pod_review(object: &Value, uid: &str) -> Value {
    let gvk = json!({"group": "", "version": "v1", "kind": "Pod"});
    let gvr = json!({"group": "", "version": "v1", "resource": "pods"});
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": object["metadata"]["name"], "namespace": "e2e", "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    })
}

/// etcd's JSON gateway: its current revision, and a compaction to it (so
/// that a watch from an older resourceVersion gets 410 Gone).
fn compact_etcd(cluster: &RealCluster) -> u64 {
    let call = |path: &str, body: &str| -> Value {
        let out = Command::new("curl")
            .args(["-sf", "-X", "POST", "-d", body])
            .arg(format!("http://127.0.0.1:{}{path}", cluster.etcd_port()))
            .output()
            .unwrap();
        assert!(out.status.success(), "etcd {path}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // "/registry", base64.
    let range = call("/v3/kv/range", r#"{"key": "L3JlZ2lzdHJ5", "limit": 1}"#);
    let revision: u64 = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap();
    call(
        "/v3/kv/compaction",
        &format!(r#"{{"revision": "{revision}", "physical": true}}"#),
    );
    revision
}

/// 6. The API server stops for 60 s: every replica keeps answering reviews
///    (sent straight to it) from its caches, and stays ready. Before the
///    outage the replicas are cut off from the API server while a ConfigMap
///    a policy reads changes, and etcd is compacted past their watches: after
///    the restart their watches get 410 Gone, they list again, and every
///    replica enforces the update it missed.
fn api_server_outage(cluster: &RealCluster, gavel: &Release) {
    let labelled = json!({"app.kubernetes.io/name": "x"});
    let compliant = pod_review(&pod("outage-ok", true, labelled.clone()), "outage-ok");
    let violating = pod_review(&pod("outage-bad", false, labelled.clone()), "outage-bad");
    for r in &gavel.replicas {
        assert_eq!(post_review(r.port, &compliant).unwrap()["allowed"], true);
    }

    gavel.api_relay.sever();
    let (_, mark) = cluster.audit_since(0);
    set_frozen(cluster, true);
    cluster.stop("kube-apiserver");
    let revision = compact_etcd(cluster);
    let down = Instant::now();
    let outage = Duration::from_secs(60);
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    while down.elapsed() < outage {
        for r in &gavel.replicas {
            for (review, allowed) in [(&compliant, true), (&violating, false)] {
                let asked = Instant::now();
                let response = post_review(r.port, review)
                    .unwrap_or_else(|e| panic!("{} during the outage: {e}", r.identity));
                slowest = slowest.max(asked.elapsed());
                // The compliant Pod is still allowed: the replica cannot
                // know of the freeze yet.
                assert_eq!(response["allowed"], allowed, "{}: {response}", r.identity);
                answered += 1;
            }
            assert_eq!(
                get(r.port, "/health/readiness").0,
                200,
                "{} is not ready during the outage",
                r.identity
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "e2e: API server down for {:.0}s (etcd compacted at revision {revision}): {answered} reviews answered by the replicas from their caches, the slowest in {:.0}ms",
        down.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1000.0
    );

    cluster.start_again("kube-apiserver");
    let restarted = Instant::now();
    gavel.api_relay.set_backends(vec![cluster.api_port()]);
    for r in &gavel.replicas {
        eventually(
            &format!("{} to enforce the freeze it missed", r.identity),
            Duration::from_secs(90),
            || {
                post_review(r.port, &compliant).is_ok_and(|response| {
                    response["allowed"] == false
                        && response["status"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("deployments are frozen"))
                })
            },
        );
        let took = restarted.elapsed().as_secs_f64();
        eprintln!(
            "e2e: {} enforces the missed update {took:.1}s after the API server is back",
            r.identity,
        );
        // A watch retries at most 20 s apart (src/cluster/watch_backoff.rs),
        // and the 410 is followed by a list at once.
        assert!(took <= 30.0, "{} took {took:.1}s", r.identity);
    }
    // The update came by a new list, after the watch from a compacted
    // resourceVersion was refused.
    let (events, _) = cluster.audit_since(mark);
    let relists = events
        .iter()
        .filter(|e| e["user"]["username"] == SERVICE_ACCOUNT)
        .filter(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "configmaps")
        .count();
    eprintln!("e2e: lists of ConfigMaps by gavel after the restart: {relists}");
    assert!(
        relists >= gavel.replicas.len(),
        "{relists} lists of ConfigMaps for {} replicas",
        gavel.replicas.len()
    );
    set_frozen(cluster, false);
}

/// The value of `--flag=` in the chart's arguments.
fn chart_arg(gavel: &Release, flag: &str) -> f64 {
    let prefix = format!("{flag}=");
    gavel
        .chart_args
        .iter()
        .find_map(|a| a.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("no {flag} in the chart's arguments"))
}

/// 3. Churn of 200 Namespaces and 2,000 ConfigMaps, each ConfigMap's
///    admission reading another ConfigMap that no store holds (no
///    `cache.kyverno.io/enabled` label; one in four): the lookups go to the API server
///    through the fallback client, far faster than its QPS allows. The API
///    server sees gavel's requests stay within QPS plus burst over every
///    window (per replica: each has its own bucket, as Kyverno's pods do).
fn churn_stays_within_qps(cluster: &RealCluster, gavel: &Release) {
    use futures_util::StreamExt;
    use kube::api::{Api, DynamicObject, PostParams};
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "churn-lookups"},
        "spec": {
            "validationFailureAction": "Audit", "failurePolicy": "Ignore", "background": false,
            "rules": [{
                "name": "reads-its-pair",
                "match": {"any": [{"resources": {
                    "kinds": ["ConfigMap"],
                    "namespaceSelector": {"matchLabels": {"churn": "yes"}},
                    "selector": {"matchLabels": {"lookup": "yes"}},
                }}]},
                "context": [{"name": "pair", "configMap": {"name": "{{ request.object.metadata.name }}-pair", "namespace": "{{ request.namespace }}"}}],
                "validate": {"message": "the pair says no", "deny": {"conditions": {"any": [
                    {"key": "{{ pair.data.allowed || 'yes' }}", "operator": "Equals", "value": "no"},
                ]}}},
            }],
        },
    }));
    eventually("churn-lookups Ready", Duration::from_secs(60), || {
        ready(cluster, "clusterpolicy", "churn-lookups")
    });
    eventually("a webhook for ConfigMaps", Duration::from_secs(60), || {
        cluster
            .get(&["validatingwebhookconfiguration", VALIDATING])
            .is_some_and(|c| c["webhooks"].to_string().contains("\"configmaps\""))
    });
    let (qps, burst) = (
        chart_arg(gavel, "--fallback-client-qps"),
        chart_arg(gavel, "--fallback-client-burst"),
    );
    let (_, mark) = cluster.audit_since(0);
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (namespaces, config_maps) = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let create = |namespace: Option<String>, object: Value| {
            let client = client.clone();
            async move {
                let kind = object["kind"].as_str().unwrap().to_string();
                let resource = kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                    "", "v1", &kind,
                ));
                let api: Api<DynamicObject> = match &namespace {
                    Some(ns) => Api::namespaced_with(client, ns, &resource),
                    None => Api::all_with(client, &resource),
                };
                let object: DynamicObject = serde_json::from_value(object).unwrap();
                api.create(&PostParams::default(), &object).await.is_ok()
            }
        };
        let namespaces = futures_util::stream::iter(0..200)
            .map(|i| {
                create(
                    None,
                    json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": format!("churn-{i}"), "labels": {"churn": "yes"}}}),
                )
            })
            .buffer_unordered(16)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        let config_maps = futures_util::stream::iter(0..2000)
            .map(|i| {
                let ns = format!("churn-{}", i % 200);
                create(
                    Some(ns),
                    // Every fourth one's admission looks its pair up: 500
                    // lookups, a few times what the bucket allows at once.
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("cm-{i}"), "labels": {"lookup": if i % 4 == 0 { "yes" } else { "no" }}},
                           "data": {"i": i.to_string()}}),
                )
            })
            .buffer_unordered(32)
            .filter(|ok| std::future::ready(*ok))
            .count()
            .await;
        (namespaces, config_maps)
    });
    let took = started.elapsed().as_secs_f64();
    assert_eq!((namespaces, config_maps), (200, 2000));
    std::thread::sleep(Duration::from_secs(2));
    let (events, _) = cluster.audit_since(mark);
    let mut at: Vec<f64> = events
        .iter()
        .filter(|e| e["user"]["username"] == SERVICE_ACCOUNT)
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.ends_with(" fallback"))
        })
        .filter_map(|e| {
            let t = e["requestReceivedTimestamp"].as_str()?;
            let t: k8s_openapi::jiff::Timestamp = t.parse().ok()?;
            Some(t.as_microsecond() as f64 / 1e6)
        })
        .collect();
    at.sort_by(f64::total_cmp);
    let lookups = gavel.metric_sum(
        "kyverno_policy_results_total",
        &["policy_name=\"churn-lookups\""],
    );
    // The most requests in any window of `w` seconds.
    let most_in = |w: f64| -> usize {
        (0..at.len())
            .map(|i| at[i..].iter().take_while(|t| **t < at[i] + w).count())
            .max()
            .unwrap_or(0)
    };
    let replicas = gavel.replicas.len() as f64;
    let span = at.last().zip(at.first()).map_or(0.0, |(l, f)| l - f);
    eprintln!(
        "e2e: churn of 200 Namespaces and 2000 ConfigMaps in {took:.1}s ({:.0} creates/s), {lookups} policy results; \
         fallback GETs at the API server: {} over {span:.1}s, at most {} in 1 s and {} in 5 s \
         (bound per replica: qps {qps} + burst {burst})",
        2200.0 / took,
        at.len(),
        most_in(1.0),
        most_in(5.0),
    );
    assert!(
        at.len() >= 100,
        "only {} fallback lookups: the churn did not need them",
        at.len()
    );
    for w in [1.0, 5.0, span + 1.0] {
        let bound = replicas * (burst + qps * w) + 1.0;
        assert!(
            most_in(w) as f64 <= bound,
            "{} requests in {w:.1}s, above {bound}",
            most_in(w)
        );
    }
    // The throttled lookups delayed the admissions, never more than their
    // deadline (the ConfigMaps above were all admitted); the churn is over.
    cluster.kubectl(&["delete", "clusterpolicy", "churn-lookups"]);
}

/// 4. Cache freshness: the ConfigMap a policy reads flips 20 times; after
///    each update, every replica is asked (directly) until its verdict
///    follows. The time from the update's acknowledgement to each replica's
///    first new verdict, p50 and p99.
fn cache_freshness(cluster: &RealCluster, gavel: &Release) {
    let review = pod_review(
        &pod("fresh", true, json!({"app.kubernetes.io/name": "x"})),
        "fresh",
    );
    let mut delays = Vec::new();
    for flip in 0..20 {
        let frozen = flip % 2 == 0;
        set_frozen(cluster, frozen);
        let updated = Instant::now();
        for r in &gavel.replicas {
            loop {
                let response = post_review(r.port, &review).unwrap();
                if response["allowed"] == !frozen {
                    delays.push(updated.elapsed().as_secs_f64());
                    break;
                }
                assert!(
                    updated.elapsed() < Duration::from_secs(10),
                    "{} still answers with the old ConfigMap after 10 s",
                    r.identity
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    delays.sort_by(f64::total_cmp);
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "e2e: a ConfigMap update seen by admissions after p50 {:.0}ms, p99 {:.0}ms, max {:.0}ms ({} samples; \
         each includes one review round trip by curl)",
        at(0.5) * 1000.0,
        at(0.99) * 1000.0,
        delays.last().unwrap() * 1000.0,
        delays.len()
    );
    assert!(at(0.99) < 2.0, "p99 {:.2}s", at(0.99));
}

/// Sets `frozen` in the ConfigMap the context-lookups policy reads.
fn set_frozen(cluster: &RealCluster, frozen: bool) {
    let value = if frozen { "yes" } else { "no" };
    cluster.kubectl(&[
        "patch",
        "configmap",
        "freeze",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"data": {{"frozen": "{value}"}}}}"#),
    ]);
}

/// 7 and 8. `helm upgrade` with `values-large-cluster.yaml`, and the rolling
///    update it causes, done as the Deployment controller does it with the
///    chart's strategy (maxSurge 1, maxUnavailable 0: a new replica is ready
///    before an old one is stopped), while Pods are created through the API
///    server with failurePolicy Fail. Zero failed creates; every stopped
///    replica drains and exits 0; a Lease it held is taken over at once
///    (released on SIGTERM, not left to expire).
fn upgrade_rolls_under_load(cluster: &RealCluster, gavel: &mut Release) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let chart = repo().join("charts/gavel");
    let out = cluster.helm(&[
        "upgrade",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--values",
        chart.join("values-large-cluster.yaml").to_str().unwrap(),
        "--values",
        gavel.dir.join("values.yaml").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "helm upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let args = deployment_args(cluster);
    assert!(
        args.iter().any(|a| a == "--client-qps=100"),
        "the upgrade did not take the large-cluster values: {args:?}"
    );
    gavel.chart_args = args;

    let stop = AtomicBool::new(false);
    let ((admitted, failures), took) = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            let started = Instant::now();
            let result = dry_run_creates_while(cluster, 8, |_| !stop.load(Ordering::Relaxed));
            (result, started.elapsed())
        });
        std::thread::sleep(Duration::from_secs(2));
        roll(cluster, gavel);
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        load.join().unwrap()
    });
    eprintln!(
        "e2e: during the rolling update: {admitted} creates admitted in {:.1}s, {} failed",
        took.as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} creates failed during the rolling update, the first: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(
        admitted > 100,
        "only {admitted} creates during the rolling update"
    );
}

/// Replaces each replica in turn, as the Deployment controller does.
fn roll(cluster: &RealCluster, gavel: &mut Release) {
    let retry_period = 2.0;
    for i in 0..gavel.replicas.len() {
        let new = gavel.spawn(&format!("gavel-upgraded-{i}"));
        wait_ready(&new, Duration::from_secs(60));
        let old = gavel.replicas.remove(0);
        gavel.replicas.push(new);
        let held: Vec<&str> = LEASES
            .into_iter()
            .filter(|l| holder(cluster, l).as_deref() == Some(old.identity.as_str()))
            .collect();
        // The old endpoint stays in the Service for a moment after the
        // pod is told to stop: the endpoints controller and kube-proxy
        // (here, the balancer) learn of it a little later.
        gavel
            .balancer
            .set_backends([gavel.ports(), vec![old.port]].concat());
        let stopped = Instant::now();
        sigterm(&old.child);
        std::thread::sleep(Duration::from_secs(1));
        gavel.balancer.set_backends(gavel.ports());
        for lease in held {
            eventually(
                &format!("a new holder of {lease}"),
                Duration::from_secs(30),
                || holder(cluster, lease).is_some_and(|h| h != old.identity),
            );
            let took = stopped.elapsed().as_secs_f64();
            eprintln!(
                "e2e: {lease}: {} stopped, taken over after {took:.1}s",
                old.identity
            );
            assert!(
                took <= 2.0 * retry_period + 2.0,
                "{lease} was taken over after {took:.1}s: it was not released"
            );
        }
        let mut old = old;
        let status = old.child.wait().unwrap();
        assert!(status.success(), "{} exited with {status:?}", old.identity);
        eprintln!(
            "e2e: {} drained and exited {:.1}s after SIGTERM",
            old.identity,
            stopped.elapsed().as_secs_f64()
        );
    }
}

/// The URL and caBundle of each webhook of a configuration.
fn webhook_client(cluster: &RealCluster, name: &str) -> Vec<(String, String)> {
    let kind = if name == VALIDATING {
        "validatingwebhookconfiguration"
    } else {
        "mutatingwebhookconfiguration"
    };
    let config = cluster.get(&[kind, name]).unwrap();
    config["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["clientConfig"]["url"].as_str().unwrap_or("").to_string(),
                w["clientConfig"]["caBundle"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// gavel's certificate Secrets: name and resourceVersion.
fn gavel_secrets(cluster: &RealCluster) -> Vec<(String, String)> {
    let list = cluster
        .get(&[
            "secrets",
            "-n",
            NAMESPACE,
            "-l",
            "cert.gavel.dev/managed-by",
        ])
        .unwrap();
    let mut secrets: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                s["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    secrets.sort();
    assert_eq!(secrets.len(), 2, "{secrets:?}");
    secrets
}

/// 8. `helm uninstall`: the Deployment's pods stop (here: the replicas are
///    stopped, as the kubelet would), and nothing of gavel is left that can
///    affect the cluster: no webhook configuration pointing at nothing, no
///    Lease, no certificate Secret, no RBAC, no ServiceAccount.
fn uninstall(cluster: &RealCluster, gavel: &mut Release) {
    let out = cluster.helm(&[
        "uninstall",
        RELEASE,
        "--namespace",
        NAMESPACE,
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        out.status.success(),
        "helm uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for replica in &gavel.replicas {
        sigterm(&replica.child);
    }
    for replica in &mut gavel.replicas {
        let _ = replica.child.wait();
    }
    eventually(
        "the webhook configurations removed",
        Duration::from_secs(120),
        || webhook_configurations(cluster) == (false, false),
    );
    // What gavel wrote at run time is owned by the chart's ClusterRole too:
    // the Leases of its duties and its certificate Secrets.
    eventually(
        "the Leases and certificate Secrets removed",
        Duration::from_secs(120),
        || {
            let leases = cluster.get(&["leases", "-n", NAMESPACE]).unwrap();
            let secrets = cluster.get(&["secrets", "-n", NAMESPACE]).unwrap();
            let names = |list: &Value| -> Vec<String> {
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
                    .collect()
            };
            let leases = names(&leases);
            let secrets = names(&secrets);
            LEASES.iter().all(|l| !leases.iter().any(|n| n == l))
                && !secrets.iter().any(|n| n.contains(".svc.gavel-tls-"))
        },
    );
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    for kind in [
        "clusterrole",
        "clusterrolebinding",
        "deployment,service,serviceaccount,role,rolebinding,poddisruptionbudget",
    ] {
        let list = cluster.get(&[kind, "-A", "-l", &selector]).unwrap();
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            0,
            "left behind: {list}"
        );
    }
    // With no webhook left, Pods are admitted again.
    create(cluster, &pod("after-uninstall", false, json!({})), &[]).unwrap();
}
