//! Kubernetes kinds and their schemas: group/version/kind and
//! group/version/resource, the plural resource name and the scope of a
//! kind, and the OpenAPI-derived structure of the built-in kinds (merge
//! keys and list types, in [`schema`]).
//!
//! Built-in kinds come from tables generated from the real API server
//! (`builtin.rs`, by `.ci/gen-kinds.py`) and from the OpenAPI schema
//! (`schema/merge_keys.rs`, by `.ci/gen-merge-keys.py`). Kinds the tables
//! do not know are learnt at run time: from the cluster's CRDs in cluster
//! mode (`crate::cluster::informer`), from the objects given to an offline
//! run (a [`Catalog`]). Nothing here knows about policies: every other
//! module may use it.

#[rustfmt::skip]
mod builtin;
pub mod schema;

use serde_json::Value;
use std::borrow::Cow;

/// Group, version and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    /// From an `apiVersion` (`apps/v1`, `v1`) and a kind.
    pub fn new(api_version: &str, kind: &str) -> Gvk {
        let (group, version) = split_api_version(api_version);
        Gvk {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// From an object's `apiVersion` and `kind`.
    pub fn of(object: &Value) -> Gvk {
        let text = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or_default();
        Gvk::new(text("apiVersion"), text("kind"))
    }

    pub fn api_version(&self) -> String {
        join_api_version(&self.group, &self.version)
    }

    /// The resource the API server serves this kind under (`apps/v1
    /// Deployment` -> `apps/v1 deployments`).
    pub fn resource(&self) -> Gvr {
        Gvr {
            group: self.group.clone(),
            version: self.version.clone(),
            resource: plural(&self.api_version(), &self.kind).into_owned(),
        }
    }
}

/// Group, version and (plural) resource, as admission requests name what
/// they act on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn api_version(&self) -> String {
        join_api_version(&self.group, &self.version)
    }
}

/// `apps/v1` -> (`apps`, `v1`); `v1` -> (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn join_api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// One kind as the API server's discovery describes it.
#[derive(Debug)]
pub struct BuiltinKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// The resource name it is served under (`deployments`).
    pub plural: &'static str,
    pub namespaced: bool,
    /// Its subresources (`scale`, `status`, `eviction`, ...).
    pub subresources: &'static [&'static str],
}

/// Every built-in kind, ordered by apiVersion and kind.
pub fn builtin_kinds() -> &'static [BuiltinKind] {
    builtin::BY_KIND
}

/// The built-in kind `kind` of `api_version`.
pub fn builtin(api_version: &str, kind: &str) -> Option<&'static BuiltinKind> {
    builtin::BY_KIND
        .binary_search_by(|k| (k.api_version, k.kind).cmp(&(api_version, kind)))
        .ok()
        .map(|i| &builtin::BY_KIND[i])
}

/// The built-in kind served as `resource` in `api_version`.
pub fn builtin_for_resource(api_version: &str, resource: &str) -> Option<&'static BuiltinKind> {
    builtin::BY_RESOURCE
        .binary_search_by(|(v, r, _)| (*v, *r).cmp(&(api_version, resource)))
        .ok()
        .map(|i| &builtin::BY_KIND[builtin::BY_RESOURCE[i].2 as usize])
}

/// The kind served as `resource` in `api_version`, among the built-in ones.
pub fn kind_for_resource(api_version: &str, resource: &str) -> Option<&'static str> {
    builtin_for_resource(api_version, resource).map(|k| k.kind)
}

/// The plural resource name of a kind: the API server's own for the
/// built-in kinds, the API server's guess for others.
pub fn plural(api_version: &str, kind: &str) -> Cow<'static, str> {
    match builtin(api_version, kind) {
        Some(k) => Cow::Borrowed(k.plural),
        None => Cow::Owned(guess_plural(kind)),
    }
}

/// The plural resource name the API server guesses for a kind
/// (`meta.UnsafeGuessKindToResource`), which is what CRDs are usually
/// named after.
pub fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower == "endpoints" {
        return lower;
    }
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// FNV-1a: a kind's hash, computed once per request and compared with the
/// rules' (see [`crate::policy::compile::RuleKinds`]).
pub fn kind_hash(kind: &str) -> u64 {
    kind.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Cluster-scoped kinds of common add-ons, which no generated table knows
/// and which policies and their tests name offline, where there is no
/// discovery to ask.
const ADD_ON_CLUSTER_SCOPED: &[&str] = &[
    "ClusterExternalSecret",
    "ClusterIssuer",
    "ClusterPolicyReport",
    "ClusterRoleTemplate",
    "ClusterSecretStore",
    "ClusterTask",
    "EC2NodeClass",
    "NodePool",
    "PodSecurityPolicy",
    "VolumeSnapshotClass",
    "VolumeSnapshotContent",
];

/// Whether a kind, known by its name only (as test files and values give
/// it), is cluster-scoped: a built-in kind of that name in any group, or a
/// common add-on one. Any other kind is taken as namespaced.
pub fn is_cluster_scoped(kind: &str) -> bool {
    builtin::BY_KIND
        .iter()
        .any(|k| k.kind == kind && !k.namespaced)
        || ADD_ON_CLUSTER_SCOPED.contains(&kind)
}

/// A kind learnt at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearntKind {
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

/// The built-in kinds plus the kinds learnt from the objects an offline
/// run is given. (In a cluster, custom kinds come from the CRDs store:
/// `crate::cluster::informer`.)
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    learnt: Vec<LearntKind>,
}

