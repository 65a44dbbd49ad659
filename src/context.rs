//! The resolver interface: how the engine reaches objects outside the
//! request (ConfigMaps, API calls, global context entries). The engine does
//! no I/O itself; `gavel test` serves these from values files and mocks
//! ([`Objects`]), and the server from informer-backed stores
//! (`crate::cluster::informer`, which implements this trait above it).

use serde_json::{Map, Value};
use std::sync::Arc;

/// Why a lookup has no answer. Each variant carries the message a rule's
/// error shows (Kyverno's words where it has them); callers that treat
/// the causes differently (a missing object, a refusal, a throttled or
/// slow API server) branch on the variant, never on the text.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ResolveError {
    /// The object or entry does not exist (the API server's 404).
    #[error("{0}")]
    NotFound(String),
    /// The API server refused gavel's identity (401, 403).
    #[error("{0}")]
    Forbidden(String),
    /// The API server, or gavel's own client-side rate limit, asked to
    /// slow down (429).
    #[error("{0}")]
    Throttled(String),
    /// The API server or service did not answer in time (408, 504, a
    /// client timeout).
    #[error("{0}")]
    TimedOut(String),
    /// Anything else: a bad request, an unreadable answer, an answer over
    /// the size limit, a transport error.
    #[error("{0}")]
    Failed(String),
}

impl ResolveError {
    /// The `reason` label of a lookup that failed.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ResolveError::NotFound(_) => "not_found",
            ResolveError::Forbidden(_) => "forbidden",
            ResolveError::Throttled(_) => "throttled",
            ResolveError::TimedOut(_) => "timed_out",
            ResolveError::Failed(_) => "failed",
        }
    }

    /// The error of an API server's status `code`, with `message`.
    pub fn of_status(code: u16, message: String) -> ResolveError {
        match code {
            404 => ResolveError::NotFound(message),
            401 | 403 => ResolveError::Forbidden(message),
            429 => ResolveError::Throttled(message),
            408 | 504 => ResolveError::TimedOut(message),
            _ => ResolveError::Failed(message),
        }
    }
}

/// An `apiCall` context entry with its variables substituted.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCallRequest {
    /// Kubernetes API path (`urlPath`), when set.
    pub url_path: Option<String>,
    /// Service URL (`service.url`), when set.
    pub url: Option<String>,
    pub method: String,
    /// POST body built from `data`.
    pub body: Option<Value>,
    /// `service.caBundle`: the only CAs trusted for `url`, when set.
    pub ca_bundle: Option<String>,
    /// `service.headers`, substituted.
    pub headers: Vec<(String, String)>,
}

/// Source of external data for context entries. `Ok(None)` (every default)
/// means the source is not available here: the entry is skipped and its
/// variable stays undefined, as `kyverno test` does offline.
pub trait Resolver: Send + Sync {
    fn config_map(&self, _namespace: &str, _name: &str) -> Result<Option<Value>, ResolveError> {
        Ok(None)
    }
    fn api_call(&self, _call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        Ok(None)
    }
    /// CEL's `http.Get/Post`: by default an API call to `call.url`.
    fn http_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        self.api_call(call)
    }
    /// Shared, not copied: an entry may cache thousands of objects, and
    /// the policy's jmesPath usually selects a little of them.
    fn global_context(&self, _name: &str) -> Result<Option<Arc<Value>>, ResolveError> {
        Ok(None)
    }
    /// One object by identity: the source of a generate `clone`. Sources
    /// without objects (the admission path today) have none.
    fn resource(
        &self,
        _api_version: &str,
        _kind: &str,
        _namespace: &str,
        _name: &str,
    ) -> Result<Option<Value>, ResolveError> {
        Ok(None)
    }
    /// The objects of one kind in a namespace: the sources of a generate
    /// `cloneList` (the caller applies the label selector).
    fn resources(
        &self,
        _api_version: &str,
        _kind: &str,
        _namespace: &str,
    ) -> Result<Vec<Value>, ResolveError> {
        Ok(Vec::new())
    }
    /// The kind served under the plural `resource` of `api_version`
    /// (`resource.Get("v1", "configmaps", ...)` in CEL). Built-in kinds by
    /// default; sources that hold custom resources know theirs.
    fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        crate::kinds::kind_for_resource(api_version, resource).map(str::to_string)
    }
    /// An image's metadata (`image.GetMetadata` in CEL). Registries are
    /// never contacted from the engine; sources that have metadata serve it.
    fn image_metadata(&self, _image: &str) -> Result<Option<Value>, ResolveError> {
        Ok(None)
    }
    /// Whether [`Resolver::resource`] and [`Resolver::resources`] see every
    /// object there is, so that "not found" means not there. Policy params
    /// are looked up only from such sources: elsewhere a missing param
    /// would silently let requests through.
    fn serves_objects(&self) -> bool {
        false
    }
    /// Whether objects of `kind` live in namespaces (a paramKind's scope).
    fn is_namespaced(&self, _api_version: &str, kind: &str) -> bool {
        !crate::kinds::is_cluster_scoped(kind)
    }
}

