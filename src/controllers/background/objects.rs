//! Downstream resources in the API server: created, kept in line and
//! deleted, each action safe to repeat (a create that finds the object
//! made, an update that finds it current, a delete that finds it gone all
//! succeed without writing), because a deposed leader may still be
//! finishing the same work.

use super::WorkError;
use crate::admission::update_requests::labels;
use crate::cluster::update_requests::BackgroundMetrics;
use crate::context::{ClusterView, ObjectSource, ResolveError, WithObjects};
use crate::kinds::{Gvk, plural};
use crate::policy::cel_policy::ResourceRule;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The API of a kind in a namespace ("" for cluster-scoped kinds or all
/// namespaces).
pub fn api_for(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Api<DynamicObject> {
    let resource = api_resource(api_version, kind);
    if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    }
}

/// The API resource of a kind (its plural as gavel knows it).
pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let gvk = Gvk::new(api_version, kind);
    ApiResource {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        plural: plural(api_version, kind).into_owned(),
    }
}

/// The kinds (apiVersion, kind) admission rules name, for sweeping the
/// objects of each: wildcards and subresources are not swept (said in
/// the log, with `policy`), nor resources the cluster does not serve.
pub fn kinds_named(
    view: &dyn ClusterView,
    rules: &[ResourceRule],
    policy: &str,
) -> BTreeSet<(String, String)> {
    let mut kinds = BTreeSet::new();
    for rule in rules {
        for group in &rule.api_groups {
            for version in &rule.api_versions {
                for resource in &rule.resources {
                    if [group, version, resource].iter().any(|x| x.contains('*'))
                        || resource.contains('/')
                    {
                        tracing::warn!(
                            policy,
                            resource,
                            "wildcard and subresource rules are not swept for existing objects"
                        );
                        continue;
                    }
                    let api_version = if group.is_empty() {
                        version.clone()
                    } else {
                        format!("{group}/{version}")
                    };
                    match view.kind_for_resource(&api_version, resource) {
                        Some(kind) => {
                            kinds.insert((api_version, kind));
                        }
                        None => tracing::warn!(policy, resource, "resource not served"),
                    }
                }
            }
        }
    }
    kinds
}

/// apiVersion, kind, namespace and name of an object.
fn identity(object: &Value) -> (&str, &str, &str, &str) {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    (
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

fn to_value(object: DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// One object, or None when it does not exist.
pub async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    Ok(api_for(client, api_version, kind, namespace)
        .get_opt(name)
        .await?
        .map(to_value))
}

/// Objects of a kind (in every namespace when `namespace` is empty) with
/// the given labels, each with its apiVersion and kind: the API server
/// leaves them out of a list's items, and a target written back without
/// them names no resource.
pub async fn list(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    selector: &str,
) -> Result<Vec<Value>, kube::Error> {
    let list = api_for(client, api_version, kind, namespace)
        .list(&ListParams::default().labels(selector))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|item| with_type(to_value(item), api_version, kind))
        .collect())
}

/// `object` with `apiVersion` and `kind` set where it has none.
fn with_type(mut object: Value, api_version: &str, kind: &str) -> Value {
    if let Value::Object(m) = &mut object {
        for (field, value) in [("apiVersion", api_version), ("kind", kind)] {
            if m.get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                m.insert(field.to_string(), Value::String(value.to_string()));
            }
        }
    }
    object
}

