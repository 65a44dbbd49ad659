//! The tree-walking evaluator over [`Val`]s.
//!
//! It evaluates what it can answer exactly as the cel crate's interpreter
//! would. Everything else, and every error, is [`Fail::Interpreter`]: the
//! caller runs the whole expression in the interpreter, which gives the
//! answer and the error message users have seen so far. Errors are rare on
//! admission's hot path; most expressions never leave this evaluator.

use super::compile::{BinOp, Comprehension, Node, OptEnd, OptStep, VariableRef};
use super::functions::{self, concat, contained};
use super::time;
use super::value::{Fail, List, MapVal, Val, compare, equals, put_entry};
use crate::json_doc::{Json, Key, Kind, PackedJson};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::sync::Arc;

/// What an expression's names resolve to.
pub trait Bindings<'a> {
    /// A top-level variable (`object`, `request`, `params`, ...).
    fn ident(&self, name: &str) -> Option<Val<'a>>;
    /// The root of [`KNOWN_ROOTS`](super::compile::KNOWN_ROOTS) at `index`,
    /// borrowed: a path from it starts from the object where it is held.
    fn known(&self, index: usize) -> Option<&Val<'a>>;
    /// `variables.<name>`, borrowed: a comprehension over a variable's
    /// list reads it in place (no count of its shared list taken and
    /// given back per rule).
    fn variable(&self, name: &str) -> Option<&Val<'a>>;
    /// A rule's variable by declaration ([`VariableRef::Declared`]),
    /// borrowed; only bindings that hold a rule's variables so have any.
    fn declared(&self, _index: usize) -> Option<&Val<'a>> {
        None
    }
    /// A variable whose name has dots (`a.b.c`, [`Node::Qualified`]); the
    /// environments of Kubernetes and Kyverno declare none.
    fn dotted(&self, _name: &str) -> Option<Val<'a>> {
        None
    }
    /// A policy set's request-wide value ([`Node::Shared`]), borrowed;
    /// only a set's bindings ([`super::set`]) have any.
    fn shared(&self, _index: usize) -> Option<&Val<'a>> {
        None
    }
}

/// The variable `v` names in `env`.
#[inline]
fn variable<'s, 'a>(env: &'s dyn Bindings<'a>, v: &VariableRef) -> Option<&'s Val<'a>> {
    match v {
        VariableRef::Name(name) => env.variable(name),
        VariableRef::Declared(index) => env.declared(*index),
    }
}

pub fn evaluate<'a>(node: &Node, env: &dyn Bindings<'a>, budget: i64) -> Result<Val<'a>, Fail> {
    // A constant (a variable's literal list of allowed values): no
    // evaluator set up and dropped for it.
    if let Node::Const(value) = node {
        return Ok(value.clone());
    }
    let mut evaluator = Evaluator::new(env, budget);
    let value = evaluator.eval(node);
    evaluator.answer(value)
}

/// [`evaluate`] of an expression that must give a bool (a validation, a
/// condition), answered as a `bool`: no `Val` is made and taken apart for
/// the answer. Anything but a bool is [`Fail::Interpreter`], whose answer
/// (or error) the caller then gets from the interpreter.
pub fn evaluate_bool(node: &Node, env: &dyn Bindings, budget: i64) -> Result<bool, Fail> {
    let mut evaluator = Evaluator::new(env, budget);
    let value = evaluator.eval_bool(node);
    evaluator.answer(value)
}

struct Evaluator<'e, 'a> {
    env: &'e dyn Bindings<'a>,
    /// Comprehension variables by slot.
    /// Inline: most expressions nest a comprehension or two.
    locals: SmallVec<[Val<'a>; 6]>,
    /// The values of shared path prefixes found so far ([`Node::Memo`]).
    memos: Memos<'a>,
    budget: i64,
    /// Whether a [`Node::Inlined`] variable failed: the answer is then
    /// not this evaluator's to give, whatever absorbed the failure.
    declined: bool,
    /// A policy set's fused quantifiers ([`Node::Fused`]) and their
    /// answers so far; none elsewhere.
    fusion: Option<Box<Fusion<'e, 'a>>>,
}

/// A fused quantifier's answer, and the cost its pass charged it: what
/// evaluating it where it is written would have given and charged.
#[derive(Debug, Clone)]
pub(super) struct FusedAnswer {
    answer: Result<bool, Fail>,
    cost: i64,
}

/// A quantifier of a policy set fused into a pass over its range
/// ([`super::set`]): its predicate reads the item in slot 1.
#[derive(Debug)]
pub(super) struct FusedQuantifier {
    pub pred: Node,
    /// The [`Sweep`] it is in.
    pub sweep: usize,
    pub exists: bool,
    pub weight: i64,
}

/// The quantifiers over one range ([`FusedQuantifier`], by number).
#[derive(Debug)]
pub(super) struct Sweep {
    pub range: Node,
    pub quantifiers: Vec<usize>,
}

type Out<'a> = Result<Val<'a>, Fail>;

/// Selecting `field` from a value that is not a map: cel-go's error for a
/// list, a scalar or null; anything else is the interpreter's.
fn select_from(value: &Val, field: &str) -> Fail {
    match value {
        Val::List(_) => string_index_on_list(),
        v if is_scalar(v) || matches!(v, Val::Null) => no_such_key(field),
        _ => Fail::Interpreter,
    }
}

/// cel-go's error for a field or string key of a list.
fn string_index_on_list() -> Fail {
    Fail::error("unsupported index type 'string' in list")
}

/// cel-go's error for a field a map does not have (the first missing one
/// of a path decides the message).
fn no_such_key(field: &str) -> Fail {
    Fail::error(format!("no such key: {field}"))
}

/// A string, number or bool: what cel-go selects no field from (an error,
/// none for `.?`, false for `has()`), and the interpreter answers wrongly.
fn is_scalar(value: &Val) -> bool {
    matches!(
        value,
        Val::Str(_) | Val::Int(_) | Val::Uint(_) | Val::Double(_) | Val::Bool(_)
    )
}

/// `at.field`: a map's value under it, else cel-go's error.
#[inline]
fn select<'a>(at: Val<'a>, field: &Key) -> Result<Val<'a>, Fail> {
    match at {
        Val::Map(m) => m.get_key(field).ok_or_else(|| no_such_key(field.as_str())),
        other => Err(select_from(&other, field.as_str())),
    }
}

/// `has(at.field)`.
#[inline]
fn has(at: &Val, field: &Key) -> Result<bool, Fail> {
    match at {
        Val::Map(m) => Ok(m.contains_key(field)),
        // cel-go: `has()` of a scalar's or null's field is false, of a
        // list's an error.
        other if is_scalar(other) || matches!(other, Val::Null) => Ok(false),
        Val::List(_) => Err(string_index_on_list()),
        _ => Err(Fail::Interpreter),
    }
}

