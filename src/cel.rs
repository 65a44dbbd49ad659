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

pub mod authz;
pub mod direct;
pub mod image_ref;
mod jwt;
pub mod library;
mod literals;
mod regex_library;
pub mod rule_plan;
mod shared_plans;
mod string_format;
mod string_functions;
mod timestamp_fields;
pub mod type_check;
mod unary_runs;
mod value_text;
pub mod values;

use direct::Val;
use kube_cel::cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, ListExpr, LiteralValue,
    MapEntryExpr, MapExpr, operators,
};
use kube_cel::cel::parser::Parser;
use kube_cel::cel::{Context, Value};
use std::borrow::Cow;
use std::collections::HashSet;
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

/// Variables bound for evaluation (`object`, `request`, `variables`, ...).
///
/// A scope holds its own bindings and reads through to its parent's. JSON
/// is bound by reference: the direct evaluator reads it in place. The
/// interpreter needs its own copy of every value; that conversion is made
/// only when an expression reaches the interpreter, and a root bound for a
/// whole request ([`InterpreterCache`]) makes it once per request.
pub struct Activation<'a> {
    parent: Option<&'a Activation<'a>>,
    /// The names every root binds ([`direct::KNOWN_ROOTS`]), in fixed
    /// slots: a root is built for every rule, and binding them this way
    /// allocates nothing, and reading them compares no strings.
    known: [Option<Val<'a>>; direct::KNOWN_ROOTS.len()],
    /// Every other name.
    slots: Vec<(Cow<'static, str>, Val<'a>)>,
    /// `variables.<name>`: set by a scope that binds a policy's variables;
    /// it hides the variables of outer scopes.
    variables: Option<Vec<(&'a str, Val<'a>)>>,
    /// The variables of this scope that failed to evaluate, with their
    /// errors: an expression that reads one reports the variable's error.
    failed_variables: Vec<(&'a str, String)>,
    /// The interpreter's context for a root, shared by every activation
    /// made from the same request.
    cache: Option<&'a InterpreterCache>,
    /// Bindings made only when an expression reads them.
    lazy: Option<&'a dyn LazyBindings>,
    /// The request's values of request-wide plans, on a root that binds
    /// the request's own `object` and `oldObject`.
    request_values: Option<&'a dyn RequestValues>,
}

/// The values of request-wide plans ([`Program::request_wide_plan`]) on
/// one request, each computed when first asked for and then shared by
/// every policy that asks.
pub trait RequestValues: std::fmt::Debug {
    /// `None` when the direct evaluator cannot give the value: the caller
    /// evaluates the expression itself.
    fn value_of(&self, plan: &Arc<direct::Node>) -> Option<Val<'_>>;
}

/// JSON bindings built on first use: a request's `request` and
/// `namespaceObject` cost more to build than most expressions that never
/// read them take to run.
pub trait LazyBindings {
    /// Every name this source binds.
    fn names(&self) -> &'static [&'static str];
    fn get(&self, name: &str) -> Option<&serde_json::Value>;
}

/// A root activation's bindings as the interpreter holds them, converted
/// on first use.
#[derive(Default)]
pub struct InterpreterCache(std::cell::OnceCell<Context<'static>>);

impl std::fmt::Debug for InterpreterCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InterpreterCache")
    }
}

impl Activation<'static> {
    /// No variables yet, every function available.
    pub fn new() -> Activation<'static> {
        Activation {
            parent: None,
            known: Default::default(),
            slots: Vec::new(),
            variables: None,
            failed_variables: Vec::new(),
            cache: None,
            lazy: None,
            request_values: None,
        }
    }
}

impl Default for Activation<'static> {
    fn default() -> Self {
        Activation::new()
    }
}

