//! List, create, update, patch and delete, with the API's optimistic
//! concurrency and status-subresource rules.

use super::*;

pub(super) fn list(
    shared: &Shared,
    target: &Target,
    filter: &Filter,
    query: &Map<String, Value>,
) -> Response<Body> {
    let param = |k: &str| query.get(k).and_then(Value::as_str).unwrap_or_default();
    let limit: usize = param("limit").parse().unwrap_or(0);
    let after = param("continue");
    let store = shared.store.lock().unwrap();
    let (start_rv, after_key) = match after {
        "" => (store.rv, None),
        token => match decode_continue(token) {
            Some((rv, ns, name)) => (rv, Some((ns, name))),
            None => return status(400, "BadRequest", "invalid continue token".into(), None),
        },
    };
    let mut items = Vec::new();
    let mut last: Option<&ObjectKey> = None;
    let mut remaining = 0usize;
    if let Some(objects) = store.objects.get(&target.type_key()) {
        let range = objects
            .iter()
            .filter(|(k, _)| after_key.as_ref().is_none_or(|a| *k > a))
            .filter(|(_, o)| filter.matches(o));
        for (key, object) in range {
            if limit > 0 && items.len() == limit {
                remaining += 1;
                continue;
            }
            last = Some(key);
            items.push(present(object, target));
        }
    }
    let mut metadata = json!({"resourceVersion": start_rv.to_string()});
    if let (true, Some(last)) = (remaining > 0, last) {
        metadata["continue"] = encode_continue(start_rv, &last.0, &last.1).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    ok(json!({
        "kind": list_kind(target),
        "apiVersion": list_api_version(target),
        "metadata": metadata,
        "items": items,
    }))
}

pub(super) fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{rv}\n{ns}\n{name}"))
}

pub(super) fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let mut parts = text.splitn(3, '\n');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

pub(super) fn create(shared: &Shared, target: &Target, mut object: Value) -> Response<Body> {
    if let Err(r) = check_identity(&object, target) {
        return r;
    }
    let ns = target.namespace.clone().unwrap_or_default();
    if let Some(body_ns) = meta_str(&object, "namespace")
        && target.rt.namespaced
        && body_ns != ns
    {
        return status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
            None,
        );
    }
    let mut store = shared.store.lock().unwrap();
    if target.rt.namespaced
        && store
            .get(
                &(String::new(), "namespaces".into()),
                &(String::new(), ns.clone()),
            )
            .is_none()
    {
        return status(
            404,
            "NotFound",
            format!("namespaces \"{ns}\" not found"),
            Some(json!({"name": ns, "kind": "namespaces"})),
        );
    }
    let name = match (meta_str(&object, "name"), meta_str(&object, "generateName")) {
        (Some(n), _) if !n.is_empty() => n.to_string(),
        (_, Some(prefix)) if !prefix.is_empty() => {
            let suffix = store.uid();
            format!("{prefix}{}", &suffix[suffix.len() - 5..])
        }
        _ => {
            return status(
                422,
                "Invalid",
                format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                    target.rt.kind
                ),
                None,
            );
        }
    };
    if let Err(e) = valid_name(&name) {
        return status(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: metadata.name: {e}",
                target.rt.kind
            ),
            None,
        );
    }
    let key = (
        if target.rt.namespaced {
            ns.clone()
        } else {
            String::new()
        },
        name.clone(),
    );
    if store.get(&target.type_key(), &key).is_some() {
        return status(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(target)),
            Some(json!({"name": name, "group": target.rt.group, "kind": target.rt.plural})),
        );
    }
    let crd_type = if target.rt.plural == "customresourcedefinitions" {
        match ResourceType::from_crd(&object) {
            Ok(t) => Some(t),
            Err(e) => {
                return status(
                    422,
                    "Invalid",
                    format!("CustomResourceDefinition \"{name}\" is invalid: {e}"),
                    None,
                );
            }
        }
    } else {
        None
    };
    set_meta(&mut object, "name", name.clone().into());
    if target.rt.namespaced {
        set_meta(&mut object, "namespace", ns.into());
    }
    stamp_new(&mut store, &mut object, &target.api_version());
    if target.rt.status && object.get("status").is_some() && target.rt.kind != "Namespace" {
        // kyverno-compat (and Kubernetes): status is written through /status only.
        object.as_object_mut().expect("object").remove("status");
    }
    match target.rt.kind.as_str() {
        "Namespace" => object["status"] = json!({"phase": "Active"}),
        "CustomResourceDefinition" => {
            object["status"] = json!({"conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
            ]})
        }
        _ => {}
    }
    add_managed_fields(&mut object, "Update", &target.api_version());
    let stored = store.write(&target.type_key(), key, object);
    let rv = store.rv;
    drop(store);
    if let Some(t) = crd_type {
        let mut types = shared.types.lock().unwrap();
        types.retain(|x| !(x.group == t.group && x.plural == t.plural));
        types.push(t);
    }
    shared.changed.send_replace(rv);
    respond(201, present(&stored, target))
}

