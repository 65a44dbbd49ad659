//! The `kyverno-test.yaml` schema (kind `Test`). Keys match
//! case-insensitively, as Go's JSON decoding does; unknown keys are errors.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Lower-cases the keys of an object and rejects keys outside `allowed`.
pub fn lower_keys(v: &Value, allowed: &[&str]) -> Result<Map<String, Value>, String> {
    let Value::Object(m) = v else {
        return Err(format!("expected an object, got {v}"));
    };
    let mut out = Map::new();
    for (k, val) in m {
        let lk = k.to_ascii_lowercase();
        if !allowed.contains(&lk.as_str()) {
            return Err(format!("unknown field \"{k}\""));
        }
        out.insert(lk, val.clone());
    }
    Ok(out)
}

pub fn field<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or_default()
}

pub fn string_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

#[derive(Debug, Clone)]
pub struct ExpectedResult {
    /// `operation`: checked against a run of that operation.
    pub operation: Option<String>,
    pub policy: String,
    pub rule: String,
    pub resources: Vec<String>,
    pub result: String,
    pub patched_resources: Option<String>,
    pub generated_resource: Option<String>,
    /// `cloneSourceResource`: the clone source a generate rule reads.
    pub clone_source: Option<String>,
    /// Set for the CEL policy kinds (no rule names).
    pub is_cel_policy: bool,
}

#[derive(Debug, Clone)]
pub struct ApiCallMock {
    pub url: String,
    pub method: String,
    pub body: Value,
    /// `response.statusCode` (200 when unset).
    pub status_code: u64,
}

/// A `globalContextEntries` mock: what the entry holds, or why it holds
/// nothing (a lookup of it fails with that error, as Kyverno's mock store
/// answers).
#[derive(Debug, Clone)]
pub struct GlobalContextMock {
    pub name: String,
    pub data: Result<Value, String>,
}

/// `fieldPath`, then `projections` (each a path on what is left, into a
/// map), on a mock entry's objects.
fn resolve_mock(
    name: &str,
    root: Value,
    field_path: &str,
    projections: &[(String, String)],
) -> Result<Value, String> {
    let search = |expression: &str, on: &Value| -> Result<Value, String> {
        crate::jmespath::Expression::parse(expression)
            .and_then(|e| e.resolve(on).map(|v| v.into_owned()))
            .map_err(|e| e.to_string())
    };
    let root = match field_path {
        "" => root,
        path => search(path, &root)
            .map_err(|e| format!("globalContextEntries {name:?} fieldPath: {e}"))?,
    };
    if projections.is_empty() {
        return Ok(root);
    }
    let mut out = Map::new();
    for (p, path) in projections {
        let v = search(path, &root).map_err(|e| {
            format!("globalContextEntries {name:?} projection {p:?} path {path:?}: {e}")
        })?;
        out.insert(p.clone(), v);
    }
    Ok(Value::Object(out))
}

