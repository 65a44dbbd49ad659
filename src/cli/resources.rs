//! Resource files for the CLI: multi-document YAML, namespace defaulting for
//! namespaced kinds, and de-duplication (first one wins).

use crate::policy::load::{LoadError, parse_yaml_documents};
use serde_json::Value;
use std::path::Path;

use crate::kinds::is_cluster_scoped;

/// Kyverno normalises null maps in resources to `{}`.
fn normalise(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["labels", "annotations"] {
            if meta.get(k).is_some_and(Value::is_null) {
                meta.insert(k.into(), Value::Object(Default::default()));
            }
        }
    }
}

/// Loads resources from `path`, defaulting the namespace of namespaced kinds.
pub fn load_resources(path: &Path) -> Result<Vec<Value>, LoadError> {
    load(path, true)
}

/// Loads objects from `path` with their namespaces as written: for params,
/// whose kind's scope is read from the files themselves.
pub fn load_objects_as_written(path: &Path) -> Result<Vec<Value>, LoadError> {
    load(path, false)
}

fn load(path: &Path, default_namespaces: bool) -> Result<Vec<Value>, LoadError> {
    let file = path.display().to_string();
    let text = crate::policy::load::read_file(path)?;
    let mut out = Vec::new();
    for (index, mut doc) in parse_yaml_documents(&file, &text)?.into_iter().enumerate() {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind.is_empty() || !doc.is_object() {
            return Err(LoadError::Document {
                file: file.clone(),
                index,
                message: "resource has no kind".into(),
            });
        }
        // Kyverno's CLI refuses the whole file too (`Object 'apiVersion' is
        // missing`): without it no rule's kinds can be matched by group.
        if doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(LoadError::Document {
                file: file.clone(),
                index,
                message: format!("resource {kind} has no apiVersion"),
            });
        }
        if kind == "List" {
            if let Some(Value::Array(items)) = doc.get_mut("items").map(Value::take) {
                for mut item in items {
                    if default_namespaces {
                        default_namespace(&mut item);
                    }
                    out.push(item);
                }
            }
            continue;
        }
        if default_namespaces {
            default_namespace(&mut doc);
        }
        normalise(&mut doc);
        out.push(doc);
    }
    Ok(out)
}

fn default_namespace(doc: &mut Value) {
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if is_cluster_scoped(&kind) {
        return;
    }
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        let empty = meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if empty {
            meta.insert("namespace".into(), Value::String("default".into()));
        }
    }
}

/// `apiVersion,kind,namespace,name`: how results are keyed per resource.
pub fn resource_key(r: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        r.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}
