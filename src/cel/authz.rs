//! Kyverno's authorization libraries (kyverno-authz), for ValidatingPolicies
//! of `evaluation.mode: HTTP` and `Envoy`: the responses a validation
//! returns (`http.Allowed().Response()`, `envoy.Denied(403).WithBody("no")
//! .Response()`, ...), the request's `Header` and `QueryParam` of the HTTP
//! mode, and `jwt.Decode`.
//!
//! In cel-go these values are messages: native Go structs (HTTP) and
//! Envoy's protobuf messages. Here each is a map of its fields, every field
//! present with the default a message reads as, plus the key `@type`
//! naming the message. The functions check it where cel-go checks an
//! overload's argument types, and the policy's evaluation reads the
//! response from it. The mode a policy declares decides which functions it
//! may call (see [`library_of`]), as each mode's CEL environment does.

use super::values::{cel_to_json, json_to_cel};
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};
use serde_json::{Map, Value as Json, json};
use std::sync::Arc;

/// The key that names a value's message type.
pub const TYPE_KEY: &str = "@type";
/// The key of a CheckResponse that names which of its `oneof` responses is
/// set (a proto message reads the unset one as its default).
pub const ONEOF_KEY: &str = "@oneof";

pub const HTTP_RESPONSE: &str = "http.CheckResponse";
const HTTP_OK: &str = "http.CheckResponseOk";
const HTTP_DENIED: &str = "http.CheckResponseDenied";
pub const HTTP_REQUEST_ATTRIBUTES: &str = "http.CheckRequestAttributes";

pub const ENVOY_RESPONSE: &str = "envoy.service.auth.v3.CheckResponse";
const ENVOY_OK: &str = "envoy.service.auth.v3.OkHttpResponse";
const ENVOY_DENIED: &str = "envoy.service.auth.v3.DeniedHttpResponse";
const ENVOY_HEADER: &str = "envoy.config.core.v3.HeaderValueOption";
const ENVOY_QUERY_PARAMETER: &str = "envoy.config.core.v3.QueryParameter";
const JWT_TOKEN: &str = "jwt.Token";

/// A library a CEL environment may include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// `http.Allowed`, `http.Denied` (HTTP mode).
    Http,
    /// `envoy.*` (Envoy mode).
    Envoy,
    /// `jwt.Decode`, `jwks.Fetch` (both authorization modes).
    Jwt,
    /// `verifyImageSignatures`, `verifyAttestationSignatures`,
    /// `getImageData`, `extractPayload` (ImageValidatingPolicy).
    ImageVerify,
}

/// The library that declares a global function (this module's, and the
/// image verification functions): a policy whose CEL environment does not
/// include it fails to compile.
pub fn library_of(function: &str) -> Option<Library> {
    match function {
        "http.Allowed" | "http.Denied" => Some(Library::Http),
        "envoy.Allowed" | "envoy.Denied" | "envoy.Header" | "envoy.QueryParam" => {
            Some(Library::Envoy)
        }
        "jwt.Decode" | "jwks.Fetch" => Some(Library::Jwt),
        "verifyImageSignatures"
        | "verifyAttestationSignatures"
        | "getImageData"
        | "extractPayload" => Some(Library::ImageVerify),
        _ => None,
    }
}

