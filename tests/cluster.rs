//! Cluster mode against the Kubernetes API test server in `tests/support/`.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::apiserver::TestApiServer;
use support::gavel::{Gavel, TlsConnection, examples, response, temp_dir};

/// `gavel serve` in cluster mode against `server`.
fn gavel_in_cluster(server: &TestApiServer, dir: &Path) -> Gavel {
    gavel_in_cluster_with(server, dir, &[], Duration::from_secs(20))
}

/// The same with more flags, waiting up to `timeout` for readiness.
fn gavel_in_cluster_with(
    server: &TestApiServer,
    dir: &Path,
    extra: &[&str],
    timeout: Duration,
) -> Gavel {
    // Its namespace holds its Leases and certificate Secrets.
    server.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gavel"}}));
    let kubeconfig = server.write_kubeconfig(dir);
    let mut args = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
    args.extend_from_slice(extra);
    Gavel::start_waiting(&dir.join("no-policy-directory"), dir, &args, timeout)
}

/// An example PSS policy as the ClusterPolicy object a user would apply.
fn example_policy(name: &str) -> Value {
    let path = examples()
        .join("policies/pod-security")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Whether gavel denies the violating example Pod.
fn denies_violating_pod(gavel: &Gavel) -> bool {
    let (code, body) = gavel.post("/validate", &examples().join("reviews/pod-violating.json"));
    assert_eq!(code, 200, "{body}");
    response(&body)["allowed"] == false
}

fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn invalid_policy_keeps_previous_version() {
    let server = TestApiServer::start();
    server.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gavel"}}));
    let dir = temp_dir("cluster-invalid-policy");
    // The first requests fail: the stores retry with backoff and still sync.
    server.fail_next(3);
    let gavel = gavel_in_cluster(&server, &dir);
    assert!(!denies_violating_pod(&gavel), "no policies yet");

    server.put(example_policy("disallow-privileged-containers"));
    eventually("the policy to be enforced", Duration::from_secs(10), || {
        denies_violating_pod(&gavel)
    });
    let generation = gavel.metric("gavel_policy_snapshot_generation");

    // A broken edit: an unknown operator. Rejected, counted, old version stays.
    let mut broken = example_policy("disallow-privileged-containers");
    broken["spec"]["rules"][0]["validate"]["pattern"] = json!(null);
    broken["spec"]["rules"][0]["validate"]["bogusField"] = json!(1);
    server.put(broken);
    eventually(
        "the rejection to be counted",
        Duration::from_secs(10),
        || gavel.metric("gavel_policies_rejected_total") == 1.0,
    );
    assert!(
        denies_violating_pod(&gavel),
        "the previous version stays in force"
    );
    // The leader writes the reason into the policy's status.
    let ready = |server: &TestApiServer| {
        server
            .get(
                "kyverno.io/v1",
                "ClusterPolicy",
                "",
                "disallow-privileged-containers",
            )
            .map(|p| p["status"]["conditions"][0].clone())
            .unwrap_or_default()
    };
    eventually("the Ready=False condition", Duration::from_secs(10), || {
        ready(&server)["status"] == "False"
    });
    let condition = ready(&server);
    assert_eq!(condition["reason"], "Failed");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("bogusField"),
        "{condition}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        gavel.metric("gavel_policies_rejected_total"),
        1.0,
        "the status write does not make the policy fail again"
    );
    assert_eq!(gavel.metric("gavel_policy_snapshot_generation"), generation);

    // Fixed again: a new snapshot; deleted: nothing denies any more.
    server.put(example_policy("disallow-privileged-containers"));
    eventually("a new snapshot", Duration::from_secs(10), || {
        gavel.metric("gavel_policy_snapshot_generation") > generation
    });
    assert!(denies_violating_pod(&gavel));
    eventually("Ready=True again", Duration::from_secs(10), || {
        ready(&server)["status"] == "True"
    });
    server.delete(
        "kyverno.io/v1",
        "ClusterPolicy",
        "",
        "disallow-privileged-containers",
    );
    eventually("the policy to be gone", Duration::from_secs(10), || {
        !denies_violating_pod(&gavel)
    });
}

/// A policy that denies Pods when a cached ConfigMap says so, and one that
/// requires a label only in namespaces labelled `env=prod`.
fn context_policies() -> [Value; 3] {
    [
        json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "freeze"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{
                "name": "deploy-freeze",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "context": [{"name": "settings", "configMap": {"name": "freeze", "namespace": "default"}}],
                "validate": {
                    "message": "deployments are frozen",
                    "deny": {"conditions": {"any": [
                        {"key": "{{ settings.data.frozen }}", "operator": "Equals", "value": "yes"},
                    ]}},
                },
            }]},
        }),
        json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "prod-owner"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{
                "name": "owner-label",
                "match": {"any": [{"resources": {
                    "kinds": ["Pod"],
                    "namespaceSelector": {"matchLabels": {"env": "prod"}},
                }}]},
                "validate": {
                    "message": "pods in prod need an owner label",
                    "pattern": {"metadata": {"labels": {"owner": "?*"}}},
                },
            }]},
        }),
        json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "maintenance"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{
                "name": "no-pods-during-maintenance",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "context": [
                    {"name": "services", "globalReference": {"name": "default-services.names"}},
                    {"name": "namespaces", "globalReference": {
                        "name": "namespaces", "jmesPath": "items[].metadata.name"}},
                ],
                "validate": {
                    "message": "maintenance window, or an unknown namespace",
                    "deny": {"conditions": {"any": [
                        {"key": "maintenance", "operator": "AnyIn", "value": "{{ services }}"},
                        {"key": "{{ request.namespace }}", "operator": "AnyNotIn", "value": "{{ namespaces }}"},
                    ]}},
                },
            }]},
        }),
    ]
}

