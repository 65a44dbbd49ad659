//! Strategic merge of a patch into a document, as kustomize's kyaml merge
//! (which Kyverno uses) does it:
//!
//! - maps merge key by key; a `null` in the patch deletes the key;
//! - lists whose schema strategy is `merge` merge element by element on
//!   the merge key; lists of unknown types are merged the same way when all
//!   their elements carry one of kyaml's associative keys; other lists are
//!   replaced;
//! - elements only in the patch come first (kyaml's "prepend"), then the
//!   document's (kyverno-compat: `patchstrategicmerge.Filter` prepends);
//! - directives: `$patch: replace|delete|merge` on maps and list elements,
//!   `$retainKeys`, `$deleteFromPrimitiveList/<field>`,
//!   `$setElementOrder/<field>`.

use super::schema::Schema;
use serde_json::{Map, Value};

/// kyaml's associative keys, tried in this order for lists without a schema.
const ASSOCIATIVE_KEYS: [&str; 7] = [
    "mountPath",
    "devicePath",
    "ip",
    "type",
    "topologyKey",
    "name",
    "containerPort",
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error("wrong node kind at {path}: expected {expected}, got {found}")]
    Kind {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("conflicting merge keys [{0},{1}] for field {2}")]
    ConflictingKeys(String, String, String),
    #[error("invalid directive at {path}: {message}")]
    Directive { path: String, message: String },
}

