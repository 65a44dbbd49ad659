use super::*;
use crate::admission::policies::PolicySet;
use crate::admission::policies::Snapshot;
use crate::policy::cel_policy::{CompiledValidatingPolicy, ValidatingPolicyDoc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::time::Duration;
use tokio::sync::watch;

fn options() -> WebhookOptions {
    WebhookOptions {
        validating_name: "v".into(),
        mutating_name: "m".into(),
        policy_validating_name: "p".into(),
        target: WebhookTarget::Url("https://127.0.0.1:9443".into()),
        ca_bundle: watch::channel(String::new()).1,
        timeout_seconds: 10,
        owner_cluster_role: None,
        selection: WebhookSelection::default(),
        resync: Duration::from_secs(60),
    }
}

/// A ValidatingPolicy registers the resources its rules name, and the
/// Pod controllers autogen evaluates it for, under its failurePolicy.
#[test]
fn cel_policies_are_registered() {
    let doc: ValidatingPolicyDoc = serde_saphyr::from_str(
        "apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: v}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
  - expression: 'true'
",
    )
    .unwrap();
    let set = PolicySet {
        validating: vec![CompiledValidatingPolicy::compile(&doc).unwrap()],
        ..PolicySet::default()
    };
    let snapshot = Snapshot::new(set, 1);
    let opts = options();
    let hooks = desired(&snapshot, &KindMap::new(), &opts);
    let validating = &hooks[&Side::Validating];
    assert_eq!(validating.len(), 1);
    assert_eq!(validating[0].path, "/validate/ignore");
    let rules: Vec<(String, Vec<String>, Vec<String>)> = validating[0]
        .rules
        .iter()
        .map(|r| {
            (
                r.api_groups.clone().unwrap().join(","),
                r.resources.clone().unwrap(),
                r.operations.clone().unwrap(),
            )
        })
        .collect();
    let ops = vec!["CREATE".to_string(), "UPDATE".to_string()];
    let resources = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        [
            (
                String::new(),
                resources(&["pods", "replicationcontrollers"]),
                ops.clone()
            ),
            (
                "apps".into(),
                resources(&["daemonsets", "deployments", "replicasets", "statefulsets"]),
                ops.clone()
            ),
            ("batch".into(), resources(&["cronjobs", "jobs"]), ops),
        ]
    );
    assert!(!hooks.contains_key(&Side::Mutating));
}

/// A GeneratingPolicy is registered on the Ignore webhook for every
/// operation whatever its rules list (its trigger's deletion takes
/// its downstream along); the policy configuration checks every
/// policy kind on write and TTL labels.
#[test]
fn generating_policies_and_the_policy_checks_are_registered() {
    let set = crate::admission::policies::load_text(
        "g.yaml",
        "apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata: {name: g}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}
  generate:
  - expression: generator.Apply(object.metadata.name, [])
",
    )
    .unwrap();
    let opts = options();
    let hooks = desired(&Snapshot::new(set, 1), &KindMap::new(), &opts);
    let validating = &hooks[&Side::Validating];
    assert_eq!(validating.len(), 1);
    assert_eq!(validating[0].path, "/validate/ignore");
    let rule = &validating[0].rules[0];
    assert_eq!(rule.resources, Some(vec!["namespaces".to_string()]));
    assert_eq!(
        rule.operations,
        Some(
            ["CREATE", "UPDATE", "DELETE", "CONNECT"]
                .map(String::from)
                .to_vec()
        )
    );

    let checks = policy_hooks(&opts);
    let paths: Vec<&str> = checks.iter().map(|h| h.path).collect();
    assert_eq!(paths, ["/policyvalidate", "/verifyttl"]);
    assert_eq!(checks[0].failure_policy, "Fail");
    assert!(checks[0].rules.iter().any(|r| {
        r.resources
            .as_ref()
            .is_some_and(|rs| rs.iter().any(|x| x == "generatingpolicies"))
    }));
    let ttl = checks[1].object_selector.as_ref().unwrap();
    assert_eq!(
        ttl.match_expressions.as_ref().unwrap()[0].key,
        "cleanup.kyverno.io/ttl"
    );
}

