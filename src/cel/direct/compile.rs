//! The parsed (and rewritten) CEL tree turned into the direct evaluator's
//! plan: comprehension variables resolved to slots, `variables.<name>`
//! resolved to a name, the roots every request binds (`object`, ...)
//! resolved to fixed slots, operators and functions resolved to enums,
//! literal lists and maps folded into constants, literal regular
//! expressions compiled once.
//!
//! Some common shapes become one node instead of a small tree, because
//! each node costs a call and a move of its value: a chain of field
//! selections (`container.securityContext.privileged`, and `has()` of one)
//! is one [`Node::Path`], a comparison with a constant one
//! [`Node::EqConst`] or [`Node::InConst`].
//!
//! Anything outside what the direct evaluator implements gives `None`, and
//! the whole expression is left to the cel crate's interpreter.

mod sharing;
mod tree;
pub(super) use sharing::*;
pub use tree::*;

use super::functions::Func;
use super::value::{List, MapVal, Val, put_entry};
use crate::cel::library::{AND, EQUALS, IN, NOT_EQUALS, OPT_INDEX, OPT_SELECT, OR, TICK};
use crate::json_doc::Key;
use kube_cel::cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use std::sync::Arc;

/// A compiled expression and what it reads from its activation.
#[derive(Debug)]
pub struct Compiled {
    pub node: Node,
    /// The top-level variables it reads (`object`, `request`, ...), and
    /// `variables` when it reads `variables.<name>`.
    pub reads: Vec<Box<str>>,
}

impl Compiled {
    /// Whether every top-level variable it reads is one of `names`.
    pub fn reads_only(&self, names: &[&str]) -> bool {
        self.reads.iter().all(|r| names.contains(&&**r))
    }
}

pub fn compile(e: &IdedExpr) -> Option<Compiled> {
    compile_with(e, None, 0)
}

/// A rule's variables as [`compile_in_rule`] reads them, by declaration.
pub struct RuleVariables<'v> {
    pub declared: Vec<RuleVariable<'v>>,
}

pub struct RuleVariable<'v> {
    pub name: &'v str,
    /// The parsed expression, when a read compiles it in place; `None`
    /// when it is read by declaration ([`VariableRef::Declared`]).
    pub in_place: Option<&'v IdedExpr>,
    /// The names it reads from outside itself: a read inside a
    /// comprehension that binds one of them is read by declaration.
    pub free: Vec<String>,
}

/// `e`, an expression of a rule that sees the first `visible` of
/// `variables`: a `variables.<name>` whose declaration has an expression
/// in place is compiled there (a constant as the constant, anything else
/// under [`Node::Inlined`]), with the declarations before it visible to
/// it; every other read is by declaration, and a name no visible
/// declaration has gives no plan.
pub fn compile_in_rule(
    e: &IdedExpr,
    variables: &RuleVariables,
    visible: usize,
) -> Option<Compiled> {
    compile_with(e, Some(variables), visible)
}

fn compile_with(
    e: &IdedExpr,
    variables: Option<&RuleVariables>,
    visible: usize,
) -> Option<Compiled> {
    let mut compiler = Compiler {
        locals: Vec::new(),
        reads: Vec::new(),
        variables,
        visible,
        in_qualified: false,
    };
    let mut node = compiler.node(e)?;
    share_paths(&mut node);
    flatten_logic(&mut node);
    Some(Compiled {
        node,
        reads: compiler.reads,
    })
}

struct Compiler<'v> {
    /// The comprehension variables in scope, innermost last; a variable's
    /// index here is its slot.
    locals: Vec<String>,
    /// The top-level variables read so far.
    reads: Vec<Box<str>>,
    /// The rule's variables ([`compile_in_rule`]), and how many of them
    /// the expression being compiled sees.
    variables: Option<&'v RuleVariables<'v>>,
    visible: usize,
    /// Compiling the plain selection of a [`Node::Qualified`]: its
    /// shorter prefixes are not qualified again.
    in_qualified: bool,
}

