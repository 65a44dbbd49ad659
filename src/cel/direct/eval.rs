//! The tree-walking evaluator over [`Val`]s.
//!
//! It evaluates what it can answer exactly as the cel crate's interpreter
//! would. Everything else, and every error, is [`Fail::Interpreter`]: the
//! caller runs the whole expression in the interpreter, which gives the
//! answer and the error message users have seen so far. Errors are rare on
//! admission's hot path; most expressions never leave this evaluator.

mod comprehensions;
mod documents;
mod fusion;
use documents::*;
pub(super) use fusion::*;

use super::compile::{BinOp, Node, VariableRef};
use super::functions::{self, concat, contained};
use super::time;
use super::value::{Fail, MapVal, Val, compare, equals, put_entry};
use crate::json_doc::Key;
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
