//! The variables an expression runs with: `object`, `request` and the
//! others, bound by reference for the direct evaluator and copied into the
//! interpreter's context once, on first use; `variables` evaluated lazily.

use super::*;
use direct::Val;
use kube_cel::cel::{Context, Value};
use std::borrow::Cow;
use std::sync::Arc;

/// Variables bound for evaluation (`object`, `request`, `variables`, ...).
///
/// A scope holds its own bindings and reads through to its parent's. JSON
/// is bound by reference: the direct evaluator reads it in place. The
/// interpreter needs its own copy of every value; that conversion is made
/// only when an expression reaches the interpreter, and a root bound for a
/// whole request ([`InterpreterCache`]) makes it once per request.
pub struct Activation<'a> {
    pub(super) parent: Option<&'a Activation<'a>>,
    /// The names every root binds ([`direct::KNOWN_ROOTS`]), in fixed
    /// slots: a root is built for every rule, and binding them this way
    /// allocates nothing, and reading them compares no strings.
    pub(super) known: [Option<Val<'a>>; direct::KNOWN_ROOTS.len()],
    /// Every other name.
    pub(super) slots: Vec<(Cow<'static, str>, Val<'a>)>,
    /// `variables.<name>`: set by a scope that binds a policy's variables;
    /// it hides the variables of outer scopes.
    pub(super) variables: Option<Vec<(&'a str, Val<'a>)>>,
    /// The variables of this scope that failed to evaluate, with their
    /// errors: an expression that reads one reports the variable's error.
    pub(super) failed_variables: Vec<(&'a str, String)>,
    /// The interpreter's context for a root, shared by every activation
    /// made from the same request.
    pub(super) cache: Option<&'a InterpreterCache>,
    /// Bindings made only when an expression reads them.
    pub(super) lazy: Option<&'a dyn LazyBindings>,
    /// The request's values of request-wide plans, on a root that binds
    /// the request's own `object` and `oldObject`.
    pub(super) request_values: Option<&'a dyn RequestValues>,
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

    pub(super) fn bind(&mut self, name: Cow<'static, str>, value: Val<'a>) {
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

    pub(super) fn own_variables(&self) -> Option<&Vec<(&'a str, Val<'a>)>> {
        match &self.variables {
            Some(v) => Some(v),
            None => self.parent.and_then(|p| p.own_variables()),
        }
    }

    /// Runs `f` with this activation as the interpreter's context.
    pub(super) fn with_interpreter<R>(&self, f: &mut dyn FnMut(&Context) -> R) -> R {
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

    pub(super) fn add_to_interpreter(&self, ctx: &mut Context) {
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

pub(super) fn variables_map<'a>(vars: &[(&'a str, Val<'a>)]) -> Val<'a> {
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