impl<'a> Activation<'a> {
    /// A root whose interpreter context is kept in `cache` (one per
    /// request; every root made with it must bind the same values).
    pub fn root(cache: &'a InterpreterCache) -> Activation<'a> {
        Activation {
            parent: None,
            known: Default::default(),
            slots: Vec::new(),
            variables: None,
            failed_variables: Vec::new(),
            cache: Some(cache),
            lazy: None,
            request_values: None,
        }
    }

    /// Binds the names of `lazy`, each built when first read.
    pub fn set_lazy(&mut self, lazy: &'a dyn LazyBindings) {
        self.lazy = Some(lazy);
    }

    /// Shares request-wide values through `values`; only for a root
    /// whose `object` and `oldObject` are the ones `values` computes on.
    pub fn set_request_values(&mut self, values: &'a dyn RequestValues) {
        self.request_values = Some(values);
    }

    /// The request's shared value of `program`, when it is request-wide
    /// and no scope between here and the root rebinds what it reads.
    pub fn shared_value(&self, program: &Program) -> Option<Val<'a>> {
        let plan = program.request_wide_plan()?;
        let mut at = self;
        loop {
            if let Some(values) = at.request_values {
                return values.value_of(plan);
            }
            // REQUEST_WIDE_NAMES, by their slots.
            if at.known[direct::OBJECT].is_some() || at.known[direct::OLD_OBJECT].is_some() {
                return None;
            }
            at = at.parent?;
        }
    }

    /// Binds `name`, shadowing an outer binding of it. A value the
    /// interpreter cannot hold (a function) is an error.
    pub fn set(&mut self, name: &str, value: Value) -> Result<(), CelError> {
        if let Value::Function(..) = value {
            return Err(CelError::Eval(format!(
                "variable {name:?} has no CEL value"
            )));
        }
        self.bind(Cow::Owned(name.to_string()), Val::from_cel(&value));
        Ok(())
    }

    /// Binds `name` to JSON, read in place.
    pub fn set_json(&mut self, name: &'static str, value: &'a serde_json::Value) {
        self.bind(Cow::Borrowed(name), Val::from_json(value));
    }

    /// Binds `name` to JSON in either representation, read in place (a
    /// request's decoded document is not converted).
    pub fn set_json_ref(&mut self, name: &'static str, value: crate::json_doc::JsonRef<'a>) {
        self.bind(Cow::Borrowed(name), Val::from_ref(value));
    }

    /// Binds the root of [`direct::KNOWN_ROOTS`] at `slot` to JSON read in
    /// place: [`Activation::set_json_ref`] without finding the slot by
    /// name (a root is bound for every rule).
    pub fn set_known_ref(&mut self, slot: usize, value: crate::json_doc::JsonRef<'a>) {
        self.known[slot] = Some(Val::from_ref(value));
    }

