//! `{{ }}` templates in policy values, found and parsed at compile time:
//! the tokens Kyverno's variable regex finds, and a [`Template`] that
//! evaluation renders ([`crate::engine::variables`]) without parsing again.

use crate::jmespath::{Expression, Val};
use crate::json_doc::View;
use serde_json::Value;

/// A `{{ }}` token found in a string: byte range and inner expression.
pub(crate) struct Token {
    pub start: usize,
    pub end: usize,
    pub inner: String,
}

/// Finds the first unescaped token whose braces balance (at most one level
/// of `{...}` inside), as Kyverno's variable regex does.
pub(crate) fn first_token(s: &str) -> Option<Token> {
    let b = s.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'{'
            && b[i + 1] == b'{'
            && (i == 0 || b[i - 1] != b'\\')
            && let Some(end) = token_end(b, i + 2)
        {
            return Some(Token {
                start: i,
                end,
                inner: s[i + 2..end - 2].trim().to_string(),
            });
        }
        i += 1;
    }
    None
}

pub(crate) fn token_end(b: &[u8], mut j: usize) -> Option<usize> {
    while j < b.len() {
        match b[j] {
            b'}' => {
                return (j + 1 < b.len() && b[j + 1] == b'}').then_some(j + 2);
            }
            b'{' => {
                let close = b[j + 1..].iter().position(|c| *c == b'{' || *c == b'}')?;
                if b[j + 1 + close] != b'}' {
                    return None;
                }
                j += close + 2;
            }
            _ => j += 1,
        }
    }
    None
}

/// The expressions of all tokens in `s`, innermost first; for pre-parsing.
pub fn expressions_in(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s.to_string();
    while let Some(t) = first_token(&rest) {
        out.push(t.inner.clone());
        rest.replace_range(t.start..t.end, "x");
    }
    out
}

/// Whether a [`Template::Whole`]'s value is a string that itself holds
/// variables: rendering then substitutes the template's text fully.
pub fn holds_variables(v: &Val) -> bool {
    v.as_json_ref()
        .and_then(View::as_str)
        .is_some_and(opens_variable)
}

/// Whether `s` holds `{{`. Faster than `str::contains` for a two-byte
/// needle, which builds a searcher first: this runs on every rendered
/// string.
pub fn opens_variable(s: &str) -> bool {
    s.as_bytes().windows(2).any(|w| w == b"{{")
}

pub fn has_variables(v: &Value) -> bool {
    match v {
        Value::String(s) => opens_variable(s) || s.contains("$("),
        Value::Array(a) => a.iter().any(has_variables),
        Value::Object(m) => m.iter().any(|(k, x)| opens_variable(k) || has_variables(x)),
        _ => false,
    }
}

/// A policy value prepared for substitution at compile time.
#[derive(Debug, Clone)]
pub enum Template {
    /// No variables: used as it is.
    Literal(Value),
    /// Exactly one `{{ expr }}` token: evaluated directly, keeping the JSON
    /// type. The second expression is the DELETE form (`request.oldObject`).
    Whole(Box<(Expression, Option<Expression>)>, Value),
    /// Anything else goes through full substitution.
    Mixed(Value),
}

impl Template {
    pub fn new(v: Value) -> Template {
        if !has_variables(&v) {
            return Template::Literal(v);
        }
        if let Value::String(s) = &v
            && let Some(t) = first_token(s)
            && t.start == 0
            && t.end == s.len()
            && !t.inner.contains("{{")
            && !t.inner.starts_with('-')
            && t.inner != "@"
            && !s.contains("$(")
            && let Ok(e) = Expression::parse(&t.inner)
        {
            let delete = t
                .inner
                .contains("request.object")
                .then(|| {
                    Expression::parse(&t.inner.replace("request.object", "request.oldObject")).ok()
                })
                .flatten();
            return Template::Whole(Box::new((e, delete)), v);
        }
        Template::Mixed(v)
    }

    /// The expression a [`Template::Whole`] evaluates: its DELETE form
    /// on a DELETE request, when it has one.
    pub fn expression(&self, delete: bool) -> Option<&Expression> {
        let Template::Whole(exprs, _) = self else {
            return None;
        };
        let (expr, on_delete) = exprs.as_ref();
        Some(match on_delete {
            Some(d) if delete => d,
            _ => expr,
        })
    }

    /// Whether rendering reads nothing of the context but `request`: the
    /// result is then the same for every rule of a request.
    pub fn reads_only_request(&self) -> bool {
        match self {
            Template::Literal(_) => true,
            Template::Whole(exprs, _) => {
                let (expr, delete) = exprs.as_ref();
                expr.reads_only_root_field("request")
                    && delete
                        .as_ref()
                        .is_none_or(|d| d.reads_only_root_field("request"))
            }
            Template::Mixed(_) => false,
        }
    }

    /// Whether the rendered value is decided by the request's operation
    /// alone ([`Expression::decided_by`] `request.operation`), so that it
    /// can be rendered once per operation rather than per request.
    pub fn decided_by_operation(&self) -> bool {
        const OPERATION: &[&str] = &["request", "operation"];
        match self {
            Template::Literal(_) => true,
            Template::Whole(exprs, _) => {
                let (expr, delete) = exprs.as_ref();
                expr.decided_by(OPERATION)
                    && delete.as_ref().is_none_or(|d| d.decided_by(OPERATION))
            }
            Template::Mixed(_) => false,
        }
    }

    /// The value as written in the policy.
    pub fn raw(&self) -> &Value {
        match self {
            Template::Literal(v) | Template::Mixed(v) | Template::Whole(_, v) => v,
        }
    }
}
