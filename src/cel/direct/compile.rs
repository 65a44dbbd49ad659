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

use super::functions::Func;
use super::value::{List, MapVal, Val, put_entry};
use crate::cel::library::{AND, EQUALS, IN, NOT_EQUALS, OPT_INDEX, OPT_SELECT, OR, TICK};
use crate::json_doc::Key;
use kube_cel::cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use std::collections::HashMap;
use std::sync::Arc;

/// A compiled expression node.
#[derive(Debug, Clone)]
pub enum Node {
    Const(Val<'static>),
    /// A variable of the activation (`request`, `namespaceObject`, ...).
    Ident(Box<str>),
    /// One of [`KNOWN_ROOTS`], by its index.
    Known(usize),
    /// A comprehension variable: its slot.
    Local(usize),
    /// `variables.<name>`.
    Variable(VariableRef),
    /// `has(variables.<name>)`.
    HasVariable(VariableRef),
    /// `base.f1.f2...fn`; with `test`, `has(base.f1...fn)` (the last field
    /// is tested, not selected).
    Path {
        base: Box<Node>,
        fields: Box<[Key]>,
        test: bool,
    },
    /// `base.field`, selected as a [`Node::Path`] selects it, and kept in
    /// memo `id` for the rest of the evaluation (one found during a
    /// comprehension's item, until the comprehension moves to its next
    /// item): a prefix that several selections of one expression walk
    /// ([`share_paths`]).
    Memo {
        id: u32,
        base: Box<Node>,
        field: Key,
    },
    /// `has(base.field)` of a [`Node::Memo`]'s path: the memo's value when
    /// present, and the test answers from it, or fills it.
    MemoHas {
        id: u32,
        base: Box<Node>,
        field: Key,
    },
    OptSelect(Box<Node>, Key),
    OptIndex(Box<Node>, Box<Node>),
    Index(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    Cond(Box<[Node; 3]>),
    Binary(BinOp, Box<Node>, Box<Node>),
    /// `x == c` (`eq`) or `x != c` with `c` a constant; `constant_left`
    /// keeps the operands' order (`c == x`) for the comparison.
    EqConst {
        x: Box<Node>,
        constant: Val<'static>,
        eq: bool,
        constant_left: bool,
    },
    /// `x in c` with `c` a constant list or map.
    InConst(Box<Node>, Val<'static>),
    /// `@result + x` inside `map`/`filter`: the accumulator is taken out of
    /// its slot and extended in place (the macro never reads it again).
    AppendAccu(usize, Box<Node>),
    Neg(Box<Node>),
    List(Vec<Node>, Vec<usize>),
    Map(Vec<(Node, Node, bool)>),
    Comprehension(Box<Comprehension>),
    /// A comprehension step and the cost it charges.
    Tick(Box<Node>, i64),
    /// A function; a method's receiver is the first argument.
    Call(Func, Vec<Node>),
    /// `s.matches('literal')`, the expression compiled once.
    Matches(Box<Node>, Arc<regex::Regex>),
    /// `range.all(x, pred)` / `range.exists(x, pred)` (the parser's
    /// expansions, recognised): the predicate on each item in turn, no
    /// accumulator. The weight is the expansion's per-item cost. With
    /// `pairs`, the two-variable forms (`range.all(i, v, pred)`): the
    /// index or key in `item_slot`, the item or value above it.
    Quantifier {
        range: Box<Node>,
        item_slot: usize,
        pred: Box<Node>,
        exists: bool,
        weight: i64,
        pairs: bool,
    },
    /// An optional chain and what ends it (`a.?b.?c.orValue(d)`,
    /// `a.?b.hasValue()`), walked without building the optionals between.
    OptPath(Box<Node>, Vec<OptStep>, OptEnd),
    /// [`Node::OptPath`] whose steps are all fields (`a.?b.?c.orValue(d)`,
    /// nearly every optional chain): walked key by key in the decoded
    /// document, no value built until the end.
    OptFields(Box<Node>, Box<[Key]>, OptEnd),
    /// [`Node::OptFields`] whose first step, `base.?fields[0]`, is a path
    /// other selections of the expression walk too ([`share_paths`]): the
    /// value of memo `id` when it was found, else the step taken and the
    /// value it finds kept there. `c.?securityContext.?privileged`,
    /// `c.?securityContext.?procMount` and `has(c.securityContext)` of one
    /// container then look `securityContext` up once.
    MemoOptFields {
        id: u32,
        base: Box<Node>,
        fields: Box<[Key]>,
        end: OptEnd,
    },
    /// `a && b && c ...` (three or more operands, any grouping): one loop
    /// over the operands, where nested pairs recurse once per operator
    /// ([`flatten_logic`]).
    All(Box<[Node]>),
    /// `a || b || c ...`, as [`Node::All`].
    Any(Box<[Node]>),
    /// A rule's variable compiled where it is read ([`compile_in_rule`]):
    /// its value, but any failure or foreign value coming out of it
    /// declines the whole evaluation
    /// ([`Fail::Interpreter`](super::value::Fail::Interpreter) at the end),
    /// as a failed read of the variable does.
    /// `a || b` would otherwise absorb a failed `a`.
    Inlined(Box<Node>),
    /// `a.b.c` read from a name no scope of the expression binds, as
    /// cel-go resolves a qualified identifier: the first of `names`
    /// (`a.b.c`, then `a.b` with `c` left to select) the bindings hold as
    /// one variable, else `or_else`, the selection from `a`.
    Qualified {
        names: Box<[QualifiedName]>,
        or_else: Box<Node>,
    },
    /// The value of request-wide plan `n` of a policy set's checks
    /// ([`super::set`]): read from the set's bindings, computed once per
    /// request.
    Shared(usize),
    /// The answer of a policy set's fused quantifier `n` ([`super::set`]),
    /// found in a pass over its range shared with the set's other
    /// quantifiers over the same items.
    Fused(usize),
}

/// One reading of a qualified identifier ([`Node::Qualified`]): a dotted
/// name, and the fields left to select from its variable.
pub type QualifiedName = (Box<str>, Box<[Key]>);

/// How a plan names a variable it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VariableRef {
    /// By name, in whatever scope the bindings hold.
    Name(Box<str>),
    /// A rule's variable by declaration ([`compile_in_rule`]), resolved
    /// when the policy was compiled.
    Declared(usize),
}

#[derive(Debug, Clone)]
pub enum OptStep {
    Field(Key),
    Index(Node),
}

#[derive(Debug, Clone)]
pub enum OptEnd {
    OrValue(Box<Node>),
    HasValue,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    In,
}

#[derive(Debug, Clone)]
pub struct Comprehension {
    pub range: Node,
    pub accu_slot: usize,
    /// Two iteration variables (`transformList(i, v, ...)`): the index or
    /// key above the accumulator, the item or value above that.
    pub pairs: bool,
    pub init: Node,
    pub cond: Node,
    pub step: Node,
    pub result: Node,
}

/// The empty list constant: a JSON array, borrowed.
static EMPTY_LIST: Vec<serde_json::Value> = Vec::new();

/// The top-level names every request binds, held in fixed slots of an
/// activation: a [`Node::Known`] reads its slot by index.
pub const KNOWN_ROOTS: [&str; 3] = ["object", "oldObject", "params"];

/// The slots of `object`, `oldObject` and `params` in [`KNOWN_ROOTS`].
pub const OBJECT: usize = 0;
pub const OLD_OBJECT: usize = 1;
pub const PARAMS: usize = 2;

/// The slot of a name of [`KNOWN_ROOTS`].
pub fn known_root(name: &str) -> Option<usize> {
    KNOWN_ROOTS.iter().position(|k| *k == name)
}

/// The accumulator name of the parser's macro expansions.
const MACRO_ACCUMULATOR: &str = "@result";

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

/// Where a selection's walk starts, for [`share_paths`]: a root every
/// request binds, a policy variable, or the item of one comprehension
/// (numbered in the order the walk meets them) in its local slot.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Root {
    Known(usize),
    Variable(VariableRef),
    Item { number: u32, slot: usize },
}

impl Root {
    /// The node that reads the root.
    fn node(&self) -> Node {
        match self {
            Root::Known(i) => Node::Known(*i),
            Root::Variable(name) => Node::Variable(name.clone()),
            Root::Item { slot, .. } => Node::Local(*slot),
        }
    }
}

/// A root and the fields walked from it.
type Prefix = (Root, Vec<Key>);

#[derive(Clone, Copy, PartialEq)]
enum Pass {
    Count,
    Rewrite,
}

/// Gives the path prefixes that several selections of one expression walk
/// a memo each ([`Node::Memo`]), so that each is looked up once per
/// evaluation, or once per item of the comprehension it starts from.
/// Guards are written that way: `has(c.securityContext) &&
/// has(c.securityContext.capabilities) &&
/// c.securityContext.capabilities.drop...` walks `securityContext` three
/// times and `capabilities` twice, where the memos look each up once.
///
/// A memo selects as the path did (the same errors, at the same field);
/// only a value found is kept, so an error is met again wherever the path
/// is walked again. Comprehension accumulators are never roots: they
/// change at every step.
pub(super) fn share_paths(node: &mut Node) {
    let mut sharing = Sharing::default();
    sharing.walk(node, Pass::Count);
    sharing.items.clear();
    sharing.next_item = 0;
    sharing.walk(node, Pass::Rewrite);
}

/// The selections [`share_paths`] gave memos made plain paths again, so
/// that a policy set can share them anew across its expressions (memo ids
/// are an expression's own).
pub(super) fn unshare_paths(node: &mut Node) {
    for_each_child(node, &mut unshare_paths);
    let taken = std::mem::replace(node, Node::Const(Val::Null));
    *node = match taken {
        Node::Memo { base, field, .. } => path(*base, field, false),
        Node::MemoHas { base, field, .. } => path(*base, field, true),
        Node::MemoOptFields {
            base, fields, end, ..
        } => Node::OptFields(base, fields, end),
        // A path from a memo's chain, now a path itself: one path.
        Node::Path { base, fields, test } if !fields.is_empty() => {
            let last = fields.len() - 1;
            let mut at = *base;
            for (n, field) in fields.into_vec().into_iter().enumerate() {
                at = path(at, field, test && n == last);
            }
            at
        }
        other => other,
    };
}

/// Chains of one logical operator made one n-ary node, bottom up. CEL's
/// `&&` and `||` are commutative over errors, so the grouping never
/// changes an answer: any operand that decides, decides; else an error
/// stands (one the interpreter must answer outranks the others, then the
/// leftmost), as pair by pair. Done last: the comprehension macros are
/// recognised by their pairs (`@result && pred`).
fn flatten_logic(node: &mut Node) {
    for_each_child(node, &mut flatten_logic);
    let and = match node {
        Node::And(..) => true,
        Node::Or(..) => false,
        _ => return,
    };
    let mut operands = Vec::new();
    gather_operands(
        std::mem::replace(node, Node::Const(Val::Null)),
        and,
        &mut operands,
    );
    *node = match (<[Node; 2]>::try_from(operands), and) {
        (Ok([l, r]), true) => Node::And(Box::new(l), Box::new(r)),
        (Ok([l, r]), false) => Node::Or(Box::new(l), Box::new(r)),
        (Err(operands), true) => Node::All(operands.into()),
        (Err(operands), false) => Node::Any(operands.into()),
    };
}

/// The operands of a chain of `&&` (`and`) or `||`, left to right.
fn gather_operands(node: Node, and: bool, out: &mut Vec<Node>) {
    match (node, and) {
        (Node::And(l, r), true) | (Node::Or(l, r), false) => {
            gather_operands(*l, and, out);
            gather_operands(*r, and, out);
        }
        (Node::All(items), true) | (Node::Any(items), false) => out.extend(items),
        (other, _) => out.push(other),
    }
}

/// Calls `f` on each node directly under `node`.
pub(super) fn for_each_child(node: &mut Node, f: &mut dyn FnMut(&mut Node)) {
    match node {
        Node::Const(_)
        | Node::Ident(_)
        | Node::Known(_)
        | Node::Local(_)
        | Node::Variable(_)
        | Node::HasVariable(_)
        | Node::Shared(_)
        | Node::Fused(_) => {}
        Node::Path { base, .. } | Node::Memo { base, .. } | Node::MemoHas { base, .. } => f(base),
        Node::Qualified { or_else, .. } => f(or_else),
        Node::OptSelect(x, _)
        | Node::Not(x)
        | Node::NotStrictlyFalse(x)
        | Node::Neg(x)
        | Node::InConst(x, _)
        | Node::AppendAccu(_, x)
        | Node::Tick(x, _)
        | Node::Matches(x, _)
        | Node::Inlined(x)
        | Node::EqConst { x, .. } => f(x),
        Node::OptIndex(a, b)
        | Node::Index(a, b)
        | Node::And(a, b)
        | Node::Or(a, b)
        | Node::Binary(_, a, b) => {
            f(a);
            f(b);
        }
        Node::Cond(parts) => parts.iter_mut().for_each(f),
        Node::List(items, _) | Node::Call(_, items) => items.iter_mut().for_each(f),
        Node::All(items) | Node::Any(items) => items.iter_mut().for_each(f),
        Node::Map(entries) => {
            for (k, v, _) in entries {
                f(k);
                f(v);
            }
        }
        Node::Comprehension(c) => {
            f(&mut c.range);
            f(&mut c.init);
            f(&mut c.cond);
            f(&mut c.step);
            f(&mut c.result);
        }
        Node::Quantifier { range, pred, .. } => {
            f(range);
            f(pred);
        }
        Node::OptPath(base, steps, end) => {
            f(base);
            for step in steps {
                if let OptStep::Index(i) = step {
                    f(i);
                }
            }
            if let OptEnd::OrValue(default) = end {
                f(default);
            }
        }
        Node::OptFields(base, _, end) | Node::MemoOptFields { base, end, .. } => {
            f(base);
            if let OptEnd::OrValue(default) = end {
                f(default);
            }
        }
    }
}

#[derive(Default)]
struct Sharing {
    /// How many selections walk each prefix.
    counts: HashMap<Prefix, u32>,
    /// The memo of each shared prefix.
    ids: HashMap<Prefix, u32>,
    /// The item number of each local slot in scope (`None` for an
    /// accumulator).
    items: Vec<Option<u32>>,
    next_item: u32,
}

impl Sharing {
    fn root(&self, base: &Node) -> Option<Root> {
        match base {
            Node::Known(i) => Some(Root::Known(*i)),
            Node::Variable(name) => Some(Root::Variable(name.clone())),
            Node::Local(slot) => {
                self.items
                    .get(*slot)
                    .copied()
                    .flatten()
                    .map(|number| Root::Item {
                        number,
                        slot: *slot,
                    })
            }
            _ => None,
        }
    }

