//! Whether a cleanup or deleting policy selects a resource
//! (docs/kyverno-semantics.md#cleanup-policies): the policy's namespace,
//! then `match`/`exclude` and the JMESPath
//! `conditions` on `target` (CleanupPolicy), or `matchConstraints` and the
//! CEL `conditions` on `object` (DeletingPolicy). A scheduled run has no
//! admission request: the resource is matched as it is stored, without
//! user info or operation.

use super::cel::deleting_policy_selects;
use super::context_loader;
use super::json_context::JsonContext;
use super::validate::eval_conditions;
use super::{Request, images};
use crate::context::Resolver;
use crate::policy::cleanup::{CompiledCleanupPolicy, Selection};
use serde_json::{Map, Value, json};

/// What a run loads once, before it reads resources: a CleanupPolicy's
/// context entries (`apiCall`, `variable`, `globalReference`).
pub struct RunContext(JsonContext<'static>);

impl RunContext {
    pub fn load(
        policy: &CompiledCleanupPolicy,
        resolver: &dyn Resolver,
    ) -> Result<RunContext, String> {
        let mut ctx = JsonContext::from_value(json!({}));
        if let Selection::Match { context, exprs, .. } = &policy.selection {
            context_loader::load(context, &mut ctx, exprs, resolver)?;
        }
        Ok(RunContext(ctx))
    }
}

/// The resource a run considers, with what the API server said about its
/// kind (the plural a DeletingPolicy's resource rules name) and namespace.
pub struct Candidate<'a> {
    pub object: &'a Value,
    /// The plural resource name, from discovery.
    pub resource: &'a str,
    /// The resource's Namespace object, when it is namespaced and exists.
    pub namespace: Option<&'a Value>,
}

