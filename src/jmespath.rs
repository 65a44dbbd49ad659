//! JMESPath with Kyverno's custom functions: expression text is parsed once
//! into an [`Expression`] (at policy compile time) and evaluated against JSON.

mod functions;
mod interpreter;
mod parser;
mod value;
mod walk;

pub use functions::{go_sprint, write_go_sprint};
pub use parser::Ast;
pub use value::{NULL, Root, Scope, Slot, Val, deep_equal, is_truthy, json_equal, number};
pub use walk::Streamed;

use crate::json_doc::JsonRef;
use serde_json::Value;
use std::borrow::Cow;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum JmesError {
    #[error("invalid JMESPath: {0}")]
    Syntax(String),
    #[error("{0}")]
    Runtime(String),
    #[error("Unknown key \"{0}\" in path")]
    NotFound(String),
}

/// A parsed JMESPath expression, ready to evaluate any number of times.
#[derive(Debug, Clone)]
pub struct Expression {
    source: String,
    ast: Ast,
    /// The expression as a direct walk of the JSON, when it has one of the
    /// shapes [`walk`] compiles.
    walk: Option<walk::Walk>,
}

impl Expression {
    pub fn parse(source: &str) -> Result<Expression, JmesError> {
        let ast = parser::parse(source)?;
        Ok(Expression {
            source: source.to_string(),
            walk: walk::Walk::compile(&ast),
            ast,
        })
    }

    /// Whether the expression is evaluated as a compiled walk.
    pub fn is_walk(&self) -> bool {
        self.walk.is_some()
    }

    /// The same expression evaluated by the interpreter alone: the
    /// reference the differential tests compare walks with.
    pub fn interpreted(&self) -> Expression {
        Expression {
            walk: None,
            ..self.clone()
        }
    }

    fn eval<'a>(&'a self, root: Val<'a>) -> Result<Val<'a>, JmesError> {
        if let Some(walk) = &self.walk
            && let Some(v) = walk.eval(root.clone())
        {
            return Ok(v);
        }
        interpreter::eval(&self.ast, root).map_err(|e| *e)
    }

    /// The value of a walk that starts at root field `name`, with that
    /// field bound to `value` (a foreach's `element`), read without a
    /// scope; `None` unless [`Expression::walks_under`] `[name]`. The value is
    /// what evaluating on a root whose `name` is `value` gives; a null
    /// value may be the interpreter's missing-key error there, which the
    /// caller decides with [`Expression::resolve_val`].
    pub fn eval_bound<'a>(&'a self, name: &str, value: JsonRef<'a>) -> Option<Val<'a>> {
        self.walk.as_ref()?.eval_bound(name, value)
    }

    /// The value of a compiled walk on `root`, each string of it given to
    /// `each` rather than a list built; see [`Streamed`] for how it ended.
    /// `None` when the value must be evaluated instead: the expression is
    /// not a walk, or its value is anything but a list of strings, an
    /// empty list or its `|| literal` (whatever `each` was given is then
    /// void).
    pub fn stream_strings<'a>(
        &'a self,
        root: Val<'a>,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        self.walk.as_ref()?.stream(root, each)
    }

    /// Whether the expression is a compiled walk whose first keys are
    /// `path`, so that the `_under` forms below (and, for one key,
    /// [`Expression::eval_bound`]) evaluate it.
    pub fn walks_under(&self, path: &[&str]) -> bool {
        self.walk.as_ref().is_some_and(|w| w.starts_with(path))
    }

    /// [`Expression::stream_strings`] with the walk's first keys, `path`,
    /// known to lead to `value` (`element`, a foreach's element;
    /// `request.object`, the request's own object), read without looking
    /// them up in a scope. `None`, before
    /// `each` is called, when the walk does not start at `path`.
    pub fn stream_strings_under<'a>(
        &'a self,
        path: &[&str],
        value: JsonRef<'a>,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        self.walk.as_ref()?.stream_under(path, value, each)
    }

    /// [`Expression::stream_list`] with the walk's first keys, `path`,
    /// known to lead to `value`, as [`Expression::stream_strings_under`].
    pub fn stream_list_under<'a>(
        &'a self,
        path: &[&str],
        value: JsonRef<'a>,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        self.walk.as_ref()?.stream_nodes_under(path, value, each)
    }

    /// The value of a compiled walk on `root`, each member of it given to
    /// `each` rather than a list built: the number of members. `None`
    /// when the value must be evaluated instead: the expression is not a
    /// walk, or its value is anything but a list of JSON values (whatever
    /// `each` was given is then void).
    pub fn stream_list<'a>(
        &'a self,
        root: Val<'a>,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        self.walk.as_ref()?.stream_nodes(root, each)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the value is decided by the value at `path` of the root
    /// alone: it reads nothing else of the root and calls no function
    /// (some read the clock). Such an expression gives the same value
    /// wherever `path` holds the same value.
    pub fn decided_by(&self, path: &[&str]) -> bool {
        self.ast.reads_only_under(path) && !self.ast.calls_function()
    }

    /// Whether the expression reads nothing of its root but the field `name`.
    pub fn reads_only_root_field(&self, name: &str) -> bool {
        self.ast.reads_only_root_field(name)
    }

    /// Evaluates with plain JMESPath semantics: missing keys give null.
    pub fn search<'a>(&'a self, data: &'a Value) -> Result<Cow<'a, Value>, JmesError> {
        self.eval(Val::Ref(data)).map(Val::into_cow)
    }

    /// Evaluates as Kyverno resolves a `{{ }}` variable: a plain path through
    /// a key that does not exist is an error rather than null.
    pub fn resolve<'a>(&'a self, data: &'a Value) -> Result<Cow<'a, Value>, JmesError> {
        self.resolve_val(Val::Ref(data)).map(Val::into_cow)
    }

    /// [`Expression::resolve`] over any input, keeping the result lazy
    /// (borrowed parts stay borrowed).
    pub fn resolve_val<'a>(&'a self, root: Val<'a>) -> Result<Val<'a>, JmesError> {
        let v = self.eval(root.clone())?;
        if v.is_null()
            && let Some(key) = interpreter::missing_key(&self.ast, root)
        {
            return Err(JmesError::NotFound(key));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests;
