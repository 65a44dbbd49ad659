//! `admission.k8s.io/v1` AdmissionReview in: decoding a body into the
//! engine's [`Request`], keeping the request's kind, resource and
//! subresource as the API server sent them (the answer is written by
//! [`super::verdict`]).

use crate::engine::Request;
use crate::json_doc::{Doc, Document};
use crate::kinds::{Gvk, Gvr};
use crate::matching::UserInfo;
use serde::Deserialize;
use serde_json::Value;

/// Why a body is not a usable AdmissionReview; the text goes back as a 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("malformed AdmissionReview: {0}")]
    Json(String),
    #[error(
        "unsupported AdmissionReview: apiVersion {0:?} and kind {1:?}; only admission.k8s.io/v1 AdmissionReview is served"
    )]
    Version(String, String),
    #[error("malformed AdmissionReview: no request")]
    NoRequest,
}

/// An AdmissionReview as it arrives on the wire: only the fields the engine
/// reads, its objects decoded as `O` (a `serde_json::Value` or a decoded
/// document). Public so that `benches/decode.rs` can decode into exactly
/// this with other JSON parsers.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewIn<O = Value> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn<O>>,
}

/// The form a review's `object` and `oldObject` are decoded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectForm {
    /// A [`crate::json_doc::Doc`]: half the cost to decode and cheaper to
    /// read, for the evaluators that read documents.
    Document,
    /// A `serde_json::Value`, for the code that reads those (CEL,
    /// mutation), rather than one made from a document.
    Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestIn<O = Value> {
    uid: String,
    kind: GvkIn,
    #[serde(default)]
    resource: Option<GvrIn>,
    #[serde(default)]
    sub_resource: String,
    #[serde(default)]
    request_kind: Option<GvkIn>,
    #[serde(default)]
    request_resource: Option<GvrIn>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    operation: String,
    #[serde(default)]
    user_info: UserInfoIn,
    #[serde(default = "none")]
    object: Option<O>,
    #[serde(default = "none")]
    old_object: Option<O>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
pub struct GvkIn {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Deserialize)]
pub struct GvrIn {
    #[serde(default)]
    group: String,
    version: String,
    resource: String,
}

impl From<GvkIn> for Gvk {
    fn from(k: GvkIn) -> Gvk {
        Gvk {
            group: k.group,
            version: k.version,
            kind: k.kind,
        }
    }
}

impl From<GvrIn> for Gvr {
    fn from(r: GvrIn) -> Gvr {
        Gvr {
            group: r.group,
            version: r.version,
            resource: r.resource,
        }
    }
}

#[derive(Deserialize, Default)]
pub struct UserInfoIn {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// A decoded review: the request's uid and the engine's view of it.
pub struct Review {
    pub uid: String,
    pub request: Request,
    /// A dry run changes nothing, so it leaves no background work.
    pub dry_run: bool,
}

/// The default of an absent object. A plain `#[serde(default)]` would
/// make serde require `O: Default` of the whole struct.
fn none<O>() -> Option<O> {
    None
}

/// Decodes a review body with its objects as documents (see [`decode_as`]).
pub fn decode(body: &[u8]) -> Result<Review, ReviewError> {
    decode_as(body, ObjectForm::Document)
}

/// Decodes a review body, its objects in `form`. Nesting is bounded by
/// serde_json's recursion limit (128), which turns a deeply nested body
/// into an error, not a crash.
pub fn decode_as(body: &[u8], form: ObjectForm) -> Result<Review, ReviewError> {
    // serde would read a struct from an array too; a review is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ReviewError::Json("expected a JSON object".into()));
    }
    // The plain parse is the fast path; only a failed body is parsed again
    // with path tracking, to say where it went wrong.
    // One UTF-8 check of the whole body is cheaper than serde_json's check
    // of every string it reads from a byte slice (benches/decode.rs).
    let text = std::str::from_utf8(body)
        .map_err(|e| ReviewError::Json(format!("body is not UTF-8: {e}")))?;
    match form {
        ObjectForm::Document => match serde_json::from_str::<ReviewIn<Doc>>(text) {
            Ok(r) => Review::from_wire(r),
            Err(_) => Err(explain(text)),
        },
        ObjectForm::Value => match serde_json::from_str::<ReviewIn<Value>>(text) {
            Ok(r) => Review::from_wire(r),
            Err(_) => Err(explain(text)),
        },
    }
}

