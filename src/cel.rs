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

pub mod image_ref;
pub mod library;
pub mod values;

use kube_cel::cel::common::ast::{
    CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, MapEntryExpr, MapExpr,
};
use kube_cel::cel::parser::Parser;
use kube_cel::cel::{Context, Value};
use std::sync::Arc;

pub use library::{Lookup, Lookups, NoLookups};

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
}

impl Program {
    pub fn compile(source: &str) -> Result<Program, CelError> {
        // The parser is a dependency's and input is the user's: a panic in
        // it (its fuzzed error recovery has had some) is a compile error
        // here, not a crash (fuzz/regressions/policy_load).
        let parsed = std::panic::catch_unwind(|| {
            Parser::new()
                .enable_optional_syntax(true)
                .max_recursion_depth(MAX_NESTING)
                .parse(source)
        })
        .map_err(|_| CelError::Compile("the CEL parser failed on this expression".into()))?
        .map_err(|e| CelError::Compile(e.to_string().replace('\n', " ")))?;
        Ok(Program {
            source: source.into(),
            expr: Arc::new(rewrite(parsed)),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates with the given variables. Lookups the expression makes are
    /// answered through `lookups`.
    pub fn eval(&self, vars: &Activation, lookups: &dyn Lookups) -> Result<Value, CelError> {
        library::evaluate(&self.expr, &vars.ctx, lookups)
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
        match self.eval(vars, lookups)? {
            Value::Bool(b) => Ok(b),
            other => Err(CelError::Eval(format!(
                "expression {:?} must return a bool, got {}",
                self.source.as_ref(),
                other.type_of()
            ))),
        }
    }
}

/// Variables bound for evaluation (`object`, `request`, `variables`, ...).
///
/// Binding converts a value into the interpreter's own representation, a
/// deep copy; so a request's variables are bound once and each evaluation
/// layers only what it adds (`variables`) in a [`Activation::scope`].
pub struct Activation<'a> {
    ctx: Context<'a>,
}

impl Activation<'static> {
    /// No variables yet, every function available.
    pub fn new() -> Activation<'static> {
        Activation {
            ctx: library::base().new_inner_scope(),
        }
    }
}

impl Default for Activation<'static> {
    fn default() -> Self {
        Activation::new()
    }
}

impl<'a> Activation<'a> {
    /// Binds `name`, shadowing an outer binding of it. A value the
    /// interpreter cannot hold (a function) is an error.
    pub fn set(&mut self, name: &str, value: Value) -> Result<(), CelError> {
        let ctx = &mut self.ctx;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.add_variable_from_value(name, value)
        }))
        .map_err(|_| CelError::Eval(format!("variable {name:?} has no CEL value")))
    }

    /// A scope over these variables: what is set in it shadows them.
    pub fn scope(&self) -> Activation<'_> {
        Activation {
            ctx: self.ctx.new_inner_scope(),
        }
    }
}

impl std::fmt::Debug for Activation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Activation")
    }
}

fn call(name: &str, args: Vec<IdedExpr>) -> Expr {
    Expr::Call(CallExpr {
        func_name: name.to_string(),
        target: None,
        args,
    })
}

fn ided(expr: Expr) -> IdedExpr {
    IdedExpr { id: 0, expr }
}

/// Number of nodes of a tree: the cost charged for one evaluation of it.
fn weight(e: &IdedExpr) -> i64 {
    1 + match &e.expr {
        Expr::Call(c) => {
            c.target.as_deref().map_or(0, weight) + c.args.iter().map(weight).sum::<i64>()
        }
        Expr::Comprehension(c) => weight(&c.iter_range) + weight(&c.result),
        Expr::List(l) => l.elements.iter().map(weight).sum(),
        Expr::Map(m) => m.entries.iter().map(entry_weight).sum(),
        Expr::Struct(s) => s.entries.iter().map(entry_weight).sum(),
        Expr::Select(s) => weight(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

fn entry_weight(e: &IdedEntryExpr) -> i64 {
    match &e.expr {
        EntryExpr::MapEntry(m) => weight(&m.key) + weight(&m.value),
        EntryExpr::StructField(f) => weight(&f.value),
    }
}

/// Whether `e` yields an optional by optional chaining.
fn is_optional(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Call(c) if c.func_name == library::OPT_SELECT || c.func_name == library::OPT_INDEX)
}

/// The compile-time rewrite described in the module docs.
fn rewrite(e: IdedExpr) -> IdedExpr {
    let id = e.id;
    let expr = match e.expr {
        Expr::Call(mut c) => {
            c.target = c.target.map(|t| Box::new(rewrite(*t)));
            c.args = c.args.into_iter().map(rewrite).collect();
            match c.func_name.as_str() {
                "_?._" => c.func_name = library::OPT_SELECT.into(),
                "_[?_]" => c.func_name = library::OPT_INDEX.into(),
                "_[_]" if c.args.first().is_some_and(is_optional) => {
                    c.func_name = library::OPT_INDEX.into()
                }
                _ => {}
            }
            Expr::Call(c)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = rewrite(c.iter_range);
            c.accu_init = rewrite(c.accu_init);
            c.loop_cond = rewrite(c.loop_cond);
            c.result = rewrite(c.result);
            let step = rewrite(c.loop_step);
            let w = weight(&step) + weight(&c.loop_cond);
            c.loop_step = ided(call(
                library::TICK,
                vec![step, ided(Expr::Literal(LiteralValue::Int(w.into())))],
            ));
            Expr::Comprehension(c)
        }
        Expr::List(mut l) => {
            l.elements = l.elements.into_iter().map(rewrite).collect();
            Expr::List(l)
        }
        Expr::Map(m) => Expr::Map(MapExpr {
            entries: m.entries.into_iter().map(rewrite_entry).collect(),
        }),
        // Typed object construction (`Object{...}`, `JSONPatch{...}`) is a
        // map of its fields: what the policy kinds read back is JSON.
        Expr::Struct(s) => Expr::Map(MapExpr {
            entries: s.entries.into_iter().map(rewrite_entry).collect(),
        }),
        Expr::Select(mut s) => {
            s.operand = Box::new(rewrite(*s.operand));
            // Selecting on an optional gives an optional: `a.?b.c` is `a.?b.?c`.
            if !s.test && is_optional(&s.operand) {
                call(
                    library::OPT_SELECT,
                    vec![
                        *s.operand,
                        ided(Expr::Literal(LiteralValue::String(s.field.into()))),
                    ],
                )
            } else {
                Expr::Select(s)
            }
        }
        other => other,
    };
    IdedExpr { id, expr }
}

fn rewrite_entry(e: IdedEntryExpr) -> IdedEntryExpr {
    let expr = match e.expr {
        EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
            key: rewrite(m.key),
            value: rewrite(m.value),
            optional: m.optional,
        }),
        EntryExpr::StructField(f) => EntryExpr::MapEntry(MapEntryExpr {
            key: ided(Expr::Literal(LiteralValue::String(f.field.into()))),
            value: rewrite(f.value),
            optional: f.optional,
        }),
    };
    IdedEntryExpr { id: e.id, expr }
}

#[cfg(test)]
mod tests;

/// One object `generator.Apply` asked for, with the namespace it named
/// (none in the NamespacedGeneratingPolicy form).
pub type Generated = (Option<String>, serde_json::Value);
