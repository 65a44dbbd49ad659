//! Variable substitution (docs/kyverno-semantics.md#variable-substitution):
//! `{{ expr }}` tokens in policy values are replaced by JMESPath results
//! against the JSON context. A token that is the whole string keeps the
//! result's JSON type; an embedded one is spliced in as text. `\{{` escapes
//! a token. Nested tokens resolve inside-out.

use super::json_context::JsonContext;
use crate::jmespath::{JmesError, Val};
use crate::policy::ExprCache;
use crate::policy::template::{Template, first_token, holds_variables, opens_variable};
use serde_json::Value;
use std::fmt::Write;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum VariableError {
    /// Worded as Kyverno's substitution: the expression, the JSON pointer
    /// of the value within the substituted document (empty for a
    /// condition's key), and the context's query error.
    #[error("failed to resolve {variable} at path {path}: {}", query_error(.variable, .source))]
    Resolve {
        variable: String,
        path: String,
        source: JmesError,
    },
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Kyverno's JSON context words a query that does not parse and one that
/// fails differently.
fn query_error(variable: &str, source: &JmesError) -> String {
    match source {
        JmesError::Syntax(_) => format!("incorrect query {variable}: {source}"),
        _ => format!("JMESPath query failed: {source}"),
    }
}

/// Substitutes variables, strictly as Kyverno does: an expression that
/// fails (an unknown key included) is an error wherever it is, conditions
/// too; policies guard with `|| ''`.
pub struct Substituter<'c> {
    pub ctx: &'c JsonContext<'c>,
    pub exprs: &'c ExprCache,
}

/// Rendering a compiled [`Template`]; the template itself is parsed at
/// compile time ([`crate::policy::template`]).
impl<'t> Substituter<'t> {
    /// The template's value as JMESPath gave it: borrowed from the policy
    /// or the request where it lies (conditions compare it there).
    pub fn render(&self, template: &'t Template) -> Result<Val<'t>, VariableError> {
        match template {
            Template::Literal(v) => Ok(Val::Ref(v)),
            Template::Mixed(v) => self.value(v).map(Val::own),
            Template::Whole(exprs, raw) => {
                let expr = template
                    .expression(self.ctx.is_delete())
                    .unwrap_or(&exprs.0);
                match expr.resolve_val(self.ctx.root()) {
                    // A string result may itself hold variables: substitute it fully.
                    Ok(v) if holds_variables(&v) => self.value(raw).map(Val::own),
                    Ok(v) => Ok(v),
                    Err(source) => Err(VariableError::Resolve {
                        variable: expr.source().trim().to_string(),
                        path: String::new(),
                        source,
                    }),
                }
            }
        }
    }
}

impl Substituter<'_> {
    fn resolve(&self, inner: &str, path: &str) -> Result<Value, VariableError> {
        if inner == "@" {
            return Err(VariableError::Unsupported("the {{@}} variable".into()));
        }
        let inner = inner.strip_prefix('-').map(str::trim).unwrap_or(inner);
        let rewritten;
        let source = if self.ctx.is_delete() && inner.contains("request.object") {
            rewritten = inner.replace("request.object", "request.oldObject");
            rewritten.as_str()
        } else {
            inner
        };
        // kyverno-compat: every error is the rule's, conditions included:
        // an unknown key ("Unknown key ... in path"), a function given the
        // wrong type, an expression that does not parse ("incorrect
        // query"). Nothing becomes an empty string that lets a rule pass.
        self.exprs
            .resolve(source, self.ctx.root())
            .map(Val::into_owned)
            .map_err(|source_error| VariableError::Resolve {
                variable: source.to_string(),
                path: path.to_string(),
                source: source_error,
            })
    }

    pub fn string(&self, s: &str) -> Result<Value, VariableError> {
        self.string_at(s, "")
    }

    /// Substitutes `s`, which sits at `path` (a JSON pointer) in the
    /// document Kyverno substitutes, for its error messages.
    pub fn string_at(&self, s: &str, path: &str) -> Result<Value, VariableError> {
        if !opens_variable(s) {
            return Ok(Value::String(s.to_string()));
        }
        let mut text = s.to_string();
        while let Some(t) = first_token(&text) {
            let value = self.resolve(&t.inner, path)?;
            if t.start == 0 && t.end == text.len() {
                if let Value::String(inner) = &value
                    && first_token(inner).is_some()
                {
                    text = inner.clone();
                    continue;
                }
                return Ok(match value {
                    Value::String(v) => Value::String(v.replace("\\{{", "{{")),
                    other => other,
                });
            }
            let rendered = match &value {
                Value::String(v) => v.clone(),
                Value::Null => "null".into(),
                other => serde_json::to_string(other).unwrap_or_default(),
            };
            text.replace_range(t.start..t.end, &rendered);
        }
        Ok(Value::String(text.replace("\\{{", "{{")))
    }

