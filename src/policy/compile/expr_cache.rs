//! The expression cache: every JMESPath expression found in a policy's
//! `{{ }}` variables and context `jmesPath`s, parsed once at compile time and looked up by its
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

    /// Every expression a policy value names: its `{{ }}` variables, and
    /// the `jmesPath` of its context entries (variable, apiCall,
    /// globalReference, in rules and in foreach), which are expressions
    /// without braces. Those written with variables are substituted per
    /// request, and only then parsed.
    pub(in crate::policy) fn add_all_variables(&mut self, v: &Value) {
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
                if k == "jmesPath"
                    && let Value::String(path) = x
                    && !template::has_variables(x)
                {
                    self.add(path);
                }
                self.add_all_variables(x)
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::CompiledPolicy;
    use crate::policy::load::{LoadedDocument, load_policy_text};

    /// What a policy names is parsed when it is compiled: its variables and
    /// its context entries' jmesPath, at any depth; a jmesPath built from
    /// variables waits for them.
    #[test]
    fn compile_parses_every_expression_a_policy_names() {
        let text = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
    - name: r
      match: {any: [{resources: {kinds: [Pod]}}]}
      context:
        - name: teams
          configMap: {name: teams, namespace: default}
        - name: owner
          variable: {jmesPath: "teams.data.owner || 'nobody'"}
        - name: dynamic
          variable: {jmesPath: "teams.data.{{ request.object.metadata.name }}"}
        - name: count
          apiCall: {urlPath: "/api/v1/pods", jmesPath: "items | length(@)"}
      validate:
        foreach:
          - list: request.object.spec.containers
            context:
              - name: image
                variable: {jmesPath: "element.image"}
            deny:
              conditions:
                any:
                  - {key: "{{ image }}", operator: Equals, value: "{{ owner }}"}
"#;
        let LoadedDocument::Policy(doc) = load_policy_text("p.yaml", text).unwrap().remove(0)
        else {
            unreachable!("a ClusterPolicy")
        };
        let policy = CompiledPolicy::compile(&doc).unwrap();
        for known in [
            "teams.data.owner || 'nobody'",
            "items | length(@)",
            "element.image",
            "request.object.spec.containers",
            "image",
            "owner",
            "request.object.metadata.name",
        ] {
            assert!(
                policy.exprs.get(known).is_some(),
                "{known} not parsed at compile time"
            );
        }
        assert!(
            policy
                .exprs
                .get("teams.data.{{ request.object.metadata.name }}")
                .is_none()
        );
    }
}