/// The chart's config.webhooks: the namespace selector keeps the user's
/// expressions and adds gavel's namespace to their NotIn (or adds one);
/// the object selector goes on the webhooks of policies, the TTL check
/// keeps its own; forced Ignore turns every Fail webhook to Ignore.
#[test]
fn selection_reaches_every_webhook() {
    let user: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
        }))
        .unwrap();
    let merged = WebhookSelection::excluding(user, &["gavel".into(), "kube-system".into()]);
    assert_eq!(
        serde_json::to_value(&merged).unwrap(),
        serde_json::json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gavel"]}]
        })
    );
    let added = WebhookSelection::excluding(LabelSelector::default(), &["gavel".into()]);
    assert_eq!(
        serde_json::to_value(&added).unwrap(),
        serde_json::json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gavel"]}]})
    );

    let set = crate::admission::policies::load_text(
        "p.yaml",
        "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  validationFailureAction: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
",
    )
    .unwrap();
    let snapshot = Snapshot::new(set, 1);
    let mut opts = options();
    opts.selection.namespace_selector = merged.clone();
    opts.selection.object_selector = serde_json::from_value(
        serde_json::json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}),
    )
    .unwrap();
    let kinds = KindMap::from([(
        "Pod".to_string(),
        vec![(String::new(), "v1".to_string(), "pods".to_string())],
    )]);
    let hooks = desired(&snapshot, &kinds, &opts);
    let hook = &hooks[&Side::Validating][0];
    assert_eq!(hook.failure_policy, "Fail");
    let api = validating(
        desired(&snapshot, &kinds, &opts)
            .remove(&Side::Validating)
            .unwrap()
            .remove(0),
        &opts,
        "ca",
    );
    assert_eq!(api.namespace_selector.as_ref(), Some(&merged));
    assert_eq!(
        api.object_selector.as_ref(),
        Some(&opts.selection.object_selector)
    );
    let ttl = validating(policy_hooks(&opts).remove(1), &opts, "ca");
    assert_eq!(
        ttl.object_selector.unwrap().match_expressions.unwrap()[0].key,
        crate::policy::cleanup::TTL_LABEL
    );
    assert_eq!(ttl.namespace_selector.as_ref(), Some(&merged));

    opts.selection.force_failure_policy_ignore = true;
    let hooks = desired(&snapshot, &kinds, &opts);
    let hook = &hooks[&Side::Validating][0];
    assert_eq!(
        (hook.failure_policy, hook.path),
        ("Ignore", "/validate/fail")
    );
}

/// Discovery is repeated for a kind it did not find (a CRD installed
/// after the last one), not for every policy change.
#[test]
fn discovery_is_repeated_only_for_unknown_kinds() {
    use crate::policy::load::{LoadedDocument, load_policy_text};
    let yaml = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod, Widget]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
";
    let Some(LoadedDocument::Policy(doc)) =
        load_policy_text("p.yaml", yaml).unwrap().into_iter().next()
    else {
        panic!("not a policy");
    };
    let set = PolicySet {
        policies: vec![crate::policy::compile::CompiledPolicy::compile(&doc).unwrap()],
        ..PolicySet::default()
    };
    let snapshot = Snapshot::new(set, 1);
    let mut kinds = KindMap::new();
    kinds.insert(
        "Pod".into(),
        vec![(String::new(), "v1".into(), "pods".into())],
    );
    assert!(names_unknown_kind(&snapshot, &kinds));
    kinds.insert(
        "Widget".into(),
        vec![("example.com".into(), "v1".into(), "widgets".into())],
    );
    assert!(!names_unknown_kind(&snapshot, &kinds));
}