/// Objects given as files (a test's params and clone sources, `gavel apply
/// --parameter-resource`): the whole world for an offline run, so "not
/// found" is an answer.
#[derive(Debug, Clone, Copy)]
pub struct Objects<'a>(pub &'a [Value]);

fn identity(o: &Value) -> [&str; 4] {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    [
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    ]
}

impl Objects<'_> {
    /// An empty `namespace` finds the object in any namespace.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.0
            .iter()
            .find(|o| {
                let [a, k, ns, n] = identity(o);
                a == api_version
                    && k == kind
                    && n == name
                    && (namespace.is_empty() || ns == namespace)
            })
            .cloned()
    }

    /// An empty `namespace` lists every namespace (a cluster-wide list).
    pub fn list(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Value> {
        self.0
            .iter()
            .filter(|o| {
                let [a, k, ns, _] = identity(o);
                a == api_version && k == kind && (namespace.is_empty() || ns == namespace)
            })
            .cloned()
            .collect()
    }

    /// Known kinds by the built-in table; others by the files themselves:
    /// namespaced when an object of the kind names a namespace.
    pub fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        let mut of_kind = self
            .0
            .iter()
            .map(identity)
            .filter(|[a, k, _, _]| *a == api_version && *k == kind);
        match of_kind.next() {
            Some(first) => !first[2].is_empty() || of_kind.any(|[_, _, ns, _]| !ns.is_empty()),
            None => !crate::kinds::is_cluster_scoped(kind),
        }
    }

    pub fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        crate::kinds::Catalog::from_objects(self.0).kind_for_resource(api_version, resource)
    }
}

impl<'a> Objects<'a> {
    /// These objects as the whole world: the only source there is.
    pub fn resolver(self) -> WithObjects<Objects<'a>, &'static NoResolver> {
        WithObjects {
            objects: self,
            rest: &NoResolver,
        }
    }
}

impl ObjectSource for Objects<'_> {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ResolveError> {
        Ok(Objects::get(self, api_version, kind, namespace, name))
    }
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ResolveError> {
        Ok(Objects::list(self, api_version, kind, namespace))
    }
    fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        Objects::kind_for_resource(self, api_version, resource)
    }
    fn is_namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        Some(Objects::is_namespaced(self, api_version, kind))
    }
}

/// Where a resolver's objects come from (generate clone sources, policy
/// params, CEL's `resource.Get/List`): files offline, the API server in
/// the background controllers. Every such source sees every object there
/// is, so "not found" means not there.
pub trait ObjectSource: Send + Sync {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ResolveError>;
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ResolveError>;
    /// The kind of a plural resource, when the source itself says (files
    /// carry their CRDs); `None` asks the resolver behind it.
    fn kind_for_resource(&self, _api_version: &str, _resource: &str) -> Option<String> {
        None
    }
    /// A kind's scope, when the source itself says; `None` asks the
    /// resolver behind it.
    fn is_namespaced(&self, _api_version: &str, _kind: &str) -> Option<bool> {
        None
    }
}

/// A resolver with objects: `objects` answers [`Resolver::resource`] and
/// [`Resolver::resources`] (and the kinds it knows), `rest` every other
/// lookup. The one way a caller adds objects to its lookups, so that no
/// front end writes the delegation again.
pub struct WithObjects<O, R> {
    pub objects: O,
    pub rest: R,
}

