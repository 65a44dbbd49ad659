//! Responses: JSON bodies and `Status` errors; query parsing.

use super::*;

pub(super) fn parse_query(query: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(percent_decode(k), percent_decode(v).into());
    }
    out
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn respond(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).expect("JSON"))).boxed())
        .expect("response")
}

pub(super) fn ok(body: Value) -> Response<Body> {
    respond(200, body)
}

pub(super) fn text(code: u16, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(body.as_bytes())).boxed())
        .expect("response")
}

/// A `Status` object, as every API error is.
pub(super) fn status(
    code: u16,
    reason: &str,
    message: String,
    details: Option<Value>,
) -> Response<Body> {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    respond(code, body)
}

pub(super) fn not_found_path() -> Response<Body> {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource".into(),
        None,
    )
}

pub(super) fn qualified(target: &Target) -> String {
    if target.rt.group.is_empty() {
        target.rt.plural.clone()
    } else {
        format!("{}.{}", target.rt.plural, target.rt.group)
    }
}

pub(super) fn not_found(target: &Target) -> Response<Body> {
    let name = target.name.clone().unwrap_or_default();
    status(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", qualified(target)),
        Some(json!({"name": name, "group": target.rt.group, "kind": target.rt.plural})),
    )
}

pub(super) fn conflict(target: &Target) -> Response<Body> {
    let name = target.name.clone().unwrap_or_default();
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            qualified(target)
        ),
        Some(json!({"name": name, "group": target.rt.group, "kind": target.rt.plural})),
    )
}
