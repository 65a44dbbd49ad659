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
    pub target_match_constraints: Option<TargetMatchConstraints>,
    #[serde(default)]
    pub target_match_conditions: Vec<NamedExpression>,
}

/// `spec.targetMatchConstraints`: the objects mutate existing patches,
/// named by an expression evaluated on the trigger, or by admission rules
/// (matchResources, inline) the cluster's objects are listed by.
#[derive(Debug, Clone, Default)]
pub struct TargetMatchConstraints {
    pub expression: Option<String>,
    /// The matchResources fields, inline beside `expression`.
    pub constraints: MatchConstraints,
}

/// `expression` beside an inline MatchConstraints, each field checked as
/// strictly as a policy's own matchConstraints (serde's `flatten` would
/// give up `deny_unknown_fields`).
impl<'de> Deserialize<'de> for TargetMatchConstraints {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut v = Value::deserialize(d)?;
        let expression = match v.as_object_mut().and_then(|m| m.remove("expression")) {
            None | Some(Value::Null) => None,
            Some(Value::String(e)) => Some(e),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "expression: {other} is not a string"
                )));
            }
        };
        let constraints = serde_json::from_value(v).map_err(D::Error::custom)?;
        Ok(TargetMatchConstraints {
            expression,
            constraints,
        })
    }
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

/// How mutate existing finds its targets.
#[derive(Debug, Clone)]
pub enum TargetSelection {
    /// `targetMatchConstraints.expression`, evaluated on the trigger: one
    /// object, or a list (`{items: [...]}`).
    Expression(Program),
    /// The objects these constraints select, listed from the cluster
    /// (operations do not apply: targets are not requests):
    /// `targetMatchConstraints` when it has resourceRules, else the
    /// policy's own matchConstraints (Kyverno's background controller).
    Constraints(MatchConstraints),
}

/// Mutate existing (`evaluation.mutateExisting.enabled`): what the policy
/// does to objects other than the request's.
#[derive(Debug, Clone)]
pub struct MutateExisting {
    pub targets: TargetSelection,
    /// `targetMatchConditions`: evaluated on each target (`object`), with
    /// the variables.
    pub conditions: Vec<CompiledNamed>,
    /// The trigger itself is not mutated at admission: the policy names
    /// other targets (`targetMatchConstraints` set).
    pub targets_only: bool,
    /// `evaluation.skipBackgroundRequests` (default true): triggers written
    /// by gavel's own background work leave no request.
    pub skip_background_requests: bool,
}

/// A compiled MutatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledMutatingPolicy {
    pub scope: PolicyScope,
    /// `name`, or `namespace/name` for a NamespacedMutatingPolicy: how
    /// UpdateRequests name it.
    pub key: String,
    /// What its report results carry from its annotations.
    pub report: crate::policy::ReportMeta,
    /// `evaluation.admission.enabled` (default true): applied at admission
    /// (and its mutate-existing triggers taken from admission).
    pub admission: bool,
    /// `evaluation.background.enabled` (default true): how Kyverno's
    /// report results name the process.
    pub background: bool,
    pub existing: Option<MutateExisting>,
    /// A hash of the spec: a changed policy has another (the background
    /// controller mutates existing targets again then).
    pub revision: u64,
    pub variables: Vec<CompiledNamed>,
    pub mutations: Vec<CompiledMutation>,
    /// A Kubernetes MutatingAdmissionPolicy: lists merge atomically (no
    /// schema, as Kyverno's CLI applies them) and each mutation reports
    /// its own result.
    pub admission_policy: bool,
    /// `evaluation.useServerSideApply`: an ApplyConfiguration may set
    /// atomic values (replaced whole), which the API server's mutating
    /// admission refuses and so does Kyverno by default.
    pub server_side_apply: bool,
}

impl CompiledMutatingPolicy {
    pub fn compile(doc: &MutatingPolicyDoc) -> Result<CompiledMutatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let unsupported = |field: &str| Err(CelCompileError::Unsupported(field.into()));
        // Only the admission kinds have bindings to name the params.
        if spec.param_kind.is_some() && doc.kind != "MutatingAdmissionPolicy" {
            return unsupported("spec.paramKind");
        }
        let setting = |path: &str| {
            spec.evaluation
                .as_ref()
                .and_then(|e| e.pointer(path))
                .and_then(Value::as_bool)
        };
        let existing = if setting("/mutateExisting/enabled") == Some(true) {
            Some(MutateExisting::compile(spec)?)
        } else {
            None
        };
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
        let key = match &doc.metadata.namespace {
            Some(ns) if doc.kind.starts_with("Namespaced") => format!("{ns}/{}", doc.metadata.name),
            _ => doc.metadata.name.clone(),
        };
        Ok(CompiledMutatingPolicy {
            key,
            report: crate::policy::ReportMeta::of(&doc.metadata),
            admission: setting("/admission/enabled").unwrap_or(true),
            background: setting("/background/enabled").unwrap_or(true),
            existing,
            revision: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                format!("{spec:?}").hash(&mut h);
                h.finish()
            },
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
            server_side_apply: setting("/useServerSideApply").unwrap_or(false),
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

    /// Whether the policy mutates the request's own object at admission
    /// (Kyverno leaves a policy with targetMatchConstraints to the
    /// background).
    pub fn mutates_trigger(&self) -> bool {
        self.admission && !self.existing.as_ref().is_some_and(|e| e.targets_only)
    }
}

impl MutateExisting {
    fn compile(spec: &MutatingPolicySpec) -> Result<MutateExisting, CelCompileError> {
        let target = spec.target_match_constraints.clone().unwrap_or_default();
        let expression = target
            .expression
            .as_deref()
            .filter(|e| !e.trim().is_empty());
        let has_rules = !target.constraints.resource_rules.is_empty();
        let targets_only = expression.is_some() || has_rules;
        let targets = match expression {
            Some(e) => {
                TargetSelection::Expression(compile(e, "spec.targetMatchConstraints.expression")?)
            }
            None if has_rules => TargetSelection::Constraints(target.constraints),
            None => {
                TargetSelection::Constraints(spec.match_constraints.clone().unwrap_or_default())
            }
        };
        let skip_background_requests = spec
            .evaluation
            .as_ref()
            .and_then(|e| e.pointer("/skipBackgroundRequests"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        Ok(MutateExisting {
            targets,
            conditions: compile_named(&spec.target_match_conditions, "spec.targetMatchConditions")?,
            targets_only,
            skip_background_requests,
        })
    }
}
