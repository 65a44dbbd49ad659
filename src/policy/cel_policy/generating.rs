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
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub use_server_side_apply: Option<bool>,
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
        Ok(CompiledGeneratingPolicy {
            scope,
            variables: compile_named(&spec.variables, "spec.variables")?,
            generate,
        })
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