/// GlobalContextEntries: the Services of `default` (with a projection of
/// their names) from a reflector, and the namespace list from an apiCall
/// refreshed every `refresh`.
fn global_context_entries(refresh: &str) -> [Value; 2] {
    [
        json!({
            "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
            "metadata": {"name": "default-services"},
            "spec": {
                "kubernetesResource": {"group": "", "version": "v1", "resource": "services", "namespace": "default"},
                "projections": [{"name": "names", "jmesPath": "[].metadata.name"}],
            },
        }),
        json!({
            "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
            "metadata": {"name": "namespaces"},
            "spec": {"apiCall": {"urlPath": "/api/v1/namespaces", "refreshInterval": refresh}},
        }),
    ]
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ports": [{"port": 80}]},
    })
}

fn freeze_config_map(frozen: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "freeze", "namespace": "default",
                     "labels": {"cache.kyverno.io/enabled": "true"}},
        "data": {"frozen": frozen},
    })
}

/// The verdict on the compliant example Pod, and the denial message.
fn verdict(gavel: &Gavel) -> (bool, String) {
    let (code, body) = gavel.post("/validate", &examples().join("reviews/pod-compliant.json"));
    assert_eq!(code, 200, "{body}");
    let r = response(&body);
    (
        r["allowed"] == true,
        r["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Requests other than the leader's (Leases, webhook configurations).
fn store_and_fallback_requests(server: &TestApiServer) -> Vec<support::apiserver::Logged> {
    server
        .requests()
        .into_iter()
        .filter(|r| {
            !r.uri.starts_with("/apis/coordination.k8s.io/")
                && !r.uri.starts_with("/apis/admissionregistration.k8s.io/")
                && !r.uri.starts_with("/api/v1/namespaces/gavel/secrets")
                // The background half: its own clients and buckets.
                && !r.uri.starts_with("/apis/kyverno.io/v2/namespaces/gavel/updaterequests")
                && !r.uri.starts_with("/apis/authentication.k8s.io/")
                && !r.uri.starts_with("/apis/wgpolicyk8s.io/")
                // The leader's duties with clients of their own (the
                // policy status writes among the `controllers` client's).
                && !["cleanup", "reports", "background", "controllers"]
                    .iter()
                    .any(|c| r.user_agent.ends_with(&format!(") {c}")))
        })
        .collect()
}

/// Sum of the `kyverno_client_queries_total` series of the stores and the
/// fallback (the leader's duties have a client of their own).
fn client_queries(gavel: &Gavel) -> f64 {
    let (_, body) = gavel.curl(&["/metrics"]);
    body.lines()
        .filter(|l| l.starts_with("kyverno_client_queries_total{"))
        .filter(|l| {
            ![
                "controllers",
                "background",
                "update-requests",
                "reports",
                "cleanup",
            ]
            .iter()
            .any(|c| l.contains(&format!("client_type=\"{c}\"")))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn hot_path_makes_no_api_calls() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-hot-path");
    for p in context_policies() {
        server.put(p);
    }
    for e in global_context_entries("1h") {
        server.put(e);
    }
    server.put(service("web"));
    server.put(freeze_config_map("no"));
    let gavel = gavel_in_cluster(&server, &dir);
    assert_eq!(verdict(&gavel), (true, String::new()));

    // A GlobalContextEntry's reflector follows its resource.
    server.put(service("maintenance"));
    eventually(
        "the Service in the global context",
        Duration::from_secs(10),
        || verdict(&gavel).1.contains("maintenance window"),
    );
    assert!(server.delete("v1", "Service", "default", "maintenance"));
    eventually(
        "the Service gone from the global context",
        Duration::from_secs(10),
        || verdict(&gavel).0,
    );

    // Store changes reach the admission path without a request of its own.
    server.put(freeze_config_map("yes"));
    eventually("the ConfigMap change", Duration::from_secs(10), || {
        !verdict(&gavel).0
    });
    assert!(
        verdict(&gavel).1.contains("deployments are frozen"),
        "{:?}",
        verdict(&gavel)
    );
    server.put(freeze_config_map("no"));
    let mut ns = server.get("v1", "Namespace", "", "default").unwrap();
    ns["metadata"]["labels"] = json!({"env": "prod"});
    server.put(ns);
    eventually("the namespace label", Duration::from_secs(10), || {
        verdict(&gavel).1.contains("need an owner label")
    });

    // A burst of reviews with synced stores: not one API request (the
    // leader's Lease renewals and webhook checks go on beside them).
    let admission_requests = || store_and_fallback_requests(&server).len();
    let api_before = admission_requests();
    let logged_before = store_and_fallback_requests(&server).len();
    let counted_before = client_queries(&gavel);
    assert!(
        counted_before > 0.0,
        "the stores' lists and watches are counted"
    );
    for _ in 0..200 {
        let (allowed, message) = verdict(&gavel);
        assert!(
            !allowed && message.contains("need an owner label"),
            "{message}"
        );
    }
    let logged = store_and_fallback_requests(&server);
    assert_eq!(
        admission_requests(),
        api_before,
        "requests reached the API server: {:?}",
        logged[logged_before.min(logged.len())..]
            .iter()
            .map(|r| format!("{} {} ({})", r.method, r.uri, r.user_agent))
            .collect::<Vec<_>>()
    );
    assert_eq!(client_queries(&gavel), counted_before);
}

#[test]
fn global_context_entries_refresh_in_the_background() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-global-context");
    let flags = |frozen: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "flags", "namespace": "default"},
               "data": {"frozen": frozen}})
    };
    server.put(flags("no"));
    server.put(json!({
        "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
        "metadata": {"name": "flags"},
        "spec": {
            "apiCall": {"urlPath": "/api/v1/namespaces/default/configmaps/flags",
                        "refreshInterval": "500ms", "retryLimit": 2},
            "projections": [{"name": "frozen", "jmesPath": "data.frozen"}],
        },
    }));
    server.put(json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "freeze"},
        "spec": {"validationFailureAction": "Enforce", "rules": [{
            "name": "deploy-freeze",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "context": [{"name": "frozen", "globalReference": {"name": "flags.frozen"}}],
            "validate": {
                "message": "deployments are frozen",
                "deny": {"conditions": {"any": [
                    {"key": "{{ frozen }}", "operator": "Equals", "value": "yes"},
                ]}},
            },
        }]},
    }));
    let gavel = gavel_in_cluster(&server, &dir);
    assert_eq!(verdict(&gavel), (true, String::new()));

    // The apiCall is refreshed in the background; its projection follows.
    server.put(flags("yes"));
    eventually("the refreshed apiCall", Duration::from_secs(10), || {
        verdict(&gavel).1.contains("deployments are frozen")
    });
    // Once every retry fails, the entry holds the error and the policy
    // that reads it fails with it (failurePolicy Fail: denied).
    assert!(server.delete("v1", "ConfigMap", "default", "flags"));
    eventually("the failing entry", Duration::from_secs(10), || {
        verdict(&gavel)
            .1
            .contains("global context entry flags.frozen")
    });
    server.put(flags("no"));
    eventually("the entry recovered", Duration::from_secs(10), || {
        verdict(&gavel).0
    });

    // The same data from a service over HTTPS: here the test server itself,
    // trusted through caBundle, with its token in a header.
    let service_entry = |ca: &str| {
        json!({
            "apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry",
            "metadata": {"name": "flags"},
            "spec": {
                "apiCall": {
                    "service": {
                        "url": format!("{}/api/v1/namespaces/default/configmaps/flags", server.url()),
                        "caBundle": ca,
                        "headers": [{"key": "Authorization",
                                     "value": format!("Bearer {}", support::apiserver::TOKEN)}],
                    },
                    "refreshInterval": "500ms", "retryLimit": 1,
                },
                "projections": [{"name": "frozen", "jmesPath": "data.frozen"}],
            },
        })
    };
    server.put(flags("yes"));
    server.put(service_entry(server.ca_pem()));
    eventually("the service entry", Duration::from_secs(10), || {
        verdict(&gavel).1.contains("deployments are frozen")
    });
    // A caBundle that does not sign the service's certificate: the entry
    // fails, and so do the policies that read it.
    let stranger = gavel::server::tls::generate_ca(Duration::from_secs(3600)).unwrap();
    server.put(service_entry(&stranger.cert_pem));
    eventually("the untrusted service", Duration::from_secs(10), || {
        let message = verdict(&gavel).1;
        message.contains("global context entry flags.frozen") && message.contains("apiCall")
    });
    // Deleting the entry: lookups say it is not found.
    assert!(server.delete("kyverno.io/v2alpha1", "GlobalContextEntry", "", "flags"));
    eventually("the entry gone", Duration::from_secs(10), || {
        verdict(&gavel).1.contains("not found")
    });
}