impl Compiler<'_> {
    fn local(&self, name: &str) -> Option<usize> {
        self.locals.iter().rposition(|l| l == name)
    }

    fn read(&mut self, name: &str) {
        if !self.reads.iter().any(|r| &**r == name) {
            self.reads.push(name.into());
        }
    }

    /// The rule's variable `index` compiled here, when it is read in
    /// place and no comprehension here binds a name it reads.
    fn in_place(&mut self, rule: &RuleVariables, index: usize) -> Option<Node> {
        let variable = &rule.declared[index];
        let expr = variable.in_place?;
        if variable.free.iter().any(|f| self.local(f).is_some()) {
            return None;
        }
        // It sees the declarations before it, wherever it is read.
        let visible = std::mem::replace(&mut self.visible, index);
        let node = self.node(expr);
        self.visible = visible;
        Some(match node? {
            Node::Const(constant) => Node::Const(constant),
            other => Node::Inlined(Box::new(other)),
        })
    }

    /// The parts of `a.b.c`, when `e` is a chain of selections from a
    /// name no scope of the expression binds (not a comprehension's
    /// variable, a known root or `variables`).
    fn qualified_parts<'e>(&self, e: &'e IdedExpr) -> Option<Vec<&'e str>> {
        match &e.expr {
            Expr::Ident(name) => {
                (self.local(name).is_none() && known_root(name).is_none() && name != "variables")
                    .then(|| vec![name.as_str()])
            }
            Expr::Select(s) if !s.test => {
                let mut parts = self.qualified_parts(&s.operand)?;
                parts.push(&s.field);
                Some(parts)
            }
            _ => None,
        }
    }

    fn boxed(&mut self, e: &IdedExpr) -> Option<Box<Node>> {
        self.node(e).map(Box::new)
    }

    fn node(&mut self, e: &IdedExpr) -> Option<Node> {
        Some(match &e.expr {
            Expr::Literal(l) => Node::Const(literal(l)?),
            Expr::Ident(name) => match self.local(name) {
                Some(slot) => Node::Local(slot),
                None => {
                    self.read(name);
                    match known_root(name) {
                        Some(index) => Node::Known(index),
                        None => Node::Ident(name.as_str().into()),
                    }
                }
            },
            Expr::Select(s) => {
                if let Expr::Ident(root) = &s.operand.expr
                    && root == "variables"
                    && self.local(root).is_none()
                {
                    let variable = match self.variables {
                        // A rule's variable by declaration: one not
                        // declared before this expression has no plan
                        // (the interpreter answers for it).
                        Some(rule) => {
                            let index = rule.declared[..self.visible]
                                .iter()
                                .rposition(|v| v.name == s.field)?;
                            if !s.test
                                && let Some(node) = self.in_place(rule, index)
                            {
                                return Some(node);
                            }
                            VariableRef::Declared(index)
                        }
                        None => VariableRef::Name(s.field.as_str().into()),
                    };
                    self.read("variables");
                    return Some(match s.test {
                        true => Node::HasVariable(variable),
                        false => Node::Variable(variable),
                    });
                }
                if !s.test
                    && !self.in_qualified
                    && let Some(parts) = self.qualified_parts(e)
                {
                    self.in_qualified = true;
                    let or_else = self.node(e);
                    self.in_qualified = false;
                    let names = (2..=parts.len())
                        .rev()
                        .map(|k| {
                            let rest = parts[k..].iter().map(|f| Key::new(f)).collect();
                            (parts[..k].join(".").into(), rest)
                        })
                        .collect();
                    return Some(Node::Qualified {
                        names,
                        or_else: Box::new(or_else?),
                    });
                }
                let operand = self.node(&s.operand)?;
                path(operand, Key::new(&s.field), s.test)
            }
            Expr::List(l) => {
                let elements = l
                    .elements
                    .iter()
                    .map(|x| self.node(x))
                    .collect::<Option<Vec<_>>>()?;
                let optional: Vec<usize> = l.optional_indices.to_vec();
                if optional.is_empty() && elements.iter().all(|n| matches!(n, Node::Const(_))) {
                    let values: Vec<Val<'static>> = elements
                        .into_iter()
                        .map(|n| match n {
                            Node::Const(v) => v,
                            _ => unreachable!("all constants"),
                        })
                        .collect();
                    // `[]` (`orValue([])`, `has(x) ? x : []`) read where it
                    // lies: a copy of it counts no shared list up and down.
                    Node::Const(Val::List(match values.is_empty() {
                        true => List::Value(&EMPTY_LIST),
                        false => List::Owned(Arc::new(values)),
                    }))
                } else {
                    Node::List(elements, optional)
                }
            }
            Expr::Map(m) => {
                let mut entries = Vec::with_capacity(m.entries.len());
                for entry in &m.entries {
                    let EntryExpr::MapEntry(me) = &entry.expr else {
                        return None;
                    };
                    entries.push((self.node(&me.key)?, self.node(&me.value)?, me.optional));
                }
                let constant = entries.iter().all(|(k, v, o)| {
                    !o && matches!(k, Node::Const(_)) && matches!(v, Node::Const(_))
                });
                if constant && !entries.is_empty() {
                    let mut values = Vec::with_capacity(entries.len());
                    for (k, v, _) in entries {
                        let (Node::Const(k), Node::Const(v)) = (k, v) else {
                            unreachable!("all constants")
                        };
                        put_entry(&mut values, k, v);
                    }
                    Node::Const(Val::Map(MapVal::Owned(Arc::new(values))))
                } else {
                    Node::Map(entries)
                }
            }
            Expr::Comprehension(c) => {
                let range = self.node(&c.iter_range)?;
                let init = self.node(&c.accu_init)?;
                let accu_slot = self.locals.len();
                self.locals.push(c.accu_var.clone());
                self.locals.push(c.iter_var.clone());
                self.locals.extend(c.iter_var2.clone());
                let cond = self.node(&c.loop_cond);
                let step = self.node(&c.loop_step);
                self.locals.truncate(accu_slot + 1);
                let result = self.node(&c.result);
                self.locals.pop();
                let c = Comprehension {
                    range,
                    accu_slot,
                    pairs: c.iter_var2.is_some(),
                    init,
                    cond: cond?,
                    step: step?,
                    result: result?,
                };
                quantifier(c)
            }
            Expr::Call(c) => self.call(c)?,
            Expr::Struct(_) | Expr::Unspecified => return None,
        })
    }

    fn call(&mut self, c: &CallExpr) -> Option<Node> {
        let name = c.func_name.as_str();
        let args = &c.args;
        if c.target.is_none() {
            let operator = match (name, args.len()) {
                (AND, 2) => Some(Node::And(self.boxed(&args[0])?, self.boxed(&args[1])?)),
                (OR, 2) => Some(Node::Or(self.boxed(&args[0])?, self.boxed(&args[1])?)),
                (operators::LOGICAL_NOT, 1) => Some(Node::Not(self.boxed(&args[0])?)),
                (operators::NOT_STRICTLY_FALSE, 1) => {
                    Some(Node::NotStrictlyFalse(self.boxed(&args[0])?))
                }
                (operators::NEGATE, 1) => Some(Node::Neg(self.boxed(&args[0])?)),
                (operators::CONDITIONAL, 3) => Some(conditional([
                    self.node(&args[0])?,
                    self.node(&args[1])?,
                    self.node(&args[2])?,
                ])),
                (operators::INDEX, 2) => {
                    Some(Node::Index(self.boxed(&args[0])?, self.boxed(&args[1])?))
                }
                (OPT_INDEX, 2) => {
                    Some(Node::OptIndex(self.boxed(&args[0])?, self.boxed(&args[1])?))
                }
                (OPT_SELECT, 2) => {
                    let Expr::Literal(LiteralValue::String(field)) = &args[1].expr else {
                        return None;
                    };
                    Some(Node::OptSelect(
                        self.boxed(&args[0])?,
                        Key::new(field.inner()),
                    ))
                }
                (TICK, 2) => {
                    let Expr::Literal(LiteralValue::Int(w)) = &args[1].expr else {
                        return None;
                    };
                    Some(Node::Tick(self.boxed(&args[0])?, *w.inner()))
                }
                (operators::ADD, 2)
                    if matches!(&args[0].expr, Expr::Ident(n) if n == MACRO_ACCUMULATOR)
                        && self.local(MACRO_ACCUMULATOR).is_some() =>
                {
                    let slot = self.local(MACRO_ACCUMULATOR)?;
                    Some(Node::AppendAccu(slot, self.boxed(&args[1])?))
                }
                (name, 2) => match binary_op(name) {
                    Some(op) => Some(binary(op, self.node(&args[0])?, self.node(&args[1])?)),
                    None => None,
                },
                _ => None,
            };
            if let Some(node) = operator {
                return Some(node);
            }
        }
        // A qualified name (`optional.of`): the target is a namespace, not
        // a value, unless a comprehension binds that name.
        let qualified = match c.target.as_deref() {
            Some(IdedExpr {
                expr: Expr::Ident(prefix),
                ..
            }) if self.local(prefix).is_none() => Func::qualified(prefix, name, args.len()),
            _ => None,
        };
        if let Some(func) = qualified {
            let args = args.iter().map(|a| self.node(a)).collect::<Option<_>>()?;
            return Some(Node::Call(func, args));
        }
        let method = c.target.is_some();
        // `s.matches('literal')`: compile the regular expression once.
        if name == "matches"
            && method
            && args.len() == 1
            && let Expr::Literal(LiteralValue::String(re)) = &args[0].expr
        {
            let re = regex::Regex::new(re.inner()).ok()?;
            let target = self.boxed(c.target.as_deref()?)?;
            return Some(Node::Matches(target, Arc::new(re)));
        }
        // An optional chain ended by orValue/hasValue.
        if method
            && let Some(target) = c.target.as_deref()
            && matches!(&target.expr, Expr::Call(t) if t.func_name == OPT_SELECT || t.func_name == OPT_INDEX)
        {
            let end = match (name, args.len()) {
                ("orValue", 1) => Some(OptEnd::OrValue(self.boxed(&args[0])?)),
                ("hasValue", 0) => Some(OptEnd::HasValue),
                _ => None,
            };
            if let Some(end) = end {
                let (base, steps) = opt_chain(self.node(target)?);
                let fields: Option<Box<[Key]>> = steps
                    .iter()
                    .map(|s| match s {
                        OptStep::Field(f) => Some(f.clone()),
                        OptStep::Index(_) => None,
                    })
                    .collect();
                return Some(match fields {
                    Some(fields) => Node::OptFields(Box::new(base), fields, end),
                    None => Node::OptPath(Box::new(base), steps, end),
                });
            }
        }
        let argc = args.len() + usize::from(method);
        let func = Func::named(name, method, argc)?;
        let mut all = Vec::with_capacity(argc);
        if let Some(t) = c.target.as_deref() {
            all.push(self.node(t)?);
        }
        for a in args {
            all.push(self.node(a)?);
        }
        Some(Node::Call(func, all))
    }
}

