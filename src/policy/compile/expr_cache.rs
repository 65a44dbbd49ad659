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

    /// Parses `source` into the cache; its syntax error otherwise
    /// (evaluation reports it again if the policy is used anyway).
    pub(super) fn add(&mut self, source: &str) -> Result<(), JmesError> {
        if !self.exprs.contains_key(source) {
            let e = Expression::parse(source)?;
            self.exprs.insert(source.to_string(), e);
        }
        Ok(())
    }

    /// Every expression a policy value names: its `{{ }}` variables, and
    /// the `jmesPath` of its context entries (variable, apiCall,
    /// globalReference, in rules and in foreach), which are expressions
    /// without braces. Those written with variables are substituted per
    /// request, and only then parsed.
    ///
    /// Returns the `{{ }}` variables that do not parse, with the JSON
    /// pointer of the value that holds each (a nested variable stands as
    /// `x` in the one around it, as it will be a value there).
    pub(in crate::policy) fn add_all_variables(&mut self, v: &Value) -> Vec<InvalidVariable> {
        let mut invalid = Vec::new();
        self.walk(v, &mut String::new(), &mut invalid);
        invalid
    }

    fn variables(&mut self, text: &str, path: &str, invalid: &mut Vec<InvalidVariable>) {
        for expr in template::expressions_in(text) {
            if let Err(error) = self.add(&expr) {
                invalid.push(InvalidVariable {
                    path: path.to_string(),
                    expression: expr,
                    error,
                });
            }
        }
    }

    fn walk(&mut self, v: &Value, path: &mut String, invalid: &mut Vec<InvalidVariable>) {
        match v {
            Value::String(s) => self.variables(s, path, invalid),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    self.walk(x, path, invalid);
                    path.truncate(len);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    self.variables(k, path, invalid);
                    if k == "jmesPath"
                        && let Value::String(p) = x
                        && !template::has_variables(x)
                    {
                        // A context entry's query: evaluation reports its
                        // syntax error, as Kyverno's context loader does.
                        let _ = self.add(p);
                    }
                    self.walk(x, path, invalid);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// A `{{ }}` variable that does not parse: Kyverno's policy validation
/// refuses the policy (`policy contains invalid variables`).
#[derive(Debug)]
pub struct InvalidVariable {
    /// JSON pointer, within the rule, of the value that holds it.
    pub path: String,
    pub expression: String,
    pub error: JmesError,
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

    /// A variable that does not parse refuses the policy, with Kyverno's
    /// words and the value's path; nested variables parse as values.
    #[test]
    fn variables_that_do_not_parse_refuse_the_policy() {
        let policy = |key: &str| {
            format!(
                "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {{name: p}}\nspec:\n  \
                 rules:\n  - name: r\n    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}\n    \
                 validate:\n      message: m\n      deny:\n        conditions:\n          any:\n          \
                 - {{key: {key:?}, operator: Equals, value: x}}\n"
            )
        };
        let compile = |key: &str| {
            let LoadedDocument::Policy(doc) =
                load_policy_text("p.yaml", &policy(key)).unwrap().remove(0)
            else {
                unreachable!("a ClusterPolicy")
            };
            CompiledPolicy::compile(&doc)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for bad in [
            "{{ request.object.metadata.name | | }}",
            "{{ request.object.metadata.name[ }}",
            "{{ x509_decode('{{ request.object.data.cert }}').( }}",
        ] {
            let e = compile(bad).unwrap_err();
            assert!(
                e.contains("policy contains invalid variables"),
                "{bad}: {e}"
            );
            assert!(
                e.contains("at path /validate/deny/conditions/any/0/key"),
                "{bad}: {e}"
            );
        }
        for good in [
            "{{ request.object.metadata.name }}",
            "{{ x509_decode('{{ request.object.data.cert }}').PublicKey.N }}",
            "{{ {a: request.operation b: request.name}.a }}",
            "plain text",
        ] {
            compile(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }
}