    fn bind(&mut self, name: Cow<'static, str>, value: Val<'a>) {
        if let Some(i) = direct::known_root(&name) {
            self.known[i] = Some(value);
            return;
        }
        match self.slots.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.slots.push((name, value)),
        }
    }

    /// Sets `variables.<name>` in this scope (creating this scope's
    /// variables, which hide outer ones).
    pub fn set_variable(&mut self, name: &'a str, value: Val<'a>) {
        let vars = self.variables.get_or_insert_with(Vec::new);
        match vars.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => vars.push((name, value)),
        }
    }

    /// Records that `variables.<name>` failed to evaluate, with `error`.
    pub fn set_variable_failure(&mut self, name: &'a str, error: String) {
        self.failed_variables.push((name, error));
    }

    /// The variables of the scope that holds them that failed to evaluate,
    /// with their errors, in their order.
    pub fn failed_variables(&self) -> &[(&'a str, String)] {
        match &self.variables {
            Some(_) => &self.failed_variables,
            None => self.parent.map_or(&[], |p| p.failed_variables()),
        }
    }

    /// (name, error) of a variable of the scope that holds the variables,
    /// when it failed to evaluate.
    pub fn variable_failure(&self, name: &str) -> Option<(&str, &str)> {
        match &self.variables {
            Some(_) => self
                .failed_variables
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(n, e)| (*n, e.as_str())),
            None => self.parent.and_then(|p| p.variable_failure(name)),
        }
    }

    /// Starts this scope's `variables` (none yet), with room for
    /// `capacity` of them: outer ones are hidden. Sized once, the list is
    /// one allocation, not one and a growth (1.7k instructions of the
    /// 16 `validate.cel` policies' 90k; callgrind, `pod_security_flavours`).
    pub fn start_variables(&mut self, capacity: usize) {
        self.variables
            .get_or_insert_with(|| Vec::with_capacity(capacity));
    }

    /// A scope over these variables: what is set in it shadows them.
    pub fn scope(&'a self) -> Activation<'a> {
        Activation {
            parent: Some(self),
            known: Default::default(),
            slots: Vec::new(),
            variables: None,
            failed_variables: Vec::new(),
            cache: None,
            lazy: None,
            request_values: None,
        }
    }

    fn own_variables(&self) -> Option<&Vec<(&'a str, Val<'a>)>> {
        match &self.variables {
            Some(v) => Some(v),
            None => self.parent.and_then(|p| p.own_variables()),
        }
    }

    /// Runs `f` with this activation as the interpreter's context.
    fn with_interpreter<R>(&self, f: &mut dyn FnMut(&Context) -> R) -> R {
        if let Some(cache) = self.cache {
            let ctx = cache.0.get_or_init(|| {
                let mut ctx = library::base().new_inner_scope();
                self.add_to_interpreter(&mut ctx);
                ctx
            });
            return f(ctx);
        }
        match self.parent {
            None => {
                let mut ctx = library::base().new_inner_scope();
                self.add_to_interpreter(&mut ctx);
                f(&ctx)
            }
            Some(parent) => parent.with_interpreter(&mut |outer| {
                let mut ctx = outer.new_inner_scope();
                self.add_to_interpreter(&mut ctx);
                f(&ctx)
            }),
        }
    }

    fn add_to_interpreter(&self, ctx: &mut Context) {
        if let Some(lazy) = self.lazy {
            for name in lazy.names() {
                if !self.slots.iter().any(|(n, _)| n == name)
                    && let Some(v) = lazy.get(name)
                {
                    ctx.add_variable_from_value(*name, values::json_to_cel(v));
                }
            }
        }
        for (name, value) in direct::KNOWN_ROOTS.iter().zip(&self.known) {
            if let Some(value) = value {
                ctx.add_variable_from_value(*name, value.to_cel());
            }
        }
        for (name, value) in &self.slots {
            ctx.add_variable_from_value(name.as_ref(), value.to_cel());
        }
        if let Some(vars) = &self.variables {
            ctx.add_variable_from_value("variables", variables_map(vars).to_cel());
        }
    }
}

fn variables_map<'a>(vars: &[(&'a str, Val<'a>)]) -> Val<'a> {
    Val::Map(direct::value::MapVal::Owned(Arc::new(
        vars.iter()
            .map(|(n, v)| (Val::Str(direct::value::Str::Borrowed(n)), v.clone()))
            .collect(),
    )))
}

impl<'a> direct::Bindings<'a> for Activation<'a> {
    fn ident(&self, name: &str) -> Option<Val<'a>> {
        if let Some(i) = direct::known_root(name) {
            return self.known(i).cloned();
        }
        if let Some((_, v)) = self.slots.iter().find(|(n, _)| n == name) {
            return Some(v.clone());
        }
        if name == "variables"
            && let Some(vars) = &self.variables
        {
            return Some(variables_map(vars));
        }
        if let Some(v) = self.lazy.and_then(|l| l.get(name)) {
            return Some(Val::from_json(v));
        }
        self.parent.and_then(|p| p.ident(name))
    }

    fn dotted(&self, name: &str) -> Option<Val<'a>> {
        let mut at = self;
        loop {
            if let Some((_, v)) = at.slots.iter().find(|(n, _)| n == name) {
                return Some(v.clone());
            }
            at = at.parent?;
        }
    }

    fn known(&self, index: usize) -> Option<&Val<'a>> {
        let mut at = self;
        loop {
            if let Some(v) = &at.known[index] {
                return Some(v);
            }
            at = at.parent?;
        }
    }

    fn variable(&self, name: &str) -> Option<&Val<'a>> {
        let vars = self.own_variables()?;
        vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
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
/// `cel.bind(<identifier>, init, body)`.
fn is_bind(c: &CallExpr) -> bool {
    c.func_name == "bind"
        && c.args.len() == 3
        && matches!(&c.args[0].expr, Expr::Ident(_))
        && matches!(c.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(t), .. }) if t == "cel")
}