fn truth(v: &Val) -> Result<bool, Fail> {
    match v {
        Val::Bool(b) => Ok(*b),
        _ => Err(Fail::Interpreter),
    }
}

impl<'e, 'a> Evaluator<'e, 'a> {
    fn new(env: &'e dyn Bindings<'a>, budget: i64) -> Self {
        Evaluator {
            env,
            locals: SmallVec::new(),
            memos: Memos::default(),
            budget,
            declined: false,
            fusion: None,
        }
    }

    /// `out`, unless an inlined variable failed on the way.
    fn answer<T>(&self, out: Result<T, Fail>) -> Result<T, Fail> {
        match self.declined {
            true => Err(Fail::Interpreter),
            false => out,
        }
    }

    /// Marks the evaluation declined: a [`Node::Inlined`] variable failed
    /// or gave a value only the interpreter holds.
    #[cold]
    fn decline(&mut self) {
        self.declined = true;
    }

    /// A policy set's request-wide value. One that could not be found
    /// declines the evaluation, as a rule's variable that fails to
    /// evaluate does (`||` must not absorb it here).
    fn shared(&mut self, index: usize) -> Result<&'e Val<'a>, Fail> {
        let env = self.env;
        match env.shared(index) {
            Some(value) => Ok(value),
            None => {
                self.decline();
                Err(Fail::Interpreter)
            }
        }
    }
}

/// The memos of one evaluation: the value each shared path prefix was
/// found to have, by memo id.
///
/// Made and dropped for every expression evaluated, so both are cheap: the
/// ids index a byte table zeroed in a store or two, and only the values
/// found are held (and dropped). A vector of `Option<Val>` per id cost the
/// CEL Pod Security set 4% of its evaluation to fill with `None` and drop.
struct Memos<'a> {
    /// By memo id: 0 while unknown, else the value's position in `found`
    /// plus one. An id past the table is never memoised (its path is
    /// walked each time), as is a value past 255 found.
    slots: [u8; MEMO_SLOTS],
    /// How many leading slots were ever set: what a rewind scans.
    used: usize,
    found: SmallVec<[Val<'a>; 6]>,
}

/// Memo ids an evaluation holds. A path whose id is past them is walked
/// each time instead (answering the same), so the bound costs speed, never
/// an answer.
const MEMO_SLOTS: usize = 64;

impl Default for Memos<'_> {
    fn default() -> Self {
        Memos {
            slots: [0; MEMO_SLOTS],
            used: 0,
            found: SmallVec::new(),
        }
    }
}

impl<'a> Memos<'a> {
    fn get(&self, id: u32) -> Option<&Val<'a>> {
        match self.slots.get(id as usize)? {
            0 => None,
            at => self.found.get(*at as usize - 1),
        }
    }

    fn remember(&mut self, id: u32, value: Val<'a>) {
        if let Some(slot) = self.slots.get_mut(id as usize)
            && let Ok(at) = u8::try_from(self.found.len() + 1)
        {
            self.found.push(value);
            *slot = at;
            self.used = self.used.max(id as usize + 1);
        }
    }

    /// Where a comprehension starts: what [`Memos::rewind`] returns to.
    fn mark(&self) -> usize {
        self.found.len()
    }

    /// Forgets every memo found since `mark`, at each item of a
    /// comprehension. The memos of the item's paths were all found since
    /// then (the item was not bound before), so none outlives its item;
    /// a path from outside found since then is only walked again. A
    /// comprehension run again (in an outer one's predicate) was started
    /// after the outer one's mark, so the outer one's next item forgets
    /// all it found. Forgetting this way also bounds what a long list
    /// keeps to one item's memos.
    fn rewind(&mut self, mark: usize) {
        if self.found.len() > mark {
            self.found.truncate(mark);
            for slot in &mut self.slots[..self.used] {
                if *slot as usize > mark {
                    *slot = 0;
                }
            }
        }
    }
}