/// Creates `desired`, or with `synchronize` brings an existing object in
/// line with it (Kyverno replaces the object's content with the rule's:
/// every top-level field but metadata and status, plus its labels and
/// annotations). Without `synchronize` an existing object is left as it is.
pub async fn apply(
    client: &Client,
    desired: &Value,
    synchronize: bool,
    metrics: &BackgroundMetrics,
) -> Result<(), WorkError> {
    let (api_version, kind, namespace, name) = identity(desired);
    let what = format!("downstream {api_version}/{kind} {namespace}/{name}");
    if name.is_empty() || kind.is_empty() {
        return Err(WorkError::Invalid(format!("{what}: no kind or name")));
    }
    let api = api_for(client, api_version, kind, namespace);
    let fail = |e: kube::Error| WorkError::api(&what, &e);
    let invalid = |e: serde_json::Error| WorkError::Invalid(format!("{what}: {e}"));
    // Create first: for a new trigger that is the one call needed. A 409
    // means it exists (made by hand, by an earlier request, or by a
    // deposed leader finishing the same work): then it is compared.
    let object: DynamicObject = serde_json::from_value(desired.clone()).map_err(invalid)?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {
            metrics.count("created");
            return Ok(());
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(fail(e)),
    }
    if !synchronize {
        return Ok(());
    }
    let Some(existing) = api.get_opt(name).await.map_err(fail)? else {
        return Err(WorkError::TriggerGone(format!(
            "{what}: deleted while being written; tried again"
        )));
    };
    let existing = to_value(existing);
    let merged = in_line(&existing, desired);
    if merged == existing {
        return Ok(());
    }
    let object: DynamicObject = serde_json::from_value(merged).map_err(invalid)?;
    // The resourceVersion read makes this a compare-and-swap: a 409 means
    // someone changed it meanwhile, and the request is tried again.
    api.replace(name, &PostParams::default(), &object)
        .await
        .map_err(fail)?;
    metrics.count("updated");
    Ok(())
}

/// Writes back a target as mutate existing patched it: a replace that
/// carries the resourceVersion it was read at, so a target changed since
/// gives 409 and the request is tried again on a fresh read.
pub async fn replace(
    client: &Client,
    patched: &Value,
    metrics: &BackgroundMetrics,
) -> Result<(), WorkError> {
    let (api_version, kind, namespace, name) = identity(patched);
    let what = format!("target {api_version}/{kind} {namespace}/{name}");
    let object: DynamicObject = serde_json::from_value(patched.clone())
        .map_err(|e| WorkError::Invalid(format!("{what}: {e}")))?;
    api_for(client, api_version, kind, namespace)
        .replace(name, &PostParams::default(), &object)
        .await
        .map_err(|e| WorkError::api(&what, &e))?;
    metrics.count("patched");
    Ok(())
}

/// `existing` with the content of `desired`.
pub fn in_line(existing: &Value, desired: &Value) -> Value {
    let mut out = existing.clone();
    let (Some(out_map), Some(want)) = (out.as_object_mut(), desired.as_object()) else {
        return desired.clone();
    };
    out_map.retain(|k, _| {
        matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") || want.contains_key(k)
    });
    for (k, v) in want {
        if k != "metadata" && k != "status" {
            out_map.insert(k.clone(), v.clone());
        }
    }
    for field in ["labels", "annotations"] {
        let Some(Value::Object(wanted)) = desired.pointer(&format!("/metadata/{field}")) else {
            continue;
        };
        let meta = out_map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            let have = meta
                .entry(field)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(have) = have {
                for (k, v) in wanted {
                    have.insert(k.clone(), v.clone());
                }
            }
        }
    }
    out
}

/// Deletes the objects of `kind` that carry `selector`; ones already gone
/// are not an error.
pub async fn delete_selected(
    client: &Client,
    api_version: &str,
    kind: &str,
    selector: &str,
    metrics: &BackgroundMetrics,
) -> Result<usize, WorkError> {
    let found = list(client, api_version, kind, "", selector)
        .await
        .map_err(|e| WorkError::api(format!("listing {api_version}/{kind} {selector}"), &e))?;
    let mut deleted = 0;
    for object in found {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
        let api = api_for(client, api_version, kind, namespace);
        // Preconditions on the uid: an object recreated under the same
        // name since the list is not this one.
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(text("/metadata/uid").to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                deleted += 1;
                metrics.count("deleted");
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(WorkError::api(
                    format!("deleting {kind} {namespace}/{name}"),
                    &e,
                ));
            }
        }
    }
    Ok(deleted)
}

pub use crate::cluster::client::short;