/// The parser's `all`/`exists` expansion as a [`Node::Quantifier`]; any
/// other comprehension as it is.
fn quantifier(c: Comprehension) -> Node {
    let accu = c.accu_slot;
    let is_accu = |n: &Node| matches!(n, Node::Local(s) if *s == accu);
    let exists = match (&c.init, &c.cond, &c.result) {
        (Node::Const(Val::Bool(true)), Node::NotStrictlyFalse(x), r)
            if is_accu(x) && is_accu(r) =>
        {
            false
        }
        (Node::Const(Val::Bool(false)), Node::NotStrictlyFalse(x), r)
            if matches!(&**x, Node::Not(y) if is_accu(y)) && is_accu(r) =>
        {
            true
        }
        _ => return Node::Comprehension(Box::new(c)),
    };
    let Node::Tick(step, weight) = &c.step else {
        return Node::Comprehension(Box::new(c));
    };
    let pred_of = |step: &Node| match (step, exists) {
        (Node::And(a, _), false) | (Node::Or(a, _), true) => is_accu(a),
        _ => false,
    };
    if !pred_of(step) {
        return Node::Comprehension(Box::new(c));
    }
    let weight = *weight;
    let Node::Tick(step, _) = c.step else {
        unreachable!("checked above")
    };
    let pred = match *step {
        Node::And(_, p) | Node::Or(_, p) => p,
        _ => unreachable!("checked above"),
    };
    Node::Quantifier {
        range: Box::new(c.range),
        item_slot: accu + 1,
        pred,
        exists,
        weight,
        pairs: c.pairs,
    }
}

