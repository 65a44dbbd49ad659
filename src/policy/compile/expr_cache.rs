//! The expression cache: every JMESPath expression found in a policy's
//! `{{ }}` variables, parsed once at compile time and looked up by its
//! source text at evaluation; text built at run time is parsed then.

use crate::jmespath::{Expression, JmesError, Val};
use crate::policy::template;
use serde_json::Value;
use std::collections::HashMap;

/// Pre-parsed JMESPath expressions keyed by their source text.
#[derive(Debug, Default)]
pub struct ExprCache {
    exprs: HashMap<String, Expression>,
}

impl ExprCache {
    pub fn get(&self, source: &str) -> Option<&Expression> {
        self.exprs.get(source)
    }

    /// Resolves `source` against `data` with Kyverno's variable semantics,
    /// using the pre-parsed expression; text built at evaluation time (nested
    /// variables) is parsed on the spot.
    pub fn resolve<'a>(&'a self, source: &str, root: Val<'a>) -> Result<Val<'a>, JmesError> {
        match self.exprs.get(source) {
            Some(e) => e.resolve_val(root),
            // The result may borrow the expression's literals: owned here.
            None => Expression::parse(source)?
                .resolve_val(root)
                .map(|v| Val::own(v.into_owned())),
        }
    }

    pub(super) fn add(&mut self, source: &str) {
        if !self.exprs.contains_key(source) {
            // Unparseable text stays out; evaluation reports the syntax error.
            if let Ok(e) = Expression::parse(source) {
                self.exprs.insert(source.to_string(), e);
            }
        }
    }

    pub(super) fn add_all_variables(&mut self, v: &Value) {
        match v {
            Value::String(s) => {
                for expr in template::expressions_in(s) {
                    self.add(&expr);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| self.add_all_variables(x)),
            Value::Object(m) => m.iter().for_each(|(k, x)| {
                for expr in template::expressions_in(k) {
                    self.add(&expr);
                }
                self.add_all_variables(x)
            }),
            _ => {}
        }
    }
}