impl Catalog {
    /// The kinds of objects given as files that the tables do not know:
    /// plural guessed as the API server guesses it, namespaced when an
    /// object of the kind names a namespace.
    pub fn from_objects(objects: &[Value]) -> Catalog {
        let mut learnt: Vec<LearntKind> = Vec::new();
        for o in objects {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let (api_version, kind) = (text("/apiVersion"), text("/kind"));
            if kind.is_empty() || builtin(api_version, kind).is_some() {
                continue;
            }
            let namespaced = !text("/metadata/namespace").is_empty();
            match learnt
                .iter_mut()
                .find(|k| k.api_version == api_version && k.kind == kind)
            {
                Some(k) => k.namespaced |= namespaced,
                None => learnt.push(LearntKind {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    plural: guess_plural(kind),
                    namespaced,
                }),
            }
        }
        Catalog { learnt }
    }

    fn learnt(&self, api_version: &str, kind: &str) -> Option<&LearntKind> {
        self.learnt
            .iter()
            .find(|k| k.api_version == api_version && k.kind == kind)
    }

    /// The kind served as `resource` in `api_version`.
    pub fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        kind_for_resource(api_version, resource)
            .map(str::to_string)
            .or_else(|| {
                self.learnt
                    .iter()
                    .find(|k| k.api_version == api_version && k.plural == resource)
                    .map(|k| k.kind.clone())
            })
    }

    /// Whether objects of the kind live in namespaces; a kind nobody knows
    /// is taken as namespaced unless its name says otherwise.
    pub fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        if let Some(k) = builtin(api_version, kind) {
            return k.namespaced;
        }
        match self.learnt(api_version, kind) {
            Some(k) => k.namespaced,
            None => !is_cluster_scoped(kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        let by_kind = builtin::BY_KIND;
        assert!(
            by_kind
                .windows(2)
                .all(|w| (w[0].api_version, w[0].kind) < (w[1].api_version, w[1].kind))
        );
        assert!(
            builtin::BY_RESOURCE
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
        for (v, r, i) in builtin::BY_RESOURCE {
            let k = &by_kind[*i as usize];
            assert_eq!((k.api_version, k.plural), (*v, *r));
        }
    }

    #[test]
    fn plurals_and_scopes_are_the_api_servers() {
        for (api_version, kind, expected) in [
            ("v1", "Pod", "pods"),
            ("v1", "Endpoints", "endpoints"),
            ("networking.k8s.io/v1", "Ingress", "ingresses"),
            ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
            ("kyverno.io/v1", "ClusterPolicy", "clusterpolicies"),
            // Not in the table: the API server's guess.
            ("example.com/v1", "Widget", "widgets"),
            ("example.com/v1", "Policy", "policies"),
            ("example.com/v1", "Gateway", "gateways"),
            ("example.com/v1", "Ingress", "ingresses"),
        ] {
            assert_eq!(plural(api_version, kind), expected, "{api_version} {kind}");
        }
        assert_eq!(
            kind_for_resource("apps/v1", "deployments"),
            Some("Deployment")
        );
        assert_eq!(kind_for_resource("v1", "configmaps"), Some("ConfigMap"));
        assert_eq!(kind_for_resource("v1", "widgets"), None);
        let deployment = builtin("apps/v1", "Deployment").unwrap();
        assert!(deployment.namespaced && deployment.subresources.contains(&"scale"));
        assert!(
            builtin("v1", "Pod")
                .unwrap()
                .subresources
                .contains(&"eviction")
        );
        for kind in [
            "Namespace",
            "Node",
            "ClusterRole",
            "ClusterPolicy",
            "ClusterIssuer",
        ] {
            assert!(is_cluster_scoped(kind), "{kind}");
        }
        for kind in ["Pod", "Policy", "Widget", "PolicyReport"] {
            assert!(!is_cluster_scoped(kind), "{kind}");
        }
    }

    #[test]
    fn a_catalog_learns_kinds_from_objects() {
        let catalog = Catalog::from_objects(&[
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "b", "namespace": "x"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Dial", "metadata": {"name": "c"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
        ]);
        assert_eq!(
            catalog
                .kind_for_resource("example.com/v1", "widgets")
                .as_deref(),
            Some("Widget")
        );
        assert!(catalog.is_namespaced("example.com/v1", "Widget"));
        assert!(!catalog.is_namespaced("example.com/v1", "Dial"));
        assert!(!catalog.is_namespaced("v1", "Namespace"));
        assert!(catalog.is_namespaced("example.com/v1", "Unknown"));
        assert_eq!(
            catalog
                .kind_for_resource("apps/v1", "deployments")
                .as_deref(),
            Some("Deployment")
        );
    }

    #[test]
    fn gvk_and_gvr_round_trip_api_versions() {
        let gvk = Gvk::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment"}));
        assert_eq!((gvk.group.as_str(), gvk.version.as_str()), ("apps", "v1"));
        assert_eq!(gvk.api_version(), "apps/v1");
        assert_eq!(gvk.resource().resource, "deployments");
        assert_eq!(Gvk::new("v1", "Pod").resource().api_version(), "v1");
    }
}
