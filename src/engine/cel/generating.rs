//! GeneratingPolicy: the `generate` expressions call `generator.Apply`,
//! and what they ask for becomes the rule's downstream resources.

use super::{CelRequest, ResolverLookups, bind_variables, conditions_hold, exempted, scope_view};
use crate::context::Resolver;
use crate::engine::{PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::policy::cel_policy::CompiledGeneratingPolicy;
use serde_json::Value;

/// One response named after the policy, with the downstream resources;
/// none when the policy does not apply or its matchConditions are false
/// (as Kyverno reports a GeneratingPolicy that did not match).
pub fn evaluate_generating_policy<'p>(
    policy: &'p CompiledGeneratingPolicy,
    req: &Request,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let mut response = PolicyResponse {
        policy: &scope.name,
        rules: Vec::new(),
    };
    if scope_view(scope, req, input).is_none() {
        return response;
    }
    let lookups = ResolverLookups(resolver);
    let respond = |status: RuleStatus, message: String| {
        RuleResponse::new(&scope.name, status, message).of_type(RuleType::Generation)
    };
    if let Some((status, message)) = exempted(scope, input.activation(), &lookups) {
        response.rules.push(respond(status, message));
        return response;
    }
    let vars = bind_variables(input.activation(), &policy.variables, &lookups);
    match conditions_hold(&scope.match_conditions, &vars, &lookups) {
        Ok(Some(_)) => return response,
        Err(e) => {
            response.rules.push(respond(
                RuleStatus::Error,
                format!("failed to evaluate match conditions: {e}"),
            ));
            return response;
        }
        Ok(None) => {}
    }
    let mut downstream = Vec::new();
    for (i, program) in policy.generate.iter().enumerate() {
        match program.eval_generating(&vars, &lookups) {
            Ok((_, generated)) => {
                for (namespace, object) in generated {
                    match target_namespace(scope.namespace.as_deref(), namespace) {
                        Ok(ns) => downstream.push(place(ns, object)),
                        Err(e) => {
                            response.rules.push(respond(
                                RuleStatus::Error,
                                format!("failed to evaluate generate[{i}]: {e}"),
                            ));
                            return response;
                        }
                    }
                }
            }
            Err(e) => {
                response.rules.push(respond(
                    RuleStatus::Error,
                    format!("failed to evaluate generate[{i}]: {e}"),
                ));
                return response;
            }
        }
    }
    let rule = respond(RuleStatus::Pass, "policy evaluated successfully".into());
    response.rules.push(rule.with_resources(downstream));
    response
}

/// Where `generator.Apply` puts its objects: the namespace it names, in a
/// GeneratingPolicy; the policy's own, in a NamespacedGeneratingPolicy,
/// which has only the one-argument form (Kyverno's generator library
/// declares each form for its own policy kind).
fn target_namespace(
    policy_namespace: Option<&str>,
    named: Option<String>,
) -> Result<String, String> {
    match (policy_namespace, named) {
        (None, Some(ns)) => Ok(ns),
        (Some(own), None) => Ok(own.to_string()),
        (None, None) => {
            Err("generator.Apply(objects) is the NamespacedGeneratingPolicy form; a GeneratingPolicy names the namespace: generator.Apply(namespace, objects)".into())
        }
        (Some(_), Some(_)) => Err(
            "a NamespacedGeneratingPolicy generates into its own namespace: generator.Apply(objects)".into(),
        ),
    }
}

/// A downstream object in the namespace `generator.Apply` named.
fn place(namespace: String, mut object: Value) -> Value {
    if !namespace.is_empty()
        && let Some(meta) = object.as_object_mut().map(|o| {
            o.entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()))
        })
        && let Some(meta) = meta.as_object_mut()
    {
        meta.insert("namespace".into(), Value::String(namespace));
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::NoResolver;
    use crate::policy::cel_policy::GeneratingPolicyDoc;
    use serde_json::json;

    const POLICY: &str = "apiVersion: policies.kyverno.io/v1alpha1
kind: GeneratingPolicy
metadata: {name: default-deny}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [namespaces]}
  matchConditions:
  - {name: not-system, expression: \"!object.metadata.name.startsWith('kube-')\"}
  variables:
  - {name: ns, expression: object.metadata.name}
  generate:
  - expression: >-
      generator.Apply(variables.ns, [{'apiVersion': 'networking.k8s.io/v1',
        'kind': 'NetworkPolicy', 'metadata': {'name': 'deny'}, 'spec': {'podSelector': {}}}])
";

    fn run(name: &str) -> Vec<(RuleStatus, Vec<Value>)> {
        let doc: GeneratingPolicyDoc = serde_saphyr::from_str(POLICY).unwrap();
        let p = CompiledGeneratingPolicy::compile(&doc).unwrap();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let req = Request::offline(&ns, "CREATE", Default::default(), None);
        evaluate_generating_policy(&p, &req, &CelRequest::of(&req), &NoResolver)
            .rules
            .into_iter()
            .map(|r| (r.status, r.into_resources()))
            .collect()
    }

    #[test]
    fn generated_objects_land_in_the_named_namespace() {
        let rules = run("team-a");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].0, RuleStatus::Pass);
        assert_eq!(
            rules[0].1,
            vec![
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "deny", "namespace": "team-a"}, "spec": {"podSelector": {}}})
            ]
        );
        // matchConditions false: no response at all.
        assert!(run("kube-system").is_empty());
    }

    #[test]
    fn a_namespaced_policy_generates_into_its_own_namespace() {
        let text = POLICY
            .replace("kind: GeneratingPolicy", "kind: NamespacedGeneratingPolicy")
            .replace(
                "{name: default-deny}",
                "{name: default-deny, namespace: team-b}",
            )
            .replace("[namespaces]", "[configmaps]");
        let evaluate = |text: &str| {
            let doc: GeneratingPolicyDoc = serde_saphyr::from_str(text).unwrap();
            let p = CompiledGeneratingPolicy::compile(&doc).unwrap();
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "c", "namespace": "team-b"}});
            let req = Request::offline(&cm, "CREATE", Default::default(), None);
            let mut rules =
                evaluate_generating_policy(&p, &req, &CelRequest::of(&req), &NoResolver).rules;
            assert_eq!(rules.len(), 1);
            let rule = rules.remove(0);
            (rule.status, rule.message.to_string(), rule.into_resources())
        };
        let (status, message, _) = evaluate(&text);
        assert_eq!(status, RuleStatus::Error);
        assert!(message.contains("generator.Apply(objects)"), "{message}");
        let (status, _, resources) =
            evaluate(&text.replace("generator.Apply(variables.ns, ", "generator.apply("));
        assert_eq!(status, RuleStatus::Pass);
        assert_eq!(resources[0]["metadata"]["namespace"], "team-b");
    }
}
