use super::*;
use crate::admission::policies::{Snapshot, load_text};
use crate::admission::review;
use crate::policy::compile::FailurePolicy;

const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: copy-configmaps
spec:
  rules:
  - name: copy
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          selector:
            matchLabels:
              copy: "yes"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: "{{request.object.metadata.name}}-copy"
      namespace: "{{request.object.metadata.namespace}}"
      synchronize: true
      data:
        data:
          a: b
"#;

fn snapshot() -> Snapshot {
    Snapshot::new(load_text("p.yaml", POLICY).unwrap(), 1)
}

fn config_map(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels}})
}

fn review(operation: &str, object: Value, old: Value, dry_run: bool) -> Review {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "r1", "operation": operation, "dryRun": dry_run,
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": "ns",
            "userInfo": {"username": "alice", "groups": ["devs"]},
            "object": object, "oldObject": old,
        }
    });
    review::decode(body.to_string().as_bytes()).unwrap()
}

fn requests(r: &Review) -> Vec<UpdateRequestSpec> {
    let s = snapshot();
    for_review(&s.policies, s.background_indexes(None), r)
}

#[test]
fn a_created_trigger_leaves_one_request_with_its_admission_request() {
    let r = review(
        "CREATE",
        config_map("one", json!({"copy": "yes"})),
        Value::Null,
        false,
    );
    let out = requests(&r);
    assert_eq!(out.len(), 1);
    let spec = &out[0].spec;
    assert_eq!(spec["policy"], "copy-configmaps");
    assert_eq!(spec["requestType"], "generate");
    assert_eq!(spec["resource"]["name"], "one");
    assert_eq!(spec["resource"]["uid"], "uid-one");
    assert_eq!(
        spec["ruleContext"],
        json!([{"rule": "copy", "deleteDownstream": false, "synchronize": true,
                    "trigger": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "one", "uid": "uid-one"}}])
    );
    let admission = &spec["context"]["admissionRequestInfo"]["admissionRequest"];
    assert_eq!(admission["operation"], "CREATE");
    assert_eq!(admission["userInfo"]["username"], "alice");
    assert_eq!(admission["object"]["metadata"]["name"], "one");
    // What the background controller decodes again.
    let again = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": admission});
    let decoded = review::decode(again.to_string().as_bytes()).unwrap();
    assert_eq!(decoded.request.user.username, "alice");
    assert_eq!(decoded.request.gvk.kind, "ConfigMap");
    assert!(!out[0].not_for_own_writes);
}

#[test]
fn dry_runs_and_unmatched_objects_leave_nothing() {
    let r = review(
        "CREATE",
        config_map("one", json!({"copy": "yes"})),
        Value::Null,
        true,
    );
    assert!(requests(&r).is_empty());
    let r = review("CREATE", config_map("one", json!({})), Value::Null, false);
    assert!(requests(&r).is_empty());
}

#[test]
fn a_deleted_or_unmatched_trigger_of_a_synchronized_rule_deletes_downstream() {
    let r = review(
        "DELETE",
        Value::Null,
        config_map("one", json!({"copy": "yes"})),
        false,
    );
    let out = requests(&r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].spec["ruleContext"][0]["deleteDownstream"], true);
    assert_eq!(out[0].spec["ruleContext"][0]["trigger"]["name"], "one");

    let r = review(
        "UPDATE",
        config_map("one", json!({})),
        config_map("one", json!({"copy": "yes"})),
        false,
    );
    let out = requests(&r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].spec["ruleContext"][0]["deleteDownstream"], true);
}

#[test]
fn a_changed_downstream_is_generated_again_from_its_trigger() {
    let labels = json!({
        "app.kubernetes.io/managed-by": "kyverno",
        "generate.kyverno.io/policy-name": "copy-configmaps",
        "generate.kyverno.io/policy-namespace": "",
        "generate.kyverno.io/rule-name": "copy",
        "generate.kyverno.io/trigger-name": "one",
        "generate.kyverno.io/trigger-namespace": "ns",
        "generate.kyverno.io/trigger-uid": "uid-one",
        "generate.kyverno.io/trigger-kind": "ConfigMap",
        "generate.kyverno.io/trigger-group": "",
        "generate.kyverno.io/trigger-version": "v1",
    });
    let r = review("DELETE", Value::Null, config_map("one-copy", labels), false);
    let out = requests(&r);
    assert_eq!(out.len(), 1);
    assert!(out[0].not_for_own_writes);
    assert_eq!(out[0].username, "alice");
    let context = &out[0].spec["ruleContext"][0];
    assert_eq!(context["deleteDownstream"], false);
    assert_eq!(
        context["trigger"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "one", "uid": "uid-one"})
    );
}

const GENERATING: &str = r#"
apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata:
  name: copy-cm
spec:
  evaluation:
    synchronize: {enabled: true}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
    objectSelector:
      matchLabels: {copy: "yes"}
  generate:
  - expression: generator.Apply(object.metadata.namespace, [])
"#;

/// A GeneratingPolicy leaves Kyverno's `cel-generate` request: generate
/// on the operations it lists; under synchronize, delete downstream of
/// a trigger deleted or changed so that the constraints no longer
/// select it; nothing for what it never selected or a dry run.
#[test]
fn generating_policies_leave_cel_generate_requests() {
    let s = Snapshot::new(load_text("g.yaml", GENERATING).unwrap(), 1);
    let run = |r: &Review| for_generating(s.generating_on(None), r);
    let yes = config_map("one", json!({"copy": "yes"}));
    let no = config_map("one", json!({"copy": "no"}));
    let contexts = |out: Vec<UpdateRequestSpec>| -> Vec<(bool, bool)> {
        out.iter()
            .map(|u| {
                assert_eq!(u.spec["requestType"], "cel-generate");
                assert_eq!(u.spec["policy"], "copy-cm");
                assert!(
                    u.not_for_own_writes,
                    "skipBackgroundRequests defaults to true"
                );
                let c = &u.spec["ruleContext"][0];
                assert_eq!(c["rule"], "copy-cm");
                assert_eq!(c["trigger"]["uid"], "uid-one");
                (c["deleteDownstream"] == true, c["synchronize"] == true)
            })
            .collect()
    };
    assert_eq!(
        contexts(run(&review("CREATE", yes.clone(), Value::Null, false))),
        [(false, false)]
    );
    assert!(run(&review("CREATE", yes.clone(), Value::Null, true)).is_empty());
    assert!(run(&review("CREATE", no.clone(), Value::Null, false)).is_empty());
    assert_eq!(
        contexts(run(&review("UPDATE", yes.clone(), no.clone(), false))),
        [(false, true)]
    );
    assert_eq!(
        contexts(run(&review("UPDATE", no.clone(), yes.clone(), false))),
        [(true, false)]
    );
    assert!(run(&review("UPDATE", no.clone(), no.clone(), false)).is_empty());
    assert_eq!(
        contexts(run(&review("DELETE", Value::Null, yes.clone(), false))),
        [(true, false)]
    );
    // On the Fail route, none: a GeneratingPolicy's webhook is Ignore.
    assert!(s.generating_on(Some(FailurePolicy::Fail)).is_empty());
}