impl<'e, 'a> Evaluator<'e, 'a> {
    fn eval(&mut self, n: &Node) -> Out<'a> {
        match n {
            Node::Const(v) => Ok(v.clone()),
            Node::Ident(name) => self.env.ident(name).ok_or(Fail::Interpreter),
            Node::Qualified { names, or_else } => {
                for (name, rest) in names {
                    if let Some(mut at) = self.env.dotted(name) {
                        for field in rest {
                            at = select(at, field)?;
                        }
                        return Ok(at);
                    }
                }
                self.eval(or_else)
            }
            Node::Known(index) => self.env.known(*index).cloned().ok_or(Fail::Interpreter),
            Node::Local(slot) => Ok(self.locals[*slot].clone()),
            Node::Variable(v) => variable(self.env, v).cloned().ok_or(Fail::Interpreter),
            Node::HasVariable(v) => Ok(Val::Bool(variable(self.env, v).is_some())),
            Node::Inlined(x) => {
                let value = self.eval(x);
                if matches!(value, Err(_) | Ok(Val::Foreign(_))) {
                    self.decline();
                }
                value
            }
            Node::Path { base, fields, test } => {
                let (last, walk) = fields.split_last().ok_or(Fail::Interpreter)?;
                let at = self.walk(base, walk)?;
                if *test {
                    has(&at, last).map(Val::Bool)
                } else {
                    select(at, last)
                }
            }
            Node::Memo { id, base, field } => {
                if let Some(known) = self.memos.get(*id) {
                    return Ok(known.clone());
                }
                let found = match self.peek_doc(base) {
                    Some(j) => j
                        .get_key(field)
                        .map(Val::from_doc)
                        .ok_or_else(|| no_such_key(field.as_str()))?,
                    None => select(self.eval(base)?, field)?,
                };
                self.memos.remember(*id, found.clone());
                Ok(found)
            }
            Node::MemoHas { id, base, field } => self.memo_has(*id, base, field).map(Val::Bool),
            Node::Shared(index) => self.shared(*index).cloned(),
            Node::Fused(index) => self.fused_answer(*index).map(Val::Bool),
            Node::OptSelect(operand, field) => {
                let Some(target) = self.eval(operand)?.through_optional() else {
                    return Ok(Val::Optional(None));
                };
                match target {
                    Val::Map(m) => Ok(Val::Optional(m.get_key(field).map(Arc::new))),
                    // kyverno-compat (as the interpreter's library): a
                    // JSON null selects to none; so does a scalar (cel-go).
                    Val::Null => Ok(Val::Optional(None)),
                    other if is_scalar(&other) => Ok(Val::Optional(None)),
                    Val::List(_) => Err(string_index_on_list()),
                    _ => Err(Fail::Interpreter),
                }
            }
            Node::OptIndex(operand, index) => {
                let target = self.eval(operand)?.through_optional();
                // The key is evaluated (and its error kept) even when the
                // target is none, as the interpreter evaluates every
                // argument (found by the `cel` fuzz target).
                let key = self.eval(index)?;
                let Some(target) = target else {
                    return Ok(Val::Optional(None));
                };
                match (target, &key) {
                    (Val::Map(m), _) => m
                        .get(&key)
                        .map(|v| Val::Optional(v.map(Arc::new)))
                        .map_err(|_| Fail::Interpreter),
                    (Val::List(l), Val::Int(i)) => Ok(Val::Optional(
                        usize::try_from(*i)
                            .ok()
                            .and_then(|i| l.get(i))
                            .map(Arc::new),
                    )),
                    (Val::List(_), Val::Str(_)) => Err(string_index_on_list()),
                    (Val::Null, _) => Ok(Val::Optional(None)),
                    _ => Err(Fail::Interpreter),
                }
            }
            Node::Index(operand, index) => {
                let target = self.eval(operand)?;
                let key = self.eval(index)?;
                match (&target, &key) {
                    (Val::List(l), Val::Int(i)) => usize::try_from(*i)
                        .ok()
                        .and_then(|i| l.get(i))
                        .ok_or(Fail::Interpreter),
                    (Val::List(l), Val::Uint(i)) => l.get(*i as usize).ok_or(Fail::Interpreter),
                    // cel-go indexes a list by a double with no fraction
                    // (`[7, 8][dyn(0.0)]`); any other is its error, which
                    // the interpreter gives.
                    (Val::List(l), Val::Double(d)) if d.fract() == 0.0 && *d >= 0.0 => {
                        l.get(*d as usize).ok_or(Fail::Interpreter)
                    }
                    (
                        Val::Map(m),
                        Val::Str(_) | Val::Int(_) | Val::Uint(_) | Val::Bool(_) | Val::Double(_),
                    ) => m.get(&key).ok().flatten().ok_or(Fail::Interpreter),
                    _ => Err(Fail::Interpreter),
                }
            }
            // CEL's logical operators are commutative over errors: `false
            // && error` and `error && false` are both false (cel-go's
            // semantics, which Kubernetes and Kyverno evaluate with). A
            // side this evaluator cannot answer counts as an error: the
            // other side may still decide; if not, the interpreter does.
            Node::And(l, r) => self.logical(l, r, false).map(Val::Bool),
            Node::Or(l, r) => self.logical(l, r, true).map(Val::Bool),
            Node::All(operands) => self.logical_n(operands, false).map(Val::Bool),
            Node::Any(operands) => self.logical_n(operands, true).map(Val::Bool),
            Node::Not(x) => Ok(Val::Bool(!self.eval_bool(x)?)),
            // `@not_strictly_false`: only a false bool is false.
            Node::NotStrictlyFalse(x) => Ok(Val::Bool(!matches!(self.eval(x)?, Val::Bool(false)))),
            Node::Cond(parts) => {
                let [c, a, b] = &**parts;
                if self.eval_bool(c)? {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            // `x in variables.<list>`: the list read where the bindings
            // hold it, not copied for every item tested.
            Node::Binary(BinOp::In, l, r) if let Node::Variable(v) = &**r => {
                self.in_variable(l, v).map(Val::Bool)
            }
            Node::Binary(op, l, r) => {
                let l = self.eval(l)?;
                let r = self.eval(r)?;
                binary(*op, l, r)
            }
            Node::EqConst {
                x,
                constant,
                eq,
                constant_left,
            } => self
                .eq_const(x, constant, *eq, *constant_left)
                .map(Val::Bool),
            Node::InConst(x, constant) => Ok(Val::Bool(contained(&self.eval(x)?, constant)?)),
            Node::AppendAccu(slot, r) => {
                let r = self.eval(r)?;
                let accu = std::mem::replace(&mut self.locals[*slot], Val::Null);
                match (accu, r) {
                    (Val::List(l), Val::List(r)) => Ok(Val::List(concat(l, &r))),
                    (accu, r) => binary(BinOp::Add, accu, r),
                }
            }
            Node::Neg(x) => match self.eval(x)? {
                Val::Int(i) => i.checked_neg().map(Val::Int).ok_or(Fail::Interpreter),
                Val::Double(d) => Ok(Val::Double(-d)),
                _ => Err(Fail::Interpreter),
            },
            Node::List(elements, optional) => {
                let mut items = Vec::with_capacity(elements.len());
                for (i, e) in elements.iter().enumerate() {
                    let v = self.eval(e)?;
                    if optional.contains(&i) {
                        match v {
                            Val::Optional(None) => {}
                            Val::Optional(Some(v)) => items.push(Arc::unwrap_or_clone(v)),
                            v => items.push(v),
                        }
                    } else {
                        items.push(v);
                    }
                }
                Ok(Val::list(items))
            }
            Node::Map(entries) => {
                let mut out: Vec<(Val<'a>, Val<'a>)> = Vec::with_capacity(entries.len());
                for (k, v, optional) in entries {
                    let key = self.eval(k)?;
                    if !key.is_map_key() {
                        return Err(Fail::Interpreter);
                    }
                    let value = match self.eval(v)? {
                        Val::Optional(None) if *optional => continue,
                        Val::Optional(Some(v)) if *optional => Arc::unwrap_or_clone(v),
                        v => v,
                    };
                    put_entry(&mut out, key, value);
                }
                Ok(Val::Map(MapVal::Owned(Arc::new(out))))
            }
            Node::Comprehension(c) => self.comprehension(c),
            Node::Quantifier { .. } => self.eval_bool(n).map(Val::Bool),
            Node::Tick(step, weight) => {
                self.budget -= weight;
                if self.budget < 0 {
                    return Err(Fail::CostLimit);
                }
                self.eval(step)
            }
            Node::Call(func, args) => {
                // No function here takes more than two arguments (counting
                // a method's receiver): no allocation for them.
                let mut values = [Val::Null, Val::Null];
                for (slot, a) in values.iter_mut().zip(args) {
                    *slot = self.eval(a)?;
                }
                functions::call(*func, &mut values[..args.len()])
            }
            Node::OptPath(base, steps, end) => {
                let found = self.opt_path(base, steps)?;
                self.opt_end(found, end)
            }
            Node::OptFields(base, fields, end) => {
                let found = self.opt_fields(base, fields)?;
                self.opt_end(found, end)
            }
            Node::MemoOptFields {
                id,
                base,
                fields,
                end,
            } => {
                let found = match self.memo_doc_opt_fields(*id, base, fields) {
                    Some(end) => end.into_result()?,
                    None => self.opt_fields(base, fields)?,
                };
                self.opt_end(found, end)
            }
            Node::Matches(target, re) => match self.eval(target)? {
                Val::Str(s) => Ok(Val::Bool(re.is_match(s.as_str()))),
                _ => Err(Fail::Interpreter),
            },
        }
    }

    /// What ends an optional chain, given the value it found.
    #[inline]
    fn opt_end(&mut self, found: Option<Val<'a>>, end: &OptEnd) -> Out<'a> {
        match end {
            OptEnd::HasValue => Ok(Val::Bool(found.is_some())),
            OptEnd::OrValue(default) => match found {
                Some(v) => Ok(v),
                None => self.eval(default),
            },
        }
    }

    /// The JSON object `base` holds, when it is a value this evaluator
    /// already has (a comprehension variable, a memo found, a root) and that value
    /// is an object of the decoded document: read where it is held, where
    /// evaluating `base` would copy the value out and drop it again.
    ///
    /// A path of fields from such a value (`object.spec`, a memo not found
    /// yet) is walked key by key in the document, where evaluating it
    /// would make a value of each step: the ranges of a policy set's
    /// passes and its request-wide lists start from `object.spec`.
    #[inline]
    fn peek_doc(&mut self, base: &Node) -> Option<Json<'a>> {
        let held = match base {
            Node::Local(slot) => self.locals.get(*slot)?,
            Node::Memo { id, base, field } => match self.memos.get(*id) {
                Some(held) => held,
                None => return self.peek_memo(*id, base, field),
            },
            Node::Known(index) => self.env.known(*index)?,
            Node::Shared(index) => self.env.shared(*index)?,
            Node::Path {
                base,
                fields,
                test: false,
            } => return self.peek_doc_walked(base, fields),
            _ => return None,
        };
        match held {
            Val::Map(MapVal::Doc(j)) => Some(j.json()),
            _ => None,
        }
    }

    /// [`Evaluator::peek_doc`] of `base.fields`: the object found when
    /// every step is an object of the document that has the next field.
    /// Anything else (a missing field, an error) is for evaluating the
    /// path to answer.
    #[inline(never)]
    fn peek_doc_walked(&mut self, base: &Node, fields: &[Key]) -> Option<Json<'a>> {
        let mut at = self.peek_doc(base)?;
        for field in fields {
            at = at.get_key(field)?;
            if !at.is_object() {
                return None;
            }
        }
        Some(at)
    }

