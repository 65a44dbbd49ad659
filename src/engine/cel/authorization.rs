//! ValidatingPolicies of `evaluation.mode: HTTP` and `Envoy`: Kyverno's
//! authorization policies (kyverno-authz), which answer an authorization
//! request instead of an admission request. `object` is the request; each
//! validation returns a response or null, and the first response decides
//! (allowed: pass, denied: fail); no response at all is a skip.
//!
//! The requests are read as kyverno-authz reads them: an HTTP
//! `CheckRequest` as Go's `encoding/json` decodes the struct (field names
//! matched without regard to case, absent fields zero), an Envoy
//! `envoy.service.auth.v3.CheckRequest` as `protojson` decodes the message
//! (JSON or proto field names, unknown fields refused), every field present
//! with the default a message reads as.

use super::{NULL, NoRequest, ResolverLookups, bind_request, bind_variables, conditions_hold};
use crate::cel::authz::{
    ENVOY_RESPONSE, HTTP_REQUEST_ATTRIBUTES, HTTP_RESPONSE, ONEOF_KEY, TYPE_KEY,
};
use crate::cel::values::cel_to_json;
use crate::cel::{Activation, InterpreterCache, Lookups};
use crate::context::Resolver;
use crate::engine::{PolicyResponse, RuleResponse, RuleResponses, RuleStatus};
use crate::json_doc::JsonRef;
use crate::pattern::go_json_type;
use crate::policy::cel_policy::{CompiledValidatingPolicy, EvaluationMode};
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// Evaluates an authorization policy on a request read by
/// [`http_request`] or [`envoy_request`]: one rule named after the policy,
/// worded as Kyverno's CLI words it. A policy of another mode gives none.
pub fn evaluate_authorization_policy<'p>(
    policy: &'p CompiledValidatingPolicy,
    request: &Value,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let mut response = PolicyResponse {
        policy: &scope.name,
        rules: RuleResponses::new(),
    };
    let expected = match policy.mode {
        EvaluationMode::Http => HTTP_RESPONSE,
        EvaluationMode::Envoy => ENVOY_RESPONSE,
        _ => return response,
    };
    let cache = InterpreterCache::default();
    let vars = bind_request(
        &cache,
        JsonRef::Value(request),
        JsonRef::Value(&NULL),
        &NoRequest,
    );
    let lookups = ResolverLookups(resolver);
    let (status, message) = match authorize(policy, expected, &vars, &lookups) {
        Ok(Some(answer)) => decision(policy.mode, &answer),
        Ok(None) => (RuleStatus::Skip, "request does not match".to_string()),
        // kyverno-authz: under failurePolicy Ignore an error is no answer.
        Err(_) if scope.failure_policy_ignore => {
            (RuleStatus::Skip, "request does not match".to_string())
        }
        Err(e) => (RuleStatus::Error, e),
    };
    response
        .rules
        .push(RuleResponse::new(&scope.name, status, message));
    response
}

