//! The Events a validating review leaves, as Kyverno's admission
//! controller emits them (docs/kyverno-semantics.md#events): for each rule
//! that failed or errored, `PolicyViolation` (Warning) on the policy with
//! the resource as `related`, action `Resource Blocked` when the request
//! was denied and `Resource Passed` when it was admitted; an admitted
//! request also gets one on the resource itself. A resource without a name
//! yet (`generateName`) gets none, as in Kyverno. Written by the cluster's
//! event writer, off the answer's path.

use crate::engine::{PolicyResponse, Request, RuleStatus};
use crate::policy::CompiledPolicy;
use crate::policy::cel_policy::CompiledValidatingPolicy;
use crate::policy::compile::PolicyScope;
use std::sync::Arc;

/// An object an event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventObject {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One event of an admission review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionEvent {
    /// What the event is about: the policy, or the resource (shared by
    /// the review's events).
    pub regarding: Arc<EventObject>,
    /// The resource, on an event about the policy.
    pub related: Option<Arc<EventObject>>,
    /// Kyverno's reason (`PolicyViolation`).
    pub reason: &'static str,
    /// Kyverno's action (`Resource Blocked`, `Resource Passed`).
    pub action: &'static str,
    pub note: String,
}

/// The events of one validating review: its classic policies' and
/// ValidatingPolicies' responses, and whether the request was denied.
pub fn for_validation<'s>(
    req: &Request,
    policies: impl Iterator<Item = &'s CompiledPolicy>,
    responses: &[PolicyResponse],
    cel: &[(&CompiledValidatingPolicy, PolicyResponse)],
    blocked: bool,
) -> Vec<AdmissionEvent> {
    let failed = |r: &PolicyResponse| {
        r.rules
            .iter()
            .any(|rule| matches!(rule.status, RuleStatus::Fail | RuleStatus::Error))
    };
    // Most reviews pass every rule: nothing to make for them.
    let name = req.name();
    if name.is_empty() || !(responses.iter().any(failed) || cel.iter().any(|(_, r)| failed(r))) {
        return Vec::new();
    }
    let resource = Arc::new(EventObject {
        api_version: req.object_kind.api_version(),
        kind: req.object_kind.kind.clone(),
        namespace: req.namespace().to_string(),
        name: name.to_string(),
        uid: req.uid().to_string(),
    });
    // (apiVersion, kind, namespace, name) of each policy, borrowed: an
    // object is made only for a policy with a failed rule.
    let classic = policies.zip(responses).map(|(p, r)| {
        let (kind, namespace) = match p.scope {
            PolicyScope::Cluster => ("ClusterPolicy", ""),
            PolicyScope::Namespaced => ("Policy", p.namespace.as_deref().unwrap_or_default()),
        };
        (("kyverno.io/v1", kind, namespace, p.name.as_str()), r)
    });
    let cel = cel.iter().map(|(p, r)| {
        let s = &p.scope;
        let namespace = s.namespace.as_deref().unwrap_or_default();
        (
            (
                "policies.kyverno.io/v1",
                s.kind.as_str(),
                namespace,
                s.name.as_str(),
            ),
            r,
        )
    });
    let mut out = Vec::new();
    for ((api_version, kind, namespace, policy_name), response) in classic.chain(cel) {
        let mut policy: Option<Arc<EventObject>> = None;
        for rule in response.rules.iter() {
            if !matches!(rule.status, RuleStatus::Fail | RuleStatus::Error) {
                continue;
            }
            let regarding = policy
                .get_or_insert_with(|| {
                    Arc::new(EventObject {
                        api_version: api_version.to_string(),
                        kind: kind.to_string(),
                        namespace: namespace.to_string(),
                        name: policy_name.to_string(),
                        uid: String::new(),
                    })
                })
                .clone();
            out.push(AdmissionEvent {
                regarding,
                related: Some(resource.clone()),
                reason: "PolicyViolation",
                action: if blocked {
                    "Resource Blocked"
                } else {
                    "Resource Passed"
                },
                note: policy_note(&resource, rule.name, rule.status, &rule.message, blocked),
            });
            if !blocked {
                out.push(AdmissionEvent {
                    regarding: resource.clone(),
                    related: None,
                    reason: "PolicyViolation",
                    action: "Resource Passed",
                    note: format!(
                        "policy {policy_name}/{} {}: {}",
                        rule.name,
                        rule.status.as_str(),
                        rule.message
                    ),
                });
            }
        }
    }
    out
}

/// Kyverno's note on a policy's event: `<Kind> <ns>/<name>: [<rule>]
/// <status> (blocked); <message>`.
fn policy_note(
    resource: &EventObject,
    rule: &str,
    status: RuleStatus,
    message: &str,
    blocked: bool,
) -> String {
    // Pushed into one buffer: a denied review words one note per failed
    // rule, and `format!` cost four times as much (callgrind,
    // `handler/pss17/violating`).
    let status = status.as_str();
    let mut note = String::with_capacity(
        resource.kind.len()
            + resource.namespace.len()
            + resource.name.len()
            + rule.len()
            + status.len()
            + message.len()
            + 24,
    );
    note.push_str(&resource.kind);
    note.push(' ');
    if !resource.namespace.is_empty() {
        note.push_str(&resource.namespace);
        note.push('/');
    }
    note.push_str(&resource.name);
    if rule.is_empty() {
        note.push_str(": ");
    } else {
        note.push_str(": [");
        note.push_str(rule);
        note.push_str("] ");
    }
    note.push_str(status);
    if blocked {
        note.push_str(" (blocked)");
    }
    if !message.is_empty() {
        note.push_str("; ");
        note.push_str(message);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_worded_as_kyverno_words_them() {
        let pod = EventObject {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "team".into(),
            name: "web".into(),
            uid: String::new(),
        };
        assert_eq!(
            policy_note(
                &pod,
                "check-labels",
                RuleStatus::Fail,
                "label app is required",
                true
            ),
            "Pod team/web: [check-labels] fail (blocked); label app is required"
        );
        let ns = EventObject {
            namespace: String::new(),
            kind: "Namespace".into(),
            ..pod
        };
        assert_eq!(
            policy_note(&ns, "r", RuleStatus::Error, "", false),
            "Namespace web: [r] error"
        );
    }
}
