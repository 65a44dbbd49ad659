//! ValidatingPolicy and NamespacedValidatingPolicy (policies.kyverno.io),
//! and ValidatingAdmissionPolicy (admissionregistration.k8s.io) with its
//! bindings: the documents and their compilation.

use super::scope::{Autogen, BindingDoc, Bindings, MatchConstraints, PolicyScope, bindings_for};
use super::{
    AuditAnnotation, CelChecks, CelCompileError, NamedExpression, ParamKind, ValidationExpression,
    check_libraries, checked_programs,
};
use crate::cel::authz::Library;
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
    /// `evaluation.mode`: what the policy evaluates.
    pub mode: EvaluationMode,
}

/// `spec.evaluation.mode` of a ValidatingPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvaluationMode {
    /// Admission requests and resources (the default).
    Kubernetes,
    /// JSON payloads: `object` is the payload.
    Json,
    /// HTTP authorization requests (kyverno-authz's HTTP authorizer):
    /// `object` is an `http.CheckRequest`, and a validation returns an
    /// `http.CheckResponse` or null.
    Http,
    /// Envoy external authorization: `object` is an
    /// `envoy.service.auth.v3.CheckRequest`, and a validation returns an
    /// `envoy.service.auth.v3.CheckResponse` or null.
    Envoy,
}

impl EvaluationMode {
    /// The mode's own library, which no other mode declares.
    fn library(self) -> Option<Library> {
        match self {
            EvaluationMode::Http => Some(Library::Http),
            EvaluationMode::Envoy => Some(Library::Envoy),
            _ => None,
        }
    }
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
        let mode = match spec.evaluation.as_ref().and_then(|e| e.pointer("/mode")) {
            None => EvaluationMode::Kubernetes,
            Some(Value::String(m)) => match m.as_str() {
                "Kubernetes" => EvaluationMode::Kubernetes,
                "JSON" => EvaluationMode::Json,
                "HTTP" => EvaluationMode::Http,
                "Envoy" => EvaluationMode::Envoy,
                _ => {
                    return Err(CelCompileError::Invalid(format!(
                        "spec.evaluation.mode: Unsupported value: {m:?}: supported values: \
                         \"Kubernetes\", \"JSON\", \"HTTP\", \"Envoy\""
                    )));
                }
            },
            Some(other) => {
                return Err(CelCompileError::Invalid(format!(
                    "spec.evaluation.mode: {other} is not a string"
                )));
            }
        };
        // A policy of the other modes matches no Kubernetes resources: no
        // constraints.
        let no_constraints = Default::default();
        let match_constraints = spec
            .match_constraints
            .as_ref()
            .or((mode != EvaluationMode::Kubernetes).then_some(&no_constraints));
        let checks =
            CelChecks::compile_parts(&spec.variables, &spec.validations, &spec.audit_annotations)?;
        let scope = PolicyScope::compile(
            &doc.kind,
            &doc.metadata,
            match_constraints,
            &spec.match_conditions,
            spec.autogen.as_ref(),
            spec.failure_policy.as_deref(),
        )?;
        let programs = checked_programs(&scope.match_conditions, &checks);
        // A mode's own library, and the JWT functions of both
        // authorization modes; the image verification functions are an
        // ImageValidatingPolicy's.
        let authorization = matches!(mode, EvaluationMode::Http | EvaluationMode::Envoy);
        check_libraries(
            |library| match library {
                Library::Jwt => authorization,
                library => mode.library() == Some(library),
            },
            &format!("evaluation mode {mode:?}"),
            &programs,
        )?;
        Ok(CompiledValidatingPolicy {
            mode,
            admission: enabled("/admission/enabled"),
            background: enabled("/background/enabled"),
            key,
            report: crate::policy::ReportMeta::of(&doc.metadata),
            scope,
            checks,
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
