//! Policies: Kyverno API types, strict loading from YAML, and the compile
//! step that turns a policy document into an immutable [`CompiledPolicy`].

pub mod autogen;
pub mod cel_policy;
pub mod cleanup;
pub mod compile;
pub mod conditions;
pub mod load;
pub mod mutation;
pub mod template;
pub mod types;

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
}

impl ReportMeta {
    pub fn of(annotations: &std::collections::BTreeMap<String, String>) -> ReportMeta {
        let annotation = |k: &str| annotations.get(k).cloned().unwrap_or_default();
        ReportMeta {
            scored: annotations
                .get("policies.kyverno.io/scored")
                .map(String::as_str)
                != Some("false"),
            severity: annotation("policies.kyverno.io/severity"),
            category: annotation("policies.kyverno.io/category"),
        }
    }
}
pub use load::{LoadError, LoadedDocument};
