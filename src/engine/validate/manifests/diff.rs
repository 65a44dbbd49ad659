//! Comparing a resource with its signed manifest as k8s-manifest-sigstore's
//! `mapnode` does: both are flattened to dotted keys
//! (`spec.ports.0.port`) with scalar leaves (null, empty maps and empty
//! lists leave no key), and the differences are keyed by those paths, with
//! the manifest's value as `before` and the resource's as `after`.

use crate::policy::manifests::FieldPattern;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// A scalar leaf. Numbers are Go's `float64`, as YAML and JSON decode
/// them into `interface{}`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Leaf {
    Str(String),
    Num(f64),
    Bool(bool),
}

impl Leaf {
    fn of(v: &Value) -> Option<Leaf> {
        match v {
            Value::String(s) => Some(Leaf::Str(s.clone())),
            Value::Number(n) => n.as_f64().map(Leaf::Num),
            Value::Bool(b) => Some(Leaf::Bool(*b)),
            _ => None,
        }
    }

    /// Go's `%v`.
    pub(super) fn text(&self) -> String {
        match self {
            Leaf::Str(s) => s.clone(),
            Leaf::Num(n) => go_float(*n),
            Leaf::Bool(b) => b.to_string(),
        }
    }

    fn go_type(&self) -> &'static str {
        match self {
            Leaf::Str(_) => "string",
            Leaf::Num(_) => "float64",
            Leaf::Bool(_) => "bool",
        }
    }

    /// Go's `%s`, which marks a value that is not a string.
    fn go_s(&self) -> String {
        match self {
            Leaf::Str(s) => s.clone(),
            other => format!("%!s({}={})", other.go_type(), other.text()),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Leaf::Str(s) => Value::String(s.clone()),
            Leaf::Bool(b) => Value::Bool(*b),
            Leaf::Num(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Value::from(*n as i64),
            Leaf::Num(n) => serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number),
        }
    }
}

/// An integral float as Go prints it with `%v` below 1e21, else Rust's
/// shortest form.
fn go_float(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

/// The object flattened: each scalar leaf by its dotted path. A subtree
/// whose path a `mask` pattern matches is left out.
pub(super) fn ravel(v: &Value, masks: &[&FieldPattern]) -> BTreeMap<String, Leaf> {
    fn walk(v: &Value, path: &str, masks: &[&FieldPattern], out: &mut BTreeMap<String, Leaf>) {
        let child = |key: &str| {
            if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            }
        };
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let key = child(k);
                    if !masks.iter().any(|p| p.masks(&key)) {
                        walk(v, &key, masks, out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let key = child(&i.to_string());
                    if !masks.iter().any(|p| p.masks(&key)) {
                        walk(v, &key, masks, out);
                    }
                }
            }
            leaf => {
                if let Some(l) = Leaf::of(leaf) {
                    out.insert(path.to_string(), l);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(v, "", masks, &mut out);
    out
}

/// One difference; `None` is a key the side lacks.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Difference {
    pub key: String,
    pub before: Option<Leaf>,
    pub after: Option<Leaf>,
}

/// `mapnode.Diff` (nil and the zero value of a type are the same only for
/// the empty string: what Go's comparison of a `reflect.Value` with
/// `reflect.Zero` amounts to), sorted by key.
pub(super) fn diff(before: &Value, after: &Value) -> Vec<Difference> {
    let m1 = ravel(before, &[]);
    let m2 = ravel(after, &[]);
    let mut items = Vec::new();
    let mut type_diffs = Vec::new();
    let keys: std::collections::BTreeSet<&String> = m1.keys().chain(m2.keys()).collect();
    for key in keys {
        let (b, a) = (m1.get(key), m2.get(key));
        match (b, a) {
            (Some(b), Some(a)) if std::mem::discriminant(b) != std::mem::discriminant(a) => {
                type_diffs.push(Difference {
                    key: key.clone(),
                    before: Some(Leaf::Str(format!("(type: {}) {}", b.go_type(), b.go_s()))),
                    after: Some(Leaf::Str(format!("(type: {}) {}", a.go_type(), a.go_s()))),
                });
            }
            (b, a) if b != a => items.push(Difference {
                key: key.clone(),
                before: b.cloned(),
                after: a.cloned(),
            }),
            _ => {}
        }
    }
    let mut items = remove_moved_list_items(items);
    items.retain(|d| {
        !matches!(
            (&d.before, &d.after),
            (None, Some(Leaf::Str(s))) | (Some(Leaf::Str(s)), None) if s.is_empty()
        )
    });
    items.extend(type_diffs);
    items.sort_by(|x, y| x.key.cmp(&y.key));
    items
}

static LIST_INDEX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\.\d+\.").expect("a valid pattern"));

/// `removeKeyDiffsInListNode`: an element of a list that is only at
/// another index on the other side (a value deleted at one index and
/// created with the same value at another) is no difference.
fn remove_moved_list_items(items: Vec<Difference>) -> Vec<Difference> {
    let keep: Vec<bool> = items
        .iter()
        .map(|item| {
            if !LIST_INDEX.is_match(&item.key) || (item.before.is_some() && item.after.is_some()) {
                return true;
            }
            let pattern = LIST_INDEX.replace_all(&item.key, regex::NoExpand(r"\.\d+\."));
            let Ok(search) = Regex::new(&pattern) else {
                return true;
            };
            !items.iter().any(|other| {
                search.is_match(&other.key)
                    && ((item.after.is_none()
                        && other.before.is_none()
                        && item.before == other.after)
                        || (item.before.is_none()
                            && other.after.is_none()
                            && item.after == other.before))
            })
        })
        .collect();
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(d, k)| k.then_some(d))
        .collect()
}

/// `removeCanonicalizedImageDiff`: an image the resource names in its
/// canonical form (`docker.io/nginx:1.27` for `nginx:1.27`, `ubuntu:latest`
/// for `ubuntu`) is no difference.
pub(super) fn remove_canonical_images(items: &mut Vec<Difference>) {
    items.retain(|d| {
        if !d.key.ends_with("image") {
            return true;
        }
        match (&d.before, &d.after) {
            (Some(Leaf::Str(b)), Some(Leaf::Str(a))) => {
                !(a.strip_prefix("docker.io/") == Some(b.as_str())
                    || a.strip_suffix(":latest") == Some(b.as_str()))
            }
            _ => true,
        }
    });
}

/// The differences no ignored field filters out (`DiffResult.Filter`).
pub(super) fn unfiltered(items: Vec<Difference>, ignored: &[&FieldPattern]) -> Vec<Difference> {
    items
        .into_iter()
        .filter(|d| !ignored.iter().any(|p| p.filters(&d.key)))
        .collect()
}

/// The differences as k8s-manifest-sigstore prints them in a failure
/// (`{"items":[{"key":…,"values":{"after":…,"before":…}}]}`), with Go's
/// escaping of `<`, `>` and `&`.
pub(super) fn to_json(items: &[Difference]) -> String {
    let value = |l: &Option<Leaf>| l.as_ref().map_or(Value::Null, Leaf::to_json);
    let items: Vec<Value> = items
        .iter()
        .map(|d| {
            serde_json::json!({
                "key": d.key,
                "values": {"after": value(&d.after), "before": value(&d.before)},
            })
        })
        .collect();
    go_json(&serde_json::json!({ "items": items }))
}

/// JSON as Go's `encoding/json` writes it: sorted keys (serde_json's map
/// is sorted), HTML characters escaped.
pub(super) fn go_json(v: &Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