/// The two-variable comprehensions of cel-go (Kubernetes' CEL has them
/// since 1.33), by name and argument count (with and without a filter).
const TWO_VARIABLE: &[(&str, usize)] = &[
    ("all", 3),
    ("exists", 3),
    ("existsOne", 3),
    ("exists_one", 3),
    ("transformList", 3),
    ("transformList", 4),
    ("transformMap", 3),
    ("transformMap", 4),
];

/// `range.all(i, v, p)` and the others of [`TWO_VARIABLE`]: the parser
/// leaves them as calls.
fn is_two_variable(c: &CallExpr) -> bool {
    c.target.is_some()
        && TWO_VARIABLE.contains(&(c.func_name.as_str(), c.args.len()))
        && c.args[..2]
            .iter()
            .all(|a| matches!(&a.expr, Expr::Ident(_)))
}

/// `cel.bind(name, init, body)`'s expansion: a comprehension over no
/// elements whose accumulator `name` holds `init` while `body` is
/// evaluated.
fn bind(name: String, init: IdedExpr, body: IdedExpr) -> IdedExpr {
    ided(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: ided(Expr::List(ListExpr {
            elements: Vec::new(),
            optional_indices: Vec::new(),
        })),
        iter_var: "#unused".into(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: ided(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: ided(Expr::Ident(name)),
        result: body,
    })))
}

/// A two-variable comprehension ([`is_two_variable`]) as cel-go expands
/// it: a comprehension whose `iter_var` is the index or key and
/// `iter_var2` the item or value. `transformMap` collects `[key, value]`
/// pairs into a map ([`library::MAP_OF_PAIRS`]). The direct evaluator runs
/// this form; the interpreter, which has no second variable, runs
/// [`pairs_form`] of it.
fn expand_two_variable(c: CallExpr) -> IdedExpr {
    const RESULT: &str = "@result";
    let mut args = c.args.into_iter();
    let mut name = || match args.next().map(|a| a.expr) {
        Some(Expr::Ident(n)) => n,
        _ => unreachable!("is_two_variable checked the names"),
    };
    let (first, second) = (name(), name());
    // The predicate, or the filter and the value.
    let mut rest = args;
    let accu = || ided(Expr::Ident(RESULT.into()));
    let literal = |v: LiteralValue| ided(Expr::Literal(v));
    let list = |elements: Vec<IdedExpr>| {
        ided(Expr::List(ListExpr {
            elements,
            optional_indices: Vec::new(),
        }))
    };
    let (init, condition, step, result) = match c.func_name.as_str() {
        "all" => (
            literal(LiteralValue::Boolean(true.into())),
            ided(call(operators::NOT_STRICTLY_FALSE, vec![accu()])),
            ided(call(
                operators::LOGICAL_AND,
                vec![accu(), rest.next().expect("3 args")],
            )),
            accu(),
        ),
        "exists" => (
            literal(LiteralValue::Boolean(false.into())),
            ided(call(
                operators::NOT_STRICTLY_FALSE,
                vec![ided(call(operators::LOGICAL_NOT, vec![accu()]))],
            )),
            ided(call(
                operators::LOGICAL_OR,
                vec![accu(), rest.next().expect("3 args")],
            )),
            accu(),
        ),
        "existsOne" | "exists_one" => (
            literal(LiteralValue::Int(0.into())),
            literal(LiteralValue::Boolean(true.into())),
            ided(call(
                operators::CONDITIONAL,
                vec![
                    rest.next().expect("3 args"),
                    ided(call(
                        operators::ADD,
                        vec![accu(), literal(LiteralValue::Int(1.into()))],
                    )),
                    accu(),
                ],
            )),
            ided(call(
                operators::EQUALS,
                vec![accu(), literal(LiteralValue::Int(1.into()))],
            )),
        ),
        transform => {
            let (filter, value) = match (rest.next(), rest.next()) {
                (Some(filter), Some(value)) => (Some(filter), value),
                (Some(value), None) => (None, value),
                _ => unreachable!("is_two_variable checked the count"),
            };
            let item = match transform {
                "transformMap" => list(vec![ided(Expr::Ident(first.clone())), value]),
                _ => value,
            };
            let appended = ided(call(operators::ADD, vec![accu(), list(vec![item])]));
            let step = match filter {
                Some(f) => ided(call(operators::CONDITIONAL, vec![f, appended, accu()])),
                None => appended,
            };
            let result = match transform {
                "transformMap" => ided(call(library::MAP_OF_PAIRS, vec![accu()])),
                _ => accu(),
            };
            (
                list(Vec::new()),
                literal(LiteralValue::Boolean(true.into())),
                step,
                result,
            )
        }
    };
    ided(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: *c.target.expect("a target"),
        iter_var: first,
        iter_var2: Some(second),
        accu_var: RESULT.into(),
        accu_init: init,
        loop_cond: condition,
        loop_step: step,
        result,
    })))
}