/// Merges `patch` into `doc`. The schema comes from the document's
/// `apiVersion` and `kind`; without one, lists are merged by inference.
pub fn merge(doc: &Value, patch: &Value) -> Result<Value, MergeError> {
    let schema = ["apiVersion", "kind"]
        .iter()
        .map(|f| doc.get(f).and_then(Value::as_str))
        .collect::<Option<Vec<_>>>()
        .and_then(|v| Schema::for_kind(v[0], v[1]));
    let mut path = String::new();
    Ok(walk(Some(doc), Some(patch), schema, &mut path)?.unwrap_or(Value::Null))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "map",
        Value::Array(_) => "sequence",
        Value::Null => "null",
        _ => "scalar",
    }
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// The merged value, or `None` when the field is to be removed.
fn walk(
    dest: Option<&Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let Some(first) = present(dest).or(present(src)) else {
        // Both missing or null: a null in the patch clears the field.
        return Ok(match src {
            Some(Value::Null) => None,
            _ => dest.cloned().filter(|d| !d.is_null()),
        });
    };
    for v in [present(dest), present(src)].into_iter().flatten() {
        if std::mem::discriminant(v) != std::mem::discriminant(first)
            && !(is_scalar(v) && is_scalar(first))
        {
            return Err(MergeError::Kind {
                path: path.clone(),
                expected: kind_name(first),
                found: kind_name(v),
            });
        }
    }
    match first {
        Value::Object(_) => walk_map(dest, src, schema, path),
        Value::Array(_) => walk_list(dest, src, schema, path),
        _ => Ok(match src {
            Some(Value::Null) => None,
            Some(s) => Some(s.clone()),
            None => dest.cloned(),
        }),
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Object(_) | Value::Array(_))
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const ELEMENT_ORDER: &str = "$setElementOrder/";

fn walk_map(
    dest: Option<&Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let src_map = match src {
        Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => Some(m),
        _ => None,
    };
    let dest_map = present(dest).and_then(Value::as_object);
    let Some(patch) = src_map else {
        return Ok(dest.cloned());
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
    let mut out = dest_map.cloned().unwrap_or_default();
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        let len = path.len();
        path.push('.');
        path.push_str(k);
        let merged = walk(out.get(k), Some(v), schema.and_then(|s| s.field(k)), path)?;
        path.truncate(len);
        match merged {
            Some(m) => {
                out.insert(k.clone(), m);
            }
            None => {
                out.remove(k);
            }
        }
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

/// kyaml's inference: the first associative key that every element of a
/// list has (an empty list qualifies for the first key).
fn inferred_key(list: &[Value]) -> Option<&'static str> {
    ASSOCIATIVE_KEYS
        .into_iter()
        .find(|k| list.iter().all(|e| e.get(k).is_some()))
}

fn walk_list(
    dest: Option<&Value>,
    src: Option<&Value>,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Option<Value>, MergeError> {
    let src_list = match src {
        Some(Value::Null) => return Ok(None),
        Some(Value::Array(l)) => l,
        _ => return Ok(dest.cloned()),
    };
    let dest_list = present(dest).and_then(Value::as_array);
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
    let key = match schema {
        Some(s @ Schema::List(_)) => match s.list_merge_key() {
            Some(k) => Some(k),
            None => return Ok(Some(Value::Array(src_list.clone()))),
        },
        _ => {
            let sources = [dest_list, Some(src_list)];
            if !sources.iter().flatten().any(|l| inferred_key(l).is_some()) {
                return Ok(Some(Value::Array(src_list.clone())));
            }
            let mut key: Option<&'static str> = None;
            for l in sources.into_iter().flatten().filter(|l| !l.is_empty()) {
                let k = inferred_key(l);
                match (key, k) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(MergeError::ConflictingKeys(
                            a.into(),
                            b.into(),
                            path.clone(),
                        ));
                    }
                    (_, Some(b)) => key = Some(b),
                    // A list whose elements share no key: kyaml fails
                    // with "no merge key"; replacing is the safe reading.
                    (_, None) => return Ok(Some(Value::Array(src_list.clone()))),
                }
            }
            match key {
                Some(k) => Some(k),
                None => return Ok(Some(Value::Array(src_list.clone()))),
            }
        }
    };
    let elem_schema = schema.and_then(Schema::elements);
    // Nothing to merge into: kyaml merges the patch's list with itself,
    // which resolves directives and keeps elements without the key.
    let dest_list = dest_list.map_or(src_list.as_slice(), Vec::as_slice);
    let merged = merge_elements(dest_list, src_list, key.unwrap_or(""), elem_schema, path)?;
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

fn merge_elements(
    dest: &[Value],
    src: &[Value],
    key: &str,
    schema: Option<Schema>,
    path: &mut String,
) -> Result<Vec<Value>, MergeError> {
    // kyverno-compat: elements only in the patch come first, in patch
    // order, then the document's in their order (what Kyverno's
    // patchedResources show); patch elements without the key are dropped.
    let mut ids: Vec<&Value> = Vec::new();
    let in_dest = |id: &Value| dest.iter().any(|d| identity(d, key) == Some(id));
    let new_first = src
        .iter()
        .filter(|e| identity(e, key).is_some_and(|id| !in_dest(id)))
        .chain(dest);
    for e in new_first {
        if e.get(PATCH).and_then(Value::as_str) == Some("delete") {
            continue;
        }
        if let Some(id) = identity(e, key)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    let deleted = |id: &Value| {
        src.iter().any(|e| {
            e.get(PATCH).and_then(Value::as_str) == Some("delete") && identity(e, key) == Some(id)
        })
    };
    let find =
        |list: &[Value], id: &Value| list.iter().find(|e| identity(e, key) == Some(id)).cloned();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if deleted(id) {
            continue;
        }
        if key.is_empty() {
            out.push(id.clone());
            continue;
        }
        let d = find(dest, id);
        let s = find(src, id).map(|mut s| {
            if let Value::Object(m) = &mut s {
                m.remove(PATCH);
            }
            s
        });
        let len = path.len();
        path.push_str(&format!("[{key}={}]", id));
        let merged = walk(d.as_ref(), s.as_ref(), schema, path)?;
        path.truncate(len);
        match merged {
            Some(Value::Object(m)) if m.is_empty() => {}
            Some(Value::Null) | None => {}
            Some(mut v) => {
                if let Value::Object(m) = &mut v
                    && !m.contains_key(key)
                {
                    m.insert(key.to_string(), id.clone());
                }
                out.push(v);
            }
        }
    }
    // Document elements without the key stay, at the end.
    out.extend(dest.iter().filter(|e| identity(e, key).is_none()).cloned());
    Ok(out)
}

#[cfg(test)]
mod tests;