#[test]
fn resolver_falls_back_to_api() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-fallback");
    server.put(context_policies()[0].clone());
    // Not labelled for the informer cache: only the fallback can see it.
    let mut cm = freeze_config_map("yes");
    cm["metadata"]["labels"] = json!({});
    server.put(cm);
    let gavel = gavel_in_cluster(&server, &dir);
    let path = "/api/v1/namespaces/default/configmaps/freeze";
    let fetches = || server.requests().iter().filter(|r| r.uri == path).count();
    assert_eq!(fetches(), 0);

    // Concurrent misses for one key make one call.
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| verdict(&gavel))).collect();
        for h in handles {
            let (allowed, message) = h.join().unwrap();
            assert!(
                !allowed && message.contains("deployments are frozen"),
                "{message}"
            );
        }
    });
    for _ in 0..20 {
        assert!(!verdict(&gavel).0);
    }
    assert_eq!(fetches(), 1, "fetched once, then served from the cache");
    assert_eq!(
        gavel.series("gavel_context_lookups_total", &["source=\"api\""]),
        1.0
    );
    assert_eq!(
        gavel.series("gavel_context_lookups_total", &["source=\"cache\""]),
        27.0
    );
    assert_eq!(
        gavel.series(
            "kyverno_client_queries_total",
            &[
                "client_type=\"fallback\"",
                "operation=\"get\"",
                "resource_kind=\"configmaps\""
            ],
        ),
        1.0
    );
}

#[test]
fn api_call_service_from_a_rule() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-service-call");
    let path = "/api/v1/namespaces/default/configmaps/freeze";
    server.put(json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "freeze"},
        "spec": {"validationFailureAction": "Enforce", "rules": [{
            "name": "deploy-freeze",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "context": [{"name": "frozen", "apiCall": {
                "method": "GET",
                "service": {
                    "url": format!("{}{path}", server.url()),
                    "caBundle": server.ca_pem(),
                    "headers": [{"key": "Authorization",
                                 "value": format!("Bearer {}", support::apiserver::TOKEN)}],
                },
                "jmesPath": "data.frozen",
            }}],
            "validate": {
                "message": "deployments are frozen",
                "deny": {"conditions": {"any": [
                    {"key": "{{ frozen }}", "operator": "Equals", "value": "yes"},
                ]}},
            },
        }]},
    }));
    server.put(freeze_config_map("yes"));
    let gavel = gavel_in_cluster(&server, &dir);
    let calls = || server.requests().iter().filter(|r| r.uri == path).count();
    let before = calls();
    for _ in 0..3 {
        let (allowed, message) = verdict(&gavel);
        assert!(
            !allowed && message.contains("deployments are frozen"),
            "{message}"
        );
    }
    // A service's answer may depend on the request: called every time.
    assert_eq!(calls() - before, 3);
    server.put(freeze_config_map("no"));
    assert_eq!(verdict(&gavel), (true, String::new()));
}