/// `operand.field` (`has(operand.field)` with `test`), extending the
/// selection chain `operand` already is.
fn path(operand: Node, field: Key, test: bool) -> Node {
    match operand {
        Node::Path {
            base,
            fields,
            test: false,
        } => {
            let mut fields = fields.into_vec();
            fields.push(field);
            Node::Path {
                base,
                fields: fields.into(),
                test,
            }
        }
        base => Node::Path {
            base: Box::new(base),
            fields: Box::new([field]),
            test,
        },
    }
}

/// A binary operator, as a comparison with a constant where one side is.
fn binary(op: BinOp, l: Node, r: Node) -> Node {
    match (op, l, r) {
        (BinOp::Eq | BinOp::Ne, x, Node::Const(c)) => Node::EqConst {
            x: Box::new(x),
            constant: c,
            eq: op == BinOp::Eq,
            constant_left: false,
        },
        (BinOp::Eq | BinOp::Ne, Node::Const(c), x) => Node::EqConst {
            x: Box::new(x),
            constant: c,
            eq: op == BinOp::Eq,
            constant_left: true,
        },
        (BinOp::In, x, Node::Const(c)) => Node::InConst(Box::new(x), c),
        (op, l, r) => Node::Binary(op, Box::new(l), Box::new(r)),
    }
}

