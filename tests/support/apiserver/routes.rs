//! Routing: discovery documents, then resource paths
//! (`/api/v1/...`, `/apis/{group}/{version}/...`) turned into a [`Target`]
//! and dispatched to list, watch or a write.

use super::*;

/// What a request asks of a resource type.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) rt: ResourceType,
    pub(super) version: String,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    /// The client asked for metadata only (`as=PartialObjectMetadata`).
    pub(super) metadata_only: bool,
}

impl Target {
    pub(super) fn type_key(&self) -> TypeKey {
        (self.rt.group.clone(), self.rt.plural.clone())
    }

    pub(super) fn key(&self) -> ObjectKey {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }

    pub(super) fn api_version(&self) -> String {
        self.rt.api_version(&self.version)
    }
}

pub(super) async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    // A request that raced a stop (its connection not yet cut) is not
    // served: the server is down.
    if !*shared.up.borrow() {
        return status(
            503,
            "ServiceUnavailable",
            "the server is stopped".into(),
            None,
        );
    }
    shared.log.lock().unwrap().push(Logged {
        method: req.method().to_string(),
        uri: req.uri().to_string(),
        user_agent: req
            .headers()
            .get(hyper::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        at: std::time::Instant::now(),
    });
    let delay = shared.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if shared
        .fail_next
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        return status(500, "InternalError", "injected failure".into(), None);
    }
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {TOKEN}"));
    if !authorized {
        return status(401, "Unauthorized", "Unauthorized".into(), None);
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or_default());
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = match Limited::new(req.into_body(), 16 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(413, "RequestEntityTooLarge", e.to_string(), None),
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let call = Call {
        method: method.clone(),
        query,
        content_type,
        accept,
        body,
    };
    match (&method, segs.as_slice()) {
        (&Method::GET, ["version"]) => ok(json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-gavel-test",
            "platform": "linux/amd64",
        })),
        (&Method::GET, ["healthz" | "readyz" | "livez"]) => text(200, "ok"),
        (&Method::GET, ["api"]) => ok(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        })),
        (&Method::GET, ["apis"]) => ok(resources::group_list(&shared.types.lock().unwrap())),
        (&Method::GET, ["apis", group]) => {
            match resources::group(&shared.types.lock().unwrap(), group) {
                Some(g) => ok(g),
                None => not_found_path(),
            }
        }
        (&Method::GET, ["openapi", "v2"]) => ok(json!({
            "swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": {}, "definitions": {},
        })),
        (&Method::GET, ["openapi", "v3"]) => {
            ok(resources::openapi_v3_index(&shared.types.lock().unwrap()))
        }
        (&Method::GET, ["openapi", "v3", gv @ ..]) => {
            match resources::openapi_v3_document(&shared.types.lock().unwrap(), &gv.join("/")) {
                Some(doc) => ok(doc),
                None => not_found_path(),
            }
        }
        (_, ["api", version, rest @ ..]) => resource_request(shared, &call, "", version, rest),
        (_, ["apis", group, version, rest @ ..]) => {
            resource_request(shared, &call, group, version, rest)
        }
        _ => not_found_path(),
    }
}

/// A request's method, query, headers and body.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) query: Map<String, Value>,
    pub(super) content_type: String,
    pub(super) accept: String,
    pub(super) body: Bytes,
}

pub(super) fn resource_request(
    shared: &Arc<Shared>,
    call: &Call,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Response<Body> {
    let (method, query, content_type, accept, body) = (
        &call.method,
        &call.query,
        call.content_type.as_str(),
        call.accept.as_str(),
        &call.body,
    );
    if rest.is_empty() || rest == [""] {
        if method != Method::GET {
            return status(405, "MethodNotAllowed", "method not allowed".into(), None);
        }
        return match resources::resource_list(&shared.types.lock().unwrap(), group, version) {
            Some(list) => ok(list),
            None => not_found_path(),
        };
    }
    // `/namespaces/{ns}/{plural}/...` unless it is the Namespace's own status.
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, ..] if !matches!(*plural, "status" | "finalize") => {
            (Some(ns.to_string()), &rest[2..])
        }
        _ => (None, rest),
    };
    if rest.len() > 3 {
        return not_found_path();
    }
    let rt = {
        let types = shared.types.lock().unwrap();
        types
            .iter()
            .find(|t| {
                t.group == group && t.plural == rest[0] && t.versions.iter().any(|v| v == version)
            })
            .cloned()
    };
    let Some(rt) = rt else {
        return not_found_path();
    };
    if rt.namespaced != namespace.is_some() && (rest.len() > 1 || !rt.namespaced) {
        return not_found_path();
    }
    let target = Target {
        rt,
        version: version.to_string(),
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
        metadata_only: accept.contains("as=PartialObjectMetadata"),
    };
    if let Some(sub) = &target.subresource
        && (sub != "status" || !target.rt.status)
    {
        return not_found_path();
    }
    let param = |k: &str| query.get(k).and_then(Value::as_str).unwrap_or_default();
    let filter = match (
        Selector::parse(param("labelSelector")),
        Selector::parse(param("fieldSelector")),
    ) {
        (Ok(labels), Ok(fields)) => Filter {
            namespace: target.namespace.clone().unwrap_or_default(),
            labels,
            fields,
        },
        (Err(e), _) | (_, Err(e)) => return status(400, "BadRequest", e, None),
    };
    let parse = || -> Result<Value, Response<Body>> {
        if content_type.starts_with("application/apply-patch+yaml") {
            let text = std::str::from_utf8(body)
                .map_err(|e| status(400, "BadRequest", e.to_string(), None))?;
            return serde_saphyr::from_str(text)
                .map_err(|e| status(400, "BadRequest", format!("invalid YAML: {e}"), None));
        }
        let mime = content_type.split(';').next().unwrap_or_default().trim();
        if !mime.ends_with("json") {
            return Err(status(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format ({mime}) - accepted media types include: application/json"
                ),
                None,
            ));
        }
        serde_json::from_slice(body)
            .map_err(|e| status(400, "BadRequest", format!("invalid JSON: {e}"), None))
    };
    let watching = matches!(param("watch"), "true" | "1");
    match (method, &target.name) {
        (&Method::GET, None) if watching => watch_response(shared, &target, filter, query),
        (&Method::GET, None) => list(shared, &target, &filter, query),
        (&Method::POST, None) => match parse() {
            Ok(b) => create(shared, &target, b),
            Err(r) => r,
        },
        (&Method::DELETE, None) => delete_collection(shared, &target, &filter),
        (&Method::GET, Some(_)) => match shared
            .store
            .lock()
            .unwrap()
            .get(&target.type_key(), &target.key())
        {
            Some(o) => ok(present(o, &target)),
            None => not_found(&target),
        },
        (&Method::PUT, Some(_)) => match parse() {
            Ok(b) => update(shared, &target, b),
            Err(r) => r,
        },
        (&Method::PATCH, Some(_)) => match parse() {
            Ok(b) => patch(shared, &target, content_type, b, param("fieldManager")),
            Err(r) => r,
        },
        (&Method::DELETE, Some(_)) => {
            let options = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
            delete(shared, &target, &options)
        }
        _ => status(405, "MethodNotAllowed", "method not allowed".into(), None),
    }
}

/// The object as served at the requested version.
pub(super) fn present(object: &Value, target: &Target) -> Value {
    if target.metadata_only {
        return json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": object.get("metadata").cloned().unwrap_or_default(),
        });
    }
    let mut o = object.clone();
    o["apiVersion"] = target.api_version().into();
    o["kind"] = target.rt.kind.clone().into();
    o
}
