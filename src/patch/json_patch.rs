//! RFC 6902 JSON Patch: applying operations, and the patch that turns one
//! document into another (the admission response's `patch`).

use serde_json::{Map, Value, json};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    #[error("invalid patch: {0}")]
    Invalid(String),
    #[error("{op} operation does not apply: doc is missing path: {path}")]
    MissingPath { op: String, path: String },
    #[error("testing value {path} failed: test failed")]
    TestFailed { path: String },
}

/// Leniencies of the json-patch library Kyverno uses, off in RFC 6902.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// `remove` of a missing path does nothing.
    pub allow_missing_on_remove: bool,
    /// `add` creates missing parent objects (arrays when the next token is
    /// an index).
    pub ensure_path_on_add: bool,
    /// `-1` is the last element.
    pub negative_indices: bool,
}

impl Options {
    /// kyverno-compat: `ApplyOptions{SupportNegativeIndices,
    /// AllowMissingPathOnRemove, EnsurePathExistsOnAdd}`.
    pub const KYVERNO: Options = Options {
        allow_missing_on_remove: true,
        ensure_path_on_add: true,
        negative_indices: true,
    };
}

/// Parses a JSON Pointer into its unescaped tokens.
fn tokens(pointer: &str) -> Result<Vec<String>, PatchError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PatchError::Invalid(format!(
            "path {pointer:?} does not start with /"
        )));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// Escapes a key for use in a JSON Pointer.
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// An array index token; negative ones count from the end when allowed.
fn index(t: &str, len: usize, opts: Options) -> Option<usize> {
    match t.parse::<i64>().ok()? {
        i if i >= 0 => Some(i as usize),
        i if opts.negative_indices && (-i as usize) <= len => Some(len - (-i as usize)),
        _ => None,
    }
}

/// The container `tokens` (all but the last token of `path`) lead to;
/// `next` is the token after them, which decides what `create` makes.
fn parent_mut<'v>(
    doc: &'v mut Value,
    tokens: &[String],
    next: &str,
    op: &str,
    path: &str,
    opts: Options,
    create: bool,
) -> Result<&'v mut Value, PatchError> {
    let missing = || PatchError::MissingPath {
        op: op.into(),
        path: path.into(),
    };
    let mut cur = doc;
    for (n, t) in tokens.iter().enumerate() {
        let following = tokens.get(n + 1).map_or(next, String::as_str);
        let next_is_index = following == "-" || following.parse::<i64>().is_ok();
        let fresh = || {
            if next_is_index {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            }
        };
        cur = match cur {
            Value::Object(m) => {
                if create && !m.contains_key(t) {
                    m.insert(t.clone(), fresh());
                }
                m.get_mut(t).ok_or_else(missing)?
            }
            Value::Array(a) => {
                let i = match index(t, a.len(), opts) {
                    Some(i) if i < a.len() => i,
                    // evanphx/json-patch's EnsurePathExistsOnAdd appends
                    // the missing element.
                    _ if create && (t == "-" || t.parse::<i64>().is_ok()) => {
                        a.push(fresh());
                        a.len() - 1
                    }
                    _ => return Err(missing()),
                };
                &mut a[i]
            }
            _ => return Err(missing()),
        };
    }
    Ok(cur)
}

fn get(doc: &Value, path: &str, op: &str) -> Result<Value, PatchError> {
    let toks = tokens(path)?;
    let mut cur = doc;
    for t in &toks {
        cur = match cur {
            Value::Object(m) => m.get(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        }
        .ok_or_else(|| PatchError::MissingPath {
            op: op.into(),
            path: path.into(),
        })?;
    }
    Ok(cur.clone())
}

fn add(doc: &mut Value, path: &str, value: Value, opts: Options) -> Result<(), PatchError> {
    let toks = tokens(path)?;
    let Some((last, parents)) = toks.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(
        doc,
        parents,
        last,
        "add",
        path,
        opts,
        opts.ensure_path_on_add,
    )? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else if let Some(neg) = last.parse::<i64>().ok().filter(|i| *i < 0) {
                // For add, -1 is the position after the last element.
                let len = a.len() as i64;
                Some(neg + len + 1)
                    .filter(|i| opts.negative_indices && *i >= 0)
                    .map(|i| i as usize)
                    .ok_or_else(|| PatchError::MissingPath {
                        op: "add".into(),
                        path: path.into(),
                    })?
            } else {
                index(last, a.len(), opts)
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| PatchError::MissingPath {
                        op: "add".into(),
                        path: path.into(),
                    })?
            };
            a.insert(i, value);
            Ok(())
        }
        _ => Err(PatchError::MissingPath {
            op: "add".into(),
            path: path.into(),
        }),
    }
}

