use super::*;
use serde_json::json;

fn validating_policy(resources: Value, variables: Value, validations: Value) -> Value {
    json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "ValidatingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {"resourceRules": resources},
            "variables": variables,
            "validations": validations,
        },
    })
}

fn cluster_policy(kinds: Value, variables: Value, expressions: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "p"},
        "spec": {"rules": [
            {"name": "pattern", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"pattern": {"spec": {"hostPID": "false"}}}},
            {"name": "cel", "match": {"any": [{"resources": {"kinds": kinds}}]},
             "validate": {"cel": {"variables": variables, "expressions": expressions}}},
        ]},
    })
}

#[test]
fn validating_policy_fields_variables_and_messages() {
    let policy = validating_policy(
        json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments", "deployments/scale"]}]),
        json!([
            {"name": "replicas", "expression": "object.spec.replicas"},
            {"name": "labels", "expression": "object.metadata.labelz"},
        ]),
        json!([
            {"expression": "variables.replicas < 5 && variables.replica < 5",
             "messageExpression": "'too many: ' + variables.replicas"},
            {"expression": "object.spec.template.spec.containers.all(c, c.image != '')"},
        ]),
    );
    assert_eq!(
        type_warnings(&policy),
        vec![
            "spec.variables[1].expression: apps/v1, Kind=Deployment: undefined field 'labelz' (object.metadata.labelz)",
            "spec.validations[0].expression: apps/v1, Kind=Deployment: undefined field 'replica' (variables.replica: no variable of that name is declared before this expression)",
            "spec.validations[0].messageExpression: apps/v1, Kind=Deployment: found no matching overload for '_+_' applied to '(string, number)'",
        ]
    );
}

#[test]
fn a_policy_that_checks_has_no_warnings() {
    let policy = cluster_policy(
        json!(["Pod"]),
        json!([{"name": "containers", "expression": "object.spec.containers + object.spec.?initContainers.orValue([])"}]),
        json!([{"expression": "variables.containers.all(c, !has(c.securityContext) || c.securityContext.privileged != true)",
                "messageExpression": "'privileged: ' + variables.containers.map(c, c.name).join(', ')"}]),
    );
    assert_eq!(type_warnings(&policy), Vec::<String>::new());
}

#[test]
fn each_kind_matched_is_checked() {
    // `spec.containers` is a Pod's and `spec.template` a Deployment's: a
    // policy for both reads each by the object's kind. A field neither
    // declares is a mistake for both.
    let policy = cluster_policy(
        json!(["Pod", "Deployment", "v1/Pod", "Pod/exec", "*"]),
        json!([]),
        json!([
            {"expression": "has(object.spec.containers) ? object.spec.containers.size() > 0 : object.spec.template.spec.containers.size() > 0"},
            {"expression": "object.spec.containerz.size() > 0"},
        ]),
    );
    assert_eq!(
        type_warnings(&policy),
        vec![
            "spec.rules[1].validate.cel.expressions[1].expression: all 2 kinds matched: undefined field 'containerz' (object.spec.containerz)"
        ]
    );
    // `HorizontalPodAutoscaler` names its preferred version,
    // autoscaling/v2, where `metrics` is declared.
    let hpa = cluster_policy(
        json!(["HorizontalPodAutoscaler"]),
        json!([]),
        json!([{"expression": "object.spec.metrics.size() > 0"}]),
    );
    assert_eq!(type_warnings(&hpa), Vec::<String>::new());
    let hpa_v1 = cluster_policy(
        json!(["autoscaling/v1/HorizontalPodAutoscaler"]),
        json!([]),
        json!([{"expression": "object.spec.metrics.size() > 0"}]),
    );
    assert_eq!(
        type_warnings(&hpa_v1).len(),
        1,
        "{:?}",
        type_warnings(&hpa_v1)
    );
}

#[test]
fn without_a_known_kind_only_what_needs_no_schema_is_checked() {
    // A wildcard version: no kind is checked, `object` is of unknown type.
    let policy = validating_policy(
        json!([{"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"]}]),
        json!([{"name": "n", "expression": "object.spec.anything"}]),
        json!([{"expression": "object.spec.whatever == variables.m"},
               {"expression": "object.metadata.name == 1 || 'a' == 1"}]),
    );
    assert_eq!(
        type_warnings(&policy),
        vec![
            "spec.validations[0].expression: undefined field 'm' (variables.m: no variable of that name is declared before this expression)",
            "spec.validations[1].expression: found no matching overload for '_==_' applied to '(string, int)'",
        ]
    );
}

#[test]
fn version_preference() {
    let mut versions = ["v1alpha1", "v1beta1", "v1", "v2beta2", "v2", "v1beta2"];
    versions.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
    assert_eq!(
        versions,
        ["v2", "v1", "v2beta2", "v1beta2", "v1beta1", "v1alpha1"]
    );
}
