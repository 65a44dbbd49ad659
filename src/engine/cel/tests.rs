use super::*;
use crate::cel::Activation;
use crate::cel::direct::Val;
use crate::cel::values::cel_to_json;
use crate::context::NoResolver;
use crate::context::Resolver;
use crate::engine::json_context::Builtins;
use crate::engine::{Request, RuleStatus};
use crate::policy::cel_policy::ValidatingPolicyDoc;
use crate::policy::cel_policy::{CompiledValidatingPolicy, PodTemplate};
use serde_json::{Value, json};
use std::sync::Arc;

const POLICY: &str = "apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: no-latest}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
  - {name: not-system, expression: \"object.metadata.?namespace.orValue('') != 'kube-system'\"}
  variables:
  - {name: images, expression: 'object.spec.containers.map(c, c.image)'}
  validations:
  - expression: \"variables.images.all(i, !i.endsWith(':latest'))\"
    messageExpression: \"'latest tag: ' + variables.images.join(', ')\"
";

fn policy() -> CompiledValidatingPolicy {
    let doc: ValidatingPolicyDoc = serde_saphyr::from_str(POLICY).unwrap();
    CompiledValidatingPolicy::compile(&doc).unwrap()
}

fn verdict(p: &CompiledValidatingPolicy, resource: Value) -> Vec<(RuleStatus, String)> {
    let req = Request::offline(&resource, "CREATE", Default::default(), None);
    evaluate_validating_policy(p, &req, &CelRequest::of(&req), &NoResolver)
        .rules
        .into_iter()
        .map(|r| (r.status, r.message.to_string()))
        .collect()
}

/// An expression reading failed variables names the first it reads,
/// with the chain of variables that failed through others, as the API
/// server words it.
#[test]
fn failed_variables_are_named_in_reading_order_with_their_chain() {
    let yaml = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: chain}
spec:
  validationFailureAction: Enforce
  rules:
  - name: chain
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      cel:
        variables:
        - {name: spec, expression: object.spec}
        - {name: context, expression: variables.spec.securityContext}
        - {name: nonRoot, expression: variables.context.runAsNonRoot == true}
        - {name: containers, expression: object.spec.containers}
        - {name: containersNonRoot, expression: 'variables.containers.all(c, true)'}
        expressions:
        - expression: variables.nonRoot || variables.containersNonRoot
";
    let docs = crate::policy::load::load_policy_text("p.yaml", yaml).unwrap();
    let crate::policy::load::LoadedDocument::Policy(doc) = docs.into_iter().next().unwrap() else {
        panic!("not a policy")
    };
    let policy = crate::policy::CompiledPolicy::compile(&doc).unwrap();
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}});
    let req = Request::offline(&pod, "CREATE", Default::default(), None);
    let ctx = req.json_context(Builtins::of([&policy]));
    let env = crate::engine::EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let response = crate::engine::validate::evaluate_policy(&policy, &req, &ctx, &env);
    assert_eq!(
        response.rules[0].message,
        "expression 'variables.nonRoot || variables.containersNonRoot' resulted in error: \
             composited variable \"nonRoot\" fails to evaluate: composited variable \"context\" \
             fails to evaluate: composited variable \"spec\" fails to evaluate: no such key: spec"
    );
}

fn pod(ns: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": image}]}})
}

#[test]
fn validations_pass_fail_and_match_conditions_skip() {
    let p = policy();
    assert_eq!(
        verdict(&p, pod("a", "nginx:1.0")),
        vec![(RuleStatus::Pass, "success".to_string())]
    );
    assert_eq!(
        verdict(&p, pod("a", "nginx:latest")),
        vec![(RuleStatus::Fail, "latest tag: nginx:latest".to_string())]
    );
    assert_eq!(
        verdict(&p, pod("kube-system", "nginx:latest"))[0].0,
        RuleStatus::Skip
    );
    // Not a matched resource at all: no rule response.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert!(verdict(&p, cm).is_empty());
}

#[test]
fn request_wide_values_are_shared_only_where_object_is_the_requests() {
    let req = Request::offline(&pod("a", "nginx:1.0"), "CREATE", Default::default(), None);
    let input = CelRequest::of(&req);
    let images = crate::cel::Program::compile("object.spec.containers.map(c, c.image)").unwrap();
    let image = |v: Option<Val>| v.map(|v| cel_to_json(&v.to_cel()).unwrap());
    let root = input.activation();
    assert_eq!(
        image(root.shared_value(&images)),
        Some(json!(["nginx:1.0"]))
    );
    // A second policy's copy of the expression is the same plan: the
    // same answer, from the request's table.
    let again = crate::cel::Program::compile("object.spec.containers.map(c,\n c.image)").unwrap();
    assert_eq!(
        image(root.scope().shared_value(&again)),
        Some(json!(["nginx:1.0"]))
    );
    // A scope that rebinds object gets nothing shared.
    let mut rebound = root.scope();
    rebound
        .set(
            "object",
            crate::cel::values::json_to_cel(&pod("a", "other:2")),
        )
        .unwrap();
    assert!(rebound.shared_value(&images).is_none());
    // Nor does a Pod controller's template view.
    assert!(
        input
            .view(PodTemplate::Spec)
            .shared_value(&images)
            .is_none()
    );
    // An expression that reads more than the objects is not shared.
    let named = crate::cel::Program::compile("request.name + object.metadata.name").unwrap();
    assert!(root.shared_value(&named).is_none());
}

