//! The cleanup controller on a real control plane (etcd, kube-apiserver,
//! kube-controller-manager and kwok built from Go modules by
//! `e2e/cluster.sh`): gavel's chart installed with the real Helm CLI, two
//! replicas running as host processes with the chart's ServiceAccount.
//! ClusterCleanupPolicy, CleanupPolicy and DeletingPolicy delete on their
//! schedules what they select and nothing else; the TTL label deletes what
//! carries it when it expires, where the chart's RBAC allows; a leader
//! killed in the middle of a run leaves the rest to the next one, and no
//! object is deleted twice.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::cluster::{RealCluster, eventually};
use support::gavel::temp_dir;
use support::release::{NAMESPACE, Release, install_kyverno_crds, wait_ready};

/// What the cleanup controller may delete, granted as a user grants it
/// (the chart's `rbac.cleanupRules`): ConfigMaps and
/// HorizontalPodAutoscalers, not Secrets.
const VALUES: &str = r#"
cleanup:
  ttlReconciliationInterval: 5s
rbac:
  cleanupRules:
    - apiGroups: [""]
      resources: ["configmaps"]
      verbs: ["get", "list", "watch", "delete"]
    - apiGroups: ["autoscaling"]
      resources: ["horizontalpodautoscalers"]
      verbs: ["get", "list", "watch", "delete"]
"#;

#[test]
fn cleanup_on_a_real_control_plane() {
    let _heavy = support::heavy();
    let dir = temp_dir("cleanup");
    let cluster = RealCluster::start(&dir.join("cluster"), 1);
    install_kyverno_crds(&cluster);
    let mut gavel = Release::install(&cluster, &dir, 2, VALUES);
    step(
        "ClusterCleanupPolicy: match, exclude, conditions, every 5 s",
        || cluster_cleanup_policy(&cluster, &gavel),
    );
    step(
        "an invalid policy is refused, or marked not Ready and not run",
        || invalid_policy(&cluster),
    );
    step("CleanupPolicy: only in its namespace", || {
        namespaced_cleanup_policy(&cluster)
    });
    step("DeletingPolicy: CEL conditions and variables", || {
        deleting_policy(&cluster)
    });
    step(
        "DeletingPolicy: a version other than the preferred one",
        || deleting_policy_at_another_version(&cluster),
    );
    step("the TTL label, where RBAC allows the deletion", || {
        ttl_label(&cluster, &gavel)
    });
    step("kill -9 of the leader in the middle of a run", || {
        leader_killed_mid_run(&cluster, &mut gavel)
    });
}

fn step(name: &str, f: impl FnOnce()) {
    let started = Instant::now();
    eprintln!("cleanup: {name} ...");
    f();
    eprintln!(
        "cleanup: {name}: ok in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

fn namespace(cluster: &RealCluster, name: &str, env: &str) {
    cluster.apply(&json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"env": env}},
    }));
}

fn create_all(cluster: &RealCluster, items: Vec<Value>) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let out = cluster.kubectl_in(&["create", "-f", "-"], Some(&list));
    assert!(
        out.status.success(),
        "kubectl create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn config_map(namespace: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace, "labels": labels},
           "data": {"k": "v"}})
}

/// The names of the ConfigMaps of `namespace` (kube-root-ca.crt aside).
fn config_maps(cluster: &RealCluster, namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .get(&["configmap", "-n", namespace])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    names
}

fn last_execution(cluster: &RealCluster, args: &[&str]) -> Option<String> {
    cluster.get(args)?["status"]["lastExecutionTime"]
        .as_str()
        .map(str::to_string)
}

