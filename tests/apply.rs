//! `gavel apply` with every policy kind: the counts, the exit code and the
//! mutated and generated resources it prints.

use std::path::{Path, PathBuf};
use std::process::Command;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gavel-apply-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const POLICIES: &str = "apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: no-latest}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: \"object.spec.containers.all(c, !c.image.endsWith(':latest'))\"
    message: latest tag
  auditAnnotations:
  - key: images
    valueExpression: \"object.spec.containers.map(c, c.image).join(',')\"
---
apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata: {name: team-label}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: \"[JSONPatch{op: 'add', path: '/metadata/labels', value: {'team': 'a'}}]\"
---
apiVersion: policies.kyverno.io/v1alpha1
kind: GeneratingPolicy
metadata: {name: pod-config}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  generate:
  - expression: >-
      generator.Apply(object.metadata.namespace, [{'apiVersion': 'v1', 'kind': 'ConfigMap',
        'metadata': {'name': object.metadata.name + '-config'}, 'data': {'team': object.metadata.labels.team}}])
";

fn pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  containers:\n  - {{name: c, image: '{image}'}}\n"
    )
}

fn apply(dir: &std::path::Path, resource: &str) -> (i32, String) {
    apply_with(dir, resource, &[])
}

fn apply_with(dir: &std::path::Path, resource: &str, extra: &[&str]) -> (i32, String) {
    std::fs::write(dir.join("policies.yaml"), POLICIES).unwrap();
    std::fs::write(dir.join("pod.yaml"), resource).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(["apply", "policies.yaml", "--resource", "pod.yaml"])
        .args(extra)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn cel_policy_kinds_are_applied() {
    let dir = temp_dir("cel");
    let (code, out) = apply(&dir, &pod("web", "nginx:1.27"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pass: 3, fail: 0"), "{out}");
    // Emitted as Kyverno's CLI emits them: "policy <name> applied to <resource>".
    assert!(
        out.contains("policy team-label applied to ns/Pod/web"),
        "{out}"
    );
    // The generating policy sees the mutated Pod (its label).
    assert!(
        out.contains("policy pod-config applied to ns/Pod/web"),
        "{out}"
    );
    assert!(
        out.contains("name: web-config") && out.contains("team: a"),
        "{out}"
    );

    let (code, out) = apply(&dir, &pod("web", "nginx:latest"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pass: 2, fail: 1"), "{out}");
    // Kyverno's listing: "<n> - <rule> <message>"; a ValidatingPolicy's
    // result has no rule name.
    assert!(
        out.contains("policy no-latest -> resource ns/Pod/web failed:"),
        "{out}"
    );
    assert!(out.contains("1 -  latest tag"), "{out}");

    // auditAnnotations are the report result's properties.
    let (_, out) = apply_with(&dir, &pod("web", "nginx:latest"), &["--policy-report"]);
    assert!(out.contains("images: nginx:latest"), "{out}");
}

/// `--parameter-resource` supplies the params of parameterised policies;
/// without it a param that must exist is an error, never a silent pass.
#[test]
fn parameter_resources_feed_parameterised_policies() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tests/policy-params");
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["apply", "policies.yaml", "--resource", "resources.yaml"])
            .args(extra)
            .current_dir(&example)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&["--parameter-resource", "params.yaml"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pass: 3, fail: 2, warn: 0, error: 3"), "{out}");
    assert!(out.contains("at most 5 replicas (prod-limit)"), "{out}");
    // A selector's params are one list, as in Kyverno's CLI.
    assert!(
        out.contains("resulted in error: no such key: maxReplicas"),
        "{out}"
    );
    // The staging default came from the param.
    assert!(out.contains("replicas: 2"), "{out}");

    // The report as Kyverno's CLI prints it (openreports.io ClusterReport):
    // every rule's result, the mutation's too, with the validate.cel
    // auditAnnotations as properties, and its own summary; no count line.
    let (_, out) = run(&["--parameter-resource", "params.yaml", "--policy-report"]);
    assert!(out.contains("registry: ghcr.io/team-a/"), "{out}");
    assert!(out.contains("rule: staging-replicas"), "{out}");
    assert!(!out.contains("\npass: "), "{out}");
    let start = out
        .find("apiVersion: openreports.io/v1alpha1")
        .expect("a report");
    let report: serde_json::Value = serde_saphyr::from_str(&out[start..]).unwrap();
    assert_eq!(report["kind"], "ClusterReport");
    assert_eq!(
        report["summary"],
        serde_json::json!({"pass": 3, "fail": 2, "warn": 0, "error": 3, "skip": 0})
    );

    let (code, out) = run(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pass: 2, fail: 0, warn: 0, error: 6"), "{out}");
    assert!(out.contains("no params found"), "{out}");
}

/// PolicyExceptions as `kyverno apply` takes them: from `--exception`
/// files, or with `--exceptions-within-resources` from among the
/// resources; those in the policy files only with
/// `--exceptions-within-policies`.
#[test]
fn exceptions_come_from_where_kyverno_apply_takes_them() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tests/manifest-signatures");
    let legacy = |args: &[&str]| -> (String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .arg("apply")
            .args(args)
            .arg("--policy-report")
            .current_dir(&example)
            .output()
            .unwrap();
        let report: serde_json::Value = gavel::policy::load::parse_yaml_documents(
            "report",
            &String::from_utf8_lossy(&out.stdout),
        )
        .unwrap()
        .remove(0);
        let result = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resources"][0]["name"] == "cm-legacy")
            .unwrap()
            .clone();
        (
            result["result"].as_str().unwrap().to_string(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (result, header) = legacy(&[
        "policies.yaml",
        "--resource",
        "resources.yaml",
        "-e",
        "exception.yaml",
    ]);
    assert_eq!(result, "skip");
    assert!(
        header.contains("to 16 resource(s) with 1 exception(s)..."),
        "{header}"
    );
    // In the policy path it is not read, unless asked.
    let (result, _) = legacy(&[
        "policies.yaml",
        "exception.yaml",
        "--resource",
        "resources.yaml",
    ]);
    assert_eq!(result, "fail");
    let (result, _) = legacy(&[
        "policies.yaml",
        "exception.yaml",
        "--resource",
        "resources.yaml",
        "--exceptions-within-policies",
    ]);
    assert_eq!(result, "skip");
    // Among the resources: taken out of them.
    let dir = std::env::temp_dir().join(format!("gavel-apply-exceptions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let both = format!(
        "{}\n---\n{}",
        std::fs::read_to_string(example.join("resources.yaml")).unwrap(),
        std::fs::read_to_string(example.join("exception.yaml")).unwrap()
    );
    let mixed = dir.join("mixed.yaml");
    std::fs::write(&mixed, both).unwrap();
    let (result, header) = legacy(&[
        "policies.yaml",
        "--resource",
        mixed.to_str().unwrap(),
        "--exceptions-within-resources",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(result, "skip");
    assert!(
        header.contains("to 16 resource(s) with 1 exception(s)..."),
        "{header}"
    );
}