#[test]
fn client_rate_limit_spaces_requests() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-rate-limit");
    let started = Instant::now();
    let gavel = gavel_in_cluster_with(
        &server,
        &dir,
        &["--client-qps", "2", "--client-burst", "1"],
        Duration::from_secs(60),
    );
    // Ready after the five lists: 2 s at least at this rate.
    assert!(started.elapsed() >= Duration::from_millis(2000));
    // The stores' requests (the leader's duties have their own bucket).
    let store_requests = || store_and_fallback_requests(&server);
    eventually("the watches", Duration::from_secs(20), || {
        store_requests().len() >= 10
    });
    // Five stores, each a list and a watch: at 2 per second after a burst
    // of 1, the tenth request cannot come before 4.5 s (unlimited, they
    // all go out within milliseconds).
    let requests = store_requests();
    let span = requests[9].at - requests[0].at;
    assert!(
        span >= Duration::from_millis(4400),
        "10 requests in {span:?}"
    );
    assert!(gavel.series("kyverno_client_queries_total", &["operation=\"watch\""]) >= 1.0);
}

const WEBHOOK_CONFIG: &str = "gavel-resource-validating-webhook-cfg";

/// A replica with fast leader election (3 s leases) and webhook checks.
fn replica(server: &TestApiServer, dir: &Path, identity: &str) -> Gavel {
    replica_with(server, dir, identity, &[])
}

fn replica_with(server: &TestApiServer, dir: &Path, identity: &str, extra: &[&str]) -> Gavel {
    let dir = dir.join(identity);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = server.write_kubeconfig(&dir);
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--namespace",
        "gavel",
        "--identity",
        identity,
        "--lease-duration-seconds",
        "3",
        "--renew-deadline-seconds",
        "2",
        "--retry-period-seconds",
        "0.5",
        "--webhook-url",
        "https://127.0.0.1:{port}",
        "--webhook-resync-seconds",
        "0.5",
    ];
    args.extend_from_slice(extra);
    Gavel::start_with(&dir.join("no-policy-directory"), &dir, &args)
}

fn cluster_with_gavel_namespace() -> TestApiServer {
    let server = TestApiServer::start();
    server.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gavel"}}));
    server.put(example_policy("disallow-privileged-containers"));
    server
}

fn holder(server: &TestApiServer) -> Option<String> {
    let lease = server.get("coordination.k8s.io/v1", "Lease", "gavel", "gavel-webhooks")?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

fn webhook_config(server: &TestApiServer) -> Option<Value> {
    server.get(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "",
        WEBHOOK_CONFIG,
    )
}

fn creates_of_webhook_config(server: &TestApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| {
            r.method == "POST"
                && r.uri.starts_with(
                    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                )
        })
        .count()
}