    /// Binds the slots of a comprehension's body: `accu` (no root), then
    /// its item (a new item), or with `pairs` an index or key (no root)
    /// and its item or value (a new item). Gives what to restore after it.
    fn enter(&mut self, accu: usize, pairs: bool) -> Vec<Option<u32>> {
        let saved = self.items.clone();
        let item = accu + 1 + usize::from(pairs);
        self.items.truncate(accu);
        self.items.resize(item, None);
        self.items.push(Some(self.next_item));
        self.next_item += 1;
        saved
    }

    fn id(&mut self, root: &Root, fields: &[Key]) -> u32 {
        let next = self.ids.len() as u32;
        *self
            .ids
            .entry((root.clone(), fields.to_vec()))
            .or_insert(next)
    }

    fn shared(&self, root: &Root, fields: &[Key]) -> bool {
        self.counts
            .get(&(root.clone(), fields.to_vec()))
            .is_some_and(|n| *n >= 2)
    }

    /// The selection `base.fields` (`has()` of it with `test`) reading
    /// the memos of its shared prefix; `None` when it shares none.
    fn rewritten(&mut self, root: &Root, fields: &[Key], test: bool) -> Option<Node> {
        // Counts only fall as a prefix grows: the shared ones lead.
        let shared = (1..=fields.len())
            .take_while(|k| self.shared(root, &fields[..*k]))
            .last()?;
        let chain = |this: &mut Self, len: usize| {
            let mut at = root.node();
            for j in 1..=len {
                at = Node::Memo {
                    id: this.id(root, &fields[..j]),
                    base: Box::new(at),
                    field: fields[j - 1].clone(),
                };
            }
            at
        };
        Some(match (test, shared == fields.len()) {
            (true, true) => Node::MemoHas {
                base: Box::new(chain(self, shared - 1)),
                id: self.id(root, fields),
                field: fields[shared - 1].clone(),
            },
            (false, true) => chain(self, shared),
            (_, false) => Node::Path {
                base: Box::new(chain(self, shared)),
                fields: fields[shared..].into(),
                test,
            },
        })
    }

