//! Server-side apply's typed conversion (structured-merge-diff's `AsTyped`
//! validation) and the API server's guard against apply configurations
//! that set atomic values: what a MutatingAdmissionPolicy's (and Kyverno's
//! MutatingPolicy's) ApplyConfiguration goes through before it is merged.
//!
//! Errors are worded as structured-merge-diff words them, Go's formatting
//! of the values included, since users compare them with Kyverno's. One
//! deliberate difference: a field the schema does not declare is not an
//! error here (structured-merge-diff says `field not declared in schema`),
//! because the schema is that of the oldest Kubernetes gavel supports and
//! a newer cluster's fields must not fail.

use crate::kinds::schema::{Atom, ListKind, Schema};
use serde_json::Value;
use std::fmt::Write;

/// Whether an associative list may hold two items with the same key: the
/// live object may (apply tolerates what is stored), an apply
/// configuration may not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Duplicates {
    Allowed,
    Refused,
}

/// Checks `value` against the type at `schema`, as structured-merge-diff
/// converts an object to a typed value. The error reads as its
/// `ValidationErrors` (one per line after `errors:` when there are more).
pub fn check(value: &Value, schema: Schema, duplicates: Duplicates) -> Result<(), String> {
    let mut errors = Vec::new();
    let mut path = String::new();
    walk(value, schema, &mut path, duplicates, &mut errors);
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(one.to_string()),
        many => {
            let mut text = String::from("errors:");
            for e in many {
                let _ = write!(text, "\n  {e}");
            }
            Err(text)
        }
    }
}

/// The paths of the atomic lists, structs and maps an apply configuration
/// sets, which the API server's mutating admission refuses
/// (`validatePatch`: `may not mutate atomic arrays, maps or structs`).
pub fn atomic_paths(config: &Value, schema: Schema) -> Vec<String> {
    let mut found = Vec::new();
    let mut path = String::new();
    find_atomics(config, schema, &mut path, &mut found);
    found
}

struct Invalid {
    path: String,
    message: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

fn invalid(errors: &mut Vec<Invalid>, path: &str, message: String) {
    errors.push(Invalid {
        path: path.to_string(),
        message,
    });
}

fn walk(
    value: &Value,
    schema: Schema,
    path: &mut String,
    duplicates: Duplicates,
    errors: &mut Vec<Invalid>,
) {
    // A null is a valid value of every type.
    if value.is_null() {
        return;
    }
    // An object with declared fields and a map field walk alike: each
    // entry against what `field` says of its key (undeclared: unchecked).
    let is_map = match schema {
        Schema::Type(_) => matches!(schema.atom(), Some(Atom::Struct { .. })),
        Schema::MapOf(_) => true,
        Schema::List(_) | Schema::Opaque => false,
    };
    if is_map {
        let Some(entries) = value.as_object() else {
            return invalid(
                errors,
                path,
                format!("expected map, got {}", pointer_v(value)),
            );
        };
        for (key, v) in entries {
            let Some(sub) = schema.field(key) else {
                continue;
            };
            let len = path.len();
            path.push('.');
            path.push_str(key);
            walk(v, sub, path, duplicates, errors);
            path.truncate(len);
        }
        return;
    }
    match schema {
        Schema::Type(_) => match schema.atom() {
            Some(Atom::Deduced | Atom::Struct { .. }) | None => {}
            Some(scalar) => {
                if let Some(message) = scalar_error(scalar, value) {
                    invalid(errors, path, message);
                }
            }
        },
        Schema::MapOf(_) | Schema::Opaque => {}
        Schema::List(_) => {
            let Some(items) = value.as_array() else {
                return invalid(
                    errors,
                    path,
                    format!("expected list, got {}", pointer_v(value)),
                );
            };
            let kind = schema.list_kind();
            let elements = schema.elements().unwrap_or(Schema::Opaque);
            let mut seen: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                if kind == ListKind::Atomic {
                    let _ = write!(path, "[{i}]");
                    walk(item, elements, path, duplicates, errors);
                    path.truncate(len);
                    continue;
                }
                let keys = match kind {
                    ListKind::Map(keys) => keys,
                    ListKind::Set | ListKind::Atomic => &[],
                };
                let element = match item_path_element(item, keys) {
                    Ok(e) => e,
                    Err(message) => {
                        // structured-merge-diff cannot go deeper without
                        // the item's key, and stops at the list.
                        return invalid(errors, path, format!("element {i}: {message}"));
                    }
                };
                if duplicates == Duplicates::Refused && seen.contains(&element) {
                    invalid(errors, path, format!("duplicate entries for key {element}"));
                }
                path.push_str(&element);
                seen.push(element);
                walk(item, elements, path, duplicates, errors);
                path.truncate(len);
            }
        }
    }
}