#[test]
fn webhook_config_restored() {
    let server = cluster_with_gavel_namespace();
    let dir = temp_dir("cluster-webhooks");
    let gavel = replica(&server, &dir, "gavel-a");
    eventually("the webhook configuration", Duration::from_secs(15), || {
        webhook_config(&server).is_some()
    });
    let config = webhook_config(&server).unwrap();
    let hooks = config["webhooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "only Fail policies: {config}");
    let hook = &hooks[0];
    assert_eq!(hook["name"], "validate.gavel.svc-fail");
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(
        hook["clientConfig"]["url"],
        format!("https://127.0.0.1:{}/validate/fail", gavel.port)
    );
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(hook["clientConfig"]["caBundle"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        ca,
        std::fs::read(&gavel.ca).unwrap(),
        "caBundle is gavel's CA"
    );
    assert_eq!(
        hook["rules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                "resources": ["pods", "pods/ephemeralcontainers"], "scope": "*"},
               {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                "resources": ["deployments"], "scope": "*"}]),
        "Pods plus the autogen controllers the test server serves"
    );
    // The default selector's kube-system, and gavel's own namespace added.
    assert_eq!(
        hook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "gavel"])
    );

    // Deleted: re-created. Edited: put back.
    assert!(server.delete(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "",
        WEBHOOK_CONFIG
    ));
    eventually("re-creation", Duration::from_secs(10), || {
        webhook_config(&server).is_some()
    });
    let mut edited = webhook_config(&server).unwrap();
    edited["webhooks"][0]["failurePolicy"] = json!("Ignore");
    server.put(edited);
    eventually("the edit to be undone", Duration::from_secs(10), || {
        webhook_config(&server).is_some_and(|c| c["webhooks"][0]["failurePolicy"] == "Fail")
    });
    // Idempotent: once in shape, no more writes.
    std::thread::sleep(Duration::from_secs(2));
    let rv = webhook_config(&server).unwrap()["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        webhook_config(&server).unwrap()["metadata"]["resourceVersion"],
        rv
    );
    let mutating = || {
        server.get(
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            "",
            "gavel-resource-mutating-webhook-cfg",
        )
    };
    assert!(
        mutating().is_some_and(|m| m["webhooks"].as_array().is_none_or(Vec::is_empty)),
        "no mutate policy yet: {:?}",
        mutating()
    );

    // Operations, subresources and timeouts come from the policies; mutate
    // rules go to the mutating configuration.
    server.put(json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "configmaps-and-exec",
                     "annotations": {"pod-policies.kyverno.io/autogen-controllers": "none"}},
        "spec": {"validationFailureAction": "Enforce", "webhookTimeoutSeconds": 20, "rules": [
            {"name": "create-only",
             "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "operations": ["CREATE"]}}]},
             "validate": {"message": "m", "pattern": {"metadata": {"name": "?*"}}}},
            {"name": "no-exec",
             "match": {"any": [{"resources": {"kinds": ["Pod/exec"], "operations": ["CONNECT"]}}]},
             "validate": {"message": "no exec", "deny": {}}},
        ]},
    }));
    server.put(json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "add-labels"},
        "spec": {"failurePolicy": "Ignore", "rules": [{
            "name": "team",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"+(team)": "none"}}}},
        }]},
    }));
    eventually("the new rules", Duration::from_secs(15), || {
        let rules = webhook_config(&server).map(|c| c["webhooks"][0]["rules"].clone());
        rules.is_some_and(|r| r.to_string().contains("configmaps"))
    });
    let fail = webhook_config(&server).unwrap()["webhooks"][0].clone();
    let rules = fail["rules"].as_array().unwrap();
    let rule_for = |resource: &str| {
        rules
            .iter()
            .find(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(resource))
            })
            .unwrap_or_else(|| panic!("no rule for {resource}: {rules:?}"))
            .clone()
    };
    assert_eq!(rule_for("configmaps")["operations"], json!(["CREATE"]));
    assert_eq!(rule_for("pods/exec")["operations"], json!(["CONNECT"]));
    assert_eq!(
        rule_for("pods")["operations"],
        json!(["CREATE", "UPDATE", "DELETE", "CONNECT"])
    );
    assert_eq!(fail["timeoutSeconds"], 20, "the longest policy timeout");
    eventually("the mutating webhook", Duration::from_secs(15), || {
        mutating().is_some_and(|m| m["webhooks"].as_array().is_some_and(|w| !w.is_empty()))
    });
    let hook = mutating().unwrap()["webhooks"][0].clone();
    assert_eq!(hook["name"], "mutate.gavel.svc-ignore");
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(hook["reinvocationPolicy"], "IfNeeded");
    assert_eq!(
        hook["clientConfig"]["url"],
        format!("https://127.0.0.1:{}/mutate/ignore", gavel.port)
    );
    assert_eq!(
        hook["rules"][0]["operations"],
        json!(["CREATE", "UPDATE"]),
        "mutate defaults"
    );
}

const CA_SECRET: &str = "gavel-svc.gavel.svc.gavel-tls-ca";
const PAIR_SECRET: &str = "gavel-svc.gavel.svc.gavel-tls-pair";

/// `tls.crt` of a Secret, as PEM.
fn secret_cert(server: &TestApiServer, name: &str) -> Option<String> {
    use base64::Engine;
    let secret = server.get("v1", "Secret", "gavel", name)?;
    let b64 = secret["data"]["tls.crt"].as_str()?;
    let pem = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(pem).ok()
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// The certificate a replica presents to a client trusting `ca`, if the
/// handshake succeeds.
fn served(gavel: &Gavel, ca: &str) -> Option<Vec<u8>> {
    TlsConnection::open(gavel.port, ca)
        .ok()
        .map(|c| c.peer_certificate())
}

/// Creates of any Secret (a POST does not name its object in the path),
/// plus updates of Secret `name`, that the server has seen.
fn secret_writes(server: &TestApiServer, name: &str) -> usize {
    let collection = "/api/v1/namespaces/gavel/secrets";
    let object = format!("{collection}/{name}");
    server
        .requests()
        .iter()
        .filter(|r| {
            (r.method == "POST" && r.uri.starts_with(collection))
                || (r.method == "PUT" && r.uri.starts_with(&object))
        })
        .count()
}

fn ca_bundle_registered(server: &TestApiServer) -> Option<String> {
    use base64::Engine;
    let config = webhook_config(server)?;
    let b64 = config["webhooks"][0]["clientConfig"]["caBundle"].as_str()?;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).ok()?).ok()
}