    fn walk(&mut self, node: &mut Node, pass: Pass) {
        match node {
            Node::Path { base, fields, test } => {
                let Some(root) = self.root(base) else {
                    return self.walk(base, pass);
                };
                match pass {
                    Pass::Count => {
                        for k in 1..=fields.len() {
                            *self
                                .counts
                                .entry((root.clone(), fields[..k].to_vec()))
                                .or_default() += 1;
                        }
                    }
                    Pass::Rewrite => {
                        if let Some(shared) = self.rewritten(&root, fields, *test) {
                            *node = shared;
                        }
                    }
                }
            }
            // An optional chain shares its first step, the one a plain
            // selection of the same path finds alike (a present field);
            // past it, `.?` finds what `.` would fail on, so nothing more.
            Node::OptFields(base, fields, end)
                if let Some(root) = self.root(base)
                    && let Some(first) = fields.first() =>
            {
                let prefix = (root, vec![first.clone()]);
                // The default is walked as any other child.
                if let OptEnd::OrValue(default) = end {
                    self.walk(default, pass);
                }
                match pass {
                    Pass::Count => *self.counts.entry(prefix).or_default() += 1,
                    Pass::Rewrite if self.shared(&prefix.0, &prefix.1) => {
                        let id = self.id(&prefix.0, &prefix.1);
                        let Node::OptFields(base, fields, end) =
                            std::mem::replace(node, Node::Const(Val::Null))
                        else {
                            unreachable!("matched above")
                        };
                        *node = Node::MemoOptFields {
                            id,
                            base,
                            fields,
                            end,
                        };
                    }
                    Pass::Rewrite => {}
                }
            }
            Node::Quantifier {
                range,
                item_slot,
                pred,
                pairs,
                ..
            } => {
                self.walk(range, pass);
                let saved = self.enter(*item_slot - 1, *pairs);
                self.walk(pred, pass);
                self.items = saved;
            }
            Node::Comprehension(c) => {
                self.walk(&mut c.range, pass);
                self.walk(&mut c.init, pass);
                let saved = self.enter(c.accu_slot, c.pairs);
                self.walk(&mut c.cond, pass);
                self.walk(&mut c.step, pass);
                // The result reads the accumulator only.
                self.items.truncate(c.accu_slot + 1);
                self.walk(&mut c.result, pass);
                self.items = saved;
            }
            // Made by this rewrite from a path: nothing under it to share.
            Node::Memo { .. } | Node::MemoHas { .. } | Node::MemoOptFields { .. } => {}
            other => for_each_child(other, &mut |child| self.walk(child, pass)),
        }
    }
}