    /// [`Evaluator::peek_doc`] of memo `id`, not found yet: the field
    /// looked up in its base's object and kept in the memo, as evaluating
    /// the memo keeps it, so that the next read finds it there (a set's
    /// request-wide lists each read `object.spec` three times).
    #[inline(never)]
    fn peek_memo(&mut self, id: u32, base: &Node, field: &Key) -> Option<Json<'a>> {
        self.find_memo(id, base, field).filter(|j| j.is_object())
    }

    /// Memo `id`'s value (`base.field`, any kind) found in the document
    /// from its peeked base and kept in the memo; `None` where the base is
    /// no object of the document or lacks the field.
    fn find_memo(&mut self, id: u32, base: &Node, field: &Key) -> Option<Json<'a>> {
        let found = self.peek_doc(base)?.get_key(field)?;
        self.memos.remember(id, Val::from_doc(found));
        Some(found)
    }

    /// [`Node::MemoOptFields`] walked in the decoded document: from memo
    /// `id`'s value when it was found, else from `base`, keeping the first
    /// step's value in the memo. `None` where either is not an object of
    /// the document ([`Evaluator::opt_fields`] answers then).
    #[inline]
    fn memo_doc_opt_fields(&mut self, id: u32, base: &Node, fields: &[Key]) -> Option<DocEnd<'a>> {
        let (first, rest) = fields.split_first()?;
        if let Some(held) = self.memos.get(id) {
            return match held {
                Val::Map(MapVal::Doc(j)) => Some(doc_opt_fields(j.json(), rest, 1)),
                _ => None,
            };
        }
        let j = self.peek_doc(base)?;
        if !j.is_object() {
            return None;
        }
        Some(match j.get_key(first) {
            Some(found) => {
                self.memos.remember(id, Val::from_doc(found));
                doc_opt_fields(found, rest, 1)
            }
            None => DocEnd::Missing,
        })
    }

    /// [`Evaluator::opt_path`] of a chain of fields alone: the same answers,
    /// walked in the decoded document from the first object of it on.
    fn opt_fields(&mut self, base: &Node, fields: &[Key]) -> Result<Option<Val<'a>>, Fail> {
        if let Some(j) = self.peek_doc(base) {
            return doc_opt_fields(j, fields, 0).into_result();
        }
        let mut at = self.eval(base)?.through_optional();
        for (n, field) in fields.iter().enumerate() {
            let Some(current) = at.take() else {
                return Ok(None);
            };
            at = match current {
                Val::Map(MapVal::Doc(j)) => {
                    return doc_opt_fields(j.json(), &fields[n..], n).into_result();
                }
                other => opt_field(other, field, n == 0)?,
            };
            if matches!(at, Some(Val::Optional(_))) {
                return Err(Fail::Interpreter);
            }
        }
        Ok(at)
    }

    /// The value at the end of an optional chain, `None` where a step finds
    /// nothing; as the interpreter's `_?._` and `_[?_]` step by step.
    fn opt_path(&mut self, base: &Node, steps: &[OptStep]) -> Result<Option<Val<'a>>, Fail> {
        let mut at = self.eval(base)?.through_optional();
        for (n, step) in steps.iter().enumerate() {
            // Keys are evaluated even past a missing step, as the
            // interpreter evaluates every argument.
            let key = match step {
                OptStep::Index(k) => Some(self.eval(k)?),
                OptStep::Field(_) => None,
            };
            let Some(current) = at.take() else {
                continue;
            };
            at = match (step, current, &key) {
                (OptStep::Field(f), current, _) => opt_field(current, f, n == 0)?,
                (OptStep::Index(_), Val::Map(m), Some(k)) => {
                    m.get(k).map_err(|_| Fail::Interpreter)?
                }
                (OptStep::Index(_), Val::List(l), Some(Val::Int(i))) => {
                    usize::try_from(*i).ok().and_then(|i| l.get(i))
                }
                (OptStep::Index(_), Val::Null, _) => None,
                _ => return Err(Fail::Interpreter),
            };
            // An optional held inside a value: the interpreter's nesting.
            if matches!(at, Some(Val::Optional(_))) {
                return Err(Fail::Interpreter);
            }
        }
        Ok(at)
    }

    /// `n` where a bool is wanted (a condition, an operand of a logical
    /// operator, a predicate): answered as `truth(eval(n))`, without a
    /// value made and dropped for the common boolean nodes.
    fn eval_bool(&mut self, n: &Node) -> Result<bool, Fail> {
        match n {
            Node::And(l, r) => self.logical(l, r, false),
            Node::Or(l, r) => self.logical(l, r, true),
            Node::All(operands) => self.logical_n(operands, false),
            Node::Any(operands) => self.logical_n(operands, true),
            // `!has(c.a.b)`, the guard of nearly every `validate.cel` Pod
            // Security check: tested here, one call less deep.
            Node::Not(x) => match &**x {
                Node::MemoHas { id, base, field } => Ok(!self.memo_has(*id, base, field)?),
                x => Ok(!self.eval_bool(x)?),
            },
            Node::Path {
                base,
                fields,
                test: true,
            } => {
                let (last, walk) = fields.split_last().ok_or(Fail::Interpreter)?;
                has(&self.walk(base, walk)?, last)
            }
            Node::MemoHas { id, base, field } => self.memo_has(*id, base, field),
            Node::EqConst {
                x,
                constant,
                eq,
                constant_left,
            } => self.eq_const(x, constant, *eq, *constant_left),
            // Answered as bools: a `Val::Bool` made, returned through
            // memory and taken apart again costs a stall on the way back.
            Node::InConst(x, constant) => contained(&self.eval(x)?, constant),
            Node::Binary(BinOp::In, l, r) if let Node::Variable(v) = &**r => self.in_variable(l, v),
            Node::HasVariable(v) => Ok(variable(self.env, v).is_some()),
            Node::Variable(v) => truth(variable(self.env, v).ok_or(Fail::Interpreter)?),
            Node::Inlined(x) => {
                let value = self.eval_bool(x);
                if value.is_err() {
                    self.decline();
                }
                value
            }
            Node::Quantifier {
                range,
                item_slot,
                pred,
                exists,
                weight,
                pairs,
            } => self.quantifier(range, *item_slot, pred, *exists, *weight, *pairs),
            Node::Fused(index) => self.fused_answer(*index),
            other => truth(&self.eval(other)?),
        }
    }

    /// `base.f1.f2...` selected field by field.
    #[inline]
    fn walk(&mut self, base: &Node, fields: &[Key]) -> Out<'a> {
        let (mut at, rest) = match self.peek_doc(base) {
            Some(mut j) => {
                // Key by key in the document while the path finds objects;
                // a value that is not one answers (or errs) as a `Val`.
                let mut rest = fields;
                while let [field, tail @ ..] = rest
                    && j.is_object()
                {
                    j = j
                        .get_key(field)
                        .ok_or_else(|| no_such_key(field.as_str()))?;
                    rest = tail;
                }
                (Val::from_doc(j), rest)
            }
            None => (self.eval(base)?, fields),
        };
        for field in rest {
            at = select(at, field)?;
        }
        Ok(at)
    }

    /// `x == constant` (`eq`) or `x != constant`, the operands in their
    /// written order.
    #[inline]
    fn eq_const(
        &mut self,
        x: &Node,
        constant: &Val,
        eq: bool,
        constant_left: bool,
    ) -> Result<bool, Fail> {
        // `a.?b.?c.orValue(d) == constant` from a document object: the
        // value found is compared where it lies, never made a `Val` and
        // returned through memory.
        let walked = match x {
            Node::OptFields(base, fields, OptEnd::OrValue(default))
                if let Node::Const(default) = &**default =>
            {
                self.peek_doc(base)
                    .map(|j| (doc_opt_fields(j, fields, 0), default))
            }
            Node::MemoOptFields {
                id,
                base,
                fields,
                end: OptEnd::OrValue(default),
            } if let Node::Const(default) = &**default => self
                .memo_doc_opt_fields(*id, base, fields)
                .map(|end| (end, default)),
            _ => None,
        };
        let same = match walked {
            Some((DocEnd::Found(j), _)) => doc_equals(j.json(), constant),
            Some((DocEnd::Missing, default)) => equals(default, constant),
            Some((DocEnd::Interpreter, _)) => return Err(Fail::Interpreter),
            None => {
                let found = self.eval(x)?;
                match constant_left {
                    false => equals(&found, constant),
                    true => equals(constant, &found),
                }
            }
        };
        Ok(same.ok_or(Fail::Interpreter)? == eq)
    }

    /// `has()` of a memo's path: true when the memo holds a value; else
    /// the test, which fills the memo when it finds the field.
    fn memo_has(&mut self, id: u32, base: &Node, field: &Key) -> Result<bool, Fail> {
        if self.memos.get(id).is_some() {
            return Ok(true);
        }
        if let Some(j) = self.peek_doc(base) {
            return Ok(match j.get_key(field) {
                Some(found) => {
                    self.memos.remember(id, Val::from_doc(found));
                    true
                }
                None => false,
            });
        }
        match self.eval(base)? {
            Val::Map(m) => Ok(match m.get_key(field) {
                Some(found) => {
                    self.memos.remember(id, found);
                    true
                }
                None => false,
            }),
            other => has(&other, field),
        }
    }

    /// `l && r` (`decides` false) or `l || r` (`decides` true).
    fn logical(&mut self, l: &Node, r: &Node, decides: bool) -> Result<bool, Fail> {
        let left = self.eval_bool(l);
        match left {
            Ok(b) if b == decides => return Ok(decides),
            Err(Fail::CostLimit) => return Err(Fail::CostLimit),
            _ => {}
        }
        let right = self.eval_bool(r);
        match (left, right) {
            (_, Ok(b)) if b == decides => Ok(decides),
            (_, Err(Fail::CostLimit)) => Err(Fail::CostLimit),
            (Ok(_), Ok(b)) => Ok(b),
            // Neither side decides: an error stands (the left one first),
            // unless a side is one only the interpreter can answer.
            (Err(Fail::Interpreter), _) | (_, Err(Fail::Interpreter)) => Err(Fail::Interpreter),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// [`Evaluator::logical`] of three or more operands: the first that
    /// decides, decides; else an error stands (one the interpreter must
    /// answer first, then the leftmost), as the pairs would answer.
    fn logical_n(&mut self, operands: &[Node], decides: bool) -> Result<bool, Fail> {
        let mut pending: Option<Fail> = None;
        for operand in operands {
            match self.eval_bool(operand) {
                Ok(b) if b == decides => return Ok(decides),
                Ok(_) => {}
                Err(Fail::CostLimit) => return Err(Fail::CostLimit),
                Err(e) => {
                    if pending.is_none() || e == Fail::Interpreter {
                        pending = Some(e);
                    }
                }
            }
        }
        match pending {
            Some(e) => Err(e),
            None => Ok(!decides),
        }
    }

    /// `all` (stops at the first false) or `exists` (at the first true);
    /// the accumulator slot holds nothing, the item sits above it (with
    /// `pairs`, the index or key, and the item or value above that).
    fn quantifier(
        &mut self,
        range: &Node,
        item_slot: usize,
        pred: &Node,
        exists: bool,
        weight: i64,
        pairs: bool,
    ) -> Result<bool, Fail> {
        let range = self.range(range)?;
        let range = range.get();
        let mark = self.memos.mark();
        self.locals.truncate(item_slot - 1);
        self.locals.push(Val::Null);
        self.locals.push(Val::Null);
        if pairs {
            self.locals.push(Val::Null);
        }
        let test = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            this.budget -= weight;
            if this.budget < 0 {
                return Err(Fail::CostLimit);
            }
            this.locals[item_slot] = item;
            this.memos.rewind(mark);
            this.eval_bool(pred)
        };
        // As `&&`/`||` (the macros' accumulators are built on them): an item
        // that errors does not decide; a later item may (`all` is false
        // when any item is false, whatever the others give).
        let mut decided = false;
        // The first item's error; an item only the interpreter can answer
        // outranks it (it may be the one that decides).
        let mut pending: Option<Fail> = None;
        let mut visit = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            match test(this, item) {
                Ok(b) if b == exists => {
                    decided = true;
                    Ok(true)
                }
                Ok(_) => Ok(false),
                Err(Fail::CostLimit) => Err(Fail::CostLimit),
                Err(e) => {
                    if pending.is_none() || e == Fail::Interpreter {
                        pending = Some(e);
                    }
                    Ok(false)
                }
            }
        };
        match pairs {
            false => self.each_item(range, visit)?,
            true => self.each_pair(range, |this, key, value| {
                this.locals[item_slot + 1] = value;
                visit(this, key)
            })?,
        }
        self.locals.truncate(item_slot - 1);
        if !decided && let Some(e) = pending {
            return Err(e);
        }
        Ok(if decided { exists } else { !exists })
    }

    /// `x in variables.<name>`: the list read where the bindings hold it,
    /// not copied for every item tested.
    fn in_variable(&mut self, x: &Node, v: &VariableRef) -> Result<bool, Fail> {
        let env = self.env;
        let x = self.eval(x)?;
        contained(&x, variable(env, v).ok_or(Fail::Interpreter)?)
    }

    /// A comprehension's range: a variable's value read where the
    /// bindings hold it (most ranges are `variables.<list>`), any other
    /// evaluated.
    fn range(&mut self, n: &Node) -> Result<Range<'e, 'a>, Fail> {
        let env = self.env;
        match n {
            Node::Variable(v) => variable(env, v)
                .map(Range::Borrowed)
                .ok_or(Fail::Interpreter),
            Node::Shared(index) => self.shared(*index).map(Range::Borrowed),
            other => self.eval(other).map(Range::Owned),
        }
    }

    fn comprehension(&mut self, c: &Comprehension) -> Out<'a> {
        let range = self.range(&c.range)?;
        let range = range.get();
        let init = self.eval(&c.init)?;
        let mark = self.memos.mark();
        let slot = c.accu_slot;
        self.locals.truncate(slot);
        self.locals.push(init);
        self.locals.push(Val::Null);
        if c.pairs {
            self.locals.push(Val::Null);
        }
        let step = |this: &mut Self, item: Val<'a>| -> Result<bool, Fail> {
            if !this.eval_bool(&c.cond)? {
                return Ok(false);
            }
            this.locals[slot + 1] = item;
            this.memos.rewind(mark);
            let accu = this.eval(&c.step)?;
            this.locals[slot] = accu;
            Ok(true)
        };
        match c.pairs {
            false => self.each_item(range, |this, item| step(this, item).map(|more| !more))?,
            true => self.each_pair(range, |this, key, value| {
                this.locals[slot + 2] = value;
                step(this, key).map(|more| !more)
            })?,
        }
        self.locals.truncate(slot + 1);
        let result = self.eval(&c.result);
        self.locals.truncate(slot);
        result
    }
}