/// `c ? t : e`, except `has(p.f) ? p.f : d` with `d` a constant, which is
/// `p.?f.orValue(d)` written the long way (`(has(object.spec.initContainers)
/// ? object.spec.initContainers : [])` in half the Pod Security policies,
/// `object.spec.?initContainers.orValue([])` in the others): compiled as
/// that chain, the two spellings are one plan, so that a policy set
/// computes `allContainers` once and sweeps it once, and the field is
/// looked up once, not twice. Both give the same value wherever either
/// gives one (a present field, null or not, is itself; an absent one is
/// `d`) and both fail where `p` is no map; the interpreter words a
/// failure from the expression as written. Neither charges a cost.
fn conditional(parts: [Node; 3]) -> Node {
    match parts {
        [
            Node::Path {
                base,
                fields,
                test: true,
            },
            Node::Path {
                base: selected_base,
                fields: selected,
                test: false,
            },
            default @ Node::Const(_),
        ] if !fields.is_empty()
            && fields == selected
            && format!("{base:?}") == format!("{selected_base:?}") =>
        {
            // Not empty (the guard): the last field is the one tested.
            let (prefix, last) = fields.split_at(fields.len() - 1);
            let map = match prefix.is_empty() {
                true => *base,
                false => Node::Path {
                    base,
                    fields: prefix.into(),
                    test: false,
                },
            };
            Node::OptFields(
                Box::new(map),
                last.into(),
                OptEnd::OrValue(Box::new(default)),
            )
        }
        parts => Node::Cond(Box::new(parts)),
    }
}

/// An optional chain as its base and steps (outermost last).
fn opt_chain(node: Node) -> (Node, Vec<OptStep>) {
    let mut steps = Vec::new();
    let mut at = node;
    loop {
        at = match at {
            Node::OptSelect(inner, field) => {
                steps.push(OptStep::Field(field));
                *inner
            }
            Node::OptIndex(inner, index) => {
                steps.push(OptStep::Index(*index));
                *inner
            }
            base => {
                steps.reverse();
                return (base, steps);
            }
        }
    }
}

fn binary_op(name: &str) -> Option<BinOp> {
    Some(match name {
        // `==`, `!=` and `in` arrive renamed: the rewrite gives the
        // interpreter CEL's equality across numeric types.
        EQUALS => BinOp::Eq,
        NOT_EQUALS => BinOp::Ne,
        operators::LESS => BinOp::Lt,
        operators::LESS_EQUALS => BinOp::Le,
        operators::GREATER => BinOp::Gt,
        operators::GREATER_EQUALS => BinOp::Ge,
        operators::ADD => BinOp::Add,
        operators::SUBSTRACT => BinOp::Sub,
        operators::MULTIPLY => BinOp::Mul,
        operators::DIVIDE => BinOp::Div,
        operators::MODULO => BinOp::Mod,
        IN => BinOp::In,
        _ => return None,
    })
}

fn literal(l: &LiteralValue) -> Option<Val<'static>> {
    Some(match l {
        LiteralValue::Null => Val::Null,
        LiteralValue::Boolean(b) => Val::Bool(*b.inner()),
        LiteralValue::Int(i) => Val::Int(*i.inner()),
        LiteralValue::UInt(u) => Val::Uint(*u.inner()),
        LiteralValue::Double(d) => Val::Double(*d.inner()),
        LiteralValue::String(s) => Val::string(s.inner()),
        LiteralValue::Bytes(b) => Val::Bytes(b.inner().into()),
    })
}
