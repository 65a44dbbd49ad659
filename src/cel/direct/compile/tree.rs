//! The direct evaluator's plan: its nodes, the variables they read, and the
//! fixed slots of the roots every request binds.

use crate::cel::direct::functions::Func;
use crate::cel::direct::value::Val;
use crate::json_doc::Key;
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
pub(super) static EMPTY_LIST: Vec<serde_json::Value> = Vec::new();

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
pub(super) const MACRO_ACCUMULATOR: &str = "@result";
