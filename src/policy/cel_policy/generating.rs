//! GeneratingPolicy and NamespacedGeneratingPolicy (policies.kyverno.io):
//! the documents and their compilation. Generation has no autogen.

use super::scope::{MatchConstraints, PolicyScope};
use super::{CelCompileError, CompiledNamed, NamedExpression, compile, compile_named};
use crate::cel::Program;
use serde::Deserialize;
use serde_json::Value;

/// One of `spec.generate[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateExpression {
    pub expression: String,
}

/// The spec of a GeneratingPolicy / NamespacedGeneratingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub generate: Vec<GenerateExpression>,
    /// Background behaviour (synchronize, generateExisting,
    /// orphanDownstreamOnPolicyDelete): no effect on one evaluation.
    #[serde(default)]
    pub evaluation: Option<GeneratingEvaluation>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub use_server_side_apply: Option<bool>,
}

/// `spec.evaluation` of a GeneratingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingEvaluation {
    #[serde(default)]
    pub admission: Option<Enabled>,
    #[serde(default)]
    pub generate_existing: Option<Enabled>,
    #[serde(default)]
    pub synchronize: Option<Enabled>,
    #[serde(default)]
    pub orphan_downstream_on_policy_delete: Option<Enabled>,
    #[serde(default)]
    pub skip_background_requests: Option<bool>,
}

/// `{enabled: bool}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enabled {
    #[serde(default)]
    pub enabled: Option<bool>,
}

fn enabled(setting: &Option<Enabled>, default: bool) -> bool {
    setting.as_ref().and_then(|s| s.enabled).unwrap_or(default)
}

/// What the background controller does with a GeneratingPolicy's
/// downstream (Kyverno's defaults: admission on, the rest off, and
/// requests caused by the controller's own writes skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationSettings {
    /// Admitted triggers generate (`evaluation.admission.enabled`).
    pub admission: bool,
    /// Triggers that exist when the policy appears generate too.
    pub generate_existing: bool,
    /// Downstream kept in line with the policy and its trigger: re-made
    /// when changed or deleted, deleted with its trigger.
    pub synchronize: bool,
    /// Downstream kept when the policy is deleted.
    pub orphan_downstream_on_policy_delete: bool,
    /// Triggers written by gavel's own background work do not generate.
    pub skip_background_requests: bool,
    pub use_server_side_apply: bool,
}

impl GenerationSettings {
    fn of(spec: &GeneratingPolicySpec) -> GenerationSettings {
        let e = spec.evaluation.clone().unwrap_or_default();
        GenerationSettings {
            admission: enabled(&e.admission, true),
            generate_existing: enabled(&e.generate_existing, false),
            synchronize: enabled(&e.synchronize, false),
            orphan_downstream_on_policy_delete: enabled(
                &e.orphan_downstream_on_policy_delete,
                false,
            ),
            skip_background_requests: e.skip_background_requests.unwrap_or(true),
            use_server_side_apply: spec.use_server_side_apply.unwrap_or(false),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: GeneratingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled GeneratingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledGeneratingPolicy {
    pub scope: PolicyScope,
    pub variables: Vec<CompiledNamed>,
    /// Expressions that call `generator.Apply`.
    pub generate: Vec<Program>,
    pub settings: GenerationSettings,
    /// `webhookConfiguration.timeoutSeconds`.
    pub timeout_seconds: Option<i32>,
    /// `name`, or `namespace/name` for a NamespacedGeneratingPolicy: the
    /// policy key of its UpdateRequests, as Kyverno writes it.
    pub key: String,
    /// Changes with the spec: how the background controller tells a
    /// changed policy (whose synchronized downstream follows it).
    pub revision: u64,
}

impl CompiledGeneratingPolicy {
    pub fn compile(doc: &GeneratingPolicyDoc) -> Result<CompiledGeneratingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let generate = spec
            .generate
            .iter()
            .enumerate()
            .map(|(i, g)| compile(&g.expression, &format!("spec.generate[{i}].expression")))
            .collect::<Result<Vec<_>, String>>()?;
        let mut scope = PolicyScope::compile(
            &doc.kind,
            &doc.metadata,
            spec.match_constraints.as_ref(),
            &spec.match_conditions,
            None,
            None,
        )?;
        // Generation has no autogen: a Pod policy generates for Pods only.
        scope.controllers.clear();
        let key = match &scope.namespace {
            Some(ns) => format!("{ns}/{}", scope.name),
            None => scope.name.clone(),
        };
        Ok(CompiledGeneratingPolicy {
            scope,
            variables: compile_named(&spec.variables, "spec.variables")?,
            generate,
            settings: GenerationSettings::of(spec),
            timeout_seconds: spec
                .webhook_configuration
                .as_ref()
                .and_then(|w| w.get("timeoutSeconds"))
                .and_then(Value::as_i64)
                .map(|t| t as i32),
            key,
            revision: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                format!("{spec:?}").hash(&mut h);
                h.finish()
            },
        })
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