/// Whether `policy` deletes `candidate`. An error (a condition that cannot
/// be evaluated) deletes nothing and is counted by the caller.
pub fn selects(
    policy: &CompiledCleanupPolicy,
    run: &RunContext,
    candidate: &Candidate,
    resolver: &dyn Resolver,
) -> Result<bool, String> {
    let object = candidate.object;
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    // A namespaced policy acts only in its namespace (cluster-scoped
    // resources included: they have none).
    if policy
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != namespace)
    {
        return Ok(false);
    }
    let namespace_labels: Option<Map<String, Value>> = candidate.namespace.map(|ns| {
        ns["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    });
    let mut req = Request::offline(object, "", Default::default(), namespace_labels);
    req.gvr.resource = candidate.resource.to_string();
    req.request_resource = req.gvr.clone();
    match &policy.selection {
        Selection::Match {
            match_resources,
            exclude,
            conditions,
            exprs,
            ..
        } => {
            let input = req.match_input();
            if !match_resources.matches(&input)
                || exclude.as_ref().is_some_and(|e| e.excludes(&input))
            {
                return Ok(false);
            }
            let Some(conditions) = conditions else {
                return Ok(true);
            };
            let mut ctx = run.0.child();
            ctx.set_ref("target", object);
            ctx.set("request", json!({"namespace": namespace}));
            if let Some(images) = images::images_of(object) {
                ctx.set("images", images);
            }
            eval_conditions(conditions, &ctx, exprs)
                .map(|(held, _)| held)
                .map_err(|e| format!("failed to check conditions: {e}"))
        }
        Selection::Cel { scope, variables } => {
            deleting_policy_selects(scope, variables, &req, candidate.namespace, resolver)
                .map(|held| held == Some(true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::NoResolver;

    fn pod(name: &str, ns: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": labels,
                            "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"containers": [{"name": "c", "image": "nginx:1.0"}]}})
    }

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    fn decide(policy: &Value, object: &Value, ns: Option<&Value>) -> Result<bool, String> {
        let policy = CompiledCleanupPolicy::compile(policy).unwrap();
        let run = RunContext::load(&policy, &NoResolver).unwrap();
        let candidate = Candidate {
            object,
            resource: "pods",
            namespace: ns,
        };
        selects(&policy, &run, &candidate, &NoResolver)
    }

    #[test]
    fn cleanup_policy_matches_excludes_and_checks_conditions_on_target() {
        let policy = json!({
            "kind": "CleanupPolicy", "metadata": {"name": "p", "namespace": "team"},
            "spec": {
                "schedule": "* * * * *",
                "context": [{"name": "wanted", "variable": {"value": "nginx:1.0"}}],
                "match": {"any": [{"resources": {"kinds": ["Pod"], "namespaceSelector": {"matchLabels": {"env": "dev"}}}}]},
                "exclude": {"any": [{"resources": {"selector": {"matchLabels": {"keep": "yes"}}}}]},
                "conditions": {"all": [
                    {"key": "{{ target.spec.containers[0].image }}", "operator": "Equals", "value": "{{ wanted }}"},
                    {"key": "{{ images.containers.c.tag }}", "operator": "Equals", "value": "1.0"},
                    {"key": "{{ request.namespace }}", "operator": "Equals", "value": "team"},
                ]},
            },
        });
        let dev = namespace("team", json!({"env": "dev"}));
        assert_eq!(
            decide(&policy, &pod("a", "team", json!({})), Some(&dev)),
            Ok(true)
        );
        // Another namespace: the policy is namespaced.
        let other = namespace("other", json!({"env": "dev"}));
        assert_eq!(
            decide(&policy, &pod("a", "other", json!({})), Some(&other)),
            Ok(false)
        );
        // The namespace selector.
        let prod = namespace("team", json!({"env": "prod"}));
        assert_eq!(
            decide(&policy, &pod("a", "team", json!({})), Some(&prod)),
            Ok(false)
        );
        // Excluded.
        assert_eq!(
            decide(
                &policy,
                &pod("a", "team", json!({"keep": "yes"})),
                Some(&dev)
            ),
            Ok(false)
        );
        // A condition false.
        let mut other_image = pod("a", "team", json!({}));
        other_image["spec"]["containers"][0]["image"] = json!("nginx:2.0");
        assert_eq!(decide(&policy, &other_image, Some(&dev)), Ok(false));
    }

    #[test]
    fn deleting_policy_checks_constraints_variables_and_conditions() {
        let policy = json!({
            "kind": "DeletingPolicy", "metadata": {"name": "d"},
            "spec": {
                "schedule": "* * * * *",
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                    "namespaceSelector": {"matchLabels": {"env": "dev"}},
                    "objectSelector": {"matchLabels": {"app": "web"}},
                },
                "variables": [{"name": "image", "expression": "object.spec.containers[0].image"}],
                "conditions": [
                    {"name": "nginx", "expression": "variables.image.startsWith('nginx')"},
                    {"name": "ns", "expression": "namespaceObject.metadata.name == 'team'"},
                ],
            },
        });
        let dev = namespace("team", json!({"env": "dev"}));
        let web = pod("a", "team", json!({"app": "web"}));
        assert_eq!(decide(&policy, &web, Some(&dev)), Ok(true));
        assert_eq!(
            decide(&policy, &pod("a", "team", json!({})), Some(&dev)),
            Ok(false)
        );
        let prod = namespace("team", json!({"env": "prod"}));
        assert_eq!(decide(&policy, &web, Some(&prod)), Ok(false));
        let mut redis = web.clone();
        redis["spec"]["containers"][0]["image"] = json!("redis");
        assert_eq!(decide(&policy, &redis, Some(&dev)), Ok(false));
        // A condition that fails to evaluate is an error, not a deletion.
        let mut broken = policy.clone();
        broken["spec"]["conditions"][0]["expression"] = json!("object.spec.nothing.here == 1");
        assert!(decide(&broken, &web, Some(&dev)).is_err());
    }
}
