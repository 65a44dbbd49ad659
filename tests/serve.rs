//! `gavel serve` end to end: the real binary over real TLS, driven by the
//! real `curl` client with the generated CA.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::gavel::{Gavel, examples, response, sigterm, temp_dir};

#[test]
fn verdicts_bad_input_and_shutdown() {
    let dir = temp_dir("serve");
    let mut server = Gavel::start(&examples().join("policies"), &dir);
    let reviews = examples().join("reviews");

    let (code, body) = server.post("/validate", &reviews.join("pod-compliant.json"));
    assert_eq!(code, 200, "{body}");
    let r = response(&body);
    assert_eq!(r["allowed"], true, "{body}");
    assert_eq!(r["uid"], "0b6c5d6e-pod-compliant");

    let (code, body) = server.post("/validate/fail", &reviews.join("pod-violating.json"));
    assert_eq!(code, 200);
    let r = response(&body);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 400);
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message
            .contains("resource Pod/default/violating was blocked due to the following policies"),
        "{message}"
    );
    assert!(
        message.contains("disallow-host-namespaces:\n  host-namespaces: "),
        "{message}"
    );

    // /validate/ignore selects the Ignore policies: the examples have none.
    let (_, body) = server.post("/validate/ignore", &reviews.join("pod-violating.json"));
    assert_eq!(response(&body)["allowed"], true);

    // /mutate answers a base64 JSONPatch that takes the object to the
    // mutated one (examples/policies/add-pod-defaults.yaml).
    let (_, body) = server.post("/mutate", &reviews.join("pod-violating.json"));
    let r = response(&body);
    assert_eq!(r["allowed"], true, "{body}");
    assert_eq!(r["patchType"], "JSONPatch", "{body}");
    let patch = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        r["patch"].as_str().unwrap(),
    )
    .unwrap();
    let ops: Vec<serde_json::Value> = serde_json::from_slice(&patch).unwrap();
    let review: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reviews.join("pod-violating.json")).unwrap())
            .unwrap();
    let mut object = review["request"]["object"].clone();
    gavel::patch::json_patch::apply(&mut object, &ops).unwrap();
    let sc = &object["spec"]["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{object}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        sc["sysctls"],
        review["request"]["object"]["spec"]["securityContext"]["sysctls"]
    );
    // nginx:1.27 is not `latest`: its pull policy is left alone.
    assert!(
        object["spec"]["containers"][0]
            .get("imagePullPolicy")
            .is_none()
    );

    for (body, status, want) in [
        ("{", 400, "malformed AdmissionReview"),
        (
            "{\"apiVersion\": \"admission.k8s.io/v1beta1\", \"kind\": \"AdmissionReview\"}",
            400,
            "only admission.k8s.io/v1",
        ),
        (
            "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\"}",
            400,
            "no request",
        ),
        (
            "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": {\"uid\": 1}}",
            400,
            "request.uid: invalid type",
        ),
        (
            "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": null}",
            400,
            "no request",
        ),
        // A number no JSON reader can hold: the path to it, not a panic or a rounding.
        (
            "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": {\"uid\": \"u\", \"kind\": {\"version\": \"v1\", \"kind\": \"Pod\"}, \"operation\": \"CREATE\", \"object\": {\"spec\": {\"priority\": 1e400}}}}",
            400,
            "request.object.spec.priority: number out of range",
        ),
    ] {
        let (code, text) = server.post_text("/validate", body);
        assert_eq!(code, status, "{body} -> {text}");
        assert!(text.contains(want), "{body} -> {text}");
    }
    let deep = format!(
        "{{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": {{\"uid\": \"u\", \"kind\": {{\"version\": \"v1\", \"kind\": \"Pod\"}}, \"operation\": \"CREATE\", \"object\": {}{}}}}}",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let (code, text) = server.post_text("/validate", &deep);
    assert_eq!(
        (code, text.contains("recursion limit")),
        (400, true),
        "{text}"
    );
    // Bytes that are not UTF-8: 400 with where they are.
    let latin1 = dir.join("latin1.json");
    let mut bytes = b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": {\"uid\": \"u".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b"\"}}");
    std::fs::write(&latin1, bytes).unwrap();
    let (code, text) = server.post("/validate", &latin1);
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("not UTF-8") && text.contains("from index 86"),
        "{text}"
    );
    // A field gavel does not read may nest as deep as it likes: skipped, not
    // recursed into, and the review is answered.
    let unknown_deep = format!(
        "{{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"unknown\": {}{}, \"request\": {{\"uid\": \"u\", \"kind\": {{\"version\": \"v1\", \"kind\": \"ConfigMap\"}}, \"operation\": \"CREATE\", \"namespace\": \"default\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {{\"name\": \"x\"}}}}}}}}",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000)
    );
    let (code, text) = server.post_text("/validate", &unknown_deep);
    assert_eq!(
        (code, response(&text)["allowed"].clone()),
        (200, true.into()),
        "{text}"
    );
    let big = "x".repeat(3 * 1024 * 1024 + 1);
    let (code, text) = server.post_text("/validate", &big);
    assert_eq!(code, 413, "{text}");
    assert_eq!(server.curl(&["/validate"]).0, 405);
    assert_eq!(server.curl(&["/nope"]).0, 404);
    assert_eq!(server.metric("gavel_requests_malformed_total"), 9.0);

    // Kyverno's metric names and labels.
    let pod = [
        "resource_kind=\"Pod\"",
        "resource_namespace=\"default\"",
        "resource_request_operation=\"create\"",
    ];
    let denied = [&pod[..], &["request_allowed=\"false\""]].concat();
    assert_eq!(
        server.series("kyverno_admission_requests_total", &denied),
        1.0
    );
    let allowed = [&pod[..], &["request_allowed=\"true\""]].concat();
    let validating = [
        &allowed[..],
        &["request_webhook=\"ValidatingWebhookConfiguration\""],
    ]
    .concat();
    assert_eq!(
        server.series("kyverno_admission_requests_total", &validating),
        2.0,
        "the compliant Pod and /validate/ignore"
    );
    let mutating = [
        &allowed[..],
        &["request_webhook=\"MutatingWebhookConfiguration\""],
    ]
    .concat();
    assert_eq!(
        server.series("kyverno_admission_requests_total", &mutating),
        1.0
    );
    let host_namespaces = [
        "policy_name=\"disallow-host-namespaces\"",
        "rule_name=\"host-namespaces\"",
        "policy_type=\"cluster\"",
        "policy_namespace=\"-\"",
        "policy_validation_mode=\"enforce\"",
        "rule_type=\"validate\"",
        "rule_execution_cause=\"admission_request\"",
    ];
    let failed = [&host_namespaces[..], &pod[..], &["rule_result=\"fail\""]].concat();
    assert_eq!(server.series("kyverno_policy_results_total", &failed), 1.0);
    let passed = [&host_namespaces[..], &["rule_result=\"pass\""]].concat();
    assert_eq!(server.series("kyverno_policy_results_total", &passed), 1.0);
    assert_eq!(
        server.series("kyverno_policy_execution_duration_seconds_count", &failed),
        1.0
    );
    let inf = [&failed[..], &["le=\"+Inf\""]].concat();
    assert_eq!(
        server.series("kyverno_policy_execution_duration_seconds_bucket", &inf),
        1.0
    );
    assert_eq!(
        server.series("kyverno_policy_rule_info_total", &host_namespaces[..2]),
        1.0
    );

    // The server is still up after all of that, and drains on SIGTERM.
    assert_eq!(server.curl(&["/health/liveness"]).0, 200);
    assert!(sigterm(&server.child));
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status:?}");
}