/// The response the policy gives, if any: matchConditions (a false one
/// decides, else an error is the policy's), variables, then validations
/// in order until one returns a response.
///
/// kyverno-compat: Kyverno's CLI compiles these policies without their
/// PolicyExceptions (`compiler.Compile(policy, nil)`), so none applies.
fn authorize(
    policy: &CompiledValidatingPolicy,
    expected: &str,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Option<Value>, String> {
    match conditions_hold(&policy.scope.match_conditions, vars, lookups) {
        Ok(None) => {}
        Ok(Some(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let vars = bind_variables(vars, &policy.checks.variables, lookups);
    for v in &policy.checks.validations {
        let answer = v.program.eval(&vars, lookups).map_err(|e| {
            let e = e.to_string();
            // A variable that failed: its own error, as the lazy
            // variables of cel-go report it.
            match super::variable_error(&vars, &e) {
                Some((_, own)) => own.to_string(),
                None => e,
            }
        })?;
        let answer = cel_to_json(&answer)?;
        match &answer {
            Value::Null => continue,
            Value::Object(m) if m.get(TYPE_KEY).and_then(Value::as_str) == Some(expected) => {
                return Ok(Some(answer));
            }
            _ => {
                return Err(format!(
                    "rule result is expected to be {}",
                    match policy.mode {
                        EvaluationMode::Envoy => "*authv3.CheckResponse",
                        _ => "*http.CheckResponse",
                    }
                ));
            }
        }
    }
    Ok(None)
}

/// Pass or fail, with Kyverno's CLI's message (`processHTTPPolicy`,
/// `processEnvoyPolicy`).
fn decision(mode: EvaluationMode, answer: &Value) -> (RuleStatus, String) {
    let allowed = match mode {
        EvaluationMode::Envoy => answer[ONEOF_KEY] == "ok_response",
        _ => !answer["ok"].is_null(),
    };
    if allowed {
        return (RuleStatus::Pass, "request allowed".into());
    }
    let message = match mode {
        EvaluationMode::Envoy => format!(
            "request denied with status code {}",
            answer["denied_response"]["status"]["code"]
        ),
        _ => format!(
            "request denied, reason: {}",
            answer["denied"]["reason"].as_str().unwrap_or_default()
        ),
    };
    (RuleStatus::Fail, message)
}

/// An HTTP `CheckRequest` (`{"attributes": {...}}`) as kyverno-authz's
/// struct holds it after `encoding/json`: field names matched without
/// regard to case, unknown ones ignored, absent ones zero. The body is
/// base64 in JSON (a Go `[]byte`); it is held decoded, as text.
pub fn http_request(payload: &Value) -> Result<Value, String> {
    let top = go_object(payload, "CheckRequest")?;
    let attributes = match go_field(&top, "attributes") {
        Some(a) => go_object(a, "CheckRequest.attributes")?,
        None => Map::new(),
    };
    let field = |name: &str| go_field(&attributes, name);
    let text = |name: &str| -> Result<Value, String> {
        match field(name) {
            None | Some(Value::Null) => Ok(json!("")),
            Some(v @ Value::String(_)) => Ok(v.clone()),
            Some(other) => Err(go_type_error(other, name, "string")),
        }
    };
    let values = |name: &str| -> Result<Value, String> {
        let mut out = Map::new();
        match field(name) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let list = match v {
                        Value::Null => Vec::new(),
                        Value::Array(items) if items.iter().all(Value::is_string) => items.clone(),
                        other => return Err(go_type_error(other, name, "[]string")),
                    };
                    out.insert(k.clone(), Value::Array(list));
                }
            }
            Some(other) => return Err(go_type_error(other, name, "map[string][]string")),
        }
        Ok(Value::Object(out))
    };
    let content_length = match field("contentLength") {
        None | Some(Value::Null) => json!(0),
        Some(Value::Number(n)) if n.is_i64() => Value::Number(n.clone()),
        Some(other) => return Err(go_type_error(other, "contentLength", "int64")),
    };
    let body = match field("body") {
        None | Some(Value::Null) => json!(""),
        Some(Value::String(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(|b| json!(String::from_utf8_lossy(&b)))
            .map_err(|e| format!("json: body: illegal base64 data: {e}"))?,
        Some(other) => return Err(go_type_error(other, "body", "[]uint8")),
    };
    let request = go_field(&top, "mcp")
        .and_then(|m| m.as_object())
        .and_then(|m| go_field(m, "request"))
        .cloned()
        .unwrap_or(Value::Null);
    Ok(json!({
        "attributes": {
            TYPE_KEY: HTTP_REQUEST_ATTRIBUTES,
            "method": text("method")?,
            "header": values("header")?,
            "host": text("host")?,
            "protocol": text("protocol")?,
            "contentLength": content_length,
            "body": body,
            "scheme": text("scheme")?,
            "path": text("path")?,
            "query": values("query")?,
            "fragment": text("fragment")?,
        },
        "mcp": {"request": request},
    }))
}

fn go_object(v: &Value, what: &str) -> Result<Map<String, Value>, String> {
    match v {
        Value::Object(m) => Ok(m.clone()),
        Value::Null => Ok(Map::new()),
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type {what}",
            go_json_type(other)
        )),
    }
}

/// `encoding/json` matches a key to a field ignoring case; an exact match
/// wins.
fn go_field<'m>(m: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    m.get(name).or_else(|| {
        m.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn go_type_error(v: &Value, field: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field CheckRequestAttributes.attributes.{field} \
         of type {go_type}",
        go_json_type(v)
    )
}