impl<O, R> Resolver for WithObjects<O, R>
where
    O: ObjectSource,
    R: std::ops::Deref + Send + Sync,
    R::Target: Resolver,
{
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, ResolveError> {
        self.rest.config_map(namespace, name)
    }
    fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        self.rest.api_call(call)
    }
    fn http_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        self.rest.http_call(call)
    }
    fn global_context(&self, name: &str) -> Result<Option<Arc<Value>>, ResolveError> {
        self.rest.global_context(name)
    }
    fn resource(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ResolveError> {
        self.objects.get(api_version, kind, namespace, name)
    }
    fn resources(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ResolveError> {
        self.objects.list(api_version, kind, namespace)
    }
    fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        self.objects
            .kind_for_resource(api_version, resource)
            .or_else(|| self.rest.kind_for_resource(api_version, resource))
    }
    fn image_metadata(&self, image: &str) -> Result<Option<Value>, ResolveError> {
        self.rest.image_metadata(image)
    }
    fn serves_objects(&self) -> bool {
        true
    }
    fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        self.objects
            .is_namespaced(api_version, kind)
            .unwrap_or_else(|| self.rest.is_namespaced(api_version, kind))
    }
}

impl<O, R> ClusterView for WithObjects<O, R>
where
    O: ObjectSource,
    R: std::ops::Deref + Send + Sync,
    R::Target: ClusterView,
{
    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
        self.rest.namespace_labels(namespace)
    }
}

/// A resolver with no sources at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResolver;

impl Resolver for NoResolver {}

/// What admission reads about the cluster besides the request: context
/// sources, and the labels of the request's namespace (for
/// namespaceSelector).
pub trait ClusterView: Resolver {
    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>>;
}

/// Standalone: no cluster to read.
impl ClusterView for NoResolver {
    fn namespace_labels(&self, _: &str) -> Option<Map<String, Value>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Answers ConfigMaps only, and says every kind is cluster-scoped.
    struct ConfigMaps;

    impl Resolver for ConfigMaps {
        fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, ResolveError> {
            Ok(Some(
                json!({"from": "rest", "at": format!("{namespace}/{name}")}),
            ))
        }
        fn is_namespaced(&self, _: &str, _: &str) -> bool {
            false
        }
    }

    /// Objects from the API server, which knows no kinds of its own.
    struct Listed(Vec<Value>);

    impl ObjectSource for Listed {
        fn get(&self, a: &str, k: &str, ns: &str, n: &str) -> Result<Option<Value>, ResolveError> {
            Ok(Objects(&self.0).get(a, k, ns, n))
        }
        fn list(&self, a: &str, k: &str, ns: &str) -> Result<Vec<Value>, ResolveError> {
            Err(ResolveError::Forbidden(format!("list {a}/{k} in {ns:?}")))
        }
    }

    #[test]
    fn objects_come_from_the_source_and_every_other_lookup_from_the_rest() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        let with = WithObjects {
            objects: Listed(vec![cm.clone()]),
            rest: &ConfigMaps,
        };
        assert!(with.serves_objects());
        assert_eq!(with.resource("v1", "ConfigMap", "x", "a"), Ok(Some(cm)));
        assert_eq!(
            with.resources("v1", "ConfigMap", "x"),
            Err(ResolveError::Forbidden(
                r#"list v1/ConfigMap in "x""#.into()
            ))
        );
        assert_eq!(with.config_map("x", "a").unwrap().unwrap()["from"], "rest");
        // The source knows no kinds: the rest says.
        assert!(!with.is_namespaced("v1", "ConfigMap"));
        assert_eq!(
            with.kind_for_resource("v1", "configmaps").as_deref(),
            Some("ConfigMap")
        );
    }

    #[test]
    fn files_say_their_own_kinds_ahead_of_the_rest() {
        let objects = [
            json!({"apiVersion": "x.io/v1", "kind": "Limit", "metadata": {"name": "l", "namespace": "a"}}),
        ];
        let with = WithObjects {
            objects: Objects(&objects),
            rest: &ConfigMaps,
        };
        assert!(
            with.is_namespaced("x.io/v1", "Limit"),
            "the files show a namespace"
        );
        let alone = Objects(&objects).resolver();
        assert_eq!(alone.config_map("a", "b"), Ok(None));
        assert_eq!(
            alone.resources("x.io/v1", "Limit", "").map(|v| v.len()),
            Ok(1)
        );
    }
}