#[test]
fn policy_directory_is_hot_reloaded_and_bad_files_are_contained() {
    let dir = temp_dir("reload");
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    let source = examples().join("policies/pod-security");
    std::fs::copy(
        source.join("disallow-host-namespaces.yaml"),
        policies.join("a.yaml"),
    )
    .unwrap();
    let server = Gavel::start(&policies, &dir);
    let violating = examples().join("reviews/pod-violating.json");
    assert_eq!(server.metric("gavel_policies"), 1.0);
    let (_, body) = server.post("/validate", &violating);
    let message = response(&body)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!message.contains("disallow-host-path"), "{message}");

    // A new file is picked up without a restart.
    std::fs::copy(
        source.join("disallow-host-path.yaml"),
        policies.join("b.yaml"),
    )
    .unwrap();
    // A broken file is rejected and counted; the rest stays in force.
    std::fs::write(
        policies.join("c.yaml"),
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nspec: {nope: 1}\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.metric("gavel_policies") != 2.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(server.metric("gavel_policies"), 2.0);
    assert_eq!(server.metric("gavel_policies_rejected_total"), 1.0);
    let (_, body) = server.post("/validate", &violating);
    let message = response(&body)["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("disallow-host-path:"), "{message}");
    assert!(message.contains("disallow-host-namespaces:"), "{message}");
    // The counters of the replaced snapshot carry over: two failures of the
    // same rule across two snapshots.
    assert_eq!(
        server.series(
            "kyverno_policy_results_total",
            &["rule_name=\"host-namespaces\"", "rule_result=\"fail\""]
        ),
        2.0
    );
}

#[test]
fn deadline_expiry_follows_the_failure_policy() {
    let dir = temp_dir("deadline");
    // Every policy is reached after a deadline of one microsecond.
    let server = Gavel::start_with(
        &examples().join("policies"),
        &dir,
        &["--deadline-seconds", "0.000001"],
    );
    let compliant = examples().join("reviews/pod-compliant.json");
    // failurePolicy Fail (the default): denied, naming the deadline.
    let (_, body) = server.post("/validate/fail", &compliant);
    let r = response(&body);
    assert_eq!(r["allowed"], false, "{body}");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(message.contains("request deadline passed"), "{message}");
    // The Ignore route has no policies here; nothing to deny.
    let (_, body) = server.post("/validate/ignore", &compliant);
    assert_eq!(response(&body)["allowed"], true, "{body}");
}

#[test]
fn cel_policy_kinds_are_served_from_the_same_snapshot() {
    let dir = temp_dir("cel-kinds");
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(
        policies.join("vpol.yaml"),
        "apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: no-host-network}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
  - expression: '!object.spec.?hostNetwork.orValue(false)'
    message: host networking is not allowed
",
    )
    .unwrap();
    std::fs::write(
        policies.join("mpol.yaml"),
        "apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata: {name: always-pull}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{spec: Object.spec{containers: object.spec.containers.map(c,
          Object.spec.containers{name: c.name, imagePullPolicy: 'Always'})}}
