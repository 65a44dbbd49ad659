//! `admission.k8s.io/v1` AdmissionReview: decoding a request into the
//! engine's [`Request`], and the verdict back into a response review.

use crate::engine::{Gvk, PolicyResponse, Request, RuleStatus};
use crate::matching::UserInfo;
use crate::policy::compile::{FailureAction, FailurePolicy};
use crate::policy::{CompiledPolicy, RuleBody};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    uid: String,
    kind: GvkIn,
    #[serde(default)]
    sub_resource: String,
    operation: String,
    #[serde(default)]
    user_info: UserInfoIn,
    #[serde(default)]
    object: Value,
    #[serde(default)]
    old_object: Value,
}

#[derive(Deserialize)]
struct GvkIn {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Deserialize, Default)]
struct UserInfoIn {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// A decoded review: the request's uid and the engine's view of it.
pub struct Review {
    pub uid: String,
    pub request: Request,
}

/// Decodes a review body. Nesting is bounded by serde_json's recursion
/// limit (128), which turns a deeply nested body into an error, not a crash.
pub fn decode(body: &[u8]) -> Result<Review, ReviewError> {
    // serde would read a struct from an array too; a review is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ReviewError::Json("expected a JSON object".into()));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let review: ReviewIn = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path == "?" {
            ReviewError::Json(inner.to_string())
        } else {
            ReviewError::Json(format!("{path}: {inner}"))
        }
    })?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(ReviewError::Version(review.api_version, review.kind));
    }
    let r = review.request.ok_or(ReviewError::NoRequest)?;
    Ok(Review {
        uid: r.uid,
        request: Request {
            operation: r.operation,
            gvk: Gvk {
                group: r.kind.group,
                version: r.kind.version,
                kind: r.kind.kind,
            },
            subresource: r.sub_resource,
            object: r.object,
            old_object: r.old_object,
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

/// The admission decision for one request.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    /// Kyverno's denial text, when denied.
    pub message: Option<String>,
    pub warnings: Vec<String>,
}

/// Decides from the policy responses (`responses[i]` belongs to
/// `policies[i]`): an Enforce failure denies; an evaluation error denies
/// only under `failurePolicy: Fail`; Audit failures are allowed, with a
/// warning when the policy sets `emitWarning`.
pub fn decide(
    policies: &[&CompiledPolicy],
    responses: &[PolicyResponse],
    req: &Request,
) -> Verdict {
    // policy -> rule -> message, sorted as Kyverno's YAML output is.
    let mut blocked: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    let mut warnings = Vec::new();
    for (policy, resp) in policies.iter().zip(responses) {
        for rule in &resp.rules {
            let enforce = policy.rules.iter().find(|r| r.name == rule.name).is_none_or(|r| {
                !matches!(&r.body, RuleBody::Validate(v) if v.failure_action == FailureAction::Audit)
            });
            let blocks = match rule.status {
                RuleStatus::Fail => enforce,
                RuleStatus::Error => policy.failure_policy == FailurePolicy::Fail,
                _ => false,
            };
            if blocks {
                blocked
                    .entry(resp.policy.as_str())
                    .or_default()
                    .insert(rule.name.as_str(), rule.message.as_str());
            } else if rule.status == RuleStatus::Fail && policy.emit_warning {
                warnings.push(format!(
                    "policy {}.{}: {}",
                    resp.policy, rule.name, rule.message
                ));
            }
        }
    }
    if blocked.is_empty() {
        return Verdict {
            allowed: true,
            message: None,
            warnings,
        };
    }
    let mut message = format!(
        "\n\nresource {} was blocked due to the following policies \n\n",
        resource_name(req)
    );
    for (policy, rules) in &blocked {
        message.push_str(policy);
        message.push_str(":\n");
        for (rule, text) in rules {
            message.push_str("  ");
            message.push_str(rule);
            message.push_str(": ");
            message.push_str(&yaml_scalar(text));
            message.push('\n');
        }
    }
    Verdict {
        allowed: false,
        message: Some(message),
        warnings,
    }
}

/// `Kind/namespace/name`, or `Kind/name` for cluster-scoped resources.
fn resource_name(req: &Request) -> String {
    let ns = req.namespace();
    if ns.is_empty() {
        format!("{}/{}", req.gvk.kind, req.name())
    } else {
        format!("{}/{}/{}", req.gvk.kind, ns, req.name())
    }
}

/// A YAML scalar as Go's yaml.Marshal writes a message: single-quoted when
/// it holds characters YAML would read differently.
fn yaml_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with([
            ' ', '\'', '"', '&', '*', '!', '|', '>', '%', '@', '`', '-', '?', '[', '{',
        ])
        && !s.ends_with(' ')
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.contains(['\n', '\t']);
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// The response review for `uid`.
pub fn encode(uid: &str, verdict: &Verdict) -> Vec<u8> {
    let mut response = json!({"uid": uid, "allowed": verdict.allowed});
    if let Some(message) = &verdict.message {
        response["status"] = json!({"status": "Failure", "code": 400, "message": message});
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
    .expect("a JSON value always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(request: Value) -> Vec<u8> {
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

    #[test]
    fn quotes_messages_like_go_yaml() {
        assert_eq!(yaml_scalar("plain words"), "plain words");
        assert_eq!(
            yaml_scalar("validation error: it's bad"),
            "'validation error: it''s bad'"
        );
    }
}