pub(super) fn update(shared: &Shared, target: &Target, object: Value) -> Response<Body> {
    if let Err(r) = check_identity(&object, target) {
        return r;
    }
    if meta_str(&object, "name").is_some_and(|n| Some(n) != target.name.as_deref()) {
        return status(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL".into(),
            None,
        );
    }
    let mut store = shared.store.lock().unwrap();
    let Some(old) = store.get(&target.type_key(), &target.key()).cloned() else {
        return not_found(target);
    };
    if let Some(rv) = meta_str(&object, "resourceVersion")
        && rv != meta_str(&old, "resourceVersion").unwrap_or_default()
    {
        return conflict(target);
    }
    let new = merge_update(&old, object, target);
    let stored = store.write(&target.type_key(), target.key(), new);
    shared.changed.send_replace(store.rv);
    ok(present(&stored, target))
}

/// The object an update (or patch) stores: server-owned metadata kept, and
/// for types with a status subresource, either only the status (a /status
/// write) or everything but the status.
pub(super) fn merge_update(old: &Value, mut object: Value, target: &Target) -> Value {
    let status_write = target.subresource.as_deref() == Some("status");
    if target.rt.status {
        if status_write {
            let mut kept = old.clone();
            match object.get("status") {
                Some(s) => kept["status"] = s.clone(),
                None => {
                    kept.as_object_mut().expect("object").remove("status");
                }
            }
            object = kept;
        } else {
            match old.get("status") {
                Some(s) => object["status"] = s.clone(),
                None => {
                    if let Some(o) = object.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
    }
    keep_server_fields(&mut object, old);
    if object.get("spec") != old.get("spec") {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        set_meta(&mut object, "generation", generation.into());
    }
    object["apiVersion"] = target.api_version().into();
    object["kind"] = target.rt.kind.clone().into();
    add_managed_fields(&mut object, "Update", &target.api_version());
    object
}

pub(super) fn patch(
    shared: &Shared,
    target: &Target,
    content_type: &str,
    body: Value,
    manager: &str,
) -> Response<Body> {
    let mut store = shared.store.lock().unwrap();
    let existing = store.get(&target.type_key(), &target.key()).cloned();
    let mime = content_type.split(';').next().unwrap_or_default().trim();
    let Some(old) = existing else {
        if mime == "application/apply-patch+yaml" {
            drop(store);
            if manager.is_empty() {
                return no_field_manager();
            }
            return create(shared, target, body);
        }
        return not_found(target);
    };
    let mut new = old.clone();
    let applied = match mime {
        "application/json-patch+json" => patch::json_patch(&mut new, &body),
        "application/merge-patch+json" => {
            patch::merge_patch(&mut new, &body);
            Ok(())
        }
        "application/strategic-merge-patch+json" if target.rt.builtin => {
            patch::strategic_merge(&mut new, &body)
        }
        "application/strategic-merge-patch+json" => {
            return status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
                None,
            );
        }
        "application/apply-patch+yaml" => {
            if manager.is_empty() {
                return no_field_manager();
            }
            // Simplified server-side apply: the applied fields win; no
            // field ownership is tracked, so nothing is removed.
            let mut applied = body.clone();
            if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            apply_merge(&mut new, &applied);
            Ok(())
        }
        other => {
            return status(
                415,
                "UnsupportedMediaType",
                format!("unsupported patch type {other:?}"),
                None,
            );
        }
    };
    if let Err(e) = applied {
        return status(422, "Invalid", e, None);
    }
    // A resourceVersion in the patch is a precondition.
    if let Some(rv) = body
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        && rv != meta_str(&old, "resourceVersion").unwrap_or_default()
    {
        return conflict(target);
    }
    if meta_str(&new, "name") != target.name.as_deref() {
        return status(
            422,
            "Invalid",
            "metadata.name: Invalid value: field is immutable".into(),
            None,
        );
    }
    let mut stored_new = merge_update(&old, new, target);
    if mime == "application/apply-patch+yaml"
        && let Some(entries) = stored_new["metadata"]["managedFields"].as_array_mut()
        && let Some(last) = entries.last_mut()
    {
        last["operation"] = "Apply".into();
        last["manager"] = manager.into();
    }
    if stored_new == old {
        return ok(present(&old, target));
    }
    let stored = store.write(&target.type_key(), target.key(), stored_new);
    shared.changed.send_replace(store.rv);
    ok(present(&stored, target))
}

/// Merges an applied configuration: maps merge, everything else replaces.
pub(super) fn apply_merge(doc: &mut Value, applied: &Value) {
    match (doc, applied) {
        (Value::Object(d), Value::Object(a)) => {
            for (k, v) in a {
                match d.get_mut(k) {
                    Some(existing) => apply_merge(existing, v),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, a) => *d = a.clone(),
    }
}

pub(super) fn delete(shared: &Shared, target: &Target, options: &Value) -> Response<Body> {
    let mut store = shared.store.lock().unwrap();
    let Some(old) = store.get(&target.type_key(), &target.key()) else {
        return not_found(target);
    };
    let preconditions = &options["preconditions"];
    if let Some(rv) = preconditions["resourceVersion"].as_str()
        && Some(rv) != meta_str(old, "resourceVersion")
    {
        return conflict(target);
    }
    if let Some(uid) = preconditions["uid"].as_str()
        && Some(uid) != meta_str(old, "uid")
    {
        return conflict(target);
    }
    let gone = store
        .remove(&target.type_key(), &target.key())
        .expect("present");
    match target.rt.kind.as_str() {
        // Namespace contents go with it (the real API does this through a finalizer).
        "Namespace" => {
            let name = target.name.clone().unwrap_or_default();
            let keys: Vec<(TypeKey, ObjectKey)> = store
                .objects
                .iter()
                .flat_map(|(ty, objects)| {
                    objects
                        .keys()
                        .filter(|k| k.0 == name)
                        .map(move |k| (ty.clone(), k.clone()))
                })
                .collect();
            for (ty, key) in keys {
                store.remove(&ty, &key);
            }
        }
        "CustomResourceDefinition" => {
            if let Ok(t) = ResourceType::from_crd(&gone) {
                let ty = (t.group.clone(), t.plural.clone());
                let keys: Vec<ObjectKey> = store
                    .objects
                    .get(&ty)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for key in keys {
                    store.remove(&ty, &key);
                }
                shared
                    .types
                    .lock()
                    .unwrap()
                    .retain(|x| !(x.group == t.group && x.plural == t.plural));
            }
        }
        _ => {}
    }
    shared.changed.send_replace(store.rv);
    ok(present(&gone, target))
}

pub(super) fn delete_collection(
    shared: &Shared,
    target: &Target,
    filter: &Filter,
) -> Response<Body> {
    let mut store = shared.store.lock().unwrap();
    let keys: Vec<ObjectKey> = store
        .objects
        .get(&target.type_key())
        .map(|m| {
            m.iter()
                .filter(|(_, o)| filter.matches(o))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let items: Vec<Value> = keys
        .iter()
        .filter_map(|k| store.remove(&target.type_key(), k))
        .map(|o| present(&o, target))
        .collect();
    shared.changed.send_replace(store.rv);
    ok(json!({
        "kind": list_kind(target),
        "apiVersion": list_api_version(target),
        "metadata": {"resourceVersion": store.rv.to_string()},
        "items": items,
    }))
}

fn list_kind(target: &Target) -> String {
    if target.metadata_only {
        "PartialObjectMetadataList".into()
    } else {
        format!("{}List", target.rt.kind)
    }
}

fn list_api_version(target: &Target) -> String {
    if target.metadata_only {
        "meta.k8s.io/v1".into()
    } else {
        target.api_version()
    }
}

fn no_field_manager() -> Response<Body> {
    status(
        422,
        "Invalid",
        "fieldManager is required for apply requests".into(),
        None,
    )
}
