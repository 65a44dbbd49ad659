//! `gavel test` stops as Kyverno's CLI stops: a test file that does not
//! load stops the run before any test runs, a test whose run fails stops
//! it there, and neither prints a summary; with `clusterResources`, a
//! resource's Namespace must be one of the test's objects.

use std::path::Path;
use std::process::Command;

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// (exit code, stdout) of `gavel test dir`.
fn gavel_test(dir: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .arg("test")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const POLICY: &str = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: team
    match: {any: [{resources: {kinds: [ConfigMap]}}]}
    validate:
      message: a team label
      pattern: {metadata: {labels: {team: '?*'}}}
";

const RESOURCE: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: apps, labels: {team: a}}
";

fn test_doc(extra: &str) -> String {
    format!(
        "apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {{name: t}}
policies: [policy.yaml]
resources: [resource.yaml]
{extra}results:
- {{policy: require-team, rule: team, kind: ConfigMap, resources: [cm], result: pass}}
"
    )
}

fn suite(root: &Path, name: &str, test: &str) {
    let dir = root.join(name);
    write(&dir, "policy.yaml", POLICY);
    write(&dir, "resource.yaml", RESOURCE);
    write(&dir, "kyverno-test.yaml", test);
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("gavel-test-command-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

#[test]
fn a_test_file_that_does_not_load_stops_the_run_before_any_test() {
    let root = scratch("invalid");
    suite(&root, "a-good", &test_doc(""));
    suite(&root, "b-bad", &test_doc("unknownField: 1\n"));
    let (code, out) = gavel_test(&root, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Test errors:"), "{out}");
    assert!(out.contains("unknownField"), "{out}");
    assert!(
        out.contains("Error: found 1 errors after loading tests"),
        "{out}"
    );
    assert!(!out.contains("Loading test"), "no test ran: {out}");
    assert!(!out.contains("Test Summary"), "{out}");
    // Alone, the good one passes.
    let (code, out) = gavel_test(&root.join("a-good"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Test Summary: 1 tests passed and 0 tests failed"),
        "{out}"
    );
    // JSON output says why.
    let (code, out) = gavel_test(&root, &["--output", "json"]);
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(doc["error"], "found 1 errors after loading tests");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn a_test_whose_run_fails_stops_the_run_there() {
    let root = scratch("run");
    suite(
        &root,
        "a-missing",
        &test_doc("").replace("resource.yaml]", "absent.yaml]"),
    );
    suite(&root, "b-good", &test_doc(""));
    let (code, out) = gavel_test(&root, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Error: failed to run test ("), "{out}");
    assert!(out.contains("absent.yaml"), "{out}");
    assert!(!out.contains("b-good"), "the run stopped: {out}");
    assert!(!out.contains("Test Summary"), "{out}");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn cluster_resources_must_hold_the_resources_namespaces() {
    let root = scratch("namespaces");
    let cluster = |objects: &str| {
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1
kind: ClusterResource
metadata: {{name: cluster}}
spec:
  resources: [{objects}]
"
        )
    };
    suite(&root, "t", &test_doc("clusterResources: [cluster.yaml]\n"));
    write(&root.join("t"), "cluster.yaml", &cluster(""));
    let (code, out) = gavel_test(&root, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "Error: failed to run test (failed to apply policies on resource cm (failed to get \
             the resource's namespace (namespaces \"apps\" not found)))"
        ),
        "{out}"
    );
    // With the Namespace among the cluster's objects, the test runs.
    write(
        &root.join("t"),
        "cluster.yaml",
        &cluster("{apiVersion: v1, kind: Namespace, metadata: {name: apps}}"),
    );
    let (code, out) = gavel_test(&root, &[]);
    assert_eq!(code, 0, "{out}");
    // Without clusterResources no Namespace is looked up.
    suite(&root, "t", &test_doc(""));
    let (code, out) = gavel_test(&root, &[]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&root).ok();
}