impl<'a> Evaluator<'_, 'a> {
    /// Calls `visit` on each item of `range` (a list's items, a map's
    /// keys) until it answers true; cel-go's error for anything else. One
    /// loop per form, so that no item pays a dispatch on it.
    #[inline(always)]
    fn each_item(
        &mut self,
        range: &Val<'a>,
        mut visit: impl FnMut(&mut Self, Val<'a>) -> Result<bool, Fail>,
    ) -> Result<(), Fail> {
        match range {
            Val::List(List::Value(items)) => {
                for item in items.iter() {
                    if visit(self, Val::from_json(item))? {
                        break;
                    }
                }
            }
            Val::List(List::Doc(items)) => {
                for item in items.json().elements() {
                    if visit(self, Val::from_doc(item))? {
                        break;
                    }
                }
            }
            Val::List(List::Owned(items)) => {
                for item in items.iter() {
                    if visit(self, item.clone())? {
                        break;
                    }
                }
            }
            Val::Map(m) => {
                for key in m.keys() {
                    if visit(self, key)? {
                        break;
                    }
                }
            }
            other => return Err(not_iterable(other)),
        }
        Ok(())
    }

    /// [`Evaluator::each_item`] for the two-variable macros: a list's
    /// indexes with its items, a map's keys with their values.
    fn each_pair(
        &mut self,
        range: &Val<'a>,
        mut visit: impl FnMut(&mut Self, Val<'a>, Val<'a>) -> Result<bool, Fail>,
    ) -> Result<(), Fail> {
        match range {
            Val::List(items) => {
                for (index, item) in items.iter().enumerate() {
                    if visit(self, Val::Int(index as i64), item)? {
                        break;
                    }
                }
            }
            Val::Map(m) => {
                for (key, value) in m.entries() {
                    if visit(self, key, value)? {
                        break;
                    }
                }
            }
            other => return Err(not_iterable(other)),
        }
        Ok(())
    }
}