",
    )
    .unwrap();
    let server = Gavel::start(&policies, &dir);
    assert_eq!(server.metric("gavel_policies"), 2.0);
    let violating = examples().join("reviews/pod-violating.json");
    let compliant = examples().join("reviews/pod-compliant.json");

    let (_, body) = server.post("/validate", &violating);
    let r = response(&body);
    assert_eq!(r["allowed"], false, "{body}");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(message.contains("no-host-network"), "{message}");
    assert!(
        message.contains("host networking is not allowed"),
        "{message}"
    );
    let (_, body) = server.post("/validate", &compliant);
    assert_eq!(response(&body)["allowed"], true, "{body}");

    // The mutation comes back as a JSONPatch from the incoming Pod.
    let (_, body) = server.post("/mutate", &compliant);
    let r = response(&body);
    assert_eq!(r["allowed"], true, "{body}");
    assert_eq!(r["patchType"], "JSONPatch", "{body}");
    use base64::Engine as _;
    let patch: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let text = patch.to_string();
    assert!(
        text.contains("imagePullPolicy") && text.contains("Always"),
        "{text}"
    );
    // The Ignore routes hold neither (both default to failurePolicy Fail).
    let (_, body) = server.post("/validate/ignore", &violating);
    assert_eq!(response(&body)["allowed"], true, "{body}");

    // Their results are counted under Kyverno's metric of each kind, per
    // policy, with Kyverno's labels; not among the classic rules'.
    let vpol = [
        "policy_name=\"no-host-network\"",
        "policy_validation_mode=\"enforce\"",
        "resource_kind=\"Pod\"",
        "execution_cause=\"admission_request\"",
    ];
    for result in ["result=\"fail\"", "result=\"pass\""] {
        let series = [&vpol[..], &[result]].concat();
        assert_eq!(
            server.series("kyverno_validating_policy_results_total", &series),
            1.0
        );
    }
    let timed = [&vpol[..], &["result=\"fail\""]].concat();
    assert_eq!(
        server.series(
            "kyverno_validating_policy_execution_duration_seconds_count",
            &timed
        ),
        1.0
    );
    let mpol = ["policy_name=\"always-pull\"", "result=\"pass\""];
    assert_eq!(
        server.series("kyverno_mutating_policy_results_total", &mpol),
        1.0
    );
    assert_eq!(
        server.series(
            "kyverno_policy_results_total",
            &["policy_name=\"no-host-network\""]
        ),
        -1.0,
        "no series of the classic family"
    );
}

