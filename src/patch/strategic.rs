//! Strategic merge of a patch into a document, as kustomize's kyaml merge
//! (which Kyverno uses) does it:
//!
//! - maps merge key by key; a `null` in the patch deletes the key;
//! - lists whose schema strategy is `merge` merge element by element on
//!   the merge key; other lists, and lists the schema does not know, are
//!   replaced (the filter Kyverno uses merges without kyaml's inference);
//! - the patch's elements come first, in patch order (merged with the
//!   document's of the same key), then the document's others (kyaml's
//!   "prepend": kyverno-compat, `patchstrategicmerge.Filter` asks for it);
//! - directives: `$patch: replace|delete|merge` on maps and list elements,
//!   `$retainKeys`, `$deleteFromPrimitiveList/<field>`,
//!   `$setElementOrder/<field>`.

use crate::kinds::schema::Schema;
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    /// kyaml's `InvalidNodeKindError`, worded as it is (the node as YAML
    /// after `node contents:`).
    #[error("wrong node kind: expected {expected} but got {}: node contents:\n{}", node_kind(.found), node_contents(.found))]
    Kind {
        expected: &'static str,
        found: Value,
    },
    #[error("invalid directive at {path}: {message}")]
    Directive { path: String, message: String },
}

/// Merges `patch` into `doc`. The schema comes from the document's
/// `apiVersion` and `kind`; without one, lists are replaced.
pub fn merge(doc: &Value, patch: &Value) -> Result<Value, MergeError> {
    merge_owned(doc.clone(), patch)
}

/// [`merge`] consuming the document: it is changed in place, never copied.
pub fn merge_owned(doc: Value, patch: &Value) -> Result<Value, MergeError> {
    let schema = match (
        doc.get("apiVersion").and_then(Value::as_str),
        doc.get("kind").and_then(Value::as_str),
    ) {
        (Some(a), Some(k)) => Schema::for_kind(a, k),
        _ => None,
    };
    let mut path = String::new();
    Ok(walk(Some(doc), Some(patch), schema, &mut path)?.unwrap_or(Value::Null))
}

/// kyaml's name of the node kind a value parses to.
pub fn node_kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "MappingNode",
        Value::Array(_) => "SequenceNode",
        _ => "ScalarNode",
    }
}

/// A node as kyaml prints it (`RNode.String`) when Kyverno parsed it from
/// JSON: flow style, strings double-quoted, with the trailing newline.
pub fn node_contents(v: &Value) -> String {
    fn flow(v: &Value, out: &mut String) {
        match v {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    flow(item, out);
                }
                out.push(']');
            }
            Value::Object(fields) => {
                out.push('{');
                for (i, (k, item)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push_str(": ");
                    flow(item, out);
                }
                out.push('}');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    flow(v, &mut out);
    out.push('\n');
    out
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Object(_) | Value::Array(_))
}

