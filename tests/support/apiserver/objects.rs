//! What the server sets on the objects it stores: identity checks,
//! names, uid and timestamps, generation, managedFields.

use super::*;

pub(super) fn check_identity(object: &Value, target: &Target) -> Result<(), Response<Body>> {
    if !object.is_object() {
        return Err(status(
            400,
            "BadRequest",
            "the body must be a JSON object".into(),
            None,
        ));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != target.rt.kind
    {
        return Err(status(
            400,
            "BadRequest",
            format!(
                "the kind of the object ({kind}) does not match the kind on the URL ({})",
                target.rt.kind
            ),
            None,
        ));
    }
    if let Some(av) = object.get("apiVersion").and_then(Value::as_str) {
        let group = av.rsplit_once('/').map_or("", |(g, _)| g);
        if group != target.rt.group {
            return Err(status(
                400,
                "BadRequest",
                format!(
                    "the API version of the object ({av}) does not match the API version on the URL ({})",
                    target.api_version()
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// RFC 1123 subdomain, as most resource names must be.
pub(super) fn valid_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

pub(super) fn new_object(
    store: &mut Store,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    body: Value,
) -> Value {
    let mut object = body;
    object["apiVersion"] = api_version.into();
    object["kind"] = kind.into();
    set_meta(&mut object, "name", name.into());
    if !ns.is_empty() {
        set_meta(&mut object, "namespace", ns.into());
    }
    stamp_new(store, &mut object, api_version);
    if kind == "Namespace" {
        object["status"] = json!({"phase": "Active"});
    }
    object
}

/// Server-set metadata of a new object.
pub(super) fn stamp_new(store: &mut Store, object: &mut Value, api_version: &str) {
    set_meta(object, "uid", store.uid().into());
    set_meta(object, "creationTimestamp", now_rfc3339().into());
    if object.get("spec").is_some() {
        set_meta(object, "generation", 1.into());
    }
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
        m.remove("deletionTimestamp");
    }
    object["apiVersion"] = api_version.into();
}

/// Keeps what only the server sets across an update.
pub(super) fn keep_server_fields(object: &mut Value, old: &Value) {
    for field in ["uid", "creationTimestamp", "generation", "managedFields"] {
        match old["metadata"].get(field) {
            Some(v) => set_meta(object, field, v.clone()),
            None => {
                if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove(field);
                }
            }
        }
    }
    if let Some(ns) = old["metadata"].get("namespace") {
        set_meta(object, "namespace", ns.clone());
    }
}

/// Records a managedFields entry as the real API does on every write, so
/// that clients meet (and must strip) the same bulk.
pub(super) fn add_managed_fields(object: &mut Value, operation: &str, api_version: &str) {
    fn fields(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                out.insert(".".into(), json!({}));
                for (k, x) in m {
                    out.insert(format!("f:{k}"), fields(x));
                }
                Value::Object(out)
            }
            _ => json!({}),
        }
    }
    let mut owned = object.clone();
    if let Some(m) = owned.get_mut("metadata").and_then(Value::as_object_mut) {
        for server_set in [
            "managedFields",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
        ] {
            m.remove(server_set);
        }
    }
    if let Some(m) = owned.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    let entry = json!({
        "manager": "gavel-test-client",
        "operation": operation,
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields(&owned),
    });
    set_meta(object, "managedFields", json!([entry]));
}

pub(super) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