/// SIGTERM during load loses nothing: while Kubernetes removes the
/// endpoint, the server stays up with readiness false and tells HTTP/1.1
/// clients to reconnect elsewhere (`Connection: close`); then it accepts
/// no more connections, lets an HTTP/2 request in flight finish (GOAWAY,
/// not a reset), and exits.
#[test]
fn sigterm_drains_without_dropping_requests() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use support::gavel::TlsConnection;
    let dir = temp_dir("drain");
    let delay = Duration::from_secs(3);
    let mut server = Gavel::start_with(
        &examples().join("policies"),
        &dir,
        &["--shutdown-delay-seconds", "3"],
    );
    let ca = std::fs::read_to_string(&server.ca).unwrap();

    // Eight keep-alive clients asking as fast as they can. Each reconnects
    // when told to close, as HTTP clients do, until the endpoint is gone.
    let endpoint_gone = Arc::new(AtomicBool::new(false));
    let terminated = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (gone, terminated, failures, ca) = (
                endpoint_gone.clone(),
                terminated.clone(),
                failures.clone(),
                ca.clone(),
            );
            let port = server.port;
            std::thread::spawn(move || {
                let (mut answered, mut told_to_close_after_term) = (0usize, 0usize);
                'connections: while !gone.load(Ordering::Relaxed) {
                    let mut conn = match TlsConnection::open(port, &ca) {
                        Ok(c) => c,
                        Err(e) => {
                            failures.lock().unwrap().push(format!("connect: {e}"));
                            break;
                        }
                    };
                    loop {
                        let after_term = terminated.load(Ordering::Relaxed);
                        match conn.get("/health/liveness") {
                            Ok((200, _)) => answered += 1,
                            Ok((code, body)) => {
                                failures.lock().unwrap().push(format!("{code}: {body}"))
                            }
                            Err(e) => {
                                failures.lock().unwrap().push(format!("request: {e}"));
                                break 'connections;
                            }
                        }
                        if conn.closing {
                            told_to_close_after_term += usize::from(after_term);
                            continue 'connections;
                        }
                        if gone.load(Ordering::Relaxed) {
                            break 'connections;
                        }
                    }
                }
                (answered, told_to_close_after_term)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    let signalled = Instant::now();
    assert!(sigterm(&server.child));
    terminated.store(true, Ordering::Relaxed);
    // Readiness is false at once, and the server still answers.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.curl(&["/health/readiness"]).0, 503);
    assert_eq!(server.curl(&["/health/liveness"]).0, 200);

    // An HTTP/2 review uploaded slowly (about 4 s), so that it is still in
    // flight when the delay ends and the connection gets GOAWAY.
    let review = {
        let text = std::fs::read_to_string(examples().join("reviews/pod-compliant.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["request"]["object"]["metadata"]["annotations"]["padding"] = "x".repeat(4000).into();
        let path = dir.join("slow-review.json");
        std::fs::write(&path, v.to_string()).unwrap();
        path
    };
    let slow = Command::new("curl")
        .args(["-s", "--http2", "--limit-rate", "1000", "--cacert"])
        .arg(&server.ca)
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", review.display()))
        .args(["-w", "\n%{http_code} %{http_version}"])
        .arg(format!("https://localhost:{}/validate", server.port))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // The endpoint is removed everywhere well within the delay.
    std::thread::sleep(Duration::from_millis(1500));
    endpoint_gone.store(true, Ordering::Relaxed);
    let mut total = 0;
    for client in clients {
        let (answered, told_to_close) = client.join().unwrap();
        total += answered;
        assert!(
            told_to_close > 0,
            "a client was never told to close its connection after SIGTERM"
        );
    }
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {total} requests failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(total > 100, "only {total} requests were answered");

    // After the delay no new connection is accepted ...
    while signalled.elapsed() < delay + Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", server.port)).is_err(),
        "the server still accepts connections after the delay"
    );
    // ... but the HTTP/2 request in flight is answered.
    let out = slow.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, status) = text.rsplit_once('\n').unwrap();
    assert_eq!(status, "200 2", "{text}");
    assert_eq!(response(body)["allowed"], true, "{body}");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status:?}");
    assert!(
        signalled.elapsed() < delay + Duration::from_secs(8),
        "exited {:?} after SIGTERM",
        signalled.elapsed()
    );
}

