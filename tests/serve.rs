//! `gavel serve` end to end: the real binary over real TLS, driven by the
//! real `curl` client with the generated CA.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    port: u16,
    ca: PathBuf,
    dir: PathBuf,
}

impl Server {
    fn start(policies: &Path, dir: &Path) -> Server {
        Server::start_with(policies, dir, &[])
    }

    fn start_with(policies: &Path, dir: &Path, extra: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ca = dir.join("ca.pem");
        let child = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--policies")
            .arg(policies)
            .arg("--ca-out")
            .arg(&ca)
            .args(["--poll-seconds", "1", "--grace-seconds", "5"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting gavel serve");
        let server = Server {
            child,
            port,
            ca,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if server.curl(&["/health/readiness"]).0 == 200 {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("gavel serve did not become ready");
    }

    /// (HTTP status, body) of a curl call; the first arg is the path.
    fn curl(&self, args: &[&str]) -> (u16, String) {
        let url = format!("https://localhost:{}{}", self.port, args[0]);
        let out = Command::new("curl")
            .args(["-s", "--cacert"])
            .arg(&self.ca)
            .args(["-w", "\n%{http_code}", &url])
            .args(&args[1..])
            .output()
            .expect("curl must be installed");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    fn post(&self, path: &str, file: &Path) -> (u16, String) {
        let data = format!("@{}", file.display());
        self.curl(&[path, "--http1.1", "--data-binary", &data])
    }

    fn post_text(&self, path: &str, body: &str) -> (u16, String) {
        let file = self.dir.join("body.json");
        std::fs::write(&file, body).unwrap();
        self.post(path, &file)
    }

    /// The value of the series of `name` whose labels include all of `labels`
    /// (each as `key="value"`).
    fn series(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.curl(&["/metrics"]);
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or(-1.0)
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.curl(&["/metrics"]);
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(-1.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gavel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn response(body: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["response"].clone()
}

#[test]
fn verdicts_bad_input_and_shutdown() {
    let dir = temp_dir("serve");
    let mut server = Server::start(&examples().join("policies"), &dir);
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

    // Mutate exists but has no engine yet: allowed, no patch.
    let (_, body) = server.post("/mutate", &reviews.join("pod-violating.json"));
    assert_eq!(response(&body)["allowed"], true);
    assert!(response(&body).get("patch").is_none());

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
    let big = "x".repeat(3 * 1024 * 1024 + 1);
    let (code, text) = server.post_text("/validate", &big);
    assert_eq!(code, 413, "{text}");
    assert_eq!(server.curl(&["/validate"]).0, 405);
    assert_eq!(server.curl(&["/nope"]).0, 404);
    assert_eq!(server.metric("gavel_requests_malformed_total"), 6.0);

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
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
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
    let server = Server::start(&policies, &dir);
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
    let server = Server::start_with(
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