/// structured-merge-diff's `validateScalar`.
fn scalar_error(atom: Atom, value: &Value) -> Option<String> {
    let scalar = !matches!(value, Value::Array(_) | Value::Object(_));
    match atom {
        Atom::Numeric if !value.is_number() => Some(format!(
            "expected numeric (int or float), got {}",
            crate::json_map::go_type(value)
        )),
        Atom::String if !value.is_string() => Some(format!(
            "expected string, got &value.valueUnstructured{{Value:{}}}",
            go_sharp_v(value)
        )),
        Atom::Boolean if !value.is_boolean() => {
            Some(format!("expected boolean, got {}", pointer_v(value)))
        }
        Atom::Untyped if !scalar => Some(format!("expected any scalar, got {}", pointer_v(value))),
        _ => None,
    }
}

/// The path element of an associative list's item: `[name="nginx"]` by
/// its `keys`, `[="a"]` in a set (no keys); or why it has none.
fn item_path_element(item: &Value, keys: &[&str]) -> Result<String, String> {
    match keys {
        [_, ..] => {
            let fields = match item {
                Value::Null => {
                    return Err("associative list with keys may not have a null element".into());
                }
                Value::Object(fields) => fields,
                _ => return Err("associative list with keys may not have non-map elements".into()),
            };
            let mut present: Vec<(&str, &Value)> = keys
                .iter()
                .filter_map(|k| fields.get(*k).map(|v| (*k, v)))
                .collect();
            if present.is_empty() {
                // The keys as Go's %q of a []string.
                let quoted: Vec<String> = keys.iter().map(|k| go_quote(k)).collect();
                return Err(format!(
                    "associative list with keys has an element that omits all key fields [{}] \
                     (and doesn't have default values for any key fields)",
                    quoted.join(" ")
                ));
            }
            present.sort_by(|a, b| a.0.cmp(b.0));
            let keyed: Vec<String> = present
                .iter()
                .map(|(k, v)| format!("{k}={}", smd_string(v)))
                .collect();
            Ok(format!("[{}]", keyed.join(",")))
        }
        [] => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            scalar => Ok(format!("[={}]", smd_string(scalar))),
        },
    }
}