/// A review over the size limit gets 413 with the reason over HTTP/2 and
/// HTTP/1.1 alike (not a reset stream), whether its length is declared or
/// not, and the connection serves the next request.
#[test]
fn oversized_reviews_get_413_on_every_protocol() {
    let dir = temp_dir("oversized");
    let server = Gavel::start(&examples().join("policies"), &dir);
    let big = dir.join("big.json");
    std::fs::write(&big, "x".repeat(4 * 1024 * 1024)).unwrap();
    let url = |path: &str| format!("https://localhost:{}{path}", server.port);
    for protocol in ["--http2", "--http1.1"] {
        // A file has a known length (Content-Length); stdin is streamed
        // without one, so only the reading finds it too long.
        for (source, declared) in [(format!("@{}", big.display()), true), ("@-".into(), false)] {
            let answer = dir.join("answer.txt");
            let mut curl = Command::new("curl");
            curl.args(["-s", protocol, "--cacert"])
                .arg(&server.ca)
                .args(["--data-binary", &source, "-o"])
                .arg(&answer)
                .args(["-w", "%{http_code} %{http_version} %{num_connects}\n"])
                .arg(url("/validate"))
                .args(["--next", "-s", protocol, "--cacert"])
                .arg(&server.ca)
                .args(["-o", "/dev/null"])
                .args(["-w", "%{http_code} %{http_version} %{num_connects}\n"])
                .arg(url("/health/liveness"))
                .stdin(if declared {
                    std::process::Stdio::null()
                } else {
                    std::fs::File::open(&big).unwrap().into()
                });
            let out = curl.output().unwrap();
            let lines = String::from_utf8_lossy(&out.stdout).into_owned();
            let what = format!("{protocol}, length declared: {declared}: {lines}");
            let mut lines = lines.lines();
            let first: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
            let second: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
            let version = if protocol == "--http2" { "2" } else { "1.1" };
            assert_eq!(first[..2], ["413", version], "{what}");
            let reason = std::fs::read_to_string(&answer).unwrap();
            assert!(
                reason.contains("AdmissionReview body over 3145728 bytes"),
                "{what}: {reason}"
            );
            assert_eq!(second[..2], ["200", version], "{what}");
            // Over HTTP/2 the next request reuses the connection. Over
            // HTTP/1.1 curl itself closes a connection whose upload was cut
            // short by the answer; the server keeps it (below).
            if protocol == "--http2" {
                assert_eq!(second[2], "0", "a new connection: {what}");
            }
        }
    }
    // A client that sends the whole oversized body gets the 413, then an
    // answer to its next request on the same connection.
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let mut conn = support::gavel::TlsConnection::open(server.port, &ca).unwrap();
    let (code, reason) = conn
        .send("POST", "/validate", &std::fs::read(&big).unwrap())
        .unwrap();
    assert_eq!(code, 413, "{reason}");
    assert!(
        !conn.closing,
        "the server closes the connection after a 413"
    );
    assert_eq!(conn.get("/health/liveness").unwrap().0, 200);
}
