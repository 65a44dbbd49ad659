//! PolicyExceptions, compiled: the match block, conditions and the
//! policy and rule names (wildcards allowed) they exempt.

use super::CompileError;
use super::expr_cache::ExprCache;
use crate::matching::CompiledMatch;
use crate::policy::conditions::Conditions;
use crate::policy::types::PolicyExceptionDoc;
use std::sync::Arc;

/// A compiled PolicyException.
#[derive(Debug, Clone)]
pub struct CompiledException {
    pub name: String,
    pub namespace: String,
    pub match_resources: CompiledMatch,
    pub conditions: Option<Conditions>,
    /// (policy name pattern, rule name patterns)
    pub exceptions: Vec<(String, Vec<String>)>,
    pub pod_security: Vec<crate::policy::types::PodSecurityExclude>,
    pub exprs: Arc<ExprCache>,
}

impl CompiledException {
    pub fn compile(doc: &PolicyExceptionDoc) -> Result<CompiledException, CompileError> {
        let invalid = |field: &str, message: String| CompileError::Invalid {
            policy: doc.metadata.name.clone(),
            field: field.into(),
            message,
        };
        let mut exprs = ExprCache::default();
        if let Some(c) = &doc.spec.conditions {
            let _ = exprs.add_all_variables(c);
        }
        Ok(CompiledException {
            name: doc.metadata.name.clone(),
            namespace: doc.metadata.namespace.clone().unwrap_or_default(),
            match_resources: CompiledMatch::compile(&doc.spec.match_resources)
                .map_err(|e| invalid("spec.match", e))?,
            conditions: doc
                .spec
                .conditions
                .as_ref()
                .map(Conditions::parse)
                .transpose()
                .map_err(|e| invalid("spec.conditions", e))?,
            exceptions: doc
                .spec
                .exceptions
                .iter()
                .map(|e| (e.policy_name.clone(), e.rule_names.clone()))
                .collect(),
            pod_security: doc.spec.pod_security.clone(),
            exprs: Arc::new(exprs),
        })
    }

    /// Whether this exception names `policy` (qualified name) and `rule`.
    pub fn covers(&self, policy: &str, rule: &str) -> bool {
        use crate::wildcard::matches;
        self.exceptions
            .iter()
            .any(|(p, rules)| matches(p, policy) && rules.iter().any(|r| matches(r, rule)))
    }
}