/// A two-variable comprehension as the interpreter can run it: over the
/// range's `[index or key, item or value]` pairs ([`library::PAIRS`]),
/// its condition and step under two binds that name the pair's halves.
/// The semantics are the one-variable macros', as the interpreter runs
/// them: its comprehension stops at an item's error, where cel-go's `all`
/// lets a later false decide; the direct evaluator answers those.
fn pairs_form(c: &mut ComprehensionExpr) {
    const PAIR: &str = "@pair";
    let Some(second) = c.iter_var2.take() else {
        return;
    };
    let first = std::mem::replace(&mut c.iter_var, PAIR.into());
    let half = |i: i64| {
        ided(call(
            "_[_]",
            vec![
                ided(Expr::Ident(PAIR.into())),
                ided(Expr::Literal(LiteralValue::Int(i.into()))),
            ],
        ))
    };
    let bound = |body: IdedExpr| bind(first.clone(), half(0), bind(second.clone(), half(1), body));
    let range = std::mem::replace(&mut c.iter_range, ided(Expr::Unspecified));
    c.iter_range = ided(call(library::PAIRS, vec![range]));
    let step = std::mem::replace(&mut c.loop_step, ided(Expr::Unspecified));
    c.loop_step = bound(step);
}

/// `opt.optMap(v, expr)` and `opt.optFlatMap(v, expr)`: CEL's optional
/// macros, which the parser leaves as calls.
fn is_optional_map(c: &CallExpr) -> bool {
    matches!(c.func_name.as_str(), "optMap" | "optFlatMap")
        && c.target.is_some()
        && c.args.len() == 2
        && matches!(&c.args[0].expr, Expr::Ident(_))
}

/// cel-go's expansion of an optional macro ([`is_optional_map`]):
/// `opt.hasValue() ? optional.of(cel.bind(v, opt.value(), expr)) :
/// optional.none()`, without `optional.of` for `optFlatMap`, whose
/// `expr` gives the optional.
fn expand_optional_map(c: CallExpr) -> IdedExpr {
    let target = *c.target.expect("is_optional_map checked the target");
    let mut args = c.args.into_iter();
    let (
        Some(IdedExpr {
            expr: Expr::Ident(name),
            ..
        }),
        Some(body),
    ) = (args.next(), args.next())
    else {
        unreachable!("is_optional_map checked the arguments")
    };
    let method = |target: IdedExpr, name: &str, args: Vec<IdedExpr>| {
        ided(Expr::Call(CallExpr {
            func_name: name.into(),
            target: Some(Box::new(target)),
            args,
        }))
    };
    let optional = || ided(Expr::Ident("optional".into()));
    let mapped = bind(name, method(target.clone(), "value", Vec::new()), body);
    let present = match c.func_name.as_str() {
        "optMap" => method(optional(), "of", vec![mapped]),
        _ => mapped,
    };
    ided(call(
        operators::CONDITIONAL,
        vec![
            method(target, "hasValue", Vec::new()),
            present,
            method(optional(), "none", Vec::new()),
        ],
    ))
}

fn is_optional(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Call(c) if c.func_name == library::OPT_SELECT || c.func_name == library::OPT_INDEX)
}