/// ConfigMaps labelled `temp: "true"` in namespaces labelled env=dev are
/// deleted, except those named keep-*; the policy runs again on its
/// schedule (a ConfigMap made after the first run goes at the next), and
/// each run is recorded in its status.
fn cluster_cleanup_policy(cluster: &RealCluster, gavel: &Release) {
    namespace(cluster, "dev-a", "dev");
    namespace(cluster, "prod-a", "prod");
    let mut items = Vec::new();
    for ns in ["dev-a", "prod-a"] {
        for i in 0..10 {
            items.push(config_map(
                ns,
                &format!("temp-{i}"),
                json!({"temp": "true"}),
            ));
            items.push(config_map(ns, &format!("plain-{i}"), json!({})));
        }
        items.push(config_map(ns, "keep-me", json!({"temp": "true"})));
    }
    create_all(cluster, items);
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v2", "kind": "ClusterCleanupPolicy",
        "metadata": {"name": "temp-configmaps"},
        "spec": {
            // Seven fields: seconds first, the year last (cronexpr's form).
            "schedule": "*/5 * * * * * *",
            "match": {"any": [{"resources": {
                "kinds": ["ConfigMap"],
                "namespaceSelector": {"matchLabels": {"env": "dev"}},
            }}]},
            "exclude": {"any": [{"resources": {"names": ["keep-*"]}}]},
            "conditions": {"all": [
                {"key": "{{ target.metadata.labels.temp || '' }}", "operator": "Equals", "value": "true"},
            ]},
        },
    }));
    let plain: Vec<String> = (0..10).map(|i| format!("plain-{i}")).collect();
    let mut dev_left: Vec<String> = vec!["keep-me".into()];
    dev_left.extend(plain.iter().cloned());
    dev_left.sort();
    eventually(
        "the temp ConfigMaps of dev-a deleted",
        Duration::from_secs(60),
        || config_maps(cluster, "dev-a") == dev_left,
    );
    assert_eq!(config_maps(cluster, "prod-a").len(), 21, "prod-a untouched");
    let first = last_execution(cluster, &["clustercleanuppolicy", "temp-configmaps"])
        .expect("the run recorded in the status");
    eventually("the policy Ready", Duration::from_secs(10), || {
        ready_condition(cluster, &["clustercleanuppolicy", "temp-configmaps"], false)
            == Some(("True".to_string(), "Ready".to_string()))
    });
    // The next runs: a new match goes, and the record moves on.
    create_all(
        cluster,
        vec![config_map("dev-a", "temp-late", json!({"temp": "true"}))],
    );
    eventually(
        "the late ConfigMap deleted at a later run",
        Duration::from_secs(30),
        || !config_maps(cluster, "dev-a").contains(&"temp-late".to_string()),
    );
    eventually("a later run recorded", Duration::from_secs(30), || {
        last_execution(cluster, &["clustercleanuppolicy", "temp-configmaps"])
            .is_some_and(|t| t > first)
    });
    assert_eq!(config_maps(cluster, "dev-a"), dev_left);
    let deleted = gavel.metric_sum(
        "kyverno_cleanup_controller_deletedobjects_total",
        &[
            "policy_name=\"temp-configmaps\"",
            "policy_type=\"ClusterCleanupPolicy\"",
        ],
    );
    assert_eq!(deleted, 11.0, "deletions counted once each");
    cluster.kubectl(&["delete", "clustercleanuppolicy", "temp-configmaps"]);
}

/// The Ready condition of a policy: (status, message).
fn ready_condition(
    cluster: &RealCluster,
    args: &[&str],
    deleting: bool,
) -> Option<(String, String)> {
    let object = cluster.get(args)?;
    let conditions = if deleting {
        &object["status"]["conditionStatus"]["conditions"]
    } else {
        &object["status"]["conditions"]
    };
    let c = conditions
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some((
        c["status"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

/// A schedule cronexpr cannot read: `kubectl apply` is refused with the
/// reason (the policy webhook, as Kyverno's cleanup controller refuses
/// it); one that gets in anyway (in gavel's own namespace, which the
/// webhooks skip) says why in its Ready condition and deletes nothing.
/// An unreadable TTL label is written with a warning.
fn invalid_policy(cluster: &RealCluster) {
    let bad = json!({
        "apiVersion": "kyverno.io/v2", "kind": "ClusterCleanupPolicy",
        "metadata": {"name": "bad-schedule"},
        "spec": {
            "schedule": "every day",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "namespaces": ["invalid"]}}]},
        },
    });
    let mut refusal = String::new();
    eventually(
        "kubectl apply refused by the policy webhook",
        Duration::from_secs(60),
        || {
            let out = cluster.kubectl_in(&["apply", "-f", "-"], Some(&bad.to_string()));
            refusal = String::from_utf8_lossy(&out.stderr).into_owned();
            !out.status.success()
                && refusal.contains("ClusterCleanupPolicy bad-schedule is invalid")
        },
    );
    assert!(refusal.contains("spec.schedule"), "{refusal}");
    assert!(
        cluster
            .get(&["clustercleanuppolicy", "bad-schedule"])
            .is_none()
    );

    create_all(
        cluster,
        vec![config_map(NAMESPACE, "stays", json!({"temp": "true"}))],
    );
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v2", "kind": "CleanupPolicy",
        "metadata": {"name": "bad-schedule", "namespace": NAMESPACE},
        "spec": {
            "schedule": "every day",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "selector": {"matchLabels": {"temp": "true"}}}}]},
        },
    }));
    eventually(
        "the policy marked not Ready",
        Duration::from_secs(30),
        || {
            ready_condition(
                cluster,
                &["cleanuppolicy", "bad-schedule", "-n", NAMESPACE],
                false,
            )
            .is_some_and(|(status, message)| status == "False" && message.contains("spec.schedule"))
        },
    );
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        cluster
            .get(&["configmap", "stays", "-n", NAMESPACE])
            .is_some()
    );
    cluster.kubectl(&["delete", "cleanuppolicy", "bad-schedule", "-n", NAMESPACE]);
    cluster.kubectl(&["delete", "configmap", "stays", "-n", NAMESPACE]);

    namespace(cluster, "invalid", "dev");
    let labelled = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unreadable-ttl\n  namespace: invalid\n  labels:\n    cleanup.kyverno.io/ttl: soon\n";
    let out = cluster.kubectl_in(&["apply", "-f", "-"], Some(labelled));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "cleanup.kyverno.io/ttl label value cannot be parsed as any recognizable format"
        ),
        "{stderr}"
    );
}