/// The label selector of the downstream of one rule, for one trigger or
/// for all of them.
pub fn selector(policy: &str, rule: Option<&str>, trigger: Option<&Value>) -> String {
    let (namespace, name) = policy.split_once('/').unwrap_or(("", policy));
    let mut parts = vec![
        format!("{}=kyverno", labels::MANAGED_BY),
        format!("{}={name}", labels::POLICY_NAME),
    ];
    if !namespace.is_empty() {
        parts.push(format!("{}={namespace}", labels::POLICY_NAMESPACE));
    }
    if let Some(rule) = rule {
        parts.push(format!("{}={rule}", labels::RULE_NAME));
    }
    if let Some(t) = trigger {
        let text = |k: &str| t[k].as_str().unwrap_or_default();
        if text("uid").is_empty() {
            parts.push(format!("{}={}", labels::TRIGGER_NAME, text("name")));
            parts.push(format!("{}={}", labels::TRIGGER_KIND, text("kind")));
            if !text("namespace").is_empty() {
                parts.push(format!(
                    "{}={}",
                    labels::TRIGGER_NAMESPACE,
                    text("namespace")
                ));
            }
        } else {
            parts.push(format!("{}={}", labels::TRIGGER_UID, text("uid")));
        }
    }
    parts.join(",")
}

/// The API server as the source of the objects a `clone` or `cloneList`
/// copies and CEL's `resource.Get/List` reads (the admission path has no
/// such reads).
pub struct ApiObjects {
    client: Client,
    runtime: tokio::runtime::Handle,
}

impl ApiObjects {
    fn block<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        // Evaluation runs on a blocking thread (spawn_blocking), where
        // waiting on the runtime is allowed.
        self.runtime.block_on(f)
    }
}

impl ObjectSource for ApiObjects {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ResolveError> {
        self.block(get(&self.client, api_version, kind, namespace, name))
            .map_err(resolve_error)
    }
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ResolveError> {
        self.block(list(&self.client, api_version, kind, namespace, ""))
            .map_err(resolve_error)
    }
}

/// A failed read as the resolver's error, by the API server's status.
fn resolve_error(e: kube::Error) -> ResolveError {
    match &e {
        kube::Error::Api(status) => ResolveError::of_status(status.code, e.to_string()),
        _ => ResolveError::Failed(e.to_string()),
    }
}

/// What the background controllers evaluate rules with: the replica's
/// resolvers, with the API server's objects.
pub type BackgroundResolver = WithObjects<ApiObjects, Arc<dyn ClusterView>>;

/// The background resolver over `view`, reading objects with `client`;
/// called on the runtime its reads will wait on.
pub fn background_resolver(view: &Arc<dyn ClusterView>, client: &Client) -> BackgroundResolver {
    WithObjects {
        objects: ApiObjects {
            client: client.clone(),
            runtime: tokio::runtime::Handle::current(),
        },
        rest: view.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn in_line_replaces_content_and_adds_labels() {
        let existing = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7", "labels": {"mine": "x", "k": "old"}},
            "data": {"a": "changed", "extra": "added by hand"},
        });
        let desired = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"k": "new"}},
            "data": {"a": "1"},
        });
        let merged = in_line(&existing, &desired);
        assert_eq!(merged["data"], json!({"a": "1"}));
        assert_eq!(
            merged["metadata"]["labels"],
            json!({"mine": "x", "k": "new"})
        );
        assert_eq!(merged["metadata"]["resourceVersion"], "7");
        assert_eq!(
            in_line(&merged, &desired),
            merged,
            "a second pass changes nothing"
        );
    }

    #[test]
    fn selectors_name_the_policy_rule_and_trigger() {
        let trigger = json!({"kind": "Namespace", "name": "team-a", "namespace": "", "uid": ""});
        assert_eq!(
            selector("ns1/p", Some("r"), Some(&trigger)),
            "app.kubernetes.io/managed-by=kyverno,generate.kyverno.io/policy-name=p,generate.kyverno.io/policy-namespace=ns1,generate.kyverno.io/rule-name=r,generate.kyverno.io/trigger-name=team-a,generate.kyverno.io/trigger-kind=Namespace"
        );
        let trigger = json!({"uid": "u-1"});
        assert!(
            selector("p", None, Some(&trigger)).ends_with("generate.kyverno.io/trigger-uid=u-1")
        );
    }
}