#[test]
fn certificate_rotation_without_restart() {
    let server = cluster_with_gavel_namespace();
    let dir = temp_dir("cluster-cert-rotation");
    // Short-lived serving certificates, so the leader renews every few seconds.
    let flags = [
        "--cert-validity-seconds",
        "20",
        "--renew-before-seconds",
        "10",
        "--cert-resync-seconds",
        "0.5",
    ];
    let mut a = replica_with(&server, &dir, "gavel-a", &flags);
    let mut b = replica_with(&server, &dir, "gavel-b", &flags);

    // The leader created both Secrets, labelled, of type kubernetes.io/tls.
    for name in [CA_SECRET, PAIR_SECRET] {
        let secret = server.get("v1", "Secret", "gavel", name).unwrap();
        assert_eq!(secret["type"], "kubernetes.io/tls", "{name}");
        assert_eq!(
            secret["metadata"]["labels"]["cert.gavel.dev/managed-by"],
            "gavel"
        );
    }
    let ca = secret_cert(&server, CA_SECRET).unwrap();
    // Both replicas serve the pair from the Secret, and it verifies against
    // the CA from the other Secret (name `localhost` checked too).
    eventually(
        "both replicas serve the Secret's pair",
        Duration::from_secs(10),
        || {
            let pair = secret_cert(&server, PAIR_SECRET).map(|p| pem_to_der(&p));
            pair.is_some() && served(&a, &ca) == pair && served(&b, &ca) == pair
        },
    );
    eventually(
        "caBundle from the CA Secret",
        Duration::from_secs(10),
        || ca_bundle_registered(&server).as_deref() == Some(ca.as_str()),
    );

    // A connection opened now must survive the rotation.
    let mut kept = TlsConnection::open(a.port, &ca).unwrap();
    assert_eq!(kept.get("/health/liveness").unwrap(), (200, "ok".into()));
    let first = kept.peer_certificate();
    let writes_before = secret_writes(&server, PAIR_SECRET);

    // Renewal: the leader writes a new pair before the old one expires;
    // both replicas pick it up without a restart.
    // (Kept busy: gavel closes connections idle for longer than its
    // 10 s header timeout.)
    let mut ping = || assert_eq!(kept.get("/health/liveness").unwrap(), (200, "ok".into()));
    eventually("the pair renewed", Duration::from_secs(20), || {
        ping();
        secret_cert(&server, PAIR_SECRET).is_some_and(|p| pem_to_der(&p) != first)
    });
    eventually(
        "both replicas serve a renewed pair",
        Duration::from_secs(10),
        || {
            ping();
            let now = served(&a, &ca);
            now.is_some()
                && now != Some(first.clone())
                && served(&b, &ca).is_some_and(|c| c != first)
        },
    );
    ping();
    assert!(a.child.try_wait().unwrap().is_none() && b.child.try_wait().unwrap().is_none());
    assert_eq!(
        secret_cert(&server, CA_SECRET).as_deref(),
        Some(ca.as_str()),
        "a pair renewal keeps the CA"
    );
    // Renewed once, by one leader: no churn, no duplicate writes.
    assert_eq!(secret_writes(&server, PAIR_SECRET) - writes_before, 1);

    // CA rotation: the CA Secret is lost; the leader makes a new CA, issues a
    // pair under it and registers the new caBundle; both replicas serve it.
    assert!(server.delete("v1", "Secret", "gavel", CA_SECRET));
    eventually("a new CA", Duration::from_secs(10), || {
        ping();
        secret_cert(&server, CA_SECRET).is_some_and(|c| c != ca)
    });
    let new_ca = secret_cert(&server, CA_SECRET).unwrap();
    eventually(
        "replicas serve a pair of the new CA",
        Duration::from_secs(15),
        || {
            ping();
            served(&a, &new_ca).is_some() && served(&b, &new_ca).is_some()
        },
    );
    assert!(served(&a, &ca).is_none(), "the old CA no longer verifies");
    eventually("caBundle rotated", Duration::from_secs(10), || {
        ping();
        ca_bundle_registered(&server).as_deref() == Some(new_ca.as_str())
    });
    // Admission through the bundle gavel writes for clients.
    eventually("admission with the new CA", Duration::from_secs(10), || {
        ping();
        std::fs::read_to_string(&a.ca).is_ok_and(|c| c == new_ca) && denies_violating_pod(&a)
    });
    ping();
    assert!(a.child.try_wait().unwrap().is_none() && b.child.try_wait().unwrap().is_none());
}

#[test]
fn leader_failover() {
    let server = cluster_with_gavel_namespace();
    let dir = temp_dir("cluster-leader");
    let mut a = Some(replica(&server, &dir, "gavel-a"));
    let b = replica(&server, &dir, "gavel-b");
    eventually("a leader and its webhooks", Duration::from_secs(15), || {
        holder(&server).is_some() && webhook_config(&server).is_some()
    });
    let first = holder(&server).unwrap();
    // One leader, holding steadily.
    for _ in 0..10 {
        assert_eq!(holder(&server).as_deref(), Some(first.as_str()));
        std::thread::sleep(Duration::from_millis(200));
    }
    // One create per configuration (resources, and policies as they are
    // written), no duplicates.
    assert_eq!(creates_of_webhook_config(&server), 2);
    // One CA and one pair, each written once by whichever replica led the
    // certificate duty.
    assert_eq!(secret_writes(&server, PAIR_SECRET), 2);
    // Both replicas serve admission.
    assert!(denies_violating_pod(a.as_ref().unwrap()) && denies_violating_pod(&b));

    // Kill the leader: the other takes over within the lease duration.
    let transitions = |s: &TestApiServer| {
        s.get("coordination.k8s.io/v1", "Lease", "gavel", "gavel-webhooks")
            .unwrap()["spec"]["leaseTransitions"]
            .as_i64()
            .unwrap_or(0)
    };
    let before = transitions(&server);
    let (survivor, survivor_name) = if first == "gavel-a" {
        a.take();
        (&b, "gavel-b")
    } else {
        drop(b);
        (a.as_ref().unwrap(), "gavel-a")
    };
    let killed = Instant::now();
    eventually("the handover", Duration::from_secs(10), || {
        holder(&server).as_deref() == Some(survivor_name)
    });
    let handover = killed.elapsed();
    assert!(
        handover < Duration::from_secs(3) + Duration::from_millis(1500),
        "handover took {handover:?}"
    );
    assert_eq!(transitions(&server), before + 1);

    // The new leader completes the duties.
    server.delete(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "",
        WEBHOOK_CONFIG,
    );
    eventually(
        "the new leader to restore the webhooks",
        Duration::from_secs(10),
        || webhook_config(&server).is_some(),
    );
    assert!(denies_violating_pod(survivor));
    // The certificate duty too, whichever replica held its Lease before.
    assert!(server.delete("v1", "Secret", "gavel", PAIR_SECRET));
    eventually(
        "the new leader to reissue the pair",
        Duration::from_secs(10),
        || {
            let ca = secret_cert(&server, CA_SECRET).unwrap();
            let pair = secret_cert(&server, PAIR_SECRET).map(|p| pem_to_der(&p));
            pair.is_some() && served(survivor, &ca) == pair
        },
    );
}