impl GlobalContextMock {
    /// One entry as Kyverno's CLI resolves it (`resolveGlobalContextMockData`):
    /// `data`, `resources` or the objects of `resourceFiles` (one of them),
    /// then `fieldPath`, then `projections` (a map of each projection's
    /// path on what is left).
    fn read(g: &Map<String, Value>, dir: &Path) -> Result<GlobalContextMock, String> {
        let name = field(g, "name").trim().to_string();
        if name.is_empty() {
            return Err("globalContextEntries: name is required".into());
        }
        let projections: Vec<(String, String)> = g
            .get("projections")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (text("name"), text("path"))
            })
            .collect();
        for (p, path) in &projections {
            if p.trim().is_empty() {
                return Err(format!(
                    "globalContextEntries entry {name:?}: projection name is required"
                ));
            }
            if path.trim().is_empty() {
                return Err(format!(
                    "globalContextEntries entry {name:?} projection {p:?}: path is required"
                ));
            }
        }
        let data = g.get("data").filter(|d| !d.is_null());
        let sources = [
            data.is_some(),
            g.contains_key("resources"),
            g.contains_key("resourcefiles"),
        ];
        match sources.iter().filter(|s| **s).count() {
            1 => {}
            0 => {
                return Err(format!(
                    "globalContextEntries entry {name:?}: one of data, resources, or \
                     resourceFiles is required"
                ));
            }
            _ => {
                return Err(format!(
                    "globalContextEntries entry {name:?}: data, resources, and resourceFiles \
                     are mutually exclusive"
                ));
            }
        }
        let root = match (data, g.get("resources"), g.get("resourcefiles")) {
            (Some(d), _, _) => d.clone(),
            (_, Some(r), _) => r.clone(),
            (_, _, files) => {
                let mut objects = Vec::new();
                for f in string_list(files) {
                    let text = std::fs::read_to_string(dir.join(&f)).map_err(|e| {
                        format!("globalContextEntries {name:?} resourceFiles {f:?}: read: {e}")
                    })?;
                    let docs =
                        crate::policy::load::parse_yaml_documents(&f, &text).map_err(|e| {
                            format!("globalContextEntries {name:?} resourceFiles {f:?}: {e}")
                        })?;
                    objects.extend(
                        docs.into_iter()
                            .filter(|d| d.as_object().is_some_and(|o| !o.is_empty())),
                    );
                }
                Value::Array(objects)
            }
        };
        let field_path = g.get("fieldpath").and_then(Value::as_str).unwrap_or("");
        let resolved = resolve_mock(&name, root, field_path, &projections);
        Ok(GlobalContextMock {
            name,
            data: resolved,
        })
    }

    /// What a lookup of `projection` of this entry finds (`""`: the whole
    /// value), as Kyverno's mock entry answers it.
    pub fn get(&self, projection: &str) -> Result<Value, String> {
        let value = self.data.clone()?;
        if projection.is_empty() {
            return Ok(value);
        }
        match value {
            Value::Object(mut m) => m
                .remove(projection)
                .ok_or_else(|| format!("global context mock: projection {projection:?} not found")),
            _ => Err(format!(
                "global context mock: projection {projection:?} requested but value is not an object"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct TestDoc {
    pub path: PathBuf,
    pub policies: Vec<PathBuf>,
    pub resources: Vec<PathBuf>,
    pub exceptions: Vec<PathBuf>,
    pub variables: Option<PathBuf>,
    pub inline_values: Option<Value>,
    pub userinfo: Option<PathBuf>,
    /// `context`: a `Context` file with the cluster's objects and image
    /// metadata that CEL lookups read.
    pub context: Option<PathBuf>,
    /// `clusterResources`: `ClusterResource` files whose objects (and
    /// CRDs) stand for the cluster: what lookups read.
    pub cluster_resources: Vec<PathBuf>,
    /// `jsonPayloads`: JSON documents for policies of `evaluation.mode:
    /// JSON`, each with its name as the test wrote it (results name it so).
    pub json_payloads: Vec<(PathBuf, String)>,
    /// `httpPayloads`: HTTP authorization requests for policies of
    /// `evaluation.mode: HTTP`, named as the test wrote them.
    pub http_payloads: Vec<(PathBuf, String)>,
    /// `envoyPayloads`: Envoy authorization requests for policies of
    /// `evaluation.mode: Envoy`.
    pub envoy_payloads: Vec<(PathBuf, String)>,
    pub target_resources: Vec<PathBuf>,
    /// `paramResources`: the params of parameterised CEL policies.
    pub param_resources: Vec<PathBuf>,
    pub api_calls: Vec<ApiCallMock>,
    pub global_context: Vec<GlobalContextMock>,
    pub results: Vec<ExpectedResult>,
}

const TEST_FIELDS: &[&str] = &[
    "apiversion",
    "kind",
    "metadata",
    "policies",
    "resources",
    "targetresources",
    "paramresources",
    "exceptions",
    "variables",
    "values",
    "userinfo",
    "context",
    "apicallresponses",
    "globalcontextentries",
    "results",
    "checks",
    "clusterresources",
    "jsonpayloads",
    "httppayloads",
    "envoypayloads",
    "name",
];

const RESULT_FIELDS: &[&str] = &[
    "operation",
    "policy",
    "rule",
    "resource",
    "resources",
    "resourcespecs",
    "namespace",
    "kind",
    "result",
    "status",
    "patchedresource",
    "patchedresources",
    "generatedresource",
    "clonesourceresource",
    "isvalidatingadmissionpolicy",
    "ismutatingadmissionpolicy",
    "isvalidatingpolicy",
    "ismutatingpolicy",
    "isgeneratingpolicy",
    "isdeletingpolicy",
    "isimagevalidatingpolicy",
];

fn dedup_paths(dir: &Path, v: Option<&Value>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in string_list(v) {
        let path = dir.join(&p);
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The entries of a list field (none when absent or not a list).
fn list<'v>(m: &'v Map<String, Value>, key: &str) -> impl Iterator<Item = &'v Value> {
    m.get(key).and_then(Value::as_array).into_iter().flatten()
}

impl ExpectedResult {
    /// One entry of `results`.
    fn read(r: &Value) -> Result<ExpectedResult, String> {
        let r = lower_keys(r, RESULT_FIELDS).map_err(|e| format!("results: {e}"))?;
        let mut resources = string_list(r.get("resources"));
        if let Some(single) = r.get("resource").and_then(Value::as_str) {
            resources.push(single.to_string());
        }
        let result = if r.contains_key("result") {
            field(&r, "result")
        } else {
            field(&r, "status")
        };
        let flag = |k: &str| r.get(k).and_then(Value::as_bool).unwrap_or(false);
        // `operation`: this result is of one more evaluation of the
        // resources, as that operation (Kyverno's CLI validates it so).
        let operation = match field(&r, "operation") {
            "" => None,
            op @ ("CREATE" | "UPDATE" | "DELETE") if !flag("isdeletingpolicy") => {
                Some(op.to_string())
            }
            "CREATE" | "UPDATE" | "DELETE" => {
                return Err(format!(
                    "results: policy {}: operation is not supported for deleting policies",
                    field(&r, "policy")
                ));
            }
            other => {
                return Err(format!(
                    "results: policy {}: invalid operation {other:?}, must be one of CREATE, UPDATE, DELETE",
                    field(&r, "policy")
                ));
            }
        };
        Ok(ExpectedResult {
            operation,
            policy: field(&r, "policy").to_string(),
            rule: field(&r, "rule").to_string(),
            resources,
            result: result.to_ascii_lowercase(),
            patched_resources: r
                .get("patchedresources")
                .or_else(|| r.get("patchedresource"))
                .and_then(Value::as_str)
                .map(str::to_string),
            generated_resource: r
                .get("generatedresource")
                .and_then(Value::as_str)
                .map(str::to_string),
            clone_source: r
                .get("clonesourceresource")
                .and_then(Value::as_str)
                .map(str::to_string),
            is_cel_policy: [
                "isvalidatingadmissionpolicy",
                "ismutatingadmissionpolicy",
                "isvalidatingpolicy",
                "ismutatingpolicy",
                "isgeneratingpolicy",
                "isdeletingpolicy",
                "isimagevalidatingpolicy",
            ]
            .iter()
            .any(|k| flag(k)),
        })
    }
}

impl ApiCallMock {
    /// One entry of `apiCallResponses`.
    fn read(c: &Value) -> Result<ApiCallMock, String> {
        let c = lower_keys(c, &["url", "urlpath", "method", "response"])
            .map_err(|e| format!("apiCallResponses: {e}"))?;
        let url = if c.contains_key("url") {
            field(&c, "url")
        } else {
            field(&c, "urlpath")
        };
        Ok(ApiCallMock {
            url: url.to_string(),
            method: c
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("GET")
                .to_string(),
            body: c
                .get("response")
                .and_then(|r| r.get("body"))
                .cloned()
                .unwrap_or(Value::Null),
            status_code: c
                .get("response")
                .and_then(|r| r.get("statusCode"))
                .and_then(Value::as_u64)
                .filter(|s| *s != 0)
                .unwrap_or(200),
        })
    }
}

impl TestDoc {
    pub fn parse(path: &Path, doc: &Value) -> Result<TestDoc, String> {
        let m = lower_keys(doc, TEST_FIELDS)?;
        if m.get("apiversion").is_none() || m.get("kind").is_none() || m.contains_key("name") {
            return Err(format!(
                "WARNING: test file ({}) uses a deprecated schema that will be removed in 1.15",
                path.display()
            ));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let join = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| dir.join(s))
        };
        let payloads = |k: &str| -> Vec<(PathBuf, String)> {
            string_list(m.get(k))
                .into_iter()
                .map(|p| (dir.join(&p), p))
                .collect()
        };
        let results = list(&m, "results")
            .map(ExpectedResult::read)
            .collect::<Result<Vec<_>, _>>()?;
        let api_calls = list(&m, "apicallresponses")
            .map(ApiCallMock::read)
            .collect::<Result<Vec<_>, _>>()?;
        let global_context = list(&m, "globalcontextentries")
            .map(|g| {
                let g = lower_keys(
                    g,
                    &[
                        "name",
                        "data",
                        "resources",
                        "resourcefiles",
                        "fieldpath",
                        "projections",
                    ],
                )
                .map_err(|e| format!("globalContextEntries: {e}"))?;
                GlobalContextMock::read(&g, dir)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = std::collections::HashSet::new();
        for g in &global_context {
            if !names.insert(g.name.as_str()) {
                return Err(format!("globalContextEntries: duplicate name {:?}", g.name));
            }
        }
        Ok(TestDoc {
            path: path.to_path_buf(),
            policies: dedup_paths(dir, m.get("policies")),
            resources: dedup_paths(dir, m.get("resources")),
            exceptions: dedup_paths(dir, m.get("exceptions")),
            target_resources: dedup_paths(dir, m.get("targetresources")),
            param_resources: dedup_paths(dir, m.get("paramresources")),
            variables: join("variables"),
            inline_values: m.get("values").cloned(),
            userinfo: join("userinfo"),
            context: join("context"),
            cluster_resources: dedup_paths(dir, m.get("clusterresources")),
            json_payloads: payloads("jsonpayloads"),
            http_payloads: payloads("httppayloads"),
            envoy_payloads: payloads("envoypayloads"),
            api_calls,
            global_context,
            results,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mock(entry: Value) -> Result<GlobalContextMock, String> {
        let dir = std::env::temp_dir().join(format!("gavel-gce-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("objects.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: ConfigMap\nmetadata: {name: b}\n",
        )
        .unwrap();
        GlobalContextMock::read(entry.as_object().unwrap(), &dir)
    }

    /// Kyverno's CLI (`resolveGlobalContextMockData`): one source, then
    /// fieldPath, then projections into a map.
    #[test]
    fn global_context_mocks_resolve_as_kyvernos() {
        let deployments = json!({"deployments": [{"name": "d1"}, {"name": "d2"}]});
        let m = mock(json!({"name": "e", "data": deployments.clone(),
            "projections": [{"name": "items", "path": "deployments"}]}))
        .unwrap();
        assert_eq!(
            m.get(""),
            Ok(json!({"items": [{"name": "d1"}, {"name": "d2"}]}))
        );
        assert_eq!(m.get("items").unwrap().as_array().unwrap().len(), 2);
        assert!(
            m.get("nope")
                .unwrap_err()
                .contains("projection \"nope\" not found")
        );
        let m =
            mock(json!({"name": "e", "data": deployments, "fieldpath": "deployments[0]"})).unwrap();
        assert_eq!(m.get(""), Ok(json!({"name": "d1"})));
        assert!(m.get("x").unwrap_err().contains("\"x\" not found"));
        let m = mock(json!({"name": "e", "resources": [{"kind": "A"}]})).unwrap();
        assert_eq!(m.get(""), Ok(json!([{"kind": "A"}])));
        assert!(m.get("x").unwrap_err().contains("value is not an object"));
        let m = mock(json!({"name": "f", "resourcefiles": ["objects.yaml"],
            "projections": [{"name": "names", "path": "[].metadata.name"}]}))
        .unwrap();
        assert_eq!(m.get("names"), Ok(json!(["a", "b"])));
        // A projection that fails is the entry's error, at lookup.
        let m = mock(json!({"name": "g", "data": {"a": 1},
            "projections": [{"name": "p", "path": "length(a)"}]}))
        .unwrap();
        assert!(
            m.get("")
                .unwrap_err()
                .contains("projection \"p\" path \"length(a)\"")
        );
        for (entry, want) in [
            (
                json!({"name": "h", "data": {}, "resources": []}),
                "mutually exclusive",
            ),
            (
                json!({"name": "h"}),
                "one of data, resources, or resourceFiles is required",
            ),
            (json!({"name": " ", "data": {}}), "name is required"),
            (
                json!({"name": "h", "data": {}, "projections": [{"name": "p"}]}),
                "path is required",
            ),
            (
                json!({"name": "h", "resourcefiles": ["missing.yaml"]}),
                "read:",
            ),
        ] {
            let e = mock(entry.clone()).unwrap_err();
            assert!(e.contains(want), "{entry}: {e}");
        }
    }
}