/// A field of an Envoy message: its proto name and type.
type Field = (&'static str, Kind);

/// The type of an Envoy message field, as far as a policy reads it.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Int,
    Unsigned,
    Bool,
    /// `bytes`: base64 in JSON, held decoded as text.
    Bytes,
    /// `map<string, string>`.
    TextMap,
    /// An enum: its JSON name or number, held as the number.
    Enum(&'static [(&'static str, i64)]),
    Message(&'static [Field]),
    /// `repeated` of a message.
    List(&'static [Field]),
    /// Well-known types (`Struct`, `Any`, `Timestamp`, maps of them): kept
    /// as the JSON gives them, absent when not given.
    Json,
}

const CHECK_REQUEST: &[Field] = &[("attributes", Kind::Message(ATTRIBUTE_CONTEXT))];
const ATTRIBUTE_CONTEXT: &[Field] = &[
    ("source", Kind::Message(PEER)),
    ("destination", Kind::Message(PEER)),
    ("request", Kind::Message(REQUEST)),
    ("context_extensions", Kind::TextMap),
    ("metadata_context", Kind::Message(METADATA)),
    ("route_metadata_context", Kind::Message(METADATA)),
    ("tls_session", Kind::Message(TLS_SESSION)),
];
const PEER: &[Field] = &[
    ("address", Kind::Message(ADDRESS)),
    ("service", Kind::Text),
    ("labels", Kind::TextMap),
    ("principal", Kind::Text),
    ("certificate", Kind::Text),
];
const ADDRESS: &[Field] = &[
    ("socket_address", Kind::Message(SOCKET_ADDRESS)),
    ("pipe", Kind::Message(PIPE)),
    ("envoy_internal_address", Kind::Message(INTERNAL_ADDRESS)),
];
const SOCKET_ADDRESS: &[Field] = &[
    ("protocol", Kind::Enum(&[("TCP", 0), ("UDP", 1)])),
    ("address", Kind::Text),
    ("port_value", Kind::Unsigned),
    ("named_port", Kind::Text),
    ("resolver_name", Kind::Text),
    ("ipv4_compat", Kind::Bool),
];
const PIPE: &[Field] = &[("path", Kind::Text), ("mode", Kind::Unsigned)];
const INTERNAL_ADDRESS: &[Field] = &[
    ("server_listener_name", Kind::Text),
    ("endpoint_id", Kind::Text),
];
const REQUEST: &[Field] = &[("time", Kind::Json), ("http", Kind::Message(HTTP_REQUEST))];
const HTTP_REQUEST: &[Field] = &[
    ("id", Kind::Text),
    ("method", Kind::Text),
    ("headers", Kind::TextMap),
    ("header_map", Kind::Message(HEADER_MAP)),
    ("path", Kind::Text),
    ("host", Kind::Text),
    ("scheme", Kind::Text),
    ("query", Kind::Text),
    ("fragment", Kind::Text),
    ("size", Kind::Int),
    ("protocol", Kind::Text),
    ("body", Kind::Text),
    ("raw_body", Kind::Bytes),
];
const HEADER_MAP: &[Field] = &[("headers", Kind::List(HEADER_VALUE))];
const HEADER_VALUE: &[Field] = &[
    ("key", Kind::Text),
    ("value", Kind::Text),
    ("raw_value", Kind::Bytes),
];
const METADATA: &[Field] = &[
    ("filter_metadata", Kind::Json),
    ("typed_filter_metadata", Kind::Json),
];
const TLS_SESSION: &[Field] = &[("sni", Kind::Text)];

/// An Envoy `CheckRequest` as `protojson` reads it into the message cel-go
/// sees: proto field names, every field present (a message's unset fields
/// read as their defaults).
pub fn envoy_request(payload: &Value) -> Result<Value, String> {
    message(payload, CHECK_REQUEST, "CheckRequest")
}

fn message(v: &Value, fields: &'static [Field], path: &str) -> Result<Value, String> {
    let given = match v {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(format!(
                "proto: {path}: invalid value {other} for a message (an object is expected)"
            ));
        }
    };
    for key in given.keys() {
        if !fields
            .iter()
            .any(|(name, _)| key == name || *key == json_name(name))
        {
            return Err(format!("proto: {path}: unknown field {key:?}"));
        }
    }
    let mut out = Map::new();
    for (name, kind) in fields {
        let value = given.get(*name).or_else(|| given.get(&json_name(name)));
        let path = format!("{path}.{name}");
        let read = match (kind, value) {
            (Kind::Json, None | Some(Value::Null)) => continue,
            (Kind::Json, Some(v)) => v.clone(),
            (Kind::Message(f), v) => message(v.unwrap_or(&NULL), f, &path)?,
            (Kind::List(f), Some(Value::Array(items))) => Value::Array(
                items
                    .iter()
                    .map(|i| message(i, f, &path))
                    .collect::<Result<_, _>>()?,
            ),
            (kind, None | Some(Value::Null)) => default_of(*kind),
            (kind, Some(v)) => scalar(*kind, v, &path)?,
        };
        out.insert(name.to_string(), read);
    }
    Ok(Value::Object(out))
}