#[test]
fn pod_controllers_are_checked_through_their_template() {
    let p = policy();
    let deploy = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"},
                   "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": image}]}}}})
    };
    assert_eq!(verdict(&p, deploy("nginx:1.0"))[0].0, RuleStatus::Pass);
    assert_eq!(verdict(&p, deploy("nginx:latest"))[0].0, RuleStatus::Fail);
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "j", "namespace": "a"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:latest"}]}}}}}});
    assert_eq!(verdict(&p, cron)[0].0, RuleStatus::Fail);
}

/// `evaluation.mode: JSON`: evaluated on a payload (no constraints
/// needed), never on a Kubernetes request; a PolicyException naming
/// the policy whose conditions hold makes it a skip (a pass with
/// `reportResult: pass`).
/// `globalContext.Get(entry, projection)` reads the projection, which
/// resolvers hold under `<entry>.<projection>` (the cluster's store).
#[test]
fn global_context_projections_are_looked_up_by_their_key() {
    struct Entries;
    impl Resolver for Entries {
        fn global_context(
            &self,
            name: &str,
        ) -> Result<Option<Arc<Value>>, crate::context::ResolveError> {
            Ok(match name {
                "svc" => Some(Arc::new(json!({"items": [1, 2, 3]}))),
                "svc.count" => Some(Arc::new(json!(3))),
                _ => None,
            })
        }
    }
    let lookups = ResolverLookups(&Entries);
    let cases = [
        (
            "globalContext.Get('svc', '')",
            Ok(json!({"items": [1, 2, 3]})),
        ),
        ("globalContext.Get('svc', 'count')", Ok(json!(3))),
    ];
    for (source, want) in cases {
        let program = crate::cel::Program::compile(source).unwrap();
        let got = program
            .eval(&Activation::new(), &lookups)
            .map(|v| cel_to_json(&v).unwrap())
            .map_err(|e| e.to_string());
        assert_eq!(got, want, "{source}");
    }
    let missing = crate::cel::Program::compile("globalContext.Get('svc', 'nope')").unwrap();
    assert!(missing.eval(&Activation::new(), &lookups).is_err());
}

#[test]
fn json_mode_and_cel_exceptions() {
    let doc: ValidatingPolicyDoc = serde_saphyr::from_str(
        "apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata: {name: no-root-ca}
spec:
  evaluation: {mode: JSON}
  validations:
  - {expression: \"object.type != 'ROOT'\", message: root CAs are not allowed}
",
    )
    .unwrap();
    let mut p = CompiledValidatingPolicy::compile(&doc).unwrap();
    let run = |p: &CompiledValidatingPolicy, payload: Value| {
        let r = evaluate_validating_policy_on_json(p, &payload, &NoResolver);
        r.rules
            .iter()
            .map(|r| (r.status, r.message.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run(&p, json!({"type": "SUBORDINATE"})),
        [(RuleStatus::Pass, "success".to_string())]
    );
    assert_eq!(
        run(&p, json!({"type": "ROOT"})),
        [(RuleStatus::Fail, "root CAs are not allowed".to_string())]
    );
    assert!(
        verdict(
            &p,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
        )
        .is_empty()
    );
    let exception = |report: &str| {
        let doc: crate::policy::cel_policy::CelExceptionDoc = serde_saphyr::from_str(&format!(
            "apiVersion: policies.kyverno.io/v1beta1
kind: PolicyException
metadata: {{name: lab, namespace: ops}}
spec:
  policyRefs: [{{name: no-root-ca, kind: ValidatingPolicy}}]
  reportResult: {report}
  matchConditions:
  - {{name: lab, expression: \"object.account == 'lab'\"}}
"
        ))
        .unwrap();
        Arc::new(crate::policy::cel_policy::CompiledCelException::compile(&doc).unwrap())
    };
    p.scope.exceptions = crate::policy::cel_policy::attach_exceptions(
        &[exception("skip")],
        "ValidatingPolicy",
        "no-root-ca",
    );
    assert_eq!(
        run(&p, json!({"type": "ROOT", "account": "lab"})),
        [(
            RuleStatus::Skip,
            "rule is skipped due to policy exception: ops/lab".to_string()
        )]
    );
    assert_eq!(
        run(&p, json!({"type": "ROOT", "account": "prod"}))[0].0,
        RuleStatus::Fail
    );
    p.scope.exceptions = crate::policy::cel_policy::attach_exceptions(
        &[exception("pass")],
        "ValidatingPolicy",
        "no-root-ca",
    );
    assert_eq!(
        run(&p, json!({"type": "ROOT", "account": "lab"}))[0].0,
        RuleStatus::Pass
    );
    assert!(
        crate::policy::cel_policy::attach_exceptions(
            &[exception("pass")],
            "MutatingPolicy",
            "no-root-ca"
        )
        .is_empty()
    );
}