pub(super) fn register(ctx: &mut Context) {
    ctx.add_function("http.Allowed", || Ok(typed(HTTP_OK, json!({}))));
    ctx.add_function("http.Denied", |reason: Arc<String>| {
        Ok(typed(HTTP_DENIED, json!({"reason": *reason})))
    });
    ctx.add_function("envoy.Allowed", || Ok(typed(ENVOY_OK, envoy_ok())));
    ctx.add_function("envoy.Denied", |code: i64| {
        Ok(typed(
            ENVOY_DENIED,
            json!({"status": {"code": code}, "headers": [], "body": ""}),
        ))
    });
    ctx.add_function("envoy.Header", |key: Arc<String>, value: Arc<String>| {
        Ok(typed(ENVOY_HEADER, envoy_header(&key, &value)))
    });
    ctx.add_function(
        "envoy.QueryParam",
        |key: Arc<String>, value: Arc<String>| {
            Ok(typed(ENVOY_QUERY_PARAMETER, query_parameter(&key, &value)))
        },
    );
    ctx.add_function("Response", response);
    ctx.add_function("WithBody", with_body);
    ctx.add_function("WithHeader", with_header);
    ctx.add_function("WithoutHeader", without_header);
    ctx.add_function("WithResponseHeader", with_response_header);
    ctx.add_function("WithQueryParam", with_query_param);
    ctx.add_function("WithoutQueryParam", without_query_param);
    ctx.add_function("KeepEmptyValue", keep_empty_value);
    ctx.add_function("WithMessage", with_message);
    ctx.add_function("WithMetadata", with_metadata);
    ctx.add_function("Header", request_header);
    ctx.add_function("QueryParam", request_query_param);
    ctx.add_function("jwt.Decode", jwt_decode);
    ctx.add_function("jwks.Fetch", |ftx: &FunctionContext| -> ResolveResult {
        Err(ftx.error(
            "unsupported: jwks.Fetch (gavel fetches no key sets; pass the key to jwt.Decode)",
        ))
    });
}

/// A message of type `name` with `fields`.
fn typed(name: &str, mut fields: Json) -> Value {
    if let Json::Object(m) = &mut fields {
        m.insert(TYPE_KEY.into(), name.into());
    }
    json_to_cel(&fields)
}

fn envoy_ok() -> Json {
    json!({
        "headers": [], "headers_to_remove": [], "response_headers_to_add": [],
        "query_parameters_to_set": [], "query_parameters_to_remove": [],
    })
}

fn envoy_header(key: &str, value: &str) -> Json {
    json!({
        "header": {"key": key, "value": value, "raw_value": ""},
        "append_action": 0,
        "keep_empty_value": false,
    })
}

/// The fields of `v` when it is a message of one of `types`; cel-go's
/// overload error otherwise.
fn message_of(
    ftx: &FunctionContext,
    v: &Value,
    types: &[&str],
) -> Result<(String, Map<String, Json>), ExecutionError> {
    let fields = match cel_to_json(v) {
        Ok(Json::Object(m)) => m,
        _ => Map::new(),
    };
    match fields.get(TYPE_KEY).and_then(Json::as_str) {
        Some(t) if types.contains(&t) => Ok((t.to_string(), fields)),
        found => Err(ftx.error(format!(
            "found no matching overload for '{}' applied to '({}...)'",
            ftx.name,
            found.map_or_else(|| v.type_of().to_string(), str::to_string)
        ))),
    }
}

fn back(fields: Map<String, Json>) -> ResolveResult {
    Ok(json_to_cel(&Json::Object(fields)))
}

fn string_at(ftx: &FunctionContext, args: &[Value], i: usize) -> Result<String, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.to_string()),
        Some(other) => Err(ftx.error(format!(
            "found no matching overload for '{}': argument {} is {}, not string",
            ftx.name,
            i + 1,
            other.type_of()
        ))),
        None => Err(ftx.error(format!("{}: missing argument {}", ftx.name, i + 1))),
    }
}

/// `<ok or denied>.Response()`: the CheckResponse that carries it.
fn response(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    let (t, mut inner) = message_of(ftx, &this, &[HTTP_OK, HTTP_DENIED, ENVOY_OK, ENVOY_DENIED])?;
    inner.remove(TYPE_KEY);
    let inner = Json::Object(inner);
    Ok(match t.as_str() {
        HTTP_OK => typed(HTTP_RESPONSE, json!({"ok": inner, "denied": null})),
        HTTP_DENIED => typed(HTTP_RESPONSE, json!({"ok": null, "denied": inner})),
        ENVOY_OK => typed(
            ENVOY_RESPONSE,
            json!({
                "status": {"code": 0, "message": "", "details": []},
                "ok_response": inner,
                "denied_response": {"status": {"code": 0}, "headers": [], "body": ""},
                "dynamic_metadata": {},
                ONEOF_KEY: "ok_response",
            }),
        ),
        // codes.PermissionDenied
        _ => typed(
            ENVOY_RESPONSE,
            json!({
                "status": {"code": 7, "message": "", "details": []},
                "ok_response": envoy_ok(),
                "denied_response": inner,
                "dynamic_metadata": {},
                ONEOF_KEY: "denied_response",
            }),
        ),
    })
}