fn remove(doc: &mut Value, path: &str, op: &str, opts: Options) -> Result<Value, PatchError> {
    let toks = tokens(path)?;
    let missing = || PatchError::MissingPath {
        op: op.into(),
        path: path.into(),
    };
    let Some((last, parents)) = toks.split_last() else {
        return Err(missing());
    };
    match parent_mut(doc, parents, last, op, path, opts, false)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = index(last, a.len(), opts)
                .filter(|i| *i < a.len())
                .ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Applies a list of RFC 6902 operations to `doc`.
pub fn apply(doc: &mut Value, ops: &[Value]) -> Result<(), PatchError> {
    apply_with(doc, ops, Options::default())
}

/// [`apply`] with the given leniencies.
pub fn apply_with(doc: &mut Value, ops: &[Value], opts: Options) -> Result<(), PatchError> {
    let strict = Options::default();
    for op in ops {
        let field = |f: &str| op.get(f).and_then(Value::as_str);
        let name = field("op").ok_or_else(|| PatchError::Invalid(format!("no op in {op}")))?;
        let path = field("path").ok_or_else(|| PatchError::Invalid(format!("no path in {op}")))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| PatchError::Invalid(format!("no value in {op}")))
        };
        let from = || field("from").ok_or_else(|| PatchError::Invalid(format!("no from in {op}")));
        match name {
            "add" => add(doc, path, value()?, opts)?,
            "remove" => match remove(doc, path, "remove", opts) {
                Err(PatchError::MissingPath { .. }) if opts.allow_missing_on_remove => {}
                other => {
                    other?;
                }
            },
            "replace" if path.is_empty() => *doc = value()?,
            "replace" => {
                remove(doc, path, "replace", opts)?;
                add(doc, path, value()?, strict)?;
            }
            "move" => {
                let v = remove(doc, from()?, "move", opts)?;
                add(doc, path, v, opts)?;
            }
            "copy" => {
                let v = get(doc, from()?, "copy")?;
                add(doc, path, v, opts)?;
            }
            "test" => {
                if get(doc, path, "test")? != value()? {
                    return Err(PatchError::TestFailed { path: path.into() });
                }
            }
            other => return Err(PatchError::Invalid(format!("unknown op {other:?}"))),
        }
    }
    Ok(())
}

/// The operations that turn `from` into `to`: maps key by key, lists
/// element by element (a shorter list loses its tail from the end, so
/// indices stay valid), anything else replaced.
pub fn diff(from: &Value, to: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    diff_into(from, to, &mut String::new(), &mut ops);
    ops
}

fn diff_into(from: &Value, to: &Value, path: &mut String, ops: &mut Vec<Value>) {
    if from == to {
        return;
    }
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => diff_maps(a, b, path, ops),
        (Value::Array(a), Value::Array(b)) => {
            let common = a.len().min(b.len());
            for i in 0..common {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                diff_into(&a[i], &b[i], path, ops);
                path.truncate(len);
            }
            for i in (common..a.len()).rev() {
                ops.push(json!({"op": "remove", "path": format!("{path}/{i}")}));
            }
            for v in &b[common..] {
                ops.push(json!({"op": "add", "path": format!("{path}/-"), "value": v}));
            }
        }
        _ => ops.push(json!({"op": "replace", "path": path.clone(), "value": to})),
    }
}

fn diff_maps(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    path: &mut String,
    ops: &mut Vec<Value>,
) {
    for (k, v) in a {
        let len = path.len();
        path.push('/');
        path.push_str(&escape(k));
        match b.get(k) {
            Some(w) => diff_into(v, w, path, ops),
            None => ops.push(json!({"op": "remove", "path": path.clone()})),
        }
        path.truncate(len);
    }
    for (k, w) in b {
        if !a.contains_key(k) {
            ops.push(json!({"op": "add", "path": format!("{path}/{}", escape(k)), "value": w}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_operations() {
        let mut doc = json!({"a": {"b~c": 1, "d/e": [1, 2]}});
        let ops = json!([
            {"op": "add", "path": "/a/d~1e/-", "value": 3},
            {"op": "add", "path": "/a/d~1e/0", "value": 0},
            {"op": "replace", "path": "/a/b~0c", "value": 2},
            {"op": "copy", "from": "/a/b~0c", "path": "/x"},
            {"op": "move", "from": "/x", "path": "/y"},
            {"op": "test", "path": "/y", "value": 2},
            {"op": "remove", "path": "/a/d~1e/1"},
        ]);
        apply(&mut doc, ops.as_array().unwrap()).unwrap();
        assert_eq!(doc, json!({"a": {"b~c": 2, "d/e": [0, 2, 3]}, "y": 2}));
    }

    #[test]
    fn kyverno_leniencies() {
        let mut doc = json!({"spec": {"l": [1, 2]}});
        let ops = json!([
            {"op": "remove", "path": "/spec/missing"},
            {"op": "add", "path": "/spec/a/b", "value": 1},
            {"op": "add", "path": "/spec/c/0", "value": "x"},
            {"op": "remove", "path": "/spec/l/-1"},
        ]);
        apply_with(&mut doc, ops.as_array().unwrap(), Options::KYVERNO).unwrap();
        assert_eq!(doc, json!({"spec": {"l": [1], "a": {"b": 1}, "c": ["x"]}}));
    }

    #[test]
    fn missing_paths_are_errors() {
        let mut doc = json!({"a": 1});
        for op in [
            json!({"op": "remove", "path": "/b"}),
            json!({"op": "replace", "path": "/b", "value": 1}),
            json!({"op": "add", "path": "/b/c", "value": 1}),
        ] {
            let err = apply(&mut doc, &[op]).unwrap_err();
            assert!(err.to_string().contains("missing path"), "{err}");
        }
    }

    #[test]
    fn diff_applies_back() {
        let cases = [
            (
                json!({"a": 1, "b": [1, 2, 3]}),
                json!({"a": 2, "b": [1], "c/d": {"~": 1}}),
            ),
            (json!({"l": [{"n": 1}]}), json!({"l": [{"n": 2}, {"n": 3}]})),
            (json!([1]), json!({"x": 1})),
        ];
        for (from, to) in cases {
            let ops = diff(&from, &to);
            let mut doc = from.clone();
            apply(&mut doc, &ops).unwrap();
            assert_eq!(doc, to, "{ops:?}");
        }
        assert!(diff(&json!({"a": 1}), &json!({"a": 1})).is_empty());
    }
}