#[test]
fn admission_survives_apiserver_outage() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-outage");
    server.put(example_policy("disallow-privileged-containers"));
    let gavel = gavel_in_cluster(&server, &dir);
    assert!(denies_violating_pod(&gavel), "synced before ready");

    // The API server goes away: admission goes on from the stores.
    server.stop();
    let before = server.request_count();
    for _ in 0..20 {
        assert!(denies_violating_pod(&gavel));
    }
    assert_eq!(
        server.request_count(),
        before,
        "no request reached the stopped server"
    );

    // While it is away, a policy is deleted and history is compacted, so
    // the watches must relist (410) when it returns.
    server.delete(
        "kyverno.io/v1",
        "ClusterPolicy",
        "",
        "disallow-privileged-containers",
    );
    server.compact();
    server.resume();
    eventually("the stores to catch up", Duration::from_secs(30), || {
        !denies_violating_pod(&gavel)
    });
    let relisted = server.requests().iter().any(|r| {
        r.uri.starts_with("/apis/kyverno.io/v1/clusterpolicies?") && !r.uri.contains("watch=true")
    });
    assert!(relisted, "the cluster policies were listed again");
}

fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let mut command = Command::new(support::tools::kubectl());
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let out = support::cluster::run_piped(command, stdin);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kubectl_speaks_to_test_server() {
    let server = TestApiServer::start();
    let dir = temp_dir("cluster-kubectl");
    let kc = server.write_kubeconfig(&dir);

    let (ok, out, err) = kubectl(&kc, &["version", "-o", "json"], None);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serverVersion"]["minor"], "33");

    // apply creates, then updates through a patch.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: web\ndata:\n  mode: strict\n";
    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(cm));
    assert!(ok, "apply (create): {out}{err}");
    assert!(out.contains("configmap/settings created"), "{out}");
    let (ok, out, err) = kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&cm.replace("strict", "lenient")),
    );
    assert!(ok, "apply (update): {out}{err}");
    assert!(out.contains("configmap/settings configured"), "{out}");
    let stored = server
        .get("v1", "ConfigMap", "default", "settings")
        .unwrap();
    assert_eq!(stored["data"]["mode"], "lenient");

    // get -o json, by name, by label and across namespaces.
    let (ok, out, err) = kubectl(&kc, &["get", "configmap", "settings", "-o", "json"], None);
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["data"]["mode"], "lenient");
    assert_eq!(
        got["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );
    let (ok, out, err) = kubectl(
        &kc,
        &["get", "cm", "-l", "app=web", "-A", "-o", "json"],
        None,
    );
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (ok, out, _) = kubectl(&kc, &["get", "cm", "-l", "app=db", "-o", "json"], None);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"],
        json!([])
    );

    // Kyverno's kinds resolve through discovery, short names included.
    let policy = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: require-labels\nspec:\n  rules: []\n";
    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(policy));
    assert!(ok, "apply policy: {out}{err}");
    let (ok, out, err) = kubectl(&kc, &["get", "cpol", "-o", "json"], None);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"][0]["metadata"]["name"],
        "require-labels"
    );

    // Errors come back as Status objects kubectl understands.
    let (ok, _, err) = kubectl(&kc, &["get", "configmap", "missing"], None);
    assert!(!ok);
    assert!(err.contains("configmaps \"missing\" not found"), "{err}");
    let (ok, _, err) = kubectl(&kc, &["create", "-f", "-"], Some(cm));
    assert!(!ok);
    assert!(err.contains("already exists"), "{err}");

    // A watch sees later writes as events.
    let watcher = Command::new("timeout")
        .arg("4")
        .arg(support::tools::kubectl())
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "get",
            "configmaps",
            "--watch-only",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (ok, _, err) = kubectl(&kc, &["label", "configmap", "settings", "tier=gold"], None);
    assert!(ok, "label: {err}");
    let watched = watcher.wait_with_output().unwrap();
    let events = String::from_utf8_lossy(&watched.stdout);
    assert!(
        events.contains("\"MODIFIED\"") && events.contains("\"tier\":\"gold\""),
        "watch output: {events} {}",
        String::from_utf8_lossy(&watched.stderr)
    );

    let (ok, out, err) = kubectl(&kc, &["delete", "configmap", "settings"], None);
    assert!(ok, "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert!(
        server
            .get("v1", "ConfigMap", "default", "settings")
            .is_none()
    );
}