    /// Substitutes every string and key in `v`.
    pub fn value(&self, v: &Value) -> Result<Value, VariableError> {
        let mut path = String::new();
        self.value_at(v, &mut path)
    }

    /// [`Self::value`] of a document that sits at `path` in the one Kyverno
    /// substitutes (`/mutate/patchStrategicMerge` for a rule's patch).
    pub fn value_under(&self, v: &Value, path: &str) -> Result<Value, VariableError> {
        let mut path = path.to_string();
        self.value_at(v, &mut path)
    }

    fn value_at(&self, v: &Value, path: &mut String) -> Result<Value, VariableError> {
        Ok(match v {
            Value::String(s) => self.string_at(s, path)?,
            Value::Array(a) => {
                let mut out = Vec::with_capacity(a.len());
                for (i, x) in a.iter().enumerate() {
                    let len = path.len();
                    let _ = write!(path, "/{i}");
                    out.push(self.value_at(x, path)?);
                    path.truncate(len);
                }
                Value::Array(out)
            }
            Value::Object(m) => {
                let mut out = serde_json::Map::with_capacity(m.len());
                for (k, x) in m {
                    let len = path.len();
                    path.push('/');
                    path.push_str(k);
                    let key = if opens_variable(k) {
                        match self.string_at(k, path)? {
                            Value::String(s) => s,
                            other => other.to_string(),
                        }
                    } else {
                        k.clone()
                    };
                    out.insert(key, self.value_at(x, path)?);
                    path.truncate(len);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::template::expressions_in;
    use serde_json::json;

    fn ctx() -> JsonContext<'static> {
        let mut c = JsonContext::from_value(
            json!({"request": {"operation": "CREATE", "object": {"metadata": {"name": "web", "labels": {"app": "a"}}, "spec": {"replicas": 3}}}}),
        );
        c.set("cm", json!({"data": {"a": "from-cm"}}));
        c
    }

    fn sub(s: &str) -> Result<Value, VariableError> {
        let c = ctx();
        let cache = ExprCache::default();
        Substituter {
            ctx: &c,
            exprs: &cache,
        }
        .string(s)
    }

    #[test]
    fn substitution_table() {
        for (input, want) in [
            ("{{ request.object.metadata.name }}", json!("web")),
            ("{{request.object.spec.replicas}}", json!(3)),
            (
                "name is {{ request.object.metadata.name }}!",
                json!("name is web!"),
            ),
            ("n={{ request.object.spec.replicas }}", json!("n=3")),
            ("\\{{ literal }}", json!("{{ literal }}")),
            (
                "{{ cm.data.{{ request.object.metadata.labels.app }} }}",
                json!("from-cm"),
            ),
            (
                "{{ request.object.metadata.labels.missing || 'none' }}",
                json!("none"),
            ),
            (
                "{{ request.object.metadata }}",
                json!({"name": "web", "labels": {"app": "a"}}),
            ),
            ("plain", json!("plain")),
        ] {
            assert_eq!(sub(input).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn missing_keys_are_errors_worded_as_kyverno_words_them() {
        assert_eq!(
            sub("{{ request.object.metadata.labels.missing }}")
                .unwrap_err()
                .to_string(),
            "failed to resolve request.object.metadata.labels.missing at path : \
             JMESPath query failed: Unknown key \"missing\" in path"
        );
        let c = ctx();
        let cache = ExprCache::default();
        let s = Substituter {
            ctx: &c,
            exprs: &cache,
        };
        let patch =
            json!({"metadata": {"labels": {"x": "{{ request.object.metadata.labels.nope }}"}}});
        assert_eq!(
            s.value_under(&patch, "/mutate/patchStrategicMerge")
                .unwrap_err()
                .to_string(),
            "failed to resolve request.object.metadata.labels.nope at path \
             /mutate/patchStrategicMerge/metadata/labels/x: JMESPath query failed: \
             Unknown key \"nope\" in path"
        );
    }

    #[test]
    fn finds_expressions() {
        assert_eq!(expressions_in("a {{ x.y }} b {{z}}"), vec!["x.y", "z"]);
        assert_eq!(expressions_in("{{ cm.{{ a }} }}"), vec!["a", "cm.x"]);
        assert!(expressions_in("\\{{ no }}").is_empty());
    }
}