/// A CleanupPolicy with no namespace selector acts only in its namespace.
fn namespaced_cleanup_policy(cluster: &RealCluster) {
    namespace(cluster, "team-a", "dev");
    namespace(cluster, "team-b", "dev");
    let mut items = Vec::new();
    for ns in ["team-a", "team-b"] {
        for i in 0..5 {
            items.push(config_map(
                ns,
                &format!("scratch-{i}"),
                json!({"scratch": "yes"}),
            ));
        }
    }
    create_all(cluster, items);
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v2", "kind": "CleanupPolicy",
        "metadata": {"name": "scratch", "namespace": "team-a"},
        "spec": {
            "schedule": "*/5 * * * * * *",
            "match": {"any": [{"resources": {
                "kinds": ["ConfigMap"],
                "selector": {"matchLabels": {"scratch": "yes"}},
            }}]},
        },
    }));
    eventually(
        "team-a's scratch ConfigMaps deleted",
        Duration::from_secs(60),
        || config_maps(cluster, "team-a").is_empty(),
    );
    eventually("the run recorded", Duration::from_secs(30), || {
        last_execution(cluster, &["cleanuppolicy", "scratch", "-n", "team-a"]).is_some()
    });
    assert_eq!(config_maps(cluster, "team-b").len(), 5, "team-b untouched");
    cluster.kubectl(&["delete", "cleanuppolicy", "scratch", "-n", "team-a"]);
}

/// A DeletingPolicy: matchConstraints with an object selector, a variable
/// and CEL conditions on `object` and `namespaceObject`.
fn deleting_policy(cluster: &RealCluster) {
    namespace(cluster, "jobs", "dev");
    let mut items = Vec::new();
    for i in 0..6 {
        let mut cm = config_map("jobs", &format!("result-{i}"), json!({"app": "batch"}));
        cm["data"] = json!({"state": if i % 2 == 0 { "done" } else { "running" }});
        items.push(cm);
    }
    items.push({
        let mut cm = config_map("jobs", "other-app", json!({"app": "web"}));
        cm["data"] = json!({"state": "done"});
        cm
    });
    create_all(cluster, items);
    cluster.apply(&json!({
        "apiVersion": "policies.kyverno.io/v1beta1", "kind": "DeletingPolicy",
        "metadata": {"name": "finished-results"},
        "spec": {
            "schedule": "*/5 * * * * * *",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {"app": "batch"}},
            },
            "variables": [{"name": "state", "expression": "object.data.?state.orValue('')"}],
            "conditions": [
                {"name": "done", "expression": "variables.state == 'done'"},
                {"name": "dev", "expression": "namespaceObject.metadata.labels.env == 'dev'"},
            ],
        },
    }));
    let left = vec![
        "other-app".to_string(),
        "result-1".into(),
        "result-3".into(),
        "result-5".into(),
    ];
    eventually(
        "the finished results deleted",
        Duration::from_secs(60),
        || config_maps(cluster, "jobs") == left,
    );
    eventually("the run recorded", Duration::from_secs(30), || {
        last_execution(cluster, &["deletingpolicy", "finished-results"]).is_some()
    });
    assert_eq!(
        ready_condition(cluster, &["deletingpolicy", "finished-results"], true),
        Some(("True".to_string(), "Ready".to_string()))
    );
    let table = cluster.kubectl(&["get", "deletingpolicy", "finished-results"]);
    assert!(table.contains("true"), "the READY column: {table}");
    cluster.kubectl(&["delete", "deletingpolicy", "finished-results"]);
}

