//! `gavel apply` with every policy kind: the counts, the exit code and the
//! mutated and generated resources it prints.

use std::path::PathBuf;
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
    assert!(out.contains("mutate policy team-label applied"), "{out}");
    // The generating policy sees the mutated Pod (its label).
    assert!(out.contains("generate policy pod-config applied"), "{out}");
    assert!(
        out.contains("name: web-config") && out.contains("team: a"),
        "{out}"
    );

    let (code, out) = apply(&dir, &pod("web", "nginx:latest"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pass: 2, fail: 1"), "{out}");
    assert!(out.contains("no-latest: latest tag"), "{out}");

    // auditAnnotations are the report result's properties.
    let (_, out) = apply_with(&dir, &pod("web", "nginx:latest"), &["--policy-report"]);
    assert!(out.contains("images: nginx:latest"), "{out}");
}