fn with_body(ftx: &FunctionContext, This(this): This<Value>, body: Arc<String>) -> ResolveResult {
    let (_, mut m) = message_of(ftx, &this, &[ENVOY_DENIED])?;
    m.insert("body".into(), body.as_str().into());
    back(m)
}

/// A message argument of type `t` (its fields), or two strings (a key
/// and a value) made into one by `pair`: the two overloads of `WithHeader`
/// and `WithQueryParam`.
fn message_or_pair(
    ftx: &FunctionContext,
    args: &[Value],
    t: &str,
    pair: fn(&str, &str) -> Json,
) -> Result<Json, ExecutionError> {
    match args {
        [m] => {
            let (_, mut m) = message_of(ftx, m, &[t])?;
            m.remove(TYPE_KEY);
            Ok(Json::Object(m))
        }
        _ => Ok(pair(&string_at(ftx, args, 0)?, &string_at(ftx, args, 1)?)),
    }
}

fn query_parameter(key: &str, value: &str) -> Json {
    json!({"key": key, "value": value})
}

/// `this` (a message of one of `types`) with `item` appended to the list
/// `field`.
fn appended(
    ftx: &FunctionContext,
    this: &Value,
    types: &[&str],
    field: &str,
    item: Json,
) -> ResolveResult {
    let (_, mut m) = message_of(ftx, this, types)?;
    push(&mut m, field, item);
    back(m)
}

fn push(m: &mut Map<String, Json>, field: &str, item: Json) {
    match m.get_mut(field) {
        Some(Json::Array(items)) => items.push(item),
        _ => {
            m.insert(field.into(), Json::Array(vec![item]));
        }
    }
}

fn with_header(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let header = message_or_pair(ftx, &args, ENVOY_HEADER, envoy_header)?;
    appended(ftx, &this, &[ENVOY_OK, ENVOY_DENIED], "headers", header)
}

fn without_header(
    ftx: &FunctionContext,
    This(this): This<Value>,
    name: Arc<String>,
) -> ResolveResult {
    appended(
        ftx,
        &this,
        &[ENVOY_OK],
        "headers_to_remove",
        name.as_str().into(),
    )
}

fn with_response_header(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let header = message_or_pair(ftx, &args, ENVOY_HEADER, envoy_header)?;
    appended(ftx, &this, &[ENVOY_OK], "response_headers_to_add", header)
}

fn with_query_param(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let param = message_or_pair(ftx, &args, ENVOY_QUERY_PARAMETER, query_parameter)?;
    appended(ftx, &this, &[ENVOY_OK], "query_parameters_to_set", param)
}

fn without_query_param(
    ftx: &FunctionContext,
    This(this): This<Value>,
    name: Arc<String>,
) -> ResolveResult {
    appended(
        ftx,
        &this,
        &[ENVOY_OK],
        "query_parameters_to_remove",
        name.as_str().into(),
    )
}

fn keep_empty_value(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let (_, mut m) = message_of(ftx, &this, &[ENVOY_HEADER])?;
    let keep = match args.first() {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ftx.error(format!(
                "found no matching overload for 'KeepEmptyValue': argument is {}, not bool",
                other.type_of()
            )));
        }
    };
    m.insert("keep_empty_value".into(), keep.into());
    back(m)
}

