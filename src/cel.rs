//! CEL: programs compiled once from policy text, evaluated against JSON
//! with the Kubernetes CEL libraries (kube-cel) and Kyverno's own.
//!
//! The `cel` crate parses and interprets; gavel owns what sits around it:
//! - the parsed tree is rewritten once at compile time: optional selection
//!   (`a.?b`, `a[?k]`) goes to gavel's functions, struct literals
//!   (`Object{...}`, `JSONPatch{...}`) become maps (the interpreter has no
//!   struct types), and every comprehension step is charged to a cost budget;
//! - a per-expression cost limit like the API server's
//!   ([`COST_LIMIT`]), so a policy cannot spin on a large object;
//! - lookups (`resource.Get`, `globalContext.Get`, `image.GetMetadata`,
//!   `http.Get`) are answered through [`Lookups`], never by I/O inside
//!   the interpreter (see [`library`]);
//! - a panic inside the interpreter is caught and reported as an error.

mod activation;
pub mod authz;
pub mod direct;
pub mod image_ref;
mod jwt;
pub mod library;
mod literals;
mod regex_library;
mod rewrite;
pub mod rule_plan;
mod shared_plans;
mod string_format;
mod string_functions;
mod syntax;
mod timestamp_fields;
pub mod type_check;
mod unary_runs;
mod value_text;
pub mod values;
pub use activation::*;
use rewrite::*;
use syntax::*;

use direct::Val;
use kube_cel::cel::Value;
use kube_cel::cel::common::ast::IdedExpr;
use std::sync::Arc;

pub use library::{Lookup, Lookups, NoLookups};
pub use shared_plans::intern_key;

/// Cost units one expression may spend, as the API server's per-call limit
/// for admission policies. A unit is roughly one evaluated node inside a
/// comprehension.
pub const COST_LIMIT: u64 = 1_000_000;

/// How deep a CEL expression may nest (the API server's parser limit).
const MAX_NESTING: u16 = 100;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum CelError {
    #[error("compilation failed: {0}")]
    Compile(String),
    #[error("{0}")]
    Eval(String),
    #[error("operation cancelled: actual cost limit exceeded ({COST_LIMIT} units)")]
    CostLimit,
}

/// A compiled CEL expression.
#[derive(Debug, Clone)]
pub struct Program {
    source: Arc<str>,
    expr: Arc<IdedExpr>,
    /// The plan of the direct evaluator, when it implements every
    /// construct of the expression.
    direct: Option<Arc<direct::Node>>,
    /// The plan reads nothing but `object` and `oldObject`: its value is
    /// the same for every policy that evaluates it on a request, so a
    /// request computes it once ([`Activation::shared_value`]). Such plans
    /// are interned: every policy with the same expression holds the same
    /// plan, which is the request's key for the value.
    request_wide: bool,
}

/// The names a request-wide plan may read.
const REQUEST_WIDE_NAMES: [&str; 2] = ["object", "oldObject"];

impl Program {
    pub fn compile(source: &str) -> Result<Program, CelError> {
        let expr = parse(source)?;
        check_constant_formats(&expr).map_err(CelError::Compile)?;
        let compiled = direct::compile(&expr);
        // After the direct plan, which reads selections as paths.
        let expr = interpreter_forms(expr);
        // A constant (`['CHOWN', ...]`) reads nothing: evaluating it is a
        // copy, cheaper than finding a shared value.
        let request_wide = compiled.as_ref().is_some_and(|c| {
            c.reads_only(&REQUEST_WIDE_NAMES) && !matches!(c.node, direct::Node::Const(_))
        });
        let direct = compiled.map(|c| match request_wide {
            true => shared_plans::intern(c.node),
            false => Arc::new(c.node),
        });
        Ok(Program {
            source: source.into(),
            direct,
            request_wide,
            expr: Arc::new(expr),
        })
    }