fn find_atomics(value: &Value, schema: Schema, path: &mut String, found: &mut Vec<String>) {
    match (value, schema) {
        (Value::Object(fields), Schema::Type(_)) => {
            if !matches!(schema.atom(), Some(Atom::Struct { .. })) {
                return;
            }
            if schema.is_atomic() {
                found.push(path.clone());
            }
            for (key, v) in fields {
                let Some(sub) = schema.field(key).filter(|s| !matches!(s, Schema::Opaque)) else {
                    continue;
                };
                let len = path.len();
                path.push('.');
                path.push_str(key);
                find_atomics(v, sub, path, found);
                path.truncate(len);
            }
        }
        // A map field's values are not fields: only the map itself counts.
        (Value::Object(_), Schema::MapOf(_)) if schema.is_atomic() => found.push(path.clone()),
        (Value::Array(items), Schema::List(_)) => {
            if schema.is_atomic() {
                found.push(path.clone());
            }
            let elements = schema.elements().unwrap_or(Schema::Opaque);
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                find_atomics(item, elements, path, found);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// structured-merge-diff's `value.ToString`: strings quoted, lists in
/// brackets, maps as `k=v` pairs.
fn smd_string(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(smd_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k}={}", smd_string(v)))
            .collect(),
    }
}

/// Go's `%v` of a pointer to the struct holding the value (`&{0}`,
/// `&{[ALL]}`).
fn pointer_v(value: &Value) -> String {
    format!("&{{{}}}", go_v(value))
}

/// Go's `%v`: maps with sorted keys, lists space-separated.
fn go_v(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_v).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(fields) => {
            let mut parts: Vec<(&String, String)> =
                fields.iter().map(|(k, v)| (k, go_v(v))).collect();
            parts.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = parts.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%#v`: Go syntax for the value.
fn go_sharp_v(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", parts.join(", "))
        }
        Value::Object(fields) => {
            let mut parts: Vec<(&String, String)> =
                fields.iter().map(|(k, v)| (k, go_sharp_v(v))).collect();
            parts.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = parts
                .into_iter()
                .map(|(k, v)| format!("{}:{v}", go_quote(k)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// A number as Go prints an int64 or float64 (`%v`: the shortest digits,
/// with an exponent below 1e-4 and from 1e+06 on).
fn go_number(n: &serde_json::Number) -> String {
    if !n.is_f64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        format!("{f}")
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// Go's `%q` of a string (as `strconv.Quote`, for the printable text
/// Kubernetes objects hold).
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Schema {
        Schema::for_kind("v1", "Pod").unwrap()
    }

    #[test]
    fn scalars_of_the_wrong_type_are_named_as_structured_merge_diff_names_them() {
        let e = |v: Value| check(&v, pod(), Duplicates::Refused).unwrap_err();
        assert_eq!(
            e(json!({"spec": {"securityContext": {"runAsUser": true}}})),
            ".spec.securityContext.runAsUser: expected numeric (int or float), got bool"
        );
        assert_eq!(
            e(json!({"metadata": {"labels": {"env": true}}})),
            ".metadata.labels.env: expected string, got &value.valueUnstructured{Value:true}"
        );
        assert_eq!(
            e(json!({"metadata": {"labels": {"x": ["ALL"]}}})),
            ".metadata.labels.x: expected string, got &value.valueUnstructured{Value:[]interface {}{\"ALL\"}}"
        );
        assert_eq!(
            e(json!({"spec": {"securityContext": 0}})),
            ".spec.securityContext: expected map, got &{0}"
        );
        assert_eq!(
            e(json!({"metadata": {"labels": ["ALL"]}})),
            ".metadata.labels: expected map, got &{[ALL]}"
        );
        assert_eq!(
            e(json!({"spec": {"containers": [{"name": "nginx", "securityContext": 1000}]}})),
            ".spec.containers[name=\"nginx\"].securityContext: expected map, got &{1000}"
        );
        assert_eq!(
            e(json!({"spec": {"hostNetwork": "yes"}})),
            ".spec.hostNetwork: expected boolean, got &{yes}"
        );
    }

    #[test]
    fn what_is_valid_passes() {
        let ok = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": null},
            "spec": {
                "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                                "ports": [{"containerPort": 80}]}],
                "hostNetwork": false,
                "someFieldOfANewerKubernetes": {"x": 1},
            }
        });
        assert_eq!(check(&ok, pod(), Duplicates::Refused), Ok(()));
    }

    #[test]
    fn duplicate_keys_are_refused_in_a_configuration_and_tolerated_in_the_live_object() {
        let v = json!({"spec": {"initContainers": [{"name": "a"}, {"name": "a"}]}});
        assert_eq!(
            check(&v, pod(), Duplicates::Refused).unwrap_err(),
            ".spec.initContainers: duplicate entries for key [name=\"a\"]"
        );
        assert_eq!(check(&v, pod(), Duplicates::Allowed), Ok(()));
        let unnamed = json!({"spec": {"containers": [{"image": "x"}]}});
        assert_eq!(
            check(&unnamed, pod(), Duplicates::Allowed).unwrap_err(),
            ".spec.containers: element 0: associative list with keys has an element that omits \
             all key fields [\"name\"] (and doesn't have default values for any key fields)"
        );
    }

    #[test]
    fn several_errors_are_listed() {
        let v = json!({"spec": {"hostNetwork": 1, "hostPID": 2}});
        assert_eq!(
            check(&v, pod(), Duplicates::Refused).unwrap_err(),
            "errors:\n  .spec.hostNetwork: expected boolean, got &{1}\n  .spec.hostPID: expected boolean, got &{2}"
        );
    }

    #[test]
    fn atomic_values_in_a_configuration_are_found() {
        let v = json!({"spec": {
            "nodeSelector": {"a": "b"},
            "containers": [{"name": "c", "args": ["x"], "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}],
            "tolerations": [{"key": "k"}],
        }});
        assert_eq!(
            atomic_paths(&v, pod()),
            vec![
                ".spec.containers[0].args",
                ".spec.containers[0].env[0].valueFrom.configMapKeyRef",
                ".spec.nodeSelector",
                ".spec.tolerations",
            ]
        );
        assert!(atomic_paths(&json!({"metadata": {"labels": {"a": "b"}}}), pod()).is_empty());
    }

    #[test]
    fn go_formats_numbers_as_go_does() {
        let n = |v: Value| go_v(&v);
        assert_eq!(n(json!(0.5)), "0.5");
        assert_eq!(n(json!(1000000.0)), "1e+06");
        assert_eq!(n(json!(123456.0)), "123456");
        assert_eq!(n(json!(0.00001)), "1e-05");
        assert_eq!(n(json!(42)), "42");
        assert_eq!(
            go_v(&json!({"b": 1, "a": [true, "x"]})),
            "map[a:[true x] b:1]"
        );
    }
}