fn default_of(kind: Kind) -> Value {
    match kind {
        Kind::Text | Kind::Bytes => json!(""),
        Kind::Int | Kind::Unsigned | Kind::Enum(_) => json!(0),
        Kind::Bool => json!(false),
        Kind::TextMap => json!({}),
        Kind::List(_) => json!([]),
        Kind::Message(_) | Kind::Json => Value::Null,
    }
}

fn scalar(kind: Kind, v: &Value, path: &str) -> Result<Value, String> {
    let invalid = || format!("proto: {path}: invalid value {v}");
    Ok(match (kind, v) {
        (Kind::Text, Value::String(_)) | (Kind::Bool, Value::Bool(_)) => v.clone(),
        // protojson writes 64-bit integers as strings and reads either.
        (Kind::Int, Value::Number(n)) if n.is_i64() => v.clone(),
        (Kind::Unsigned, Value::Number(n)) if n.is_u64() => v.clone(),
        (Kind::Int, Value::String(s)) => json!(s.parse::<i64>().map_err(|_| invalid())?),
        (Kind::Unsigned, Value::String(s)) => json!(s.parse::<u64>().map_err(|_| invalid())?),
        (Kind::Bytes, Value::String(s)) => {
            let engines = [
                base64::engine::general_purpose::STANDARD,
                base64::engine::general_purpose::URL_SAFE,
            ];
            let bytes = engines
                .iter()
                .find_map(|e| e.decode(s).ok())
                .ok_or_else(invalid)?;
            json!(String::from_utf8_lossy(&bytes))
        }
        (Kind::Enum(values), Value::String(s)) => values
            .iter()
            .find(|(name, _)| name == s)
            .map(|(_, n)| json!(n))
            .ok_or_else(invalid)?,
        (Kind::Enum(_), Value::Number(n)) if n.is_i64() => v.clone(),
        (Kind::TextMap, Value::Object(m)) if m.values().all(Value::is_string) => v.clone(),
        _ => return Err(invalid()),
    })
}

/// protojson's JSON name of a field: lowerCamelCase of its proto name.
fn json_name(proto: &str) -> String {
    let mut out = String::with_capacity(proto.len());
    let mut upper = false;
    for c in proto.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