/// The store scale measurement of the cluster issue: 100,000 ConfigMaps of
/// about 1 KiB of data and 10,000 Namespaces, synced through the test
/// server. Prints gavel's RSS against the raw JSON size of the cached
/// objects, and the time to sync. Run with
/// `cargo test --release --test integration -- --ignored --nocapture cluster::stores_at_scale`.
#[test]
#[ignore]
fn stores_at_scale() {
    const NAMESPACES: usize = 10_000;
    const CONFIG_MAPS: usize = 100_000;
    let server = TestApiServer::with_config(support::apiserver::Config {
        history_limit: 1_000,
        ..Default::default()
    });
    let dir = temp_dir("cluster-scale");

    // Baseline in the same run: gavel with empty stores.
    let empty = gavel_in_cluster(&server, &dir);
    std::thread::sleep(Duration::from_secs(1));
    let (baseline_rss, _) = empty.rss();
    drop(empty);

    let mut raw = 0usize;
    for i in 0..NAMESPACES {
        let ns = server.put(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("team-{i:05}"), "labels": {"team": format!("t{}", i % 97)}},
        }));
        raw += serde_json::to_vec(&ns).unwrap().len();
    }
    let value: String = "x".repeat(64);
    for i in 0..CONFIG_MAPS {
        let data: serde_json::Map<String, Value> = (0..16)
            .map(|k| (format!("key-{k:02}"), Value::String(value.clone())))
            .collect();
        let cm = server.put(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": format!("settings-{i:06}"),
                "namespace": format!("team-{:05}", i % NAMESPACES),
                "labels": {"cache.kyverno.io/enabled": "true", "app": "scale"},
            },
            "data": data,
        }));
        raw += serde_json::to_vec(&cm).unwrap().len();
    }

    let started = Instant::now();
    let gavel = gavel_in_cluster_with(
        &server,
        &dir,
        &["--client-qps", "0"],
        Duration::from_secs(120),
    );
    let sync = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let (rss, peak) = gavel.rss();
    let stores = rss.saturating_sub(baseline_rss);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "objects: {NAMESPACES} namespaces + {CONFIG_MAPS} configmaps, raw JSON {:.1} MiB\n\
         sync (spawn to ready): {:.2} s\n\
         gavel RSS {:.1} MiB (peak {:.1} MiB); empty-store baseline {:.1} MiB; stores' share {:.1} MiB\n\
         RSS / raw = {:.2}; (RSS - baseline) / raw = {:.2}",
        mib(raw as u64),
        sync.as_secs_f64(),
        mib(rss),
        mib(peak),
        mib(baseline_rss),
        mib(stores),
        rss as f64 / raw as f64,
        stores as f64 / raw as f64,
    );
    assert!(sync < Duration::from_secs(30), "sync took {sync:?}");
    assert!(
        (rss as f64) <= 1.5 * raw as f64,
        "RSS {rss} > 1.5 x raw {raw}"
    );
}

/// The CRD of a policies.kyverno.io kind, served at v1alpha1.
fn cel_policy_crd(kind: &str, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.policies.kyverno.io")},
        "spec": {
            "group": "policies.kyverno.io",
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                          "subresources": {"status": {}}}],
        },
    })
}

/// With Kyverno's CEL CRDs installed, ValidatingPolicies and
/// MutatingPolicies are watched and served from the same snapshot as the
/// ClusterPolicies; an invalid one is rejected and counted.
#[test]
fn cel_policy_kinds_are_watched() {
    let server = TestApiServer::start();
    for (kind, plural, namespaced) in [
        ("ValidatingPolicy", "validatingpolicies", false),
        (
            "NamespacedValidatingPolicy",
            "namespacedvalidatingpolicies",
            true,
        ),
        ("MutatingPolicy", "mutatingpolicies", false),
        (
            "NamespacedMutatingPolicy",
            "namespacedmutatingpolicies",
            true,
        ),
    ] {
        server.put(cel_policy_crd(kind, plural, namespaced));
    }
    let dir = temp_dir("cluster-cel-kinds");
    let gavel = gavel_in_cluster(&server, &dir);
    assert!(!denies_violating_pod(&gavel), "no policies yet");

    let vpol = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "no-host-network"},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "!object.spec.?hostNetwork.orValue(false)",
                             "message": "host networking is not allowed"}],
        },
    });
    server.put(vpol.clone());
    eventually(
        "the ValidatingPolicy to be enforced",
        Duration::from_secs(10),
        || denies_violating_pod(&gavel),
    );
    let (_, body) = gavel.post("/validate", &examples().join("reviews/pod-violating.json"));
    let message = response(&body)["status"]["message"].to_string();
    assert!(
        message.contains("host networking is not allowed"),
        "{message}"
    );

    server.put(json!({
        "apiVersion": "policies.kyverno.io/v1alpha1",
        "kind": "MutatingPolicy",
        "metadata": {"name": "always-pull"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, imagePullPolicy: 'Always'})}}"}}],
        },
    }));
    eventually(
        "the MutatingPolicy to patch",
        Duration::from_secs(10),
        || {
            let (_, body) = gavel.post("/mutate", &examples().join("reviews/pod-compliant.json"));
            response(&body)["patchType"] == "JSONPatch"
        },
    );

    // A broken edit is rejected; the previous version stays in force.
    let mut broken = vpol.clone();
    broken["spec"]["validations"][0]["expression"] = json!("object.spec.(");
    server.put(broken);
    eventually(
        "the rejection to be counted",
        Duration::from_secs(10),
        || gavel.metric("gavel_policies_rejected_total") == 1.0,
    );
    assert!(denies_violating_pod(&gavel), "the previous version stays");
    assert_eq!(gavel.metric("gavel_policies"), 2.0);
    // The leader says why in its status, where `kubectl get vpol` reads
    // its READY column.
    eventually(
        "conditionStatus.ready false with the reason",
        Duration::from_secs(10),
        || {
            server
                .get(
                    "policies.kyverno.io/v1alpha1",
                    "ValidatingPolicy",
                    "",
                    "no-host-network",
                )
                .is_some_and(|p| {
                    let status = &p["status"]["conditionStatus"];
                    status["ready"] == false
                        && status["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("object.spec.("))
                })
        },
    );

    server.delete(
        "policies.kyverno.io/v1alpha1",
        "ValidatingPolicy",
        "",
        "no-host-network",
    );
    eventually(
        "the ValidatingPolicy to be gone",
        Duration::from_secs(10),
        || !denies_violating_pod(&gavel),
    );
}