/// `source` parsed, with the rewrites both evaluators compile from.
fn parse(source: &str) -> Result<IdedExpr, CelError> {
    // The parser is a dependency's and input is the user's: a panic in
    // it (its fuzzed error recovery has had some) is a compile error
    // here, not a crash (fuzz/regressions/policy_load).
    let parsed = std::panic::catch_unwind(|| {
        Parser::new()
            .enable_optional_syntax(true)
            .max_recursion_depth(MAX_NESTING)
            .parse(&unary_runs::cancel_unary_runs(
                &literals::canonical_literals(source),
            ))
    })
    .map_err(|_| CelError::Compile("the CEL parser failed on this expression".into()))?
    .map_err(|e| CelError::Compile(reported_errors(&e)))?;
    let mut shadowed = HashSet::new();
    bound_names(&parsed, &mut shadowed);
    Ok(rewrite(parsed, &shadowed))
}

/// cel-go's compile-time check of `"...".format([...])` with a constant
/// template and a list literal (its `stringFormatValidator`, which
/// Kubernetes' environment has): a clause that does not parse, or items
/// too few or too many for the clauses, fail the expression's compilation
/// as they fail a policy's in Kubernetes.
fn check_constant_formats(e: &IdedExpr) -> Result<(), String> {
    if let Expr::Call(c) = &e.expr
        && c.func_name == "format"
        && let Some(Expr::Literal(LiteralValue::String(template))) =
            c.target.as_deref().map(|t| &t.expr)
        && let [arg] = c.args.as_slice()
        && let Expr::List(items) = &arg.expr
    {
        string_format::check_constant(template, items.elements.len())?;
    }
    let mut result = Ok(());
    for_each_child(e, &mut |child| {
        if result.is_ok() {
            result = check_constant_formats(child);
        }
    });
    result
}

/// The names an expression binds (comprehension and `cel.bind`
/// variables): a type name used so (`exists(type, ...)`) stays a
/// variable everywhere in it.
fn bound_names(e: &IdedExpr, out: &mut HashSet<String>) {
    match &e.expr {
        Expr::Call(c) if is_bind(c) => {
            if let Expr::Ident(name) = &c.args[0].expr {
                out.insert(name.clone());
            }
        }
        Expr::Comprehension(c) => {
            out.insert(c.iter_var.clone());
            out.extend(c.iter_var2.clone());
            out.insert(c.accu_var.clone());
        }
        Expr::Call(c) if is_optional_map(c) => {
            if let Expr::Ident(name) = &c.args[0].expr {
                out.insert(name.clone());
            }
        }
        Expr::Call(c) if is_two_variable(c) => {
            for a in &c.args[..2] {
                if let Expr::Ident(name) = &a.expr {
                    out.insert(name.clone());
                }
            }
        }
        _ => {}
    }
    for_each_child(e, &mut |child| bound_names(child, out));
}

/// The functions an expression calls, a call on a plain name qualified
/// with it (`envoy.Allowed`), as the interpreter resolves such calls.
fn called_functions(e: &IdedExpr, out: &mut Vec<String>) {
    if let Expr::Call(c) = &e.expr {
        match c.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(prefix)) => out.push(format!("{prefix}.{}", c.func_name)),
            _ => out.push(c.func_name.clone()),
        }
    }
    for_each_child(e, &mut |child| called_functions(child, out));
}