/// A DeletingPolicy whose rule names autoscaling/v1, where discovery
/// prefers v2: the HorizontalPodAutoscalers are listed and deleted at the
/// version the rule names.
fn deleting_policy_at_another_version(cluster: &RealCluster) {
    namespace(cluster, "hpas", "dev");
    for (name, expire) in [("old", "yes"), ("kept", "no")] {
        cluster.apply(&json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": "hpas", "labels": {"expire": expire}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 2},
        }));
    }
    cluster.apply(&json!({
        "apiVersion": "policies.kyverno.io/v1beta1", "kind": "DeletingPolicy",
        "metadata": {"name": "expired-hpas"},
        "spec": {
            "schedule": "*/5 * * * * * *",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": ["autoscaling"], "apiVersions": ["v1"],
                                   "resources": ["horizontalpodautoscalers"]}],
                "objectSelector": {"matchLabels": {"expire": "yes"}},
            },
        },
    }));
    let hpa = |name: &str| cluster.get(&["horizontalpodautoscaler", name, "-n", "hpas"]);
    eventually("the expired HPA deleted", Duration::from_secs(60), || {
        hpa("old").is_none()
    });
    assert!(hpa("kept").is_some());
    cluster.kubectl(&["delete", "deletingpolicy", "expired-hpas"]);
}

/// ConfigMaps with an expired or expiring TTL go; one with a long TTL or an
/// unreadable value stays; a Secret with an expired TTL stays, because the
/// chart grants no deletion of Secrets.
fn ttl_label(cluster: &RealCluster, gavel: &Release) {
    namespace(cluster, "ttl", "dev");
    let ttl =
        |name: &str, value: &str| config_map("ttl", name, json!({"cleanup.kyverno.io/ttl": value}));
    create_all(
        cluster,
        vec![
            ttl("short", "15s"),
            ttl("past-date", "2020-01-01"),
            ttl("past-time", "2020-01-01T000000Z"),
            ttl("long", "1d"),
            ttl("unreadable", "soon"),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "secret", "namespace": "ttl",
                                "labels": {"cleanup.kyverno.io/ttl": "1s"}},
                   "stringData": {"k": "v"}}),
        ],
    );
    let created = Instant::now();
    eventually(
        "the expired ConfigMaps deleted",
        Duration::from_secs(30),
        || {
            let left = config_maps(cluster, "ttl");
            !left.contains(&"past-date".to_string()) && !left.contains(&"past-time".to_string())
        },
    );
    eventually(
        "the 15 s ConfigMap deleted",
        Duration::from_secs(45),
        || !config_maps(cluster, "ttl").contains(&"short".to_string()),
    );
    let after = created.elapsed();
    eprintln!(
        "cleanup: the 15 s TTL took effect after {:.1}s",
        after.as_secs_f64()
    );
    assert!(
        after >= Duration::from_secs(14),
        "deleted before its TTL: {after:?}"
    );
    assert_eq!(config_maps(cluster, "ttl"), ["long", "unreadable"]);
    assert!(
        cluster.get(&["secret", "secret", "-n", "ttl"]).is_some(),
        "a Secret deleted without RBAC for it"
    );
    let deleted = gavel.metric_sum(
        "kyverno_ttl_controller_deletedobjects_total",
        &[
            "resource_resource=\"configmaps\"",
            "resource_namespace=\"ttl\"",
        ],
    );
    assert_eq!(deleted, 3.0);
}

