use super::*;
use crate::engine::json_context::Builtins;
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

fn outcome<'p>(p: &'p CompiledPolicy, resource: &Value) -> MutateOutcome<'p> {
    let req = Request::offline(resource, "CREATE", UserInfo::default(), None);
    let ctx = req.json_context(Builtins::default());
    let env = EvalEnv {
        resolver: &crate::context::NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    mutate_policy(p, &req, &ctx, &env)
}

fn mutate(p: &CompiledPolicy, resource: &Value) -> (Vec<(String, RuleStatus)>, Value) {
    let out = outcome(p, resource);
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

#[test]
fn a_list_of_maps_over_a_scalar_fails_in_the_preprocessing_as_kyverno() {
    // other/add-ndots with `dnsConfig.options: false`: Kyverno's anchor
    // preprocessing reads the resource's options as a list before any merge,
    // also for an overlay without anchors.
    let p = policy(
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: add-ndots
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge:
        spec:
          dnsConfig:
            options:
            - name: ndots
              value: "1"
"#,
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": {"dnsConfig": {"options": false}}});
    let out = outcome(&p, &pod);
    let rule = &out.response.rules[0];
    assert_eq!(rule.status, RuleStatus::Error);
    assert_eq!(
        rule.message,
        "failed to patch resource: failed to preProcess rule: wrong node kind: \
         expected SequenceNode but got ScalarNode: node contents:\nfalse\n"
    );
    // Absent or null options are merged into.
    for options in [json!(null), json!([])] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                         "spec": {"dnsConfig": {"options": options}}});
        let (statuses, patched) = mutate(&p, &pod);
        assert_eq!(statuses, vec![("add-ndots".into(), RuleStatus::Pass)]);
        assert_eq!(patched["spec"]["dnsConfig"]["options"][0]["name"], "ndots");
    }
}

#[test]
fn a_foreach_entry_reads_the_object_the_entries_before_it_patched() {
    // Kyverno puts each entry's result into request.object for the next
    // (psp-migration/add-capabilities indexes containers an earlier entry
    // added).
    let p = policy(
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: two-entries
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      foreach:
      - list: request.object.spec.containers
        patchStrategicMerge:
          metadata:
            labels:
              "c-{{ element.name }}": "yes"
      - list: keys(request.object.metadata.labels)
        patchStrategicMerge:
          metadata:
            annotations:
              "{{ element }}": "{{ request.object.metadata.labels.\"c-a\" || 'unseen' }}"
"#,
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "x", "labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "a"}]}});
    let (statuses, patched) = mutate(&p, &pod);
    assert_eq!(statuses, vec![("two-entries".into(), RuleStatus::Pass)]);
    assert_eq!(
        patched["metadata"]["annotations"],
        json!({"app": "yes", "c-a": "yes"})
    );
}