/// The forms of cel-go's semantics the interpreter has no operator for:
/// every field selection and `has()` as a call of the library's
/// [`library::SELECT`] and [`library::HAS`] (the interpreter's own
/// selection answers false on a value that is not a map, where cel-go
/// fails with `no such key`, or `unsupported index type` on a list), and
/// a comprehension's range checked by [`library::ITERABLE`], `-x` as
/// [`library::NEGATE`] (the interpreter's takes a bool and wraps the
/// smallest int), and a two-variable comprehension over pairs
/// ([`pairs_form`]).
fn interpreter_forms(mut e: IdedExpr) -> IdedExpr {
    fn visit(e: &mut IdedExpr) {
        for_each_child_mut(e, &mut visit);
        if let Expr::Comprehension(c) = &mut e.expr {
            pairs_form(c);
            if !matches!(c.iter_range.expr, Expr::List(_)) {
                let range = std::mem::replace(&mut c.iter_range, ided(Expr::Unspecified));
                c.iter_range = ided(call(library::ITERABLE, vec![range]));
            }
        }
        if let Expr::Call(c) = &mut e.expr
            && c.func_name == operators::NEGATE
        {
            c.func_name = library::NEGATE.into();
        }
        if let Expr::Select(s) = &mut e.expr {
            let operand = std::mem::replace(&mut *s.operand, ided(Expr::Unspecified));
            let field = ided(Expr::Literal(LiteralValue::String(
                std::mem::take(&mut s.field).into(),
            )));
            let name = if s.test {
                library::HAS
            } else {
                library::SELECT
            };
            e.expr = call(name, vec![operand, field]);
        }
    }
    visit(&mut e);
    e
}

/// [`for_each_child`], for changing the subexpressions in place.
fn for_each_child_mut(e: &mut IdedExpr, f: &mut dyn FnMut(&mut IdedExpr)) {
    fn entries(entries: &mut [IdedEntryExpr], f: &mut dyn FnMut(&mut IdedExpr)) {
        for x in entries {
            match &mut x.expr {
                EntryExpr::MapEntry(m) => {
                    f(&mut m.key);
                    f(&mut m.value);
                }
                EntryExpr::StructField(s) => f(&mut s.value),
            }
        }
    }
    match &mut e.expr {
        Expr::Call(c) => {
            c.target.iter_mut().for_each(|t| f(t));
            c.args.iter_mut().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter_mut().for_each(&mut *f),
        Expr::Map(m) => entries(&mut m.entries, f),
        Expr::Struct(st) => entries(&mut st.entries, f),
        Expr::Select(sel) => f(&mut sel.operand),
        _ => {}
    }
}

/// Calls `f` on each direct subexpression of `e`.
fn for_each_child<'e>(e: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    fn entries<'e>(entries: &'e [IdedEntryExpr], f: &mut dyn FnMut(&'e IdedExpr)) {
        for x in entries {
            match &x.expr {
                EntryExpr::MapEntry(m) => {
                    f(&m.key);
                    f(&m.value);
                }
                EntryExpr::StructField(s) => f(&s.value),
            }
        }
    }
    match &e.expr {
        Expr::Call(c) => {
            c.target.iter().for_each(|t| f(t));
            c.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut *f),
        Expr::Map(m) => entries(&m.entries, f),
        Expr::Struct(st) => entries(&st.entries, f),
        Expr::Select(sel) => f(&sel.operand),
        _ => {}
    }
}

/// How many parse errors a compile error reports, as cel-go's parser
/// (`ErrorReportingLimit`'s default); each repeats the expression, so an
/// unbounded list of a long broken expression runs to gigabytes (a fuzzed
/// 2 KB expression took 90 s to print).
const MAX_REPORTED_ERRORS: usize = 100;

/// The first parse errors, one line, and how many more there were.
fn reported_errors(e: &kube_cel::cel::parser::ParseErrors) -> String {
    let mut text = e
        .errors
        .iter()
        .take(MAX_REPORTED_ERRORS)
        .map(|e| e.to_string().replace('\n', " "))
        .collect::<Vec<_>>()
        .join(" ");
    if e.errors.len() > MAX_REPORTED_ERRORS {
        text.push_str(&format!(
            " {} more errors were truncated",
            e.errors.len() - MAX_REPORTED_ERRORS
        ));
    }
    text
}

