use super::*;
use crate::engine::{EvalEnv, Request};
use crate::matching::UserInfo;
use crate::policy::load::{LoadedDocument, load_policy_text};
use serde_json::json;

fn policy(yaml: &str) -> CompiledPolicy {
    let docs = load_policy_text("test.yaml", yaml).unwrap();
    match docs.into_iter().next().unwrap() {
        LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
        _ => panic!("not a policy"),
    }
}

fn mutate(p: &CompiledPolicy, resource: &Value) -> (Vec<(String, RuleStatus)>, Value) {
    let req = Request::offline(resource, "CREATE", UserInfo::default(), None);
    let ctx = req.json_context(false);
    let env = EvalEnv {
        resolver: &crate::context::NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let out = mutate_policy(p, &req, &ctx, &env);
    let statuses = out
        .response
        .rules
        .iter()
        .map(|r| (r.name.to_string(), r.status))
        .collect();
    (statuses, out.patched.unwrap_or_else(|| resource.clone()))
}

const RULES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: label
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            +(team): "{{ request.object.metadata.name }}"
  - name: sees-label
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchesJson6902: |-
        - op: add
          path: /metadata/annotations
          value: {owner: "{{ request.object.metadata.labels.team }}"}
  - name: pull-always
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      foreach:
      - list: request.object.spec.containers
        order: Descending
        preconditions:
          all:
          - {key: "{{ element.image }}", operator: Equals, value: "*:latest"}
        patchesJson6902: |-
          - op: add
            path: /spec/containers/{{elementIndex}}/imagePullPolicy
            value: Always
"#;

#[test]
fn rules_chain_and_report_pass_or_skip() {
    let p = policy(RULES);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "a", "image": "x:latest"}, {"name": "b", "image": "y:1"}]}});
    let (statuses, patched) = mutate(&p, &pod);
    assert_eq!(
        statuses,
        vec![
            ("label".into(), RuleStatus::Pass),
            ("sees-label".into(), RuleStatus::Pass),
            ("pull-always".into(), RuleStatus::Pass),
        ]
    );
    assert_eq!(patched["metadata"]["labels"]["team"], "web");
    assert_eq!(patched["metadata"]["annotations"]["owner"], "web");
    assert_eq!(
        patched["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );
    assert!(
        patched["spec"]["containers"][1]
            .get("imagePullPolicy")
            .is_none()
    );

    // Already labelled, no latest image: only the annotation rule changes it.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "labels": {"team": "t"}, "annotations": {"owner": "t"}},
        "spec": {"containers": [{"name": "b", "image": "y:1"}]}});
    let (statuses, patched) = mutate(&p, &pod);
    assert_eq!(
        statuses.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![RuleStatus::Skip, RuleStatus::Skip, RuleStatus::Skip]
    );
    assert_eq!(patched, pod);
}

#[test]
fn patch_errors_are_rule_errors() {
    let p = policy(
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: bad
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchesJson6902: |-
        - op: replace
          path: /spec/missing/field
          value: 1
"#,
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}});
    let (statuses, patched) = mutate(&p, &pod);
    assert_eq!(statuses, vec![("bad".into(), RuleStatus::Error)]);
    assert_eq!(patched, pod);
}
