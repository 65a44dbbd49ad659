//! The resource types the test server serves and the discovery documents
//! (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) that describe them.
//! Built-in types are fixed; CustomResourceDefinitions add types when created.

use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    /// Served versions, the preferred (storage) one first.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Built into Kubernetes: accepts strategic merge patches (CRDs answer 415).
    pub builtin: bool,
    /// Has a `/status` subresource: writes to the main resource leave status alone.
    pub status: bool,
}

impl ResourceType {
    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
    ) -> ResourceType {
        ResourceType {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: Vec::new(),
            builtin: true,
            status,
        }
    }

    fn custom(
        group: &str,
        versions: &[&str],
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) -> ResourceType {
        ResourceType {
            builtin: false,
            status: true,
            versions: versions.iter().map(|v| v.to_string()).collect(),
            ..ResourceType::builtin(group, versions[0], plural, kind, namespaced, true)
        }
    }

    fn short(mut self, names: &[&str]) -> ResourceType {
        self.short_names = names.iter().map(|n| n.to_string()).collect();
        self
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The type a CustomResourceDefinition object declares.
    pub fn from_crd(crd: &Value) -> Result<ResourceType, String> {
        let spec = crd.get("spec").ok_or("spec is required")?;
        let text = |v: Option<&Value>, what: &str| -> Result<String, String> {
            v.and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("{what} is required"))
        };
        let names = spec.get("names").ok_or("spec.names is required")?;
        let mut versions: Vec<(bool, String)> = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or("spec.versions is required")?
            .iter()
            .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
            .map(|v| {
                let storage = v.get("storage").and_then(Value::as_bool) == Some(true);
                text(v.get("name"), "spec.versions[].name").map(|n| (!storage, n))
            })
            .collect::<Result<_, _>>()?;
        if versions.is_empty() {
            return Err("spec.versions must serve at least one version".into());
        }
        versions.sort_by_key(|(not_storage, _)| *not_storage);
        let kind = text(names.get("kind"), "spec.names.kind")?;
        Ok(ResourceType {
            group: text(spec.get("group"), "spec.group")?,
            versions: versions.into_iter().map(|(_, v)| v).collect(),
            plural: text(names.get("plural"), "spec.names.plural")?,
            singular: names
                .get("singular")
                .and_then(Value::as_str)
                .map_or_else(|| kind.to_lowercase(), str::to_string),
            kind,
            namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
            short_names: names
                .get("shortNames")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            builtin: false,
            status: true,
        })
    }
}

/// The built-in types, plus Kyverno's CRDs as if already installed.
pub fn initial_types() -> Vec<ResourceType> {
    use ResourceType as R;
    vec![
        R::builtin("", "v1", "namespaces", "Namespace", false, true).short(&["ns"]),
        R::builtin("", "v1", "configmaps", "ConfigMap", true, false).short(&["cm"]),
        R::builtin("", "v1", "secrets", "Secret", true, false),
        R::builtin("", "v1", "pods", "Pod", true, true).short(&["po"]),
        R::builtin("", "v1", "services", "Service", true, true).short(&["svc"]),
        R::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false).short(&["sa"]),
        R::builtin("apps", "v1", "deployments", "Deployment", true, true).short(&["deploy"]),
        R::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        R::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            false,
        ),
        R::builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            false,
        ),
        R::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        )
        .short(&["crd", "crds"]),
        R::custom(
            "kyverno.io",
            &["v1"],
            "clusterpolicies",
            "ClusterPolicy",
            false,
        )
        .short(&["cpol"]),
        R::custom("kyverno.io", &["v1"], "policies", "Policy", true).short(&["pol"]),
        R::custom(
            "kyverno.io",
            &["v2", "v2beta1"],
            "policyexceptions",
            "PolicyException",
            true,
        )
        .short(&["polex"]),
        R::custom(
            "kyverno.io",
            &["v2alpha1"],
            "globalcontextentries",
            "GlobalContextEntry",
            false,
        )
        .short(&["gctxentry"]),
    ]
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `GET /api/v1` or `GET /apis/{group}/{version}`.
pub fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
    {
        resources.push(json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
            "shortNames": t.short_names,
        }));
        if t.status {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// `GET /apis`: every named group with its versions, preferred first.
pub fn group_list(types: &[ResourceType]) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let entry = match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some(e) => e,
            None => {
                groups.push((t.group.clone(), Vec::new()));
                groups.last_mut().expect("just pushed")
            }
        };
        for v in &t.versions {
            if !entry.1.contains(v) {
                entry.1.push(v.clone());
            }
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({
                "name": name,
                "versions": versions,
                "preferredVersion": versions[0],
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`.
pub fn group(types: &[ResourceType], name: &str) -> Option<Value> {
    group_list(types)["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == name)
        .map(|g| {
            let mut g = g.clone();
            g["kind"] = "APIGroup".into();
            g["apiVersion"] = "v1".into();
            g
        })
}

fn group_versions(types: &[ResourceType]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for t in types {
        for v in &t.versions {
            let gv = (t.group.clone(), v.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: one document per group/version.
pub fn openapi_v3_index(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, version) in group_versions(types) {
        let path = gv_path(&group, &version);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=0")}),
        );
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/{api/v1 | apis/g/v}`: the operations of each type, with
/// the `fieldValidation` parameter on PATCH that tells kubectl to leave
/// validation to the server. Schemas are left open (no properties).
pub fn openapi_v3_document(types: &[ResourceType], gv: &str) -> Option<Value> {
    let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.versions.contains(&version))
    {
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        let prefix = if t.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(&group, &version),
                t.plural
            )
        } else {
            format!("/{}/{}", gv_path(&group, &version), t.plural)
        };
        let param = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
        paths.insert(
            format!("{prefix}/{{name}}"),
            json!({
                "get": {"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk},
                "put": {"x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk,
                        "parameters": [param("fieldValidation"), param("fieldManager")]},
                "patch": {"x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                          "parameters": [param("fieldValidation"), param("fieldManager"), param("force")]},
                "delete": {"x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk},
            }),
        );
        paths.insert(
            prefix,
            json!({
                "get": {"x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk},
                "post": {"x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk,
                         "parameters": [param("fieldValidation"), param("fieldManager")]},
            }),
        );
        let schema_name = format!(
            "{}.{version}.{}",
            if group.is_empty() {
                "io.k8s.api.core"
            } else {
                group.as_str()
            },
            t.kind
        );
        schemas.insert(
            schema_name,
            json!({"type": "object", "x-kubernetes-group-version-kind": [gvk]}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