/// The merged value, or `None` when the field is to be removed.
fn walk(
    dest: Option<Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let dest = dest.filter(|d| !d.is_null());
    let src_present = src.filter(|s| !s.is_null());
    let Some(first) = dest.as_ref().or(src_present) else {
        // Both missing or null: a null in the patch clears the field.
        return Ok(None);
    };
    // kyaml's walker: every source must be of the first one's kind.
    for v in [dest.as_ref(), src_present].into_iter().flatten() {
        if node_kind(v) != node_kind(first) {
            return Err(MergeError::Kind {
                expected: node_kind(first),
                found: v.clone(),
            });
        }
    }
    match first {
        Value::Object(_) => walk_map(dest, src, schema, path),
        Value::Array(_) => walk_list(dest, src, schema, path),
        _ => Ok(match src {
            Some(Value::Null) => None,
            Some(s) => Some(s.clone()),
            None => dest,
        }),
    }
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const ELEMENT_ORDER: &str = "$setElementOrder/";

fn walk_map(
    dest: Option<Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let patch = match src {
        Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        _ => return Ok(dest),
    };
    match patch.get(PATCH).map(|v| v.as_str()) {
        None | Some(Some("merge")) => {}
        Some(Some("delete")) => return Ok(None),
        Some(Some("replace")) => {
            let mut out = Map::new();
            for (k, v) in patch.iter().filter(|(k, _)| !k.starts_with('$')) {
                if let Some(v) = walk(None, Some(v), schema.and_then(|s| s.field(k)), path)? {
                    out.insert(k.clone(), v);
                }
            }
            return Ok(Some(Value::Object(out)));
        }
        Some(other) => {
            return Err(MergeError::Directive {
                path: path.clone(),
                message: format!("unknown $patch value {other:?}"),
            });
        }
    }
    let mut out = match dest {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        let len = path.len();
        path.push('.');
        path.push_str(k);
        let child_schema = schema.and_then(|s| s.field(k));
        // In place when the key exists: no key copy, no re-insertion.
        if let Some(slot) = out.get_mut(k) {
            match walk(Some(std::mem::take(slot)), Some(v), child_schema, path)? {
                Some(m) => *slot = m,
                None => {
                    out.remove(k);
                }
            }
        } else if let Some(m) = walk(None, Some(v), child_schema, path)? {
            out.insert(k.clone(), m);
        }
        path.truncate(len);
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
        } else if let Some(field) = k.strip_prefix(ELEMENT_ORDER) {
            let key = schema
                .and_then(|s| s.field(field))
                .and_then(Schema::list_merge_key)
                .unwrap_or("");
            if let (Some(Value::Array(list)), Some(order)) = (out.get_mut(field), v.as_array()) {
                set_element_order(list, order, key);
            }
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let Some(keys) = retain.as_array() else {
            return Err(MergeError::Directive {
                path: path.clone(),
                message: "$retainKeys must be a list of strings".into(),
            });
        };
        out.retain(|k, _| keys.iter().any(|r| r.as_str() == Some(k)));
    }
    Ok(Some(Value::Object(out)))
}

/// Orders `list` as `order` lists its elements (by merge key, or by value
/// for scalars); elements not in `order` keep their place after them.
fn set_element_order(list: &mut [Value], order: &[Value], key: &str) {
    let rank = |v: &Value| {
        let id = if key.is_empty() { Some(v) } else { v.get(key) };
        id.and_then(|id| {
            order.iter().position(|o| {
                if key.is_empty() {
                    o == id
                } else {
                    o.get(key) == Some(id)
                }
            })
        })
        .unwrap_or(usize::MAX)
    };
    list.sort_by_key(rank);
}

fn walk_list(
    dest: Option<Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let src_list = match src {
        Some(Value::Null) => return Ok(None),
        Some(Value::Array(l)) => l,
        _ => return Ok(dest),
    };
    let dest_list = match dest {
        Some(Value::Array(l)) => Some(l),
        _ => None,
    };
    // `$patch: replace` as an element replaces the whole list.
    if src_list
        .iter()
        .any(|e| e.get(PATCH).and_then(Value::as_str) == Some("replace"))
    {
        let kept = src_list
            .iter()
            .filter(|e| e.get(PATCH).is_none())
            .cloned()
            .collect();
        return Ok(Some(Value::Array(kept)));
    }
    let replaced = || Ok(Some(Value::Array(src_list.clone())));
    let key = match schema {
        Some(s @ Schema::List(_)) => match s.list_merge_key() {
            Some(k) => k,
            None => return replaced(),
        },
        // No schema (a custom resource, a field the schema does not
        // know): kyaml infers no key here, since the filter Kyverno uses
        // merges without InferAssociativeLists, so the patch's list
        // replaces the document's (checked with Kyverno's CLI on a
        // custom resource).
        _ => return replaced(),
    };
    // Merged by a key, every element is read as a map: kyaml fails on
    // the first that is not (the document's, then the patch's).
    if !key.is_empty() {
        let elements = dest_list.iter().flatten().chain(src_list.iter());
        if let Some(e) = elements
            .into_iter()
            .find(|e| !e.is_null() && !e.is_object())
        {
            return Err(MergeError::Kind {
                expected: "MappingNode",
                found: e.clone(),
            });
        }
    }
    let elem_schema = schema.and_then(Schema::elements);
    // Nothing to merge into: kyaml merges the patch's list with itself,
    // which resolves directives and keeps elements without the key.
    let dest_list = dest_list.unwrap_or_else(|| src_list.clone());
    let merged = merge_elements(dest_list, src_list, key, elem_schema, path)?;
    Ok(Some(Value::Array(merged)))
}

/// The identity of a list element: its merge key's value, or the element
/// itself for a list of scalars (`key` empty).
fn identity<'v>(e: &'v Value, key: &str) -> Option<&'v Value> {
    if key.is_empty() {
        Some(e).filter(|e| is_scalar(e))
    } else {
        e.get(key).filter(|v| !v.is_null())
    }
}