/// The error of a body that failed to decode, with the path where it failed.
fn explain(body: &str) -> ReviewError {
    let de = &mut serde_json::Deserializer::from_str(body);
    match serde_path_to_error::deserialize::<_, ReviewIn>(de) {
        Ok(_) => ReviewError::Json("undecodable body".into()),
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || path == "?" {
                ReviewError::Json(inner.to_string())
            } else {
                ReviewError::Json(format!("{path}: {inner}"))
            }
        }
    }
}

impl Review {
    /// Checks the version and kind of a decoded review and takes its request.
    pub fn from_wire<O: Into<Document>>(review: ReviewIn<O>) -> Result<Review, ReviewError> {
        if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
            return Err(ReviewError::Version(review.api_version, review.kind));
        }
        let r = review.request.ok_or(ReviewError::NoRequest)?;
        let object_kind = Gvk::from(r.kind);
        // The API server always sends `resource`; a hand-made review may
        // leave it out, and then the object's kind names it.
        let gvr = r.resource.map_or_else(|| object_kind.resource(), Gvr::from);
        let gvk = matched_kind(&object_kind, &gvr, &r.sub_resource);
        Ok(Review {
            uid: r.uid,
            dry_run: r.dry_run,
            request: Request {
                operation: r.operation,
                gvk,
                request_kind: r
                    .request_kind
                    .map_or_else(|| object_kind.clone(), Gvk::from),
                request_resource: r.request_resource.map_or_else(|| gvr.clone(), Gvr::from),
                request_sub_resource: r
                    .request_sub_resource
                    .unwrap_or_else(|| r.sub_resource.clone()),
                object_kind,
                gvr,
                subresource: r.sub_resource,
                from_review: true,
                dry_run: r.dry_run,
                object: r.object.map(Into::into).unwrap_or_default(),
                old_object: r.old_object.map(Into::into).unwrap_or_default(),
                user: UserInfo {
                    username: r.user_info.username,
                    groups: r.user_info.groups,
                    roles: Vec::new(),
                    cluster_roles: Vec::new(),
                },
                namespace_labels: None,
            },
        })
    }
}

