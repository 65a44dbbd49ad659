//! Policies: Kyverno API types, strict loading from YAML, and the compile
//! step that turns a policy document into an immutable [`CompiledPolicy`].

pub mod autogen;
pub mod cel_policy;
pub mod cleanup;
pub mod compile;
pub mod conditions;
pub mod deferred_context;
pub mod load;
pub mod manifests;
pub mod mutation;
pub mod plan_slot;
pub mod set;
pub mod template;
pub mod type_checking;
pub mod types;
pub mod verify_images;

pub use compile::{
    CompiledException, CompiledPolicy, CompiledRule, ExprCache, FailureAction, FailurePolicy,
    RuleBody, ValidateCheck,
};
pub use conditions::{Condition, Conditions};

/// What a policy's report results carry from its annotations, as Kyverno
/// reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportMeta {
    /// `policies.kyverno.io/scored: "false"` turns fail results into warn.
    pub scored: bool,
    /// `policies.kyverno.io/severity`.
    pub severity: String,
    /// `policies.kyverno.io/category`.
    pub category: String,
    /// The policy's namespace as its document wrote it, which Kyverno's CLI
    /// reports even on a cluster-scoped kind (its report key is the
    /// object's `MetaNamespaceKeyFunc`); a namespaced Policy that wrote
    /// none is reported without one.
    pub written_namespace: Option<String>,
    /// `namespace/name` with the written namespace, else `name`.
    pub written_key: String,
}

impl ReportMeta {
    pub fn of(metadata: &types::ObjectMeta) -> ReportMeta {
        let annotations = &metadata.annotations;
        let written_namespace = metadata.namespace.clone().filter(|ns| !ns.is_empty());
        let annotation = |k: &str| annotations.get(k).cloned().unwrap_or_default();
        ReportMeta {
            scored: annotations
                .get("policies.kyverno.io/scored")
                .map(String::as_str)
                != Some("false"),
            severity: annotation("policies.kyverno.io/severity"),
            category: annotation("policies.kyverno.io/category"),
            written_key: match &written_namespace {
                Some(ns) => format!("{ns}/{}", metadata.name),
                None => metadata.name.clone(),
            },
            written_namespace,
        }
    }
}
pub use load::{LoadError, LoadedDocument};