/// [`equals`] of a value of the document and a constant: a bool, a
/// string or null compared where it lies; any other made a `Val` first.
/// Equality is symmetric, so the operands' order does not matter.
#[inline]
fn doc_equals(found: Json, constant: &Val) -> Option<bool> {
    match (found.kind(), constant) {
        (Kind::Bool(a), Val::Bool(b)) => Some(a == *b),
        (Kind::Str(a), Val::Str(b)) => Some(crate::text::same(a, b.as_str())),
        (Kind::Null, Val::Null) => Some(true),
        _ => equals(&Val::from_doc(found), constant),
    }
}

/// One `.?field` step of an optional chain from `current` (`first`: the
/// chain's first step). A field of null is none, as is a scalar's at the
/// first step (cel-go: a later step selects from the value an optional
/// holds); a list's is the interpreter's to answer.
fn opt_field<'a>(current: Val<'a>, field: &Key, first: bool) -> Result<Option<Val<'a>>, Fail> {
    match current {
        Val::Map(m) => Ok(m.get_key(field)),
        Val::Null => Ok(None),
        other if first && is_scalar(&other) => Ok(None),
        _ => Err(Fail::Interpreter),
    }
}

/// The rest of an optional chain of fields from `at`, its step `first`
/// on: each step a key lookup in the document, answered as [`opt_field`]
/// answers it.
fn doc_opt_fields<'a>(mut at: Json<'a>, fields: &[Key], first: usize) -> DocEnd<'a> {
    for (n, field) in (first..).zip(fields) {
        if at.is_object() {
            match at.get_key(field) {
                Some(next) => at = next,
                None => return DocEnd::Missing,
            }
        } else if at.is_null() || (n == 0 && !at.is_array()) {
            return DocEnd::Missing;
        } else {
            return DocEnd::Interpreter;
        }
    }
    DocEnd::Found(at.into())
}