fn with_message(
    ftx: &FunctionContext,
    This(this): This<Value>,
    message: Arc<String>,
) -> ResolveResult {
    let (_, mut m) = message_of(ftx, &this, &[ENVOY_RESPONSE])?;
    if let Some(Json::Object(status)) = m.get_mut("status") {
        status.insert("message".into(), message.as_str().into());
    }
    back(m)
}

fn with_metadata(ftx: &FunctionContext, This(this): This<Value>, metadata: Value) -> ResolveResult {
    let (_, mut m) = message_of(ftx, &this, &[ENVOY_RESPONSE])?;
    let metadata = match cel_to_json(&metadata) {
        Ok(v @ Json::Object(_)) => v,
        _ => {
            return Err(ftx.error(format!(
                "found no matching overload for 'WithMetadata': argument is {}, not \
                 google.protobuf.Struct",
                metadata.type_of()
            )));
        }
    };
    m.insert("dynamic_metadata".into(), metadata);
    back(m)
}

/// `object.attributes.Header(name)`: the values of a header, its name
/// canonicalised as Go's `textproto.MIMEHeader` does.
fn request_header(
    ftx: &FunctionContext,
    This(this): This<Value>,
    name: Arc<String>,
) -> ResolveResult {
    let (_, m) = message_of(ftx, &this, &[HTTP_REQUEST_ATTRIBUTES])?;
    Ok(values_at(&m, "header", &canonical_header_key(&name)))
}

/// `object.attributes.QueryParam(name)`: the values of a query parameter.
fn request_query_param(
    ftx: &FunctionContext,
    This(this): This<Value>,
    name: Arc<String>,
) -> ResolveResult {
    let (_, m) = message_of(ftx, &this, &[HTTP_REQUEST_ATTRIBUTES])?;
    Ok(values_at(&m, "query", &name))
}

fn values_at(m: &Map<String, Json>, field: &str, key: &str) -> Value {
    let values = m
        .get(field)
        .and_then(|f| f.get(key))
        .cloned()
        .unwrap_or_else(|| json!([]));
    json_to_cel(&values)
}

/// Go's `textproto.CanonicalMIMEHeaderKey`: the first letter and each
/// letter after a hyphen upper case, the rest lower case; a key with a
/// space or a byte outside a header token is left as it is.
pub fn canonical_header_key(key: &str) -> String {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !key.bytes().all(token) {
        return key.to_string();
    }
    let mut upper = true;
    key.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// `jwt.Decode(token, key)`: the token's claims and whether it is valid
/// now, after its signature is verified with `key` (a shared secret: the
/// key string is taken as the bytes of a symmetric key, as jwx's
/// `jwk.Import` takes it, so HS256, HS384 and HS512 verify).
fn jwt_decode(ftx: &FunctionContext, token: Arc<String>, key: Value) -> ResolveResult {
    let Value::String(key) = key else {
        return Err(ftx.error(format!(
            "found no matching overload for 'jwt.Decode' applied to '(string, {})'",
            key.type_of()
        )));
    };
    let decoded = super::jwt::decode(&token, key.as_bytes(), chrono::Utc::now().timestamp())
        .map_err(|e| ftx.error(e))?;
    Ok(typed(
        JWT_TOKEN,
        json!({"Claims": decoded.claims, "Valid": decoded.valid}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_keys_are_canonical_as_go_makes_them() {
        for (key, canonical) in [
            ("authorization", "Authorization"),
            ("x-request-ID", "X-Request-Id"),
            ("CONTENT-TYPE", "Content-Type"),
            ("a b", "a b"),
            ("", ""),
        ] {
            assert_eq!(canonical_header_key(key), canonical, "{key}");
        }
    }

    #[test]
    fn each_mode_has_its_library() {
        assert_eq!(library_of("http.Denied"), Some(Library::Http));
        assert_eq!(library_of("envoy.Header"), Some(Library::Envoy));
        assert_eq!(library_of("jwt.Decode"), Some(Library::Jwt));
        assert_eq!(library_of("http.Get"), None);
    }
}
