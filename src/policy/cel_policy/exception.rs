//! PolicyException (policies.kyverno.io): exempts requests from the CEL
//! policy kinds it names (`policyRefs`, by kind and name) when all its
//! `matchConditions` hold. As Kyverno compiles them into the policies they
//! name, each compiled policy carries its own ([`attach`]).

use super::{CelCompileError, CompiledNamed, NamedExpression, compile_named};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRef {
    pub name: String,
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelExceptionSpec {
    pub policy_refs: Vec<PolicyRef>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub allowed_values: Vec<String>,
    #[serde(default)]
    pub report_result: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub properties: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelExceptionDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: CelExceptionSpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled PolicyException of the CEL kinds.
#[derive(Debug, Clone)]
pub struct CompiledCelException {
    /// `namespace/name`, or `name`: how results name it.
    pub key: String,
    pub policy_refs: Vec<PolicyRef>,
    pub match_conditions: Vec<CompiledNamed>,
    /// `reportResult: pass`: an exempted request reports pass, not skip.
    pub report_pass: bool,
}

impl CompiledCelException {
    pub fn compile(doc: &CelExceptionDoc) -> Result<CompiledCelException, CelCompileError> {
        let spec = &doc.spec;
        // Partial exemptions reach the policy as its `exceptions` variable,
        // which gavel's CEL environment does not bind.
        if !spec.images.is_empty() || !spec.allowed_values.is_empty() {
            return Err(CelCompileError::Unsupported(
                "spec.images / spec.allowedValues (partial exemptions)".into(),
            ));
        }
        let key = match &doc.metadata.namespace {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", doc.metadata.name),
            _ => doc.metadata.name.clone(),
        };
        Ok(CompiledCelException {
            key,
            policy_refs: spec.policy_refs.clone(),
            match_conditions: compile_named(&spec.match_conditions, "spec.matchConditions")?,
            report_pass: spec.report_result.as_deref() == Some("pass"),
        })
    }

    fn names(&self, kind: &str, name: &str) -> bool {
        self.policy_refs
            .iter()
            .any(|r| r.kind == kind && r.name == name)
    }
}

/// The exceptions of `all` that name the policy `kind`/`name`.
pub fn attach(
    all: &[Arc<CompiledCelException>],
    kind: &str,
    name: &str,
) -> Vec<Arc<CompiledCelException>> {
    all.iter()
        .filter(|e| e.names(kind, name))
        .cloned()
        .collect()
}

/// Gives each policy scope the exceptions of `all` that name its policy
/// (once every document is read: an exception may come before or after).
pub fn attach_to<'a>(
    scopes: impl Iterator<Item = &'a mut super::PolicyScope>,
    all: &[Arc<CompiledCelException>],
) {
    for scope in scopes {
        scope.exceptions = attach(all, &scope.kind, &scope.name);
    }
}