fn holder(cluster: &RealCluster, lease: &str) -> Option<String> {
    cluster.get(&["lease", lease, "-n", NAMESPACE])?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

/// 600 ConfigMaps selected by a policy that runs once (a time of day, a
/// few seconds ahead); the cleanup leader is killed (SIGKILL) once a part
/// of them is gone. The run was not recorded, so the next leader runs it
/// again: every selected ConfigMap is deleted, none of the others, and the
/// audit log shows no object deleted twice.
fn leader_killed_mid_run(cluster: &RealCluster, gavel: &mut Release) {
    const N: usize = 600;
    namespace(cluster, "bulk", "dev");
    let mut items: Vec<Value> = (0..N)
        .map(|i| config_map("bulk", &format!("old-{i:03}"), json!({"age": "old"})))
        .collect();
    items
        .extend((0..20).map(|i| config_map("bulk", &format!("new-{i:02}"), json!({"age": "new"}))));
    create_all(cluster, items);
    let (_, mark) = cluster.audit_since(0);
    // Once, 20 s from now (UTC): seconds, minutes, hours, any day.
    let at = chrono::Utc::now() + chrono::Duration::seconds(20);
    let schedule = at.format("%-S %-M %-H * * * *").to_string();
    cluster.apply(&json!({
        "apiVersion": "kyverno.io/v2", "kind": "ClusterCleanupPolicy",
        "metadata": {"name": "old-bulk"},
        "spec": {
            "schedule": schedule,
            "match": {"any": [{"resources": {
                "kinds": ["ConfigMap"], "namespaces": ["bulk"],
                "selector": {"matchLabels": {"age": "old"}},
            }}]},
        },
    }));
    let old = || {
        config_maps(cluster, "bulk")
            .iter()
            .filter(|n| n.starts_with("old-"))
            .count()
    };
    eventually("a part of the run done", Duration::from_secs(90), || {
        old() <= N - 60
    });
    let leader = holder(cluster, "gavel-cleanup").expect("a cleanup leader");
    let index = gavel
        .replicas
        .iter()
        .position(|r| r.identity == leader)
        .unwrap();
    gavel.replicas[index].child.kill().unwrap();
    gavel.replicas[index].child.wait().unwrap();
    let left_at_kill = old();
    eprintln!("cleanup: {leader} killed with {left_at_kill} of {N} selected ConfigMaps left");
    assert!(
        left_at_kill > 0,
        "the leader was not killed in the middle of the run"
    );
    assert!(
        last_execution(cluster, &["clustercleanuppolicy", "old-bulk"]).is_none(),
        "the run was recorded before it was done"
    );
    let mut successor = None;
    eventually("another cleanup leader", Duration::from_secs(40), || {
        successor = holder(cluster, "gavel-cleanup").filter(|h| *h != leader);
        successor.is_some()
    });
    gavel.replicas[index] = gavel.spawn(&leader);
    gavel.balancer.set_backends(gavel.ports());
    wait_ready(&gavel.replicas[index], Duration::from_secs(60));
    eventually(
        "every selected ConfigMap deleted",
        Duration::from_secs(120),
        || old() == 0,
    );
    eventually(
        "the run recorded by the new leader",
        Duration::from_secs(30),
        || last_execution(cluster, &["clustercleanuppolicy", "old-bulk"]).is_some(),
    );
    assert_eq!(
        config_maps(cluster, "bulk").len(),
        20,
        "the unselected ConfigMaps stay"
    );
    let (events, _) = cluster.audit_since(mark);
    // Every delete request per name with the status the API server logged.
    // The killed leader may have had a delete in flight: the object can be
    // gone while the request's log entry carries the error of the dropped
    // connection rather than 200, so a name counts as deleted by any
    // delete request, and "twice" means two that succeeded.
    let mut deletes: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in &events {
        if e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["namespace"] == "bulk"
            && e["verb"] == "delete"
            && e["stage"] != "RequestReceived"
        {
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
            deletes.entry(name.to_string()).or_default().push(code);
        }
    }
    let twice: Vec<_> = deletes
        .iter()
        .filter(|(_, codes)| codes.iter().filter(|c| **c == 200).count() > 1)
        .collect();
    let not_ok: Vec<_> = deletes
        .iter()
        .filter(|(_, codes)| codes.iter().any(|c| *c != 200))
        .collect();
    eprintln!(
        "cleanup: audit: {} ConfigMaps deleted, {} twice, answered other than 200: {:?}; lead now with {:?}",
        deletes.len(),
        twice.len(),
        not_ok,
        successor
    );
    assert!(
        deletes.keys().all(|name| name.starts_with("old-")),
        "only selected ConfigMaps deleted: {:?}",
        deletes
            .keys()
            .filter(|n| !n.starts_with("old-"))
            .collect::<Vec<_>>()
    );
    assert_eq!(deletes.len(), N, "every selected ConfigMap had a delete");
    assert!(twice.is_empty(), "deleted more than once: {twice:?}");
}
