//! The PATCH bodies the API accepts: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386) and strategic merge patch (built-in types only).

use serde_json::{Map, Value};

/// RFC 6902. Any failed operation fails the whole patch.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops.as_array().ok_or("a JSON patch must be a list")?;
    let mut out = doc.clone();
    for op in ops {
        let field = |name: &str| -> Result<&str, String> {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("JSON patch operation without {name:?}: {op}"))
        };
        let path = field("path")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("JSON patch operation without \"value\": {op}"))
        };
        match field("op")? {
            "add" => add(&mut out, path, value()?)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                remove(&mut out, path)?;
                add(&mut out, path, value()?)?;
            }
            "move" => {
                let v = remove(&mut out, field("from")?)?;
                add(&mut out, path, v)?;
            }
            "copy" => {
                let v = out
                    .pointer(&unescape_pointer(field("from")?)?)
                    .cloned()
                    .ok_or_else(|| format!("JSON patch: nothing at {}", field("from").unwrap()))?;
                add(&mut out, path, v)?;
            }
            "test" => {
                if out.pointer(&unescape_pointer(path)?) != Some(&value()?) {
                    return Err(format!("JSON patch: test failed at {path}"));
                }
            }
            other => return Err(format!("JSON patch: unknown operation {other:?}")),
        }
    }
    *doc = out;
    Ok(())
}

/// Checks the pointer syntax; serde_json's `pointer` does the unescaping.
fn unescape_pointer(path: &str) -> Result<String, String> {
    if !path.is_empty() && !path.starts_with('/') {
        return Err(format!("JSON patch: invalid path {path:?}"));
    }
    Ok(path.to_string())
}

fn split(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("JSON patch: invalid path {path:?}"))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    let target = doc
        .pointer_mut(parent)
        .ok_or_else(|| format!("JSON patch: no parent for {path}"))?;
    match target {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let index = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| format!("JSON patch: index out of range at {path}"))?
            };
            a.insert(index, value);
        }
        _ => return Err(format!("JSON patch: cannot add below a scalar at {path}")),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    let missing = || format!("JSON patch: nothing to remove at {path}");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// RFC 7386: objects merge, null deletes, anything else replaces.
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let target = doc.as_object_mut().expect("object");
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// List fields of built-in types that merge by a key instead of being
/// replaced (the `x-kubernetes-patch-merge-key` of the OpenAPI schema).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "volumeMounts"
        | "imagePullSecrets"
        | "webhooks" => "name",
        "ports" => "containerPort",
        _ => return None,
    })
}

/// Strategic merge: a merge patch where keyed lists merge element by
/// element, `$patch: delete|replace` directives apply, and the order and
/// retain-keys directives that kubectl sends are accepted.
pub fn strategic_merge(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        *doc = patch.clone();
        return Ok(());
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = patch.clone();
        p.remove("$patch");
        *doc = Value::Object(p);
        return Ok(());
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let target = doc.as_object_mut().expect("object");
    for (k, v) in patch {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (target.get_mut(field), v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        match (v, merge_key(k), target.get_mut(k)) {
            (Value::Null, _, _) => {
                target.remove(k);
            }
            (Value::Array(items), Some(key), Some(Value::Array(existing))) => {
                merge_list(existing, items, key)?
            }
            (Value::Object(_), _, Some(existing)) if existing.is_object() => {
                strategic_merge(existing, v)?
            }
            _ => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, v)?;
                target.insert(k.clone(), fresh);
            }
        }
    }
    Ok(())
}

fn merge_list(existing: &mut Vec<Value>, items: &[Value], key: &str) -> Result<(), String> {
    for item in items {
        let id = item
            .get(key)
            .ok_or_else(|| format!("strategic merge: list element without merge key {key:?}"))?;
        let pos = existing.iter().position(|e| e.get(key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut existing[i], item)?,
            (None, false) => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, item)?;
                existing.push(fresh);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patches() {
        let mut doc = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/a/c/-", "value": 3},
                {"op": "replace", "path": "/d", "value": "y"},
                {"op": "move", "from": "/a/b", "path": "/e"},
                {"op": "test", "path": "/e", "value": 1},
            ]),
        )
        .unwrap();
        assert_eq!(doc, json!({"a": {"c": [1, 2, 3]}, "d": "y", "e": 1}));
        let before = doc.clone();
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/zz"}])).is_err());
        assert_eq!(doc, before, "a failed patch changes nothing");

        merge_patch(&mut doc, &json!({"a": null, "d": {"x": 1}}));
        assert_eq!(doc, json!({"d": {"x": 1}, "e": 1}));

        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "a", "image": "y"}, {"name": "b", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(
            pod,
            json!({"spec": {"containers": [{"name": "a", "image": "y"}]}})
        );
    }
}
