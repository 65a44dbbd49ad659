//! MutatingPolicy and NamespacedMutatingPolicy (policies.kyverno.io), and
//! MutatingAdmissionPolicy (admissionregistration.k8s.io) with its
//! bindings: the documents and their compilation into apply-configuration
//! and JSON Patch programs.

use super::scope::{Autogen, BindingDoc, Bindings, MatchConstraints, PolicyScope, bindings_for};
use super::{CelCompileError, CompiledNamed, NamedExpression, ParamKind, compile, compile_named};
use crate::cel::Program;
use serde::Deserialize;
use serde_json::Value;

/// `{expression}` of a mutation.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutationExpression {
    pub expression: String,
}

/// One of `spec.mutations[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mutation {
    pub patch_type: String,
    #[serde(default)]
    pub apply_configuration: Option<MutationExpression>,
    #[serde(default)]
    pub json_patch: Option<MutationExpression>,
}

/// The spec of a MutatingPolicy / NamespacedMutatingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutatingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub mutations: Vec<Mutation>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub reinvocation_policy: Option<String>,
    #[serde(default)]
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub autogen: Option<Autogen>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub target_match_constraints: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutatingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: MutatingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled mutation: its expression gives either an object merged in
/// the way server-side apply merges, or a list of JSON Patch operations.
#[derive(Debug, Clone)]
pub enum CompiledMutation {
    ApplyConfiguration(Program),
    JsonPatch(Program),
}

/// A compiled MutatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledMutatingPolicy {
    pub scope: PolicyScope,
    pub variables: Vec<CompiledNamed>,
    pub mutations: Vec<CompiledMutation>,
    /// A Kubernetes MutatingAdmissionPolicy: lists merge atomically (no
    /// schema, as Kyverno's CLI applies them) and each mutation reports
    /// its own result.
    pub admission_policy: bool,
}

impl CompiledMutatingPolicy {
    pub fn compile(doc: &MutatingPolicyDoc) -> Result<CompiledMutatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let unsupported = |field: &str| Err(CelCompileError::Unsupported(field.into()));
        // Only the admission kinds have bindings to name the params.
        if spec.param_kind.is_some() && doc.kind != "MutatingAdmissionPolicy" {
            return unsupported("spec.paramKind");
        }
        if spec.target_match_constraints.is_some() {
            return unsupported("spec.targetMatchConstraints (mutate existing)");
        }
        let enabled = |path: &str| {
            spec.evaluation
                .as_ref()
                .and_then(|e| e.pointer(path))
                .and_then(Value::as_bool)
        };
        if enabled("/mutateExisting/enabled") == Some(true) {
            return unsupported("spec.evaluation.mutateExisting");
        }
        let mutations = spec
            .mutations
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let field = format!("spec.mutations[{i}]");
                match (m.patch_type.as_str(), &m.apply_configuration, &m.json_patch) {
                    ("ApplyConfiguration", Some(a), None) => {
                        Ok(CompiledMutation::ApplyConfiguration(compile(
                            &a.expression,
                            &format!("{field}.applyConfiguration.expression"),
                        )?))
                    }
                    ("JSONPatch", None, Some(j)) => Ok(CompiledMutation::JsonPatch(compile(
                        &j.expression,
                        &format!("{field}.jsonPatch.expression"),
                    )?)),
                    (t, _, _) => Err(CelCompileError::Invalid(format!(
                        "{field}: patchType {t:?} needs exactly its own field \
                         (applyConfiguration for ApplyConfiguration, jsonPatch for JSONPatch)"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, CelCompileError>>()?;
        Ok(CompiledMutatingPolicy {
            scope: PolicyScope::compile(
                &doc.kind,
                &doc.metadata,
                spec.match_constraints.as_ref(),
                &spec.match_conditions,
                spec.autogen.as_ref(),
                spec.failure_policy.as_deref(),
            )?,
            variables: compile_named(&spec.variables, "spec.variables")?,
            mutations,
            admission_policy: false,
        })
    }

    /// A MutatingAdmissionPolicy with its bindings (of every loaded
    /// binding, those naming it).
    pub fn compile_admission(
        doc: &MutatingPolicyDoc,
        bindings: &[BindingDoc],
    ) -> Result<CompiledMutatingPolicy, CelCompileError> {
        let mut policy = CompiledMutatingPolicy::compile(doc)?;
        policy.scope.controllers.clear();
        policy.scope.param_kind = doc.spec.param_kind.clone();
        policy.admission_policy = true;
        let mine = bindings_for(bindings, &doc.kind, &doc.metadata.name)?;
        if !mine.is_empty() {
            policy.scope.bindings = Bindings::Mutating(
                mine.into_iter()
                    .filter(|b| b.match_resources.is_some())
                    .collect(),
            );
        }
        Ok(policy)
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