    /// The plan whose value a request may share between policies: see
    /// [`Program::request_wide`].
    pub fn request_wide_plan(&self) -> Option<&Arc<direct::Node>> {
        self.direct.as_ref().filter(|_| self.request_wide)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The direct evaluator's plan, for a caller that evaluates it over
    /// bindings of its own (and takes any failure to [`Program::eval`]).
    pub fn direct_plan(&self) -> Option<&Arc<direct::Node>> {
        self.direct.as_ref()
    }

    /// The functions the expression calls (see [`called_functions`]).
    pub fn called_functions(&self) -> Vec<String> {
        let mut out = Vec::new();
        called_functions(&self.expr, &mut out);
        out
    }

    /// Whether the direct evaluator runs this expression (the interpreter
    /// still answers whatever it hands over at run time).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The same expression with the direct evaluator off: every evaluation
    /// goes to the interpreter (the differential tests compare the two).
    pub fn interpreted_only(&self) -> Program {
        Program {
            direct: None,
            request_wide: false,
            ..self.clone()
        }
    }

    /// Evaluates with the given variables. Lookups the expression makes are
    /// answered through `lookups`.
    pub fn eval(&self, vars: &Activation, lookups: &dyn Lookups) -> Result<Value, CelError> {
        match self.eval_direct(vars)? {
            Some(v) => Ok(v.to_cel()),
            None => self.interpret(vars, lookups),
        }
    }

    /// [`Program::eval`], keeping the result in the direct evaluator's
    /// form (a borrowed view where it selects from the request).
    pub fn eval_val<'a>(
        &self,
        vars: &Activation<'a>,
        lookups: &dyn Lookups,
    ) -> Result<Val<'a>, CelError> {
        match self.eval_direct(vars)? {
            Some(v) => Ok(v),
            None => self.interpret(vars, lookups).map(|v| Val::from_cel(&v)),
        }
    }

    /// The direct evaluator's answer; `None` when the interpreter must
    /// give it.
    pub fn eval_direct<'a>(&self, vars: &Activation<'a>) -> Result<Option<Val<'a>>, CelError> {
        let Some(node) = &self.direct else {
            return Ok(None);
        };
        direct_answer(direct::evaluate(node, vars, COST_LIMIT as i64))
    }

    fn interpret(&self, vars: &Activation, lookups: &dyn Lookups) -> Result<Value, CelError> {
        vars.with_interpreter(&mut |ctx| library::evaluate(&self.expr, ctx, lookups))
    }

    /// [`Program::eval`], with the objects `generator.Apply` asked for:
    /// (namespace, object).
    pub fn eval_generating(
        &self,
        vars: &Activation,
        lookups: &dyn Lookups,
    ) -> Result<(Value, Vec<Generated>), CelError> {
        let value = self.eval(vars, lookups)?;
        Ok((value, library::take_generated()))
    }

    /// [`Program::eval`], requiring a bool.
    pub fn eval_bool(&self, vars: &Activation, lookups: &dyn Lookups) -> Result<bool, CelError> {
        // Anything but a bool falls to the interpreter, which words the
        // error below.
        if let Some(node) = &self.direct
            && let Some(b) = direct_answer(direct::evaluate_bool(node, vars, COST_LIMIT as i64))?
        {
            return Ok(b);
        }
        match self.interpret(vars, lookups)? {
            Value::Bool(b) => Ok(b),
            other => Err(CelError::Eval(format!(
                "expression {:?} must return a bool, got {}",
                self.source.as_ref(),
                other.type_of()
            ))),
        }
    }
}

/// The direct evaluator's answer as [`Program`] gives it: `None` when the
/// interpreter must answer.
fn direct_answer<T>(answer: Result<T, direct::Fail>) -> Result<Option<T>, CelError> {
    match answer {
        Ok(v) => Ok(Some(v)),
        Err(direct::Fail::CostLimit) => Err(CelError::CostLimit),
        Err(direct::Fail::Interpreter) => Ok(None),
        Err(direct::Fail::Error(message)) => Err(CelError::Eval(*message)),
    }
}

#[cfg(test)]
mod tests;

/// One object `generator.Apply` asked for, with the namespace it named
/// (none in the NamespacedGeneratingPolicy form).
pub type Generated = (Option<String>, serde_json::Value);
