//! The `images` builtin variable (docs/kyverno-semantics.md#built-in-variables):
//! container images of a Pod or pod template, split into registry, path,
//! name, tag and digest.

use crate::image_reference::ImageInfo;
use serde_json::{Map, Value, json};

/// Parses an image reference the way Kyverno's image utilities do.
pub fn parse_image(image: &str) -> Value {
    let info = ImageInfo::split(image);
    let reference = info.reference();
    let ImageInfo {
        registry,
        path,
        name,
        tag,
        digest,
    } = info;
    let base = format!("{registry}/{path}");
    let reference_with_tag = if tag.is_empty() {
        base.clone()
    } else {
        format!("{base}:{tag}")
    };
    let mut info = json!({
        "registry": registry,
        "path": path,
        "name": name,
        "reference": reference,
        "referenceWithTag": reference_with_tag,
    });
    // Kyverno's ImageInfo leaves an empty tag or digest out (`omitempty`):
    // `images.containers.x.tag` of an image with only a digest is an
    // unknown key there.
    for (key, value) in [("tag", tag), ("digest", digest)] {
        if !value.is_empty() {
            info[key] = Value::String(value);
        }
    }
    info
}

/// Builds `images` for a resource: `{containers: {<name>: info}, initContainers: ..., ephemeralContainers: ...}`.
pub fn images_of(resource: &Value) -> Option<Value> {
    let kind = resource
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let pod_spec = match kind {
        "Pod" => resource.get("spec"),
        "CronJob" => resource.pointer("/spec/jobTemplate/spec/template/spec"),
        _ => resource.pointer("/spec/template/spec"),
    }?;
    let mut out = Map::new();
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(list) = pod_spec.get(field).and_then(Value::as_array) else {
            continue;
        };
        let mut m = Map::new();
        for c in list {
            if let (Some(name), Some(image)) = (
                c.get("name").and_then(Value::as_str),
                c.get("image").and_then(Value::as_str),
            ) {
                m.insert(name.to_string(), parse_image(image));
            }
        }
        if !m.is_empty() {
            out.insert(field.to_string(), Value::Object(m));
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}
