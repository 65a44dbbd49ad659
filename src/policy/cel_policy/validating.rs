//! ValidatingPolicy and NamespacedValidatingPolicy (policies.kyverno.io),
//! and ValidatingAdmissionPolicy (admissionregistration.k8s.io) with its
//! bindings: the documents and their compilation.

use super::scope::{Autogen, BindingDoc, Bindings, MatchConstraints, PolicyScope, bindings_for};
use super::{
    AuditAnnotation, CelChecks, CelCompileError, NamedExpression, ParamKind, ValidationExpression,
};
use serde::Deserialize;
use serde_json::Value;

/// The spec of a ValidatingPolicy / NamespacedValidatingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidatingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub validations: Vec<ValidationExpression>,
    #[serde(default)]
    pub validation_actions: Vec<String>,
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub autogen: Option<Autogen>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub validation_configurations: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidatingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: ValidatingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled ValidatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledValidatingPolicy {
    pub scope: PolicyScope,
    pub checks: CelChecks,
    /// `validationActions` contains Deny.
    pub deny: bool,
    /// `validationActions` contains Warn.
    pub warn: bool,
    /// `evaluation.admission.enabled` (default true): evaluated at
    /// admission.
    pub admission: bool,
    /// `evaluation.background.enabled` (default true): evaluated by the
    /// background scan.
    pub background: bool,
    /// `name`, or `namespace/name` for a namespaced one: the policy of its
    /// report results, as Kyverno names it.
    pub key: String,
    /// What its report results carry from its annotations.
    pub report: crate::policy::ReportMeta,
    /// `evaluation.mode: JSON`: evaluated on JSON payloads (`object` the
    /// payload), never on Kubernetes requests.
    pub json: bool,
}

impl CompiledValidatingPolicy {
    pub fn compile(doc: &ValidatingPolicyDoc) -> Result<CompiledValidatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        // Only the admission kinds have bindings to name the params.
        if spec.param_kind.is_some() && doc.kind != "ValidatingAdmissionPolicy" {
            return Err(CelCompileError::Unsupported("spec.paramKind".into()));
        }
        let enabled = |path: &str| {
            spec.evaluation
                .as_ref()
                .and_then(|e| e.pointer(path))
                .and_then(Value::as_bool)
                .unwrap_or(true)
        };
        let key = match &doc.metadata.namespace {
            Some(ns) if doc.kind.starts_with("Namespaced") => format!("{ns}/{}", doc.metadata.name),
            _ => doc.metadata.name.clone(),
        };
        let json = match spec.evaluation.as_ref().and_then(|e| e.pointer("/mode")) {
            None => false,
            Some(Value::String(m)) if m == "Kubernetes" => false,
            Some(Value::String(m)) if m == "JSON" => true,
            Some(other) => {
                return Err(CelCompileError::Unsupported(format!(
                    "spec.evaluation.mode {other} (gavel evaluates Kubernetes and JSON)"
                )));
            }
        };
        // A JSON policy matches no Kubernetes resources: no constraints.
        let no_constraints = Default::default();
        let match_constraints = match (&spec.match_constraints, json) {
            (None, true) => Some(&no_constraints),
            (c, _) => c.as_ref(),
        };
        Ok(CompiledValidatingPolicy {
            json,
            admission: enabled("/admission/enabled"),
            background: enabled("/background/enabled"),
            key,
            report: crate::policy::ReportMeta::of(&doc.metadata),
            scope: PolicyScope::compile(
                &doc.kind,
                &doc.metadata,
                match_constraints,
                &spec.match_conditions,
                spec.autogen.as_ref(),
                spec.failure_policy.as_deref(),
            )?,
            checks: CelChecks::compile_parts(
                &spec.variables,
                &spec.validations,
                &spec.audit_annotations,
            )?,
            deny: spec.validation_actions.is_empty()
                || spec.validation_actions.iter().any(|a| a == "Deny"),
            warn: spec.validation_actions.iter().any(|a| a == "Warn"),
        })
    }

    /// A ValidatingAdmissionPolicy with its bindings (of every loaded
    /// binding, those naming it): no autogen, and failures deny.
    pub fn compile_admission(
        doc: &ValidatingPolicyDoc,
        bindings: &[BindingDoc],
    ) -> Result<CompiledValidatingPolicy, CelCompileError> {
        let mut policy = CompiledValidatingPolicy::compile(doc)?;
        policy.scope.controllers.clear();
        policy.scope.param_kind = doc.spec.param_kind.clone();
        policy.deny = true;
        let mine = bindings_for(bindings, &doc.kind, &doc.metadata.name)?;
        if !mine.is_empty() {
            policy.scope.bindings = Bindings::Validating(mine);
        }
        Ok(policy)
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