fn is_delete(e: &Value) -> bool {
    e.get(PATCH).and_then(Value::as_str) == Some("delete")
}

fn merge_elements(
    dest: Vec<Value>,
    src: &[Value],
    key: &str,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Vec<Value>, MergeError> {
    let mut dest: Vec<Option<Value>> = dest.into_iter().map(Some).collect();
    // A repeated key in the document: kyaml keeps the first element.
    for i in 1..dest.len() {
        let (before, rest) = dest.split_at(i);
        let repeated = rest[0]
            .as_ref()
            .and_then(|d| identity(d, key))
            .is_some_and(|id| {
                before
                    .iter()
                    .flatten()
                    .any(|d| identity(d, key) == Some(id))
            });
        if repeated {
            dest[i] = None;
        }
    }
    let take = |dest: &mut [Option<Value>], id: &Value| {
        dest.iter_mut()
            .find(|d| d.as_ref().and_then(|d| identity(d, key)) == Some(id))
            .and_then(Option::take)
    };
    let deleted = |id: &Value| {
        src.iter()
            .any(|e| is_delete(e) && identity(e, key) == Some(id))
    };
    let mut out = Vec::with_capacity(dest.len() + src.len());
    // kyverno-compat: kyaml merges as kustomize's patchstrategicmerge filter
    // asks, with ListIncreaseDirection Prepend: the patch's elements come
    // first, in patch order, each merged with the document's element of
    // the same key, then the document's others in their order (checked
    // with Kyverno's CLI: containers [c0, c1, c2] patched with [c1, new,
    // c0] give [c1, new, c0, c2]); patch elements without the key are
    // dropped.
    let mut seen: Vec<&Value> = Vec::new();
    for e in src {
        let Some(id) = identity(e, key) else {
            continue;
        };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let d = take(&mut dest, id);
        if deleted(id) {
            continue;
        }
        if key.is_empty() {
            out.push(d.unwrap_or_else(|| e.clone()));
            continue;
        }
        let s = src
            .iter()
            .find(|e| !is_delete(e) && identity(e, key) == Some(id));
        push_merged(&mut out, d, s, key, id, schema, path)?;
    }
    for slot in dest.iter_mut() {
        // Document elements without the key stay, at the end.
        let Some(id) = slot.as_ref().and_then(|d| identity(d, key)).cloned() else {
            continue;
        };
        let d = slot.take();
        if key.is_empty() {
            out.extend(d);
            continue;
        }
        push_merged(&mut out, d, None, key, &id, schema, path)?;
    }
    out.extend(dest.into_iter().flatten());
    Ok(out)
}

fn push_merged(
    out: &mut Vec<Value>,
    dest: Option<Value>,
    src: Option<&Value>,
    key: &str,
    id: &Value,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<(), MergeError> {
    let len = path.len();
    // Cheap on the happy path: the element is named only if an error quotes the path.
    path.push('[');
    path.push_str(key);
    path.push('=');
    match id {
        Value::String(s) => path.push_str(s),
        other => path.push_str(&other.to_string()),
    }
    path.push(']');
    let merged = walk(dest, src, schema, path)?;
    path.truncate(len);
    match merged {
        Some(Value::Object(m)) if m.is_empty() => {}
        None | Some(Value::Null) => {}
        Some(mut v) => {
            if let Value::Object(m) = &mut v {
                m.remove(PATCH);
                if !m.contains_key(key) {
                    m.insert(key.to_string(), id.clone());
                }
            }
            out.push(v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
