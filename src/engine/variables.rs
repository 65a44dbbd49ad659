//! Variable substitution (§4.1): `{{ expr }}` tokens in policy values are
//! replaced by JMESPath results against the JSON context. A token that is
//! the whole string keeps the result's JSON type; an embedded one is spliced
//! in as text. `\{{` escapes a token. Nested tokens resolve inside-out.

use super::json_context::JsonContext;
use crate::jmespath::{JmesError, Val};
use crate::policy::ExprCache;
use crate::policy::template::{Template, first_token, opens_variable};
use serde_json::Value;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum VariableError {
    #[error("failed to resolve {variable}: {source}")]
    Resolve { variable: String, source: JmesError },
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// How unresolvable variables are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Fail the substitution (patterns, messages, context entries).
    Fail,
    /// kyverno-compat: condition keys and values treat an unknown key as
    /// an empty string (any other error is the rule's).
    EmptyString,
}

pub struct Substituter<'c> {
    pub ctx: &'c JsonContext<'c>,
    pub exprs: &'c ExprCache,
    pub on_error: OnError,
}

/// Rendering a compiled [`Template`]; the template itself is parsed at
/// compile time ([`crate::policy::template`]).
impl<'t> Substituter<'t> {
    pub fn render(
        &self,
        template: &'t Template,
    ) -> Result<std::borrow::Cow<'t, Value>, VariableError> {
        use std::borrow::Cow;
        match template {
            Template::Literal(v) => Ok(Cow::Borrowed(v)),
            Template::Mixed(v) => self.value(v).map(Cow::Owned),
            Template::Whole(exprs, raw) => {
                let (expr, delete) = exprs.as_ref();
                let expr = if self.ctx.is_delete() {
                    delete.as_ref().unwrap_or(expr)
                } else {
                    expr
                };
                match (expr.resolve_val(self.ctx.root()), self.on_error) {
                    // A string result may itself hold variables: substitute it fully.
                    (Ok(v), _)
                        if v.as_json()
                            .and_then(Value::as_str)
                            .is_some_and(opens_variable) =>
                    {
                        self.value(raw).map(Cow::Owned)
                    }
                    (Ok(v), _) => Ok(v.into_cow()),
                    (Err(JmesError::NotFound(_)), OnError::EmptyString) => {
                        Ok(Cow::Owned(Value::String(String::new())))
                    }
                    (Err(source), _) => Err(VariableError::Resolve {
                        variable: raw.to_string(),
                        source,
                    }),
                }
            }
        }
    }
}

impl Substituter<'_> {
    fn resolve(&self, inner: &str) -> Result<Value, VariableError> {
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
        let result = self
            .exprs
            .resolve(source, self.ctx.root())
            .map(Val::into_owned);
        match (result, self.on_error) {
            (Ok(v), _) => Ok(v),
            (Err(JmesError::NotFound(_)), OnError::EmptyString) => Ok(Value::String(String::new())),
            // kyverno-compat: an expression that does not parse is an error
            // everywhere, conditions included (Kyverno's context rejects the
            // query, "incorrect query", and the rule ends in error): it never
            // becomes an empty string that lets the rule pass. A runtime
            // error (a function given the wrong type) is the rule's error in
            // conditions too ("failed to substitute variables in condition
            // key").
            (Err(source), _) => Err(VariableError::Resolve {
                variable: format!("{{{{{inner}}}}}"),
                source,
            }),
        }
    }

    pub fn string(&self, s: &str) -> Result<Value, VariableError> {
        if !opens_variable(s) {
            return Ok(Value::String(s.to_string()));
        }
        let mut text = s.to_string();
        while let Some(t) = first_token(&text) {
            let value = self.resolve(&t.inner)?;
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
        Ok(match v {
            Value::String(s) => self.string(s)?,
            Value::Array(a) => {
                Value::Array(a.iter().map(|x| self.value(x)).collect::<Result<_, _>>()?)
            }
            Value::Object(m) => {
                let mut out = serde_json::Map::with_capacity(m.len());
                for (k, x) in m {
                    let key = if opens_variable(k) {
                        match self.string(k)? {
                            Value::String(s) => s,
                            other => other.to_string(),
                        }
                    } else {
                        k.clone()
                    };
                    out.insert(key, self.value(x)?);
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

    fn sub(s: &str, on_error: OnError) -> Result<Value, VariableError> {
        let c = ctx();
        let cache = ExprCache::default();
        Substituter {
            ctx: &c,
            exprs: &cache,
            on_error,
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
            assert_eq!(sub(input, OnError::Fail).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn missing_keys() {
        assert!(
            sub(
                "{{ request.object.metadata.labels.missing }}",
                OnError::Fail
            )
            .is_err()
        );
        assert_eq!(
            sub(
                "{{ request.object.metadata.labels.missing }}",
                OnError::EmptyString
            )
            .unwrap(),
            json!("")
        );
    }

    #[test]
    fn finds_expressions() {
        assert_eq!(expressions_in("a {{ x.y }} b {{z}}"), vec!["x.y", "z"]);
        assert_eq!(expressions_in("{{ cm.{{ a }} }}"), vec!["a", "cm.x"]);
        assert!(expressions_in("\\{{ no }}").is_empty());
    }
}
