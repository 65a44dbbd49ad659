//! What Kyverno checks when a policy or a TTL label is written, as
//! admission webhooks of their own:
//! - `/policyvalidate` (Kyverno's policy validating webhook, and its
//!   cleanup controller's for cleanup policies): a policy Kyverno refuses
//!   is refused with Kyverno's words ([`super::policy_checks`]); then a
//!   policy object of any kind gavel loads is compiled as the server would; one that does not
//!   compile is denied with the reason, so `kubectl apply` says what is
//!   wrong instead of a policy that never takes effect. A policy that uses
//!   what gavel does not serve (`unsupported: ...`, or a field gavel
//!   does not know) is allowed with a warning: Kyverno may serve it beside
//!   gavel, and gavel's refusal to serve it stays loud in the policy's
//!   status. A policy that compiles is allowed with the type checking
//!   warnings of its CEL expressions ([`crate::policy::type_checking`]):
//!   a field the matched kinds' schemas do not declare, an operator on
//!   the wrong types.
//! - `/verifyttl` (Kyverno's TTL webhook): an object whose
//!   `cleanup.kyverno.io/ttl` label cannot be read is allowed with a
//!   warning, as Kyverno does.

use super::verdict::Verdict;
use crate::engine::Request;
use crate::policy::cleanup::{CompiledCleanupPolicy, TTL_LABEL, deletion_time};
use crate::policy::load::classify;
use crate::policy::set::{LoadOptions, Policy};
use crate::policy::type_checking::type_warnings;
use serde_json::Value;

/// The kinds compiled by the cleanup controller rather than the policy set.
const CLEANUP_KINDS: [&str; 4] = [
    "CleanupPolicy",
    "ClusterCleanupPolicy",
    "DeletingPolicy",
    "NamespacedDeletingPolicy",
];

/// The verdict on a policy object written (CREATE, UPDATE).
pub fn policy_verdict(req: &Request) -> Verdict {
    let object = req.object.value();
    if object.is_null() {
        return allowed(Vec::new());
    }
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // Kyverno's own refusals come first, in its words and with no prefix.
    if let Some(message) = super::policy_checks::refusal(object) {
        return denied(&message);
    }
    let checked = if CLEANUP_KINDS.contains(&kind) {
        CompiledCleanupPolicy::compile(object).map(|_| ())
    } else {
        classify(&format!("{kind}/{name}"), 0, object.clone())
            .map_err(|e| e.to_string())
            .and_then(|doc| {
                Policy::compile(doc, &LoadOptions::SERVER)
                    .map(|_| ())
                    .map_err(|r| r.reason)
            })
    };
    match checked {
        Ok(()) => allowed(type_warnings(object)),
        // The API server prunes what the CRD does not declare before any
        // webhook sees the object: an unknown field is one gavel does not
        // know yet, not a mistake of the user's.
        Err(reason) if reason.contains("unsupported:") || reason.contains("unknown field") => {
            allowed(vec![format!(
                "gavel does not serve {kind} {name}: {reason}"
            )])
        }
        Err(reason) => denied(&format!("{kind} {name} is invalid: {reason}")),
    }
}

fn denied(message: &str) -> Verdict {
    Verdict {
        allowed: false,
        message: Some(super::json_text::JsonText::escape(message)),
        warnings: Vec::new(),
        patch: None,
    }
}

/// The verdict on an object carrying the TTL label: allowed, with a
/// warning when the value cannot be read (Kyverno's words).
pub fn ttl_verdict(req: &Request) -> Verdict {
    let Some(value) = req
        .object
        .value()
        .pointer("/metadata/labels")
        .and_then(|l| l.get(TTL_LABEL))
        .and_then(Value::as_str)
    else {
        return allowed(Vec::new());
    };
    // A creation time is needed only to place a duration; any will do to
    // tell whether the value reads.
    match deletion_time(value, Some(chrono::DateTime::UNIX_EPOCH)) {
        Ok(_) => allowed(Vec::new()),
        Err(e) => allowed(vec![format!(
            "{TTL_LABEL} label value cannot be parsed as any recognizable format ({e})"
        )]),
    }
}

fn allowed(warnings: Vec<String>) -> Verdict {
    Verdict {
        allowed: true,
        message: None,
        warnings,
        patch: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(object: Value) -> Request {
        Request::offline(&object, "CREATE", Default::default(), None)
    }

    fn cluster_policy(expression: &str) -> Value {
        json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "m", "deny": {"conditions": {"any": [
                    {"key": expression, "operator": "Equals", "value": "x"}]}}}}]},
        })
    }

    #[test]
    fn invalid_policies_are_denied_with_the_reason() {
        let good = policy_verdict(&request(cluster_policy(
            "{{ request.object.metadata.name }}",
        )));
        assert!(good.allowed && good.warnings.is_empty());
        let vpol = |expression: &str| {
            json!({
                "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                "metadata": {"name": "p"},
                "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                            "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                         "validations": [{"expression": expression}]},
            })
        };
        assert!(policy_verdict(&request(vpol("true"))).allowed);
        // A mistake the type check finds is a warning: the policy compiles
        // and is served.
        let typo = policy_verdict(&request(vpol("object.spec.hostNetwrk == false")));
        assert!(typo.allowed);
        assert_eq!(
            typo.warnings,
            [
                "spec.validations[0].expression: /v1, Kind=Pod: undefined field 'hostNetwrk' (object.spec.hostNetwrk)"
            ]
        );
        let bad = policy_verdict(&request(vpol("object.spec.(")));
        assert!(!bad.allowed, "{:?}", bad.warnings);
        let message = bad.message.unwrap().as_escaped().to_string();
        assert!(
            message.starts_with("ValidatingPolicy p is invalid: "),
            "{message}"
        );

        let cleanup = json!({
            "apiVersion": "kyverno.io/v2", "kind": "ClusterCleanupPolicy",
            "metadata": {"name": "c"},
            "spec": {"schedule": "not a schedule",
                     "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}},
        });
        let verdict = policy_verdict(&request(cleanup));
        assert!(!verdict.allowed);
        assert!(
            verdict.message.unwrap().as_escaped().contains("schedule"),
            "the reason names the field"
        );
    }

    #[test]
    fn unsupported_policies_are_allowed_with_a_warning() {
        let vap = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "v"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["pods"]}]},
                     "validations": [{"expression": "true"}]},
        });
        let verdict = policy_verdict(&request(vap));
        assert!(verdict.allowed);
        assert_eq!(verdict.warnings.len(), 1);
        assert!(
            verdict.warnings[0].contains("unsupported:"),
            "{:?}",
            verdict.warnings
        );
        // A field gavel does not know (the API server has pruned any the
        // CRD does not declare).
        let mut newer = cluster_policy("x");
        newer["spec"]["rules"][0]["validate"]["someNewField"] = json!(true);
        let verdict = policy_verdict(&request(newer));
        assert!(verdict.allowed);
        assert!(
            verdict.warnings[0].contains("unknown field"),
            "{:?}",
            verdict.warnings
        );
    }

    #[test]
    fn unreadable_ttl_labels_warn() {
        let object = |ttl: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "n", "labels": {TTL_LABEL: ttl}}})
        };
        assert!(ttl_verdict(&request(object("1d"))).warnings.is_empty());
        assert!(
            ttl_verdict(&request(object("2026-10-04")))
                .warnings
                .is_empty()
        );
        let soon = ttl_verdict(&request(object("soon")));
        assert!(soon.allowed);
        assert!(soon.warnings[0].starts_with(
            "cleanup.kyverno.io/ttl label value cannot be parsed as any recognizable format"
        ));
    }
}