/// The compile-time rewrite described in the module docs.
fn rewrite(e: IdedExpr, shadowed: &HashSet<String>) -> IdedExpr {
    let id = e.id;
    let expr = match e.expr {
        Expr::Call(c) if is_bind(&c) => {
            // `cel.bind(name, init, body)` (CEL's bind extension) is its
            // expansion: a comprehension over no elements whose
            // accumulator `name` holds `init` while `body` is evaluated.
            let mut args = c.args.into_iter();
            let (
                Some(IdedExpr {
                    expr: Expr::Ident(name),
                    ..
                }),
                Some(init),
                Some(body),
            ) = (args.next(), args.next(), args.next())
            else {
                unreachable!("is_bind checked the arguments")
            };
            bind(name, rewrite(init, shadowed), rewrite(body, shadowed)).expr
        }
        Expr::Call(c) if is_two_variable(&c) => rewrite(expand_two_variable(c), shadowed).expr,
        Expr::Call(c) if is_optional_map(&c) => rewrite(expand_optional_map(c), shadowed).expr,
        // A type name (`int`, `map`, `null_type`, ...) is the value
        // `type()` gives for values of that type.
        Expr::Ident(name)
            if library::TYPE_NAMES.contains(&name.as_str()) && !shadowed.contains(&name) =>
        {
            Expr::Literal(LiteralValue::String(library::type_value(&name).into()))
        }
        Expr::Call(mut c) => {
            c.target = c.target.map(|t| Box::new(rewrite(*t, shadowed)));
            c.args = c.args.into_iter().map(|e| rewrite(e, shadowed)).collect();
            match c.func_name.as_str() {
                // The value's equality (numbers across types), not the
                // interpreter's operator's.
                "_==_" => c.func_name = library::EQUALS.into(),
                // cel-go's error order: see library::AND.
                "_&&_" => c.func_name = library::AND.into(),
                "_||_" => c.func_name = library::OR.into(),
                "_!=_" => c.func_name = library::NOT_EQUALS.into(),
                "@in" => c.func_name = library::IN.into(),
                "_?._" => {
                    c.func_name = library::OPT_SELECT.into();
                    if let Some(Expr::Literal(LiteralValue::String(field))) =
                        c.args.get_mut(1).map(|f| &mut f.expr)
                        && let Some(name) = literals::backquoted_name(field)
                    {
                        *field = name.into();
                    }
                }
                "_[?_]" => c.func_name = library::OPT_INDEX.into(),
                "_[_]" if c.args.first().is_some_and(is_optional) => {
                    c.func_name = library::OPT_INDEX.into()
                }
                _ => {}
            }
            Expr::Call(c)
        }
        Expr::Comprehension(mut c) => {
            c.iter_range = rewrite(c.iter_range, shadowed);
            c.accu_init = rewrite(c.accu_init, shadowed);
            c.loop_cond = rewrite(c.loop_cond, shadowed);
            c.result = rewrite(c.result, shadowed);
            let step = rewrite(c.loop_step, shadowed);
            let w = weight(&step) + weight(&c.loop_cond);
            c.loop_step = ided(call(
                library::TICK,
                vec![step, ided(Expr::Literal(LiteralValue::Int(w.into())))],
            ));
            Expr::Comprehension(c)
        }
        Expr::List(mut l) => {
            l.elements = l
                .elements
                .into_iter()
                .map(|e| rewrite(e, shadowed))
                .collect();
            Expr::List(l)
        }
        Expr::Map(m) => Expr::Map(MapExpr {
            entries: m
                .entries
                .into_iter()
                .map(|e| rewrite_entry(e, shadowed))
                .collect(),
        }),
        // Typed object construction (`Object{...}`, `JSONPatch{...}`) is a
        // map of its fields: what the policy kinds read back is JSON.
        Expr::Struct(s) => Expr::Map(MapExpr {
            entries: s
                .entries
                .into_iter()
                .map(|e| rewrite_entry(e, shadowed))
                .collect(),
        }),
        Expr::Select(mut s) => {
            s.operand = Box::new(rewrite(*s.operand, shadowed));
            if let Some(name) = literals::backquoted_name(&s.field) {
                s.field = name;
            }
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

fn rewrite_entry(e: IdedEntryExpr, shadowed: &HashSet<String>) -> IdedEntryExpr {
    let expr = match e.expr {
        EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
            key: rewrite(m.key, shadowed),
            value: rewrite(m.value, shadowed),
            optional: m.optional,
        }),
        EntryExpr::StructField(f) => EntryExpr::MapEntry(MapEntryExpr {
            key: ided(Expr::Literal(LiteralValue::String(f.field.into()))),
            value: rewrite(f.value, shadowed),
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
