//! JSON ↔ CEL values. JSON integers are CEL `int` (as the API server
//! types integer fields), other numbers `double`.

use crate::json_doc::{Kind, View};
use kube_cel::cel::Value;
use kube_cel::cel::objects::{Key, Map, OptionalValue};
use std::collections::HashMap;
use std::sync::Arc;

pub fn json_to_cel(v: &serde_json::Value) -> Value {
    view_to_cel(v)
}

/// [`json_to_cel`] of a decoded document's value, read in place.
pub fn doc_to_cel(v: crate::json_doc::Json) -> Value {
    view_to_cel(v)
}

/// Either representation, through what both serve (`View`): numbers are
/// typed the same, and a map is filled in the order its keys are served.
fn view_to_cel<'r>(v: impl View<'r>) -> Value {
    match v.kind() {
        Kind::Null => Value::Null,
        Kind::Bool(b) => Value::Bool(b),
        Kind::I64(i) => Value::Int(i),
        Kind::U64(u) => Value::UInt(u),
        Kind::F64(f) => Value::Float(f),
        Kind::Str(s) => Value::String(Arc::new(s.to_string())),
        Kind::Array(_) => Value::List(Arc::new(v.elements().map(view_to_cel).collect())),
        Kind::Object(_) => {
            let map: HashMap<Key, Value> = v
                .entries()
                .map(|(k, v)| (Key::String(Arc::new(k.to_string())), view_to_cel(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A CEL result as JSON; types with no JSON form are an error.
pub fn cel_to_json(v: &Value) -> Result<serde_json::Value, String> {
    Ok(match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => (*i).into(),
        Value::UInt(u) => (*u).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("{f} has no JSON form"))?,
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::Bytes(b) => {
            use base64::Engine as _;
            serde_json::Value::String(
                base64::engine::general_purpose::STANDARD.encode(b.as_slice()),
            )
        }
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(cel_to_json).collect::<Result<_, _>>()?)
        }
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            let mut entries: Vec<_> = m.map.iter().collect();
            entries.sort_by_key(|(k, _)| key_text(k));
            for (k, v) in entries {
                out.insert(key_text(k), cel_to_json(v)?);
            }
            serde_json::Value::Object(out)
        }
        Value::Timestamp(t) => {
            serde_json::Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        }
        Value::Duration(d) => {
            serde_json::Value::String(format!("{}s", d.num_milliseconds() as f64 / 1000.0))
        }
        Value::Opaque(_) => match <&OptionalValue>::try_from(v) {
            Ok(o) => match o.value() {
                Some(inner) => cel_to_json(inner)?,
                None => serde_json::Value::Null,
            },
            Err(_) => return Err(format!("a {} value has no JSON form", v.type_of())),
        },
        Value::Function(name, _) => return Err(format!("function {name} has no JSON form")),
    })
}

fn key_text(k: &Key) -> String {
    match k {
        Key::String(s) => s.to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

pub fn opt_of(v: Value) -> Value {
    Value::Opaque(Arc::new(OptionalValue::of(v)))
}

pub fn opt_none() -> Value {
    Value::Opaque(Arc::new(OptionalValue::none()))
}