/// Where an optional chain of fields walked in the document ends. Two
/// words (the packed value's spare byte holds the tag), so it is returned
/// in registers: a `Result<Option<Val>, _>` goes through memory, and
/// reading it back in wider loads than it was written in stalls.
enum DocEnd<'a> {
    Found(PackedJson<'a>),
    Missing,
    /// A step the interpreter answers (a list's field, a scalar's past
    /// the chain's first step).
    Interpreter,
}

impl<'a> DocEnd<'a> {
    fn into_result(self) -> Result<Option<Val<'a>>, Fail> {
        match self {
            DocEnd::Found(j) => Ok(Some(Val::from_doc(j.json()))),
            DocEnd::Missing => Ok(None),
            DocEnd::Interpreter => Err(Fail::Interpreter),
        }
    }
}

/// A comprehension's range: borrowed from the bindings, or evaluated.
enum Range<'e, 'a> {
    Borrowed(&'e Val<'a>),
    Owned(Val<'a>),
}

impl<'a> Range<'_, 'a> {
    fn get(&self) -> &Val<'a> {
        match self {
            Range::Borrowed(v) => v,
            Range::Owned(v) => v,
        }
    }
}

/// cel-go's error for a comprehension over a value that is neither a list
/// nor a map (`got 'types.String', expected iterable type`).
fn not_iterable(range: &Val) -> Fail {
    match range.go_type_name() {
        Some(t) => Fail::error(format!("got '{t}', expected iterable type")),
        None => Fail::Interpreter,
    }
}

fn binary<'a>(op: BinOp, l: Val<'a>, r: Val<'a>) -> Out<'a> {
    use Val::*;
    Ok(match op {
        BinOp::Eq | BinOp::Ne => {
            // Numbers compare across types, as in the interpreter's `@eq`.
            let eq = equals(&l, &r).ok_or(Fail::Interpreter)?;
            Bool(eq == (op == BinOp::Eq))
        }
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            if std::mem::discriminant(&l) != std::mem::discriminant(&r) {
                return Err(Fail::Interpreter);
            }
            let o = compare(&l, &r).map_err(|_| Fail::Interpreter)?;
            Bool(match op {
                BinOp::Lt => o == Ordering::Less,
                BinOp::Le => o != Ordering::Greater,
                BinOp::Gt => o == Ordering::Greater,
                _ => o != Ordering::Less,
            })
        }
        BinOp::In => Bool(contained(&l, &r)?),
        BinOp::Add => match (l, r) {
            (Int(a), Int(b)) => Int(a.checked_add(b).ok_or(Fail::Interpreter)?),
            (Uint(a), Uint(b)) => Uint(a.checked_add(b).ok_or(Fail::Interpreter)?),
            (Double(a), Double(b)) => Double(a + b),
            (Str(a), Str(b)) => {
                let mut s = String::with_capacity(a.as_str().len() + b.as_str().len());
                s.push_str(a.as_str());
                s.push_str(b.as_str());
                Val::string(s)
            }
            (List(a), List(b)) => List(concat(a, &b)),
            (l, r) => return time::add(&l, &r).unwrap_or(Err(Fail::Interpreter)),
        },
        BinOp::Sub => match (l, r) {
            (Int(a), Int(b)) => Int(a.checked_sub(b).ok_or(Fail::Interpreter)?),
            (Uint(a), Uint(b)) => Uint(a.checked_sub(b).ok_or(Fail::Interpreter)?),
            (Double(a), Double(b)) => Double(a - b),
            (l, r) => return time::sub(&l, &r).unwrap_or(Err(Fail::Interpreter)),
        },
        BinOp::Mul => match (l, r) {
            (Int(a), Int(b)) => Int(a.checked_mul(b).ok_or(Fail::Interpreter)?),
            (Uint(a), Uint(b)) => Uint(a.checked_mul(b).ok_or(Fail::Interpreter)?),
            (Double(a), Double(b)) => Double(a * b),
            _ => return Err(Fail::Interpreter),
        },
        BinOp::Div => match (l, r) {
            (Int(a), Int(b)) => Int(a.checked_div(b).ok_or(Fail::Interpreter)?),
            (Uint(a), Uint(b)) => Uint(a.checked_div(b).ok_or(Fail::Interpreter)?),
            (Double(a), Double(b)) if b != 0.0 => Double(a / b),
            _ => return Err(Fail::Interpreter),
        },
        BinOp::Mod => match (l, r) {
            (Int(a), Int(b)) => Int(a.checked_rem(b).ok_or(Fail::Interpreter)?),
            (Uint(a), Uint(b)) => Uint(a.checked_rem(b).ok_or(Fail::Interpreter)?),
            _ => return Err(Fail::Interpreter),
        },
    })
}

/// A policy set's expressions (a bool each) over `env`: one evaluator for
/// all, so that a path several of them walk is walked once, and the fused
/// quantifiers answered by passes over their ranges, each run when one of
/// its quantifiers is first read.
pub(super) fn evaluate_members<'a>(
    env: &dyn Bindings<'a>,
    sweeps: &[Sweep],
    quantifiers: &[FusedQuantifier],
    members: &[Node],
    budget: i64,
) -> Vec<Result<bool, Fail>> {
    let mut ev = Evaluator::new(env, budget);
    ev.fusion = Some(Box::new(Fusion {
        sweeps,
        quantifiers,
        answers: vec![None; quantifiers.len()],
        swept: vec![false; sweeps.len()],
        peeked: None,
        budget,
        pass: Vec::new(),
        standings: Vec::new(),
    }));
    members
        .iter()
        .map(|member| {
            ev.budget = budget;
            ev.declined = false;
            ev.locals.clear();
            let answer = ev.eval_bool(member);
            ev.answer(answer)
        })
        .collect()
}

/// A set's fused quantifiers in one request: their answers so far.
pub(super) struct Fusion<'e, 'a> {
    sweeps: &'e [Sweep],
    quantifiers: &'e [FusedQuantifier],
    answers: Vec<Option<FusedAnswer>>,
    /// Which sweeps' passes were run (or their range failed).
    swept: Vec<bool>,
    /// Each sweep's range where [`Evaluator::peek_range`] finds it, looked
    /// for once, by the first pass.
    peeked: Option<Vec<Option<Val<'a>>>>,
    /// The budget each quantifier starts with.
    budget: i64,
    /// The sweeps of the pass being run, and where each of their
    /// quantifiers stands: kept from pass to pass, so that a request
    /// allocates them once. Built afresh as inline vectors, every pass
    /// copied a kilobyte of them in and out.
    pass: Vec<usize>,
    standings: Vec<Standing>,
}