/// The kind rules match a request on: on a subresource, the kind of the
/// parent resource (`Deployment` for `deployments/scale`, whose object is
/// an `autoscaling/v1 Scale`; `Pod` for `pods/eviction` and `pods/exec`),
/// which Kyverno finds by discovery from the request's resource.
// kyverno-compat: withTopLevelGVK maps request.resource to its kind and
// matches `Kind/subresource` selectors against it and request.subResource.
fn matched_kind(object_kind: &Gvk, gvr: &Gvr, sub_resource: &str) -> Gvk {
    if sub_resource.is_empty() {
        return object_kind.clone();
    }
    match crate::kinds::kind_for_resource(&gvr.api_version(), &gvr.resource) {
        Some(kind) => Gvk {
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            kind: kind.to_string(),
        },
        // A custom resource's subresource: CRDs serve only `status` and
        // `scale`, and `status` carries the resource's own kind. The kind
        // of a `scale` is the CRD's: left empty here, for the pipeline to
        // ask the cluster.
        None if sub_resource == "status" => object_kind.clone(),
        None => Gvk {
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            kind: String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::json_context::Builtins;
    use serde_json::json;

    fn review(request: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
            .unwrap()
    }

    #[test]
    fn decodes_a_pod_review() {
        let body = review(json!({
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE", "userInfo": {"username": "alice", "groups": ["dev"]},
            "object": {"metadata": {"name": "p", "namespace": "ns"}}
        }));
        let r = decode(&body).unwrap();
        assert_eq!(r.uid, "u1");
        assert_eq!(r.request.gvk.kind, "Pod");
        assert_eq!(r.request.name(), "p");
        assert_eq!(r.request.user.groups, vec!["dev"]);
    }

    /// Both object forms decode the same request: the objects read the
    /// same, null and absent objects are null, and the document form holds
    /// a document (so the validate route's evaluators read it in place).
    #[test]
    fn both_object_forms_decode_the_same_request() {
        let body = review(json!({
            "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "UPDATE",
            "object": {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"n": [1, 2.5, -3]}},
            "oldObject": null
        }));
        let doc = decode_as(&body, ObjectForm::Document).unwrap().request;
        let value = decode_as(&body, ObjectForm::Value).unwrap().request;
        assert!(matches!(
            doc.object.json(),
            crate::json_doc::JsonRef::Doc(_)
        ));
        assert!(matches!(
            value.object.json(),
            crate::json_doc::JsonRef::Value(_)
        ));
        assert_eq!(doc.object.value(), value.object.value());
        assert_eq!(doc.object.value()["spec"]["n"], json!([1, 2.5, -3]));
        assert!(doc.old_object.is_null() && value.old_object.is_null());
        let mut no_old = serde_json::from_slice::<serde_json::Value>(&body).unwrap();
        no_old["request"]
            .as_object_mut()
            .unwrap()
            .remove("oldObject");
        let no_old = serde_json::to_vec(&no_old).unwrap();
        assert!(decode(&no_old).unwrap().request.old_object.is_null());
        assert_eq!(
            doc.match_input().labels.map(|l| l.to_value()),
            Some(json!({"a": "1"}))
        );
        assert_eq!(
            value.match_input().labels.map(|l| l.to_value()),
            Some(json!({"a": "1"}))
        );
    }

    /// Subresource requests: rules match the parent's kind and the
    /// subresource, while `request.kind` and the object are the
    /// subresource's own (reviews as kube-apiserver v1.37 sends them).
    #[test]
    fn subresources_match_on_the_parent_kind() {
        let scale = decode(&review(json!({
            "uid": "u2", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "subResource": "scale",
            "requestKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestSubResource": "scale",
            "operation": "UPDATE", "userInfo": {"username": "alice"},
            "object": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                       "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 9}},
            "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale",
                          "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": 1}}
        })))
        .unwrap()
        .request;
        assert_eq!(scale.gvk, Gvk::new("apps/v1", "Deployment"));
        assert_eq!(scale.object_kind, Gvk::new("autoscaling/v1", "Scale"));
        assert_eq!(scale.gvr.resource, "deployments");
        assert_eq!(scale.subresource, "scale");
        assert_eq!(scale.name(), "web");
        let input = scale.match_input();
        assert_eq!((input.kind, input.subresource), ("Deployment", "scale"));
        // JMESPath sees the review's own fields, as Kyverno's webhook does.
        let context = scale.json_context(Builtins::default()).to_value();
        for (path, want) in [
            ("request.kind.kind", "Scale"),
            ("request.resource.resource", "deployments"),
            ("request.subResource", "scale"),
            ("request.requestKind.group", "autoscaling"),
            ("request.requestSubResource", "scale"),
        ] {
            let found = crate::jmespath::Expression::parse(path)
                .unwrap()
                .search(&context)
                .unwrap()
                .into_owned();
            assert_eq!(found, json!(want), "{path}");
        }

        let eviction = decode(&review(json!({
            "uid": "u3", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction", "operation": "CREATE",
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "p", "namespace": "ns"}}
        })))
        .unwrap()
        .request;
        assert_eq!(eviction.gvk, Gvk::new("v1", "Pod"));
        assert_eq!(eviction.object_kind.kind, "Eviction");
        // Left out by a hand-made review, the request's own fields are the
        // object's.
        assert_eq!(eviction.request_kind.kind, "Eviction");
        assert_eq!(eviction.request_sub_resource, "eviction");

        // A custom resource's status carries its own kind; its resource
        // is not in the built-in table.
        let status = decode(&review(json!({
            "uid": "u4", "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
            "resource": {"group": "example.com", "version": "v1", "resource": "widgets"},
            "subResource": "status", "operation": "UPDATE",
            "object": {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
        })))
        .unwrap()
        .request;
        assert_eq!(status.gvk.kind, "Widget");
    }

    #[test]
    fn bad_reviews_say_what_is_wrong() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{".to_vec(), "malformed AdmissionReview: EOF"),
            (
                b"[]".to_vec(),
                "malformed AdmissionReview: expected a JSON object",
            ),
            (
                b"".to_vec(),
                "malformed AdmissionReview: expected a JSON object",
            ),
            (
                serde_json::to_vec(
                    &json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
                )
                .unwrap(),
                "only admission.k8s.io/v1",
            ),
            (
                serde_json::to_vec(
                    &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
                )
                .unwrap(),
                "no request",
            ),
            (review(json!({"uid": 5})), "request.uid: invalid type"),
            (review(json!({"uid": "u"})), "missing field `kind`"),
        ];
        for (body, want) in cases {
            let err = decode(&body).err().expect("must fail").to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
        let deep = review(
            json!({"uid": "u", "kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": "DEEP"}),
        );
        let deep = String::from_utf8(deep).unwrap().replace(
            "\"DEEP\"",
            &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        );
        let err = decode(deep.as_bytes()).err().unwrap().to_string();
        assert!(err.contains("recursion limit"), "{err}");
    }
}
