//! GeneratingPolicy: the `generate` expressions call `generator.Apply`,
//! and what they ask for becomes the rule's downstream resources.

use super::{CelRequest, ResolverLookups, begin, bind_variables, conditions_hold, exempted};
use crate::cel::values::cel_to_json;
use crate::cel::{Activation, Lookups};
use crate::context::Resolver;
use crate::engine::{PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::policy::cel_policy::EvaluationMode;
use crate::policy::cel_policy::{
    CompiledGeneratingPolicy, CompiledGeneration, Segment, TemplateNode,
};
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
    let (mut response, Some(_)) = begin(scope, EvaluationMode::Kubernetes, req, input) else {
        return PolicyResponse::empty(&scope.name);
    };
    let lookups = ResolverLookups(resolver);
    let respond = |status: RuleStatus, message: String| {
        RuleResponse::new(&scope.name, status, message).of_type(RuleType::Generation)
    };
    let root = input.activation();
    if let Some((status, message)) = exempted(scope, &root, &lookups) {
        response.rules.push(respond(status, message));
        return response;
    }
    let vars = bind_variables(&root, &policy.variables, &lookups);
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
    for (i, generation) in policy.generate.iter().enumerate() {
        let program = match generation {
            CompiledGeneration::Expression(program) => program,
            CompiledGeneration::Template(docs) => {
                match render_template(docs, scope.namespace.as_deref(), &vars, &lookups) {
                    Ok(objects) => downstream.extend(objects),
                    Err(e) => {
                        response.rules.push(respond(
                            RuleStatus::Error,
                            format!("failed to render generate[{i}].template: {e}"),
                        ));
                        return response;
                    }
                }
                continue;
            }
        };
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

/// A template's objects, each in the namespace its metadata names (a
/// namespaced policy's own when it names none; another is refused).
fn render_template(
    docs: &[TemplateNode],
    policy_namespace: Option<&str>,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(docs.len());
    for (i, doc) in docs.iter().enumerate() {
        let object = render(doc, vars, lookups).map_err(|e| format!("document {}: {e}", i + 1))?;
        if !object.is_object() {
            return Err(format!(
                "document {}: expected a mapping describing a resource",
                i + 1
            ));
        }
        let named = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let namespace = match policy_namespace {
            Some(own) if named.is_empty() => own.to_string(),
            Some(own) if named != own => {
                return Err(format!(
                    "cross-namespace generation denied: a policy in namespace {own:?} cannot generate resources into namespace {named:?}"
                ));
            }
            _ => named,
        };
        out.push(place(namespace, object));
    }
    Ok(out)
}

fn render(node: &TemplateNode, vars: &Activation, lookups: &dyn Lookups) -> Result<Value, String> {
    let eval = |p: &crate::cel::Program| -> Result<Value, String> {
        let v = p
            .eval(vars, lookups)
            .map_err(|e| format!("placeholder {:?}: {e}", p.source()))?;
        cel_to_json(&v)
    };
    Ok(match node {
        TemplateNode::Literal(v) => v.clone(),
        TemplateNode::Splice(p) => eval(p)?,
        TemplateNode::Interpolated(segments) => {
            let mut s = String::new();
            for segment in segments {
                match segment {
                    Segment::Text(t) => s.push_str(t),
                    Segment::Expr(p) => match eval(p)? {
                        Value::String(v) => s.push_str(&v),
                        v @ (Value::Bool(_) | Value::Number(_)) => s.push_str(&v.to_string()),
                        other => {
                            return Err(format!(
                                "placeholder {:?} embedded in a string must evaluate to a scalar, got {other}",
                                p.source()
                            ));
                        }
                    },
                }
            }
            Value::String(s)
        }
        TemplateNode::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        render(v, vars, lookups).map_err(|e| format!("field {k:?}: {e}"))?,
                    ))
                })
                .collect::<Result<_, String>>()?,
        ),
        TemplateNode::List(items) => Value::Array(
            items
                .iter()
                .map(|v| render(v, vars, lookups))
                .collect::<Result<_, String>>()?,
        ),
    })
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
            let rules =
                evaluate_generating_policy(&p, &req, &CelRequest::of(&req), &NoResolver).rules;
            assert_eq!(rules.len(), 1);
            let rule = rules.into_iter().next().unwrap();
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

    /// `generate[].template`: plain YAML as written; with `interpolate:
    /// cel`, a whole-value placeholder splices any value, an embedded one
    /// interpolates a scalar, `\((` stays literal; a namespaced policy's
    /// template lands in its namespace and may not name another.
    #[test]
    fn templates_render_their_placeholders() {
        let policy = |kind: &str, interpolate: &str, value: &str| {
            let yaml = format!(
                "apiVersion: policies.kyverno.io/v1beta1
kind: {kind}
metadata: {{name: t, namespace: team-a}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [namespaces, configmaps]}}
  variables:
  - {{name: labels, expression: \"{{'team': 'a', 'env': 'x'}}\"}}
  generate:
  - template:
      interpolate: {interpolate}
      value: |
{}
",
                value
                    .lines()
                    .map(|l| format!("        {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            let doc: GeneratingPolicyDoc = serde_saphyr::from_str(&yaml).unwrap();
            CompiledGeneratingPolicy::compile(&doc).unwrap()
        };
        let generate = |p: &CompiledGeneratingPolicy, object: Value| {
            let req = Request::offline(&object, "CREATE", Default::default(), None);
            let out = evaluate_generating_policy(p, &req, &CelRequest::of(&req), &NoResolver);
            let rule = &out.rules[0];
            (
                rule.status,
                rule.message.to_string(),
                rule.resources().to_vec(),
            )
        };
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}});
        let template = "apiVersion: v1
kind: ConfigMap
metadata:
  name: (( object.metadata.name ))-config
  namespace: (( object.metadata.name ))
  labels: (( variables.labels ))
data:
  replicas: (( 1 + 2 ))
  note: \\(( kept ))";
        let (status, _, made) = generate(&policy("GeneratingPolicy", "cel", template), ns.clone());
        assert_eq!(status, RuleStatus::Pass);
        assert_eq!(
            made,
            [json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "team-b-config", "namespace": "team-b",
                                 "labels": {"team": "a", "env": "x"}},
                    "data": {"replicas": 3, "note": "(( kept ))"}})]
        );
        // interpolate none (the default): the text as written.
        let (_, _, made) = generate(&policy("GeneratingPolicy", "none", template), ns.clone());
        assert_eq!(
            made[0]["metadata"]["name"],
            "(( object.metadata.name ))-config"
        );
        // A namespaced policy: its own namespace, and no other.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}});
        let plain = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n";
        let (_, _, made) = generate(
            &policy("NamespacedGeneratingPolicy", "cel", plain),
            cm.clone(),
        );
        assert_eq!(made[0]["metadata"]["namespace"], "team-a");
        let elsewhere =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: other\n";
        let (status, message, _) =
            generate(&policy("NamespacedGeneratingPolicy", "cel", elsewhere), cm);
        assert_eq!(status, RuleStatus::Error);
        assert!(
            message.contains("cross-namespace generation denied"),
            "{message}"
        );
        // A structured value embedded in a string is an error.
        let embedded =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x-(( variables.labels ))\n";
        let (status, message, _) = generate(&policy("GeneratingPolicy", "cel", embedded), ns);
        assert_eq!(status, RuleStatus::Error);
        assert!(message.contains("must evaluate to a scalar"), "{message}");
    }
}