/// Where a fused quantifier stands in its pass.
struct Standing {
    /// The quantifier, by number.
    quantifier: usize,
    budget: i64,
    /// Its answer, once an item decided it or its budget ran out.
    done: Option<Result<bool, Fail>>,
    /// The first error an item gave (one only the interpreter can answer
    /// outranks it), as [`Evaluator::quantifier`] keeps it.
    pending: Option<Fail>,
}

impl<'e, 'a> Evaluator<'e, 'a> {
    /// The answer of fused quantifier `index`, its pass run if it was not
    /// yet, and its cost charged here, where it is written: the budget
    /// runs out here exactly when the quantifier evaluated here would have
    /// run it out.
    fn fused_answer(&mut self, index: usize) -> Result<bool, Fail> {
        let mut fusion = self.fusion.take().ok_or(Fail::Interpreter)?;
        if fusion.answers.get(index).is_some_and(Option::is_none) {
            let budget = self.budget;
            self.run_pass(&mut fusion, index);
            self.budget = budget;
        }
        let found = fusion.answers.get(index).cloned().flatten();
        self.fusion = Some(fusion);
        let found = found.ok_or(Fail::Interpreter)?;
        self.budget -= found.cost;
        if self.budget < 0 {
            return Err(Fail::CostLimit);
        }
        found.answer
    }

    /// The pass over the range of quantifier `index`'s sweep, which also
    /// answers the sweeps not yet run whose ranges hold the very same
    /// items (found without evaluating anything that could fail: a range
    /// that fails is only met where it is read).
    fn run_pass(&mut self, fusion: &mut Fusion<'e, 'a>, index: usize) {
        let sweep = fusion.quantifiers[index].sweep;
        fusion.swept[sweep] = true;
        let range = match self.eval(&fusion.sweeps[sweep].range) {
            Ok(range) => range,
            // As the quantifier alone: the range's error, nothing charged.
            Err(e) => {
                for &q in &fusion.sweeps[sweep].quantifiers {
                    fusion.answers[q] = Some(FusedAnswer {
                        answer: Err(e.clone()),
                        cost: 0,
                    });
                }
                return;
            }
        };
        // No items (`object.spec.?initContainers.orValue([])` on most
        // Pods): each quantifier is answered as it is alone over none, `all`
        // true and `exists` false, nothing charged; no other range is
        // looked for and no pass set up.
        if let Val::List(items) = &range
            && items.is_empty()
        {
            for &q in &fusion.sweeps[sweep].quantifiers {
                fusion.answers[q] = Some(FusedAnswer {
                    answer: Ok(!fusion.quantifiers[q].exists),
                    cost: 0,
                });
            }
            return;
        }
        if fusion.peeked.is_none() {
            let sweeps = fusion.sweeps;
            fusion.peeked = Some(sweeps.iter().map(|s| self.peek_range(&s.range)).collect());
        }
        let mut pass = std::mem::take(&mut fusion.pass);
        pass.clear();
        pass.push(sweep);
        for (other, peeked) in fusion.peeked.iter().flatten().enumerate() {
            if !fusion.swept[other]
                && let Some(found) = peeked
                && super::value::same_items(&range, found)
            {
                fusion.swept[other] = true;
                pass.push(other);
            }
        }
        self.sweep(&range, &pass, fusion);
        fusion.pass = pass;
    }

    /// A range's value when finding it cannot fail or cost anything: a
    /// request-wide value, or a chain of fields found in the document.
    fn peek_range(&mut self, range: &Node) -> Option<Val<'a>> {
        match range {
            Node::Shared(index) => self.env.shared(*index).cloned(),
            // A range the set's paths share (`object.spec.containers`,
            // read by several quantifiers' guards).
            Node::Memo { id, base, field } => match self.memos.get(*id) {
                Some(held) => Some(held.clone()),
                None => self.find_memo(*id, base, field).map(Val::from_doc),
            },
            Node::Path {
                base,
                fields,
                test: false,
            } => {
                let (last, walk) = fields.split_last()?;
                let found = self.peek_doc_walked(base, walk)?.get_key(last)?;
                Some(Val::from_doc(found))
            }
            _ => None,
        }
    }

    /// One pass over `range` for the fused quantifiers of the sweeps
    /// `pass`, writing each one's answer and cost into the fusion's
    /// answers.
    fn sweep(&mut self, range: &Val<'a>, pass: &[usize], fusion: &mut Fusion<'e, 'a>) {
        let quantifiers = fusion.quantifiers;
        let budget = fusion.budget;
        let standings = &mut fusion.standings;
        standings.clear();
        for &sweep in pass {
            standings.extend(
                fusion.sweeps[sweep]
                    .quantifiers
                    .iter()
                    .map(|&quantifier| Standing {
                        quantifier,
                        budget,
                        done: None,
                        pending: None,
                    }),
            );
        }
        let mut open = standings.len();
        let mark = self.memos.mark();
        self.locals.clear();
        self.locals.push(Val::Null);
        self.locals.push(Val::Null);
        let mut visit = |this: &mut Self, item: Val<'a>| -> bool {
            this.memos.rewind(mark);
            this.locals[1] = item;
            for standing in standings.iter_mut() {
                if standing.done.is_some() {
                    continue;
                }
                let q = &quantifiers[standing.quantifier];
                // As `Evaluator::quantifier` charges and tests each item.
                this.budget = standing.budget - q.weight;
                let tested = match this.budget < 0 {
                    true => Err(Fail::CostLimit),
                    false => this.eval_bool(&q.pred),
                };
                standing.budget = this.budget;
                match tested {
                    Ok(b) if b == q.exists => standing.done = Some(Ok(q.exists)),
                    Ok(_) => {}
                    Err(Fail::CostLimit) => standing.done = Some(Err(Fail::CostLimit)),
                    Err(e) => {
                        if standing.pending.is_none() || e == Fail::Interpreter {
                            standing.pending = Some(e);
                        }
                    }
                }
                if standing.done.is_some() {
                    open -= 1;
                }
            }
            open == 0
        };
        let iterated = self.each_item(range, |this, item| Ok(visit(this, item)));
        self.memos.rewind(mark);
        self.locals.clear();
        for standing in fusion.standings.iter_mut() {
            let q = standing.quantifier;
            let exists = quantifiers[q].exists;
            fusion.answers[q] = Some(FusedAnswer {
                answer: match (&iterated, standing.done.take(), standing.pending.take()) {
                    (Err(e), _, _) => Err(e.clone()),
                    (_, Some(done), _) => done,
                    (_, None, Some(e)) => Err(e),
                    (_, None, None) => Ok(!exists),
                },
                cost: budget - standing.budget,
            });
        }
    }
}
