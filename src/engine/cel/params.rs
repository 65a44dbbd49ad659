//! Policy params: the objects a parameterised policy is evaluated with,
//! found the way the API server finds them for an admission policy
//! binding (and Kyverno for a `validate.cel` rule): by name or by label
//! selector, in the paramRef's namespace or the request's.

use crate::cel::Activation;
use crate::context::Resolver;
use crate::engine::Request;
use crate::matching::selector_matches;
use crate::policy::cel_policy::{ParamKind, ParamRef};
use serde_json::Value;

/// The params to evaluate with, each in turn. `None`: the policy has no
/// paramKind, so it is evaluated once with `params` null. An empty list:
/// none were found and `parameterNotFoundAction` is Allow, so nothing is
/// evaluated.
pub fn collect(
    kind: Option<&ParamKind>,
    reference: Option<&ParamRef>,
    req: &Request,
    resolver: &dyn Resolver,
) -> Result<Option<Vec<Value>>, String> {
    let Some(kind) = kind else {
        return Ok(None);
    };
    let Some(reference) = reference else {
        return Err(format!(
            "paramKind {} {} is set but no paramRef selects the params",
            kind.api_version, kind.kind
        ));
    };
    if !resolver.serves_objects() {
        return Err(format!(
            "unsupported: params of kind {} {} here: they are served from files \
             (gavel test paramResources, gavel apply --parameter-resource)",
            kind.api_version, kind.kind
        ));
    }
    let requested = reference.namespace.as_deref().unwrap_or_default();
    let namespace = if resolver.is_namespaced(&kind.api_version, &kind.kind) {
        match (requested, req.namespace()) {
            ("", "") => {
                return Err(
                    "cannot use a namespaced paramRef to match a cluster-scoped resource".into(),
                );
            }
            ("", own) => own,
            (set, _) => set,
        }
    } else if !requested.is_empty() {
        return Err(format!(
            "paramRef.namespace must not be set for the cluster-scoped paramKind {}",
            kind.kind
        ));
    } else {
        ""
    };
    let failed = |e: crate::context::ResolveError| format!("failed to read params: {e}");
    let found = match (&reference.name, &reference.selector) {
        (Some(name), _) if !name.is_empty() => resolver
            .resource(&kind.api_version, &kind.kind, namespace, name)
            .map_err(failed)?
            .into_iter()
            .collect(),
        (_, Some(selector)) => resolver
            .resources(&kind.api_version, &kind.kind, namespace)
            .map_err(failed)?
            .into_iter()
            .filter(|o| {
                let labels = o.pointer("/metadata/labels").and_then(Value::as_object);
                selector_matches(selector, labels)
            })
            .collect(),
        _ => Vec::new(),
    };
    if found.is_empty() && reference.deny_when_missing() {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(Some(found))
}

/// `vars` with `params` bound to `param`.
pub fn bind<'a>(vars: &'a Activation<'a>, param: &'a Value) -> Result<Activation<'a>, String> {
    let mut scope = vars.scope();
    scope.set_json("params", param);
    Ok(scope)
}

/// The pass message when no params were found and that is allowed.
pub const NONE_FOUND: &str = "no params found (parameterNotFoundAction: Allow)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{NoResolver, Objects};
    use serde_json::json;

    fn kind(api_version: &str, kind: &str) -> ParamKind {
        ParamKind {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    fn by_name(name: &str, namespace: Option<&str>, deny: bool) -> ParamRef {
        ParamRef {
            name: Some(name.into()),
            namespace: namespace.map(str::to_string),
            selector: None,
            parameter_not_found_action: deny.then(|| "Deny".into()),
        }
    }

    fn pod_in(namespace: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}})
    }

    fn names(found: Option<Vec<Value>>) -> Vec<String> {
        found
            .unwrap_or_default()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn namespaced_params_default_to_the_request_namespace() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits", "namespace": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits", "namespace": "b"}, "data": {"x": "b"}}),
        ];
        let source = Objects(&objects).resolver();
        let cm = kind("v1", "ConfigMap");
        let collect_for = |ns: &str, r: &ParamRef| {
            let object = pod_in(ns);
            let req = Request::offline(&object, "CREATE", Default::default(), None);
            collect(Some(&cm), Some(r), &req, &source)
        };
        let found = collect_for("b", &by_name("limits", None, false))
            .unwrap()
            .unwrap();
        assert_eq!(found[0]["data"]["x"], "b");
        // An explicit namespace wins over the request's.
        let found = collect_for("b", &by_name("limits", Some("a"), false))
            .unwrap()
            .unwrap();
        assert_eq!(found[0]["metadata"]["namespace"], "a");
        // Not found: nothing to evaluate under Allow, an error under Deny.
        assert_eq!(
            collect_for("c", &by_name("limits", None, false)),
            Ok(Some(Vec::new()))
        );
        assert!(
            collect_for("c", &by_name("limits", None, true))
                .unwrap_err()
                .contains("Deny")
        );
        // A cluster-scoped request cannot use a namespaced param by default.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}});
        let req = Request::offline(&ns, "CREATE", Default::default(), None);
        let err = collect(
            Some(&cm),
            Some(&by_name("limits", None, false)),
            &req,
            &source,
        );
        assert!(err.unwrap_err().contains("cluster-scoped resource"));
    }

    #[test]
    fn cluster_scoped_params_and_selectors() {
        let objects = [
            json!({"apiVersion": "x.io/v1", "kind": "Limit", "metadata": {"name": "one", "labels": {"tier": "dev"}}}),
            json!({"apiVersion": "x.io/v1", "kind": "Limit", "metadata": {"name": "two", "labels": {"tier": "dev"}}}),
            json!({"apiVersion": "x.io/v1", "kind": "Limit", "metadata": {"name": "three", "labels": {"tier": "prod"}}}),
        ];
        let source = Objects(&objects).resolver();
        let limit = kind("x.io/v1", "Limit");
        let object = pod_in("a");
        let req = Request::offline(&object, "CREATE", Default::default(), None);
        let selector: ParamRef = serde_json::from_value(
            json!({"selector": {"matchLabels": {"tier": "dev"}}, "parameterNotFoundAction": "Allow"}),
        )
        .unwrap();
        let found = collect(Some(&limit), Some(&selector), &req, &source).unwrap();
        assert_eq!(names(found), ["one", "two"]);
        // The files say the kind is cluster-scoped: no namespace allowed.
        let err = collect(
            Some(&limit),
            Some(&by_name("one", Some("a"), false)),
            &req,
            &source,
        );
        assert!(err.unwrap_err().contains("must not be set"));
        // No paramKind: evaluated once, params null.
        assert_eq!(collect(None, Some(&selector), &req, &source), Ok(None));
        // A paramKind needs a paramRef.
        assert!(collect(Some(&limit), None, &req, &source).is_err());
    }

    #[test]
    fn sources_without_objects_refuse_loudly() {
        let object = pod_in("a");
        let req = Request::offline(&object, "CREATE", Default::default(), None);
        let err = collect(
            Some(&kind("v1", "ConfigMap")),
            Some(&by_name("limits", None, false)),
            &req,
            &NoResolver,
        );
        assert!(err.unwrap_err().starts_with("unsupported: params"));
    }
}
